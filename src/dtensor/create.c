/* Creation without a full host copy: ones, full_value, arange, eye, rand, randn, uniform_ and
 * normal_ write each rank's shard from its global indices (core/fill.h) on its device. No
 * communication; Partial placements follow the convention of dtensor/tensor.h. */
#include <math.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "core/fill.h"
#include "dtensor/create.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"

/* Under the P(sum) convention only coordinate 0 of each P(sum) mesh dim holds the value. */
static int holds_zeros(const dt_tensor *t) {
    for (int m = 0; m < t->mesh->ndim; m++)
        if (t->placements[m].kind == DT_PLACEMENT_PARTIAL && t->placements[m].op == DT_REDUCE_SUM &&
            t->mesh->coord[m] != 0)
            return 1;
    return 0;
}

/* Writes f into t's shard (or zeros, off coordinate 0 of a P(sum) dim), on t's device. */
static dt_status fill_shard(dt_tensor *t, dt_fill f) {
    if (t->local_numel == 0) return DT_OK;
    f.dtype = t->dtype;
    f.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        f.shape[d] = t->shape[d];
        f.local_shape[d] = t->local_shape[d];
        f.local_offset[d] = t->local_offset[d];
    }
    if (holds_zeros(t)) {
        f.kind = DT_FILL_BITS;
        f.bits = 0;
    }
    const dt_fill_ops *ops = dt_fill_ops_of(t->device.kind);
    if (!ops)
        return dt_error(DT_ERR_UNSUPPORTED, "fill: device kind %d is not in this build",
                        (int)t->device.kind);
    dt_ctx_bind(t->mesh->ctx);
    return ops->fill(&f, t->data);
}

/* A new tensor of the checked spec with its shard written from f. */
static dt_status create(const char *fn, dt_mesh *mesh, dt_dtype dtype, int ndim,
                        const int64_t *shape, int nplacements, const dt_placement *placements,
                        const dt_fill *f, dt_tensor **out) {
    DT_ARG(out != NULL, "%s: argument out is NULL", fn);
    dt_placement norm[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_spec_check(fn, mesh, dtype, ndim, shape, nplacements, placements, norm));
    int m = dt_placements_find_norm(norm, mesh->ndim);
    if (m >= 0) /* zeros are fine (dt_tensor_zeros): every part's norm is 0 */
        return dt_error(DT_ERR_PLACEMENT, "%s: placements[%d] = NormP(%g): a pending norm is made "
                                          "by norm ops (dt_vector_norm), not filled", fn, m,
                        norm[m].norm_ord);
    dt_tensor *t;
    DT_CHECK(dt_tensor_alloc(mesh, mesh->ctx->dev.device, dtype, ndim, shape, norm, &t));
    dt_status st = fill_shard(t, *f);
    if (st != DT_OK) {
        dt_error_prefix(fn);
        dt_tensor_release(t);
        return st;
    }
    *out = t;
    return DT_OK;
}

static int is_int(dt_dtype dtype) {
    return dtype == DT_I32 || dtype == DT_I64;
}

/* value as dtype's bits: DT_ERR_ARG where an integer dtype cannot hold it. */
static dt_status value_bits(const char *fn, dt_dtype dtype, double value, uint64_t *bits_out) {
    if (is_int(dtype)) {
        double lim = dtype == DT_I32 ? 2147483648.0 : 9223372036854775808.0;
        double t = trunc(value);
        if (!(t >= -lim && t < lim))
            return dt_error(DT_ERR_ARG, "%s: argument value = %g does not fit in %s", fn, value,
                            dt_dtype_name(dtype));
    }
    if ((unsigned)dtype >= DT_DTYPE_COUNT) return DT_OK; /* the spec check names it */
    uint64_t bits = 0;
    dt_cast_elem(dtype, &bits, DT_F64, &value, 0); /* little-endian: the low bytes */
    *bits_out = bits;
    return DT_OK;
}

dt_status dt_tensor_full_value(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                               int nplacements, const dt_placement *placements, double value,
                               dt_tensor **out) {
    const char *fn = "dt_tensor_full_value";
    dt_fill f = {.kind = DT_FILL_BITS};
    DT_CHECK(value_bits(fn, dtype, value, &f.bits));
    return create(fn, mesh, dtype, ndim, shape, nplacements, placements, &f, out);
}

dt_status dt_tensor_ones(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                         int nplacements, const dt_placement *placements, dt_tensor **out) {
    dt_fill f = {.kind = DT_FILL_BITS};
    DT_CHECK(value_bits("dt_tensor_ones", dtype, 1.0, &f.bits));
    return create("dt_tensor_ones", mesh, dtype, ndim, shape, nplacements, placements, &f,
                  out);
}

