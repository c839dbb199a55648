/* The typed entry points of the model-code ops (DT_OP_NN_LIST): rope and its tables, and
 * dropout with its generator. */
#include <math.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/fill.h"
#include "dtensor/tensor_impl.h"
#include "ops/op_impl.h"

dt_status dt_rope(dt_tensor *x, dt_tensor *cos, dt_tensor *sin, dt_tensor **out) {
    dt_tensor *in[3] = {x, cos, sin};
    return dt_op_call(DT_OP_ROPE, in, 3, NULL, out);
}

dt_status dt_rope_(dt_tensor *x, dt_tensor *cos, dt_tensor *sin, dt_tensor **out) {
    dt_tensor *in[3] = {x, cos, sin};
    return dt_op_call_inplace(DT_OP_ROPE, in, 3, NULL, out);
}

dt_status dt_rope_tables(dt_mesh *mesh, dt_dtype dtype, int64_t T, int64_t D, double theta,
                         int nplacements, const dt_placement *placements, dt_tensor **cos_out,
                         dt_tensor **sin_out) {
    const char *fn = "dt_rope_tables";
    DT_ARG_NOT_NULL(cos_out);
    DT_ARG_NOT_NULL(sin_out);
    DT_ARG(T >= 0 && T <= ((int64_t)1 << 31), "%s: argument T = %lld is not in [0, 2^31]", fn,
           (long long)T);
    if (D <= 0 || D % 2 || D > ((int64_t)1 << 20))
        return dt_error(DT_ERR_SHAPE, "%s: argument D = %lld must be even and in [2, 2^20]", fn,
                        (long long)D);
    DT_ARG(theta > 0 && isfinite(theta), "%s: argument theta = %g must be positive", fn, theta);
    if (dtype != DT_F32 && dtype != DT_F64 && dtype != DT_BF16 && dtype != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s: the tables need a float dtype", fn,
                        dt_dtype_name(dtype));
    int64_t P = D / 2, shape[2] = {T, P};
    size_t n = (size_t)(T * P);
    double *c = dt_host_alloc(n * sizeof(double) + 8), *s = dt_host_alloc(n * sizeof(double) + 8);
    void *cb = dt_host_alloc(n * 8 + 8), *sb = dt_host_alloc(n * 8 + 8);
    dt_status st = DT_OK;
    dt_tensor *tc = NULL, *ts = NULL;
    if (!c || !s || !cb || !sb) {
        st = dt_error(DT_ERR_NOMEM, "%s: no memory for two (%lld, %lld) tables", fn,
                      (long long)T, (long long)P);
        goto done;
    }
    for (int64_t i = 0; i < P; i++) {
        double freq = 1.0 / pow(theta, (double)(2 * i) / (double)D);
        for (int64_t t = 0; t < T; t++) {
            c[t * P + i] = cos((double)t * freq);
            s[t * P + i] = sin((double)t * freq);
        }
    }
    DT_CHECK_GOTO(dt_convert_from_f64(dtype, c, cb, n), st, done);
    DT_CHECK_GOTO(dt_convert_from_f64(dtype, s, sb, n), st, done);
    DT_CHECK_GOTO(dt_tensor_distribute(mesh, cb, dtype, 2, shape, nplacements, placements,
                                       DT_ALL_RANKS, &tc), st, done);
    DT_CHECK_GOTO(dt_tensor_distribute(mesh, sb, dtype, 2, shape, nplacements, placements,
                                       DT_ALL_RANKS, &ts), st, done);
    *cos_out = tc, *sin_out = ts;
    tc = ts = NULL;
done:
    dt_tensor_release(ts);
    dt_tensor_release(tc);
    dt_host_free(sb);
    dt_host_free(cb);
    dt_host_free(s);
    dt_host_free(c);
    return st;
}

dt_status dt_dropout(dt_tensor *x, double p, int training, dt_generator *gen, dt_tensor **out) {
    DT_TENSOR_ARG(x);
    DT_ARG_NOT_NULL(out);
    DT_ARG(p >= 0 && p <= 1, "dt_dropout: argument p = %g is not in [0, 1]", p);
    if (!training || p == 0) {
        DT_CHECK(dt_tensor_retain(x));
        *out = x;
        return DT_OK;
    }
    DT_ARG_NOT_NULL(gen);
    dt_op_args a = {.scalar = p, .seed = gen->seed, .offset = gen->offset};
    DT_CHECK(dt_op_call(DT_OP_DROPOUT, &x, 1, &a, out));
    /* As dt_tensor_rand of x's shape and dtype: ceil(numel / per block) blocks. */
    uint64_t numel = 1, per = (uint64_t)dt_fill_per_block(x->dtype);
    for (int d = 0; d < x->ndim; d++) numel *= (uint64_t)x->shape[d];
    gen->offset += numel / per + (numel % per != 0);
    return DT_OK;
}
