/* CPU scatter_add: the adjoint of gather. Contributions are added in src's row-major order, so
 * each out element (fed by one column of src along dim) sums its terms in increasing order
 * along dim, as the CUDA kernel does. */
#include <stdint.h>
#include <string.h>

#include "core/check.h"
#include "core/half.h"
#include "ops/kernels.h"
#include "ops/kernel_args.h"

static inline double load(dt_dtype t, const void *p, size_t i) {
    switch (t) {
    case DT_F32: return ((const float *)p)[i];
    case DT_F64: return ((const double *)p)[i];
    case DT_BF16: return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return dt_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* out[o] += v in the dtype's compute type (f32 for all but f64), rounded once to storage. */
static inline void add_at(dt_dtype t, void *p, size_t o, double v) {
    switch (t) {
    case DT_F32: ((float *)p)[o] += (float)v; break;
    case DT_F64: ((double *)p)[o] += v; break;
    case DT_BF16: {
        uint16_t *h = p;
        h[o] = dt_f32_to_bf16(dt_bf16_to_f32(h[o]) + (float)v);
        break;
    }
    default: {
        uint16_t *h = p;
        h[o] = dt_f32_to_f16(dt_f16_to_f32(h[o]) + (float)v);
    }
    }
}

/* out[o + k] += src[e + k] for k < len, each as add_at. */
static void add_row(dt_dtype t, void *out, size_t o, const void *src, size_t e, size_t len) {
    if (t == DT_F32) {
        float *y = (float *)out + o;
        const float *x = (const float *)src + e;
        for (size_t k = 0; k < len; k++) y[k] += x[k];
    } else if (t == DT_F64) {
        double *y = (double *)out + o;
        const double *x = (const double *)src + e;
        for (size_t k = 0; k < len; k++) y[k] += x[k];
    } else {
        for (size_t k = 0; k < len; k++) add_at(t, out, o + k, load(t, src, e + k));
    }
}

dt_status dt_cpu_scatter_add(const dt_local *src, int dim, const int64_t *shift,
                             int64_t dim_offset, int64_t dim_size, const dt_local *index,
                             dt_local *out) {
    const char *fn = "dt_cpu_scatter_add";
    DT_CHECK(dt_scatter_check(fn, src, dim, index, out));
    dt_dtype t = src->dtype;
    int nd = src->ndim;
    size_t n = 1, on = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)src->shape[d], on *= (size_t)out->shape[d];
    memset(out->data, 0, on * dt_dtype_size(t));
    /* out's strides, and index's (0 where it is broadcast) */
    int64_t os[DT_MAX_NDIM], is[DT_MAX_NDIM], i[DT_MAX_NDIM] = {0}, step = 1;
    for (int d = nd - 1; d >= 0; d--) {
        os[d] = d == nd - 1 ? 1 : os[d + 1] * out->shape[d + 1];
        is[d] = index->shape[d] == 1 && src->shape[d] != 1 ? 0 : step;
        step *= index->shape[d];
    }
    /* Whole rows when index is broadcast over every dim after dim and nothing shifts there (an
     * embedding's gradient): one index read and one check per row, the same additions. */
    size_t row = 1;
    int rows_ok = 1;
    for (int d = dim + 1; d < nd; d++) {
        rows_ok &= is[d] == 0 && shift[d] == 0 && src->shape[d] == out->shape[d];
        row *= (size_t)src->shape[d];
    }
    if (!rows_ok || row < 8) row = 1;
    int last = row > 1 ? dim : nd - 1; /* the odometer's innermost dim */
    for (size_t e = 0; e < n; e += row) {
        size_t ie = 0;
        for (int d = 0; d < nd; d++) ie += (size_t)(i[d] * is[d]);
        int64_t v = index->dtype == DT_I32 ? ((const int32_t *)index->data)[ie]
                                           : ((const int64_t *)index->data)[ie];
        if (v < 0 || v >= dim_size) {
            char at[128];
            size_t o = 0;
            for (int d = 0; d < nd; d++)
                o += (size_t)snprintf(at + o, sizeof at - o, d ? ",%lld" : "%lld",
                                      (long long)(is[d] ? i[d] : 0));
            return dt_error(DT_ERR_ARG, "scatter_add: index[%s] = %lld is outside [0, %lld) "
                            "along dim %d", at, (long long)v, (long long)dim_size, dim);
        }
        int64_t off = 0;
        int inside = 1;
        for (int d = 0; d <= last && inside; d++) {
            int64_t j = d == dim ? v - dim_offset : i[d] + shift[d];
            inside = j >= 0 && j < out->shape[d];
            off += j * os[d];
        }
        if (inside) add_row(t, out->data, (size_t)off, src->data, e, row);
        for (int d = last; d >= 0; d--) {
            if (++i[d] < src->shape[d]) break;
            i[d] = 0;
        }
    }
    return DT_OK;
}
