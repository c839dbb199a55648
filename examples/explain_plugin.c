/* An op plugin: a shared object whose dt_plugin_register() registers ops, so that
 * dtensor-explain --plugin ./libexplain_plugin.so can explain them and check propagation rows
 * for them (examples/explain_plugin.tsv), and any program can dlopen it to use them.
 *   scale_rows(x, s) = x * s[:, None]   x (R, C) f32, s (R) f32
 *   softsign(x)      = x / (1 + |x|)    any shape, f32
 * CPU blocks only: a CUDA version would queue its kernel on dt_cuda_current_stream(). */
#include <math.h>

#include <dtensor.h>

/* ---- scale_rows: rows of x scaled; linear in x and in s ----------------------------------- */

static dt_status scale_rows_infer(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    if (in[0].ndim != 2 || in[1].ndim != 1 || in[1].shape[0] != in[0].shape[0])
        return dt_error_set(DT_ERR_SHAPE, "scale_rows: x (R, C) and s (R) expected");
    if (in[0].dtype != DT_F32 || in[1].dtype != DT_F32)
        return dt_error_set(DT_ERR_DTYPE, "scale_rows: f32 only, got %s and %s",
                            dt_dtype_name(in[0].dtype), dt_dtype_name(in[1].dtype));
    *out = in[0];
    return DT_OK;
}

static dt_status scale_rows_kernel(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    if (in[0].device.kind != DT_DEVICE_CPU)
        return dt_error_set(DT_ERR_UNSUPPORTED, "scale_rows: this example runs on the CPU only");
    const float *x = in[0].data, *s = in[1].data;
    float *o = out->data;
    int64_t rows = in[0].shape[0], cols = in[0].shape[1];
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            o[i * cols + j] = x[i * cols + j] * s[i];
    return DT_OK;
}

/* One mesh dim each: inputs x, s, then the output. R, R -> R is always there. */
#define R_                                                                                         \
    { DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM, 0 }
#define S_(d)                                                                                      \
    { DT_PLACEMENT_SHARD, d, DT_REDUCE_SUM, 0 }
#define PSUM_                                                                                      \
    { DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_SUM, 0 }
static const dt_placement scale_rows_rows[][DT_OP_MAX_USER_INPUTS + 1] = {
    {S_(0), S_(0), S_(0)}, /* rows split: each rank scales its own rows */
    {S_(1), R_, S_(1)},    /* columns split: every rank needs all of s */
    {PSUM_, R_, PSUM_},    /* linear in x */
    {R_, PSUM_, PSUM_},    /* linear in s */
};

/* ---- softsign: elementwise, not linear (no Partial row) --------------------------------- */

static dt_status softsign_infer(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    if (in[0].dtype != DT_F32)
        return dt_error_set(DT_ERR_DTYPE, "softsign: f32 only, got %s", dt_dtype_name(in[0].dtype));
    *out = in[0];
    return DT_OK;
}

static dt_status softsign_kernel(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    if (in[0].device.kind != DT_DEVICE_CPU)
        return dt_error_set(DT_ERR_UNSUPPORTED, "softsign: this example runs on the CPU only");
    int64_t count = 1;
    for (int d = 0; d < in[0].ndim; d++)
        count *= in[0].shape[d];
    const float *x = in[0].data;
    float *o = out->data;
    for (int64_t i = 0; i < count; i++)
        o[i] = x[i] / (1.0f + fabsf(x[i]));
    return DT_OK;
}

static const dt_placement softsign_rows[][DT_OP_MAX_USER_INPUTS + 1] = {
    {S_(0), S_(0)}, {S_(1), S_(1)}, {S_(2), S_(2)}, {S_(3), S_(3)}, /* rows past ndim drop out */
};

/* ---- the entry point dtensor-explain (or any loader) calls once --------------------------- */

dt_status dt_plugin_register(void) {
    const dt_op_def defs[] = {
        {.name = "scale_rows",
         .ninputs = 2,
         .rows = scale_rows_rows,
         .nrows = DT_COUNT_OF(scale_rows_rows),
         .infer = scale_rows_infer,
         .kernel = scale_rows_kernel},
        {.name = "softsign",
         .ninputs = 1,
         .rows = softsign_rows,
         .nrows = DT_COUNT_OF(softsign_rows),
         .infer = softsign_infer,
         .kernel = softsign_kernel},
    };
    for (int i = 0; i < DT_COUNT_OF(defs); i++) {
        dt_op op;
        if (dt_op_lookup(defs[i].name, &op) == DT_OK) continue; /* loaded twice: once is enough */
        dt_status st = dt_op_register(&defs[i], &op);
        if (st != DT_OK) return st;
    }
    return DT_OK;
}
