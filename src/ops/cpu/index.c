/* CPU indexing kernels: embedding lookup and target pick with a shard's offset (ids outside
 * the shard give zeros), box slice, permute and expand. Pure data movement: every dtype, copied
 * by element size; all-zero bits are 0 in every dtype. Embedding rows are shared out by the
 * intra-op pool. */
#include <stdint.h>
#include <string.h>

#include "core/box.h"
#include "core/check.h"
#include "core/pool.h"
#include "ops/kernels.h"

static size_t numel(const dt_local *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static dt_status check_index_dtype(const char *fn, const dt_local *ix) {
    if (ix->dtype != DT_I32 && ix->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: indices must be i32 or i64, not %s", fn,
                        dt_dtype_name(ix->dtype));
    return DT_OK;
}

static inline int64_t index_at(const dt_local *ix, size_t i) {
    return ix->dtype == DT_I32 ? ((const int32_t *)ix->data)[i] : ((const int64_t *)ix->data)[i];
}

#define PIECE_BYTES 32768 /* bytes a pool chunk copies at least: smaller stays serial */

typedef struct {
    const dt_local *table, *indices, *out;
    int64_t row_offset;
    size_t row; /* bytes */
} embed_job;

static void embed_range(void *arg, int64_t begin, int64_t end) {
    const embed_job *j = arg;
    int64_t V = j->table->shape[0];
    for (size_t i = (size_t)begin; i < (size_t)end; i++) {
        int64_t r = index_at(j->indices, i) - j->row_offset;
        char *dst = (char *)j->out->data + i * j->row;
        if (r >= 0 && r < V)
            memcpy(dst, (const char *)j->table->data + (size_t)r * j->row, j->row);
        else
            memset(dst, 0, j->row);
    }
}

dt_status dt_cpu_embedding(const dt_local *table, int64_t row_offset, const dt_local *indices,
                           dt_local *out) {
    DT_CHECK(check_index_dtype("dt_cpu_embedding", indices));
    size_t es = dt_dtype_size(table->dtype);
    if (es == 0)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_embedding: unknown table dtype %d",
                        (int)table->dtype);
    if (table->ndim != 2)
        return dt_error(DT_ERR_SHAPE, "dt_cpu_embedding: table must be (V, H), has %d dims",
                        table->ndim);
    size_t row = (size_t)table->shape[1] * es, n = numel(indices);
    if (row == 0) return DT_OK; /* an empty shard of the hidden dim */
    embed_job j = {.table = table, .indices = indices, .out = out, .row_offset = row_offset,
                   .row = row};
    dt_parallel_for((int64_t)n, row >= PIECE_BYTES ? 1 : (int64_t)(PIECE_BYTES / row),
                    embed_range, &j);
    return DT_OK;
}

dt_status dt_cpu_pick(const dt_local *logits, int64_t class_offset, const dt_local *target,
                      dt_local *out) {
    DT_CHECK(check_index_dtype("dt_cpu_pick", target));
    size_t es = dt_dtype_size(logits->dtype);
    if (es == 0)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_pick: unknown logits dtype %d", (int)logits->dtype);
    if (logits->ndim < 1)
        return dt_error(DT_ERR_SHAPE, "dt_cpu_pick: logits must have a class dim");
    int64_t C = logits->shape[logits->ndim - 1];
    size_t n = numel(target);
    for (size_t i = 0; i < n; i++) {
        int64_t c = index_at(target, i) - class_offset;
        char *dst = (char *)out->data + i * es;
        if (c >= 0 && c < C)
            memcpy(dst, (const char *)logits->data + ((size_t)C * i + (size_t)c) * es, es);
        else
            memset(dst, 0, es);
    }
    return DT_OK;
}