dt_status dt_tensor_arange(dt_mesh *mesh, dt_dtype dtype, double start, double end, double step,
                           int nplacements, const dt_placement *placements,
                           dt_tensor **out) {
    const char *fn = "dt_tensor_arange";
    DT_ARG(isfinite(start) && isfinite(end),
           "%s: arguments start = %g and end = %g must be "
           "finite",
           fn, start, end);
    DT_ARG(isfinite(step) && step != 0, "%s: argument step = %g must be finite and non-zero", fn,
           step);
    DT_ARG((step > 0 && end >= start) || (step < 0 && end <= start),
           "%s: argument step = %g does not lead from start = %g to end = %g", fn, step, start,
           end);
    double len = ceil((end - start) / step);
    DT_ARG(len < 9.2e18, "%s: %g elements (start %g, end %g, step %g) are too many", fn, len, start,
           end, step);
    int64_t shape[1] = {(int64_t)len};
    dt_fill f = {.kind = DT_FILL_ARANGE, .start = start, .step = step};
    if (is_int(dtype)) {
        DT_ARG(start == trunc(start) && step == trunc(step),
               "%s: arguments start = %g and step = %g must be whole numbers for %s", fn, start,
               step, dt_dtype_name(dtype));
        /* Every element lies between start and the last one, which must fit the dtype. */
        double last = shape[0] ? start + (double)(shape[0] - 1) * step : start;
        double lim = dtype == DT_I32 ? 2147483648.0 : 9223372036854775808.0;
        DT_ARG(start >= -lim && start < lim && last >= -lim && last < lim,
               "%s: elements from %g to %g do not fit in %s", fn, start, last,
               dt_dtype_name(dtype));
        f.istart = (int64_t)start;
        f.istep = (int64_t)step;
    }
    return create(fn, mesh, dtype, 1, shape, nplacements, placements, &f, out);
}

dt_status dt_tensor_eye(dt_mesh *mesh, dt_dtype dtype, int64_t n, int64_t m, int nplacements,
                        const dt_placement *placements, dt_tensor **out) {
    DT_ARG(n >= 0 && m >= 0, "dt_tensor_eye: arguments n = %lld and m = %lld must be >= 0",
           (long long)n, (long long)m);
    int64_t shape[2] = {n, m};
    dt_fill f = {.kind = DT_FILL_EYE};
    return create("dt_tensor_eye", mesh, dtype, 2, shape, nplacements, placements, &f, out);
}

/* ---- random ------------------------------------------------------------------------------- */

static dt_status random_check(const char *fn, dt_dtype dtype, const dt_generator *gen) {
    DT_ARG(gen != NULL, "%s: argument gen is NULL", fn);
    if (is_int(dtype) || dtype == DT_F8E4M3 || dtype == DT_F8E5M2)
        return dt_error(DT_ERR_DTYPE,
                        "%s: dtype %s: random draws need a float dtype (f32, f64, "
                        "bf16, f16; float8 tensors are casts, dtensor/float8.h)",
                        fn, dt_dtype_name(dtype));
    return DT_OK;
}

/* Blocks a draw of numel elements uses: ceil(numel / per block). */
static uint64_t blocks_of(dt_dtype dtype, const int64_t *shape, int ndim) {
    uint64_t n = 1, per = (uint64_t)dt_fill_per_block(dtype);
    for (int d = 0; d < ndim; d++)
        n *= (uint64_t)shape[d];
    return n / per + (n % per != 0);
}

static dt_status create_random(const char *fn, dt_mesh *mesh, dt_dtype dtype, int ndim,
                               const int64_t *shape, int nplacements,
                               const dt_placement *placements, dt_generator *gen, dt_fill *f,
                               dt_tensor **out) {
    DT_CHECK(random_check(fn, dtype, gen));
    f->seed = gen->seed;
    f->offset = gen->offset;
    DT_CHECK(create(fn, mesh, dtype, ndim, shape, nplacements, placements, f, out));
    gen->offset += blocks_of(dtype, shape, ndim);
    return DT_OK;
}

dt_status dt_tensor_rand(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                         int nplacements, const dt_placement *placements, dt_generator *gen,
                         dt_tensor **out) {
    dt_fill f = {.kind = DT_FILL_UNIFORM, .lo = 0, .hi = 1};
    return create_random("dt_tensor_rand", mesh, dtype, ndim, shape, nplacements, placements, gen,
                         &f, out);
}

dt_status dt_tensor_randn(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                          int nplacements, const dt_placement *placements, dt_generator *gen,
                          dt_tensor **out) {
    dt_fill f = {.kind = DT_FILL_NORMAL, .mean = 0, .std = 1};
    return create_random("dt_tensor_randn", mesh, dtype, ndim, shape, nplacements, placements, gen,
                         &f, out);
}

static dt_status fill_random_(const char *fn, dt_tensor *t, dt_generator *gen, dt_fill *f) {
    DT_CHECK(dt_tensor_check(fn, "tensor", t));
    DT_CHECK(random_check(fn, t->dtype, gen));
    f->seed = gen->seed;
    f->offset = gen->offset;
    dt_status st = fill_shard(t, *f);
    if (st != DT_OK) {
        dt_error_prefix(fn);
        return st;
    }
    gen->offset += blocks_of(t->dtype, t->shape, t->ndim);
    return DT_OK;
}

dt_status dt_tensor_uniform_(dt_tensor *tensor, double lo, double hi, dt_generator *gen) {
    DT_ARG(isfinite(lo) && isfinite(hi) && lo <= hi && isfinite(hi - lo),
           "dt_tensor_uniform_: arguments lo = %g and hi = %g must be finite with lo <= hi (and "
           "hi - lo finite)",
           lo, hi);
    dt_fill f = {.kind = DT_FILL_UNIFORM, .lo = lo, .hi = hi};
    return fill_random_("dt_tensor_uniform_", tensor, gen, &f);
}

dt_status dt_tensor_normal_(dt_tensor *tensor, double mean, double std, dt_generator *gen) {
    DT_ARG(isfinite(mean), "dt_tensor_normal_: argument mean = %g must be finite", mean);
    DT_ARG(isfinite(std) && std >= 0,
           "dt_tensor_normal_: argument std = %g must be finite and "
           ">= 0",
           std);
    dt_fill f = {.kind = DT_FILL_NORMAL, .mean = mean, .std = std};
    return fill_random_("dt_tensor_normal_", tensor, gen, &f);
}