dt_status dt_cpu_slice(const dt_local *x, const int64_t *start, dt_local *out) {
    size_t es = dt_dtype_size(x->dtype);
    if (es == 0) return dt_error(DT_ERR_DTYPE, "dt_cpu_slice: unknown dtype %d", (int)x->dtype);
    for (int d = 0; d < x->ndim; d++)
        if (start[d] < 0 || out->shape[d] < 0 || start[d] + out->shape[d] > x->shape[d])
            return dt_error(DT_ERR_SHAPE,
                            "dt_cpu_slice: dim %d: box [%lld, %lld) outside size %lld", d,
                            (long long)start[d], (long long)(start[d] + out->shape[d]),
                            (long long)x->shape[d]);
    dt_box_copy(out->data, out->shape, NULL, x->data, x->shape, start, out->shape, x->ndim, es);
    return DT_OK;
}

#define TILE 32

#define PERMUTE_ROW(T)                                                                             \
    for (int64_t i = 0; i < n; i++) ((T *)o)[i] = ((const T *)s)[i * is];

/* out (n) = s[i * is]: one output row read with a stride (a plain copy when it is 1). */
static void copy_row(size_t es, void *o, const void *s, int64_t n, int64_t is) {
    if (is == 1) {
        memcpy(o, s, (size_t)n * es);
        return;
    }
    switch (es) {
    case 2: PERMUTE_ROW(uint16_t) break;
    case 4: PERMUTE_ROW(uint32_t) break;
    case 8: PERMUTE_ROW(uint64_t) break;
    default: break;
    }
}

#define TRANSPOSE_TILE(T)                                                                          \
    for (int64_t r = r0; r < r1; r++)                                                              \
        for (int64_t c = c0; c < c1; c++) ((T *)o)[r * C + c] = ((const T *)s)[r + c * is];

/* out (R, C) with out[r][c] = s[r + c * is]: TILE x TILE tiles keep both sides in cache. */
static void transpose_2d(size_t es, void *o, const void *s, int64_t R, int64_t C, int64_t is) {
    for (int64_t r0 = 0; r0 < R; r0 += TILE) {
        int64_t r1 = R - r0 < TILE ? R : r0 + TILE;
        for (int64_t c0 = 0; c0 < C; c0 += TILE) {
            int64_t c1 = C - c0 < TILE ? C : c0 + TILE;
            switch (es) {
            case 2: TRANSPOSE_TILE(uint16_t) break;
            case 4: TRANSPOSE_TILE(uint32_t) break;
            case 8: TRANSPOSE_TILE(uint64_t) break;
            default: break;
            }
        }
    }
}

dt_status dt_cpu_permute(const dt_local *x, const int *perm, dt_local *out) {
    size_t es = dt_dtype_size(x->dtype);
    if (es == 0)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_permute: unknown dtype %d", (int)x->dtype);
    int nd = x->ndim, seen = 0;
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || (seen >> perm[i]) & 1)
            return dt_error(DT_ERR_ARG, "dt_cpu_permute: perm[%d] = %d is not a permutation of "
                            "0..%d", i, perm[i], nd - 1);
        seen |= 1 << perm[i];
    }
    size_t total = numel(x);
    if (total == 0) return DT_OK;
    int64_t xs[DT_MAX_NDIM];
    for (int d = nd - 1; d >= 0; d--) xs[d] = d == nd - 1 ? 1 : xs[d + 1] * x->shape[d + 1];
    /* out's dims in order with their strides in x; size-1 dims dropped and out dims that stay
     * adjacent in x merged, so an identity permute is one memcpy. */
    int64_t size[DT_MAX_NDIM], st[DT_MAX_NDIM];
    int k = 0;
    for (int i = 0; i < nd; i++) {
        int64_t sz = x->shape[perm[i]], s = xs[perm[i]];
        if (sz == 1) continue;
        if (k > 0 && st[k - 1] == s * sz) {
            size[k - 1] *= sz;
            st[k - 1] = s;
        } else {
            size[k] = sz;
            st[k] = s;
            k++;
        }
    }
    if (k == 0 || (k == 1 && st[0] == 1)) {
        memcpy(out->data, x->data, total * es);
        return DT_OK;
    }
    /* When x's innermost dim is out's second-to-last, the last two out dims are a transpose:
     * copy them in tiles. Otherwise copy one strided output row at a time. */
    int tiled = k >= 2 && st[k - 2] == 1, outer_nd = k - 1 - tiled;
    int64_t chunk = tiled ? size[k - 2] * size[k - 1] : size[k - 1];
    int64_t idx[DT_MAX_NDIM] = {0}, off = 0;
    for (size_t c = 0; c < total / (size_t)chunk; c++) {
        char *o = (char *)out->data + c * (size_t)chunk * es;
        const char *s = (const char *)x->data + (size_t)off * es;
        if (tiled)
            transpose_2d(es, o, s, size[k - 2], size[k - 1], st[k - 1]);
        else
            copy_row(es, o, s, size[k - 1], st[k - 1]);
        for (int d = outer_nd - 1; d >= 0; d--) {
            off += st[d];
            if (++idx[d] < size[d]) break;
            off -= st[d] * size[d];
            idx[d] = 0;
        }
    }
    return DT_OK;
}

/* Writes count copies of the es-byte element at src from dst on. */
static void fill_element(char *dst, const char *src, size_t es, size_t count) {
    switch (es) {
    case 2: {
        uint16_t v;
        memcpy(&v, src, 2);
        for (size_t i = 0; i < count; i++)
            memcpy(dst + 2 * i, &v, 2);
        return;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, src, 4);
        for (size_t i = 0; i < count; i++)
            memcpy(dst + 4 * i, &v, 4);
        return;
    }
    case 8: {
        uint64_t v;
        memcpy(&v, src, 8);
        for (size_t i = 0; i < count; i++)
            memcpy(dst + 8 * i, &v, 8);
        return;
    }
    default:
        for (size_t i = 0; i < count; i++)
            memcpy(dst + es * i, src, es);
    }
}

/* out's trailing dims that x holds whole are one contiguous run of x (x's size-1 dims do not
 * step its offsets), and the broadcast dims just before them repeat that run: each step of the
 * remaining outer dims writes one block of repeats x run with memcpy or a fill, instead of one
 * element at a time (a loss's (N, 1) gradient expanded over the classes: a fill per row). */
dt_status dt_cpu_expand(const dt_local *x, dt_local *out) {
    const size_t es = dt_dtype_size(x->dtype), n = dt_shape_numel(out->shape, out->ndim);
    if (n == 0) return DT_OK;
    int64_t stride[DT_MAX_NDIM], idx[DT_MAX_NDIM] = {0}, s = 1;
    for (int i = out->ndim - 1; i >= 0; i--) {
        int xi = i - (out->ndim - x->ndim);
        int64_t size = xi >= 0 ? x->shape[xi] : 1;
        stride[i] = size == out->shape[i] && size != 1 ? s : 0;
        s *= size;
    }
    int d = out->ndim - 1;
    size_t run = 1, repeats = 1; /* elements */
    for (; d >= 0 && stride[d] != 0; d--)
        run *= (size_t)out->shape[d];
    for (; d >= 0 && stride[d] == 0; d--)
        repeats *= (size_t)out->shape[d];
    const int outer = d + 1; /* dims [0, outer) are walked */
    const size_t block = run * repeats * es;
    const char *src = x->data;
    char *dst = out->data;
    int64_t off = 0;
    for (size_t b = 0; b < n / (run * repeats); b++, dst += block) {
        const char *from = src + (size_t)off * es;
        if (run == 1)
            fill_element(dst, from, es, repeats);
        else
            for (size_t r = 0; r < repeats; r++)
                memcpy(dst + r * run * es, from, run * es);
        for (int i = outer - 1; i >= 0; i--) {
            off += stride[i];
            if (++idx[i] < out->shape[i]) break;
            off -= stride[i] * out->shape[i];
            idx[i] = 0;
        }
    }
    return DT_OK;
}
