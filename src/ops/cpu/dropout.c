/* CPU dropout: the keep mask from the Philox draw of each element's global flat index, the
 * draw dt_tensor_rand makes for it (core/fill.h), so any shard of any placement agrees with
 * the unsharded op bit for bit. Kept values times 1 / (1 - p) in f32 (f64 for f64). */
#include <stdint.h>

#include "core/check.h"
#include "core/fill.h"
#include "ops/kernels.h"

dt_status dt_cpu_dropout(double p, uint64_t seed, uint64_t offset, const int64_t *global_shape,
                         const int64_t *box_offset, const dt_local *x, dt_local *out) {
    dt_dtype dt = x->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_dropout: dtype %s not supported (float dtypes "
                                      "only)", dt_dtype_name(dt));
    if (out->dtype != dt) return dt_error(DT_ERR_DTYPE, "dt_cpu_dropout: out dtype differs");
    dt_fill f = {.kind = DT_FILL_UNIFORM, .dtype = dt, .ndim = x->ndim, .seed = seed,
                 .offset = offset};
    size_t n = 1;
    for (int d = 0; d < x->ndim; d++) {
        f.shape[d] = global_shape[d];
        f.local_shape[d] = x->shape[d];
        f.local_offset[d] = box_offset[d];
        n *= (size_t)x->shape[d];
    }
    double scale = 1.0 / (1.0 - p);
    float scale32 = (float)scale;
    uint64_t have = UINT64_MAX;
    int shift = dt_fill_block_shift(dt);
    dt_philox4 blk = {{0, 0, 0, 0}};
    for (size_t k = 0; k < n; k++) {
        uint64_t gi = dt_fill_index(&f, k);
        if (gi >> shift != have) {
            have = gi >> shift;
            blk = dt_fill_block(&f, gi);
        }
        int keep = dt_fill_unit(dt, gi, blk) >= p;
        switch (dt) {
        case DT_F32:
            ((float *)out->data)[k] = keep ? ((const float *)x->data)[k] * scale32 : 0.0f;
            break;
        case DT_F64:
            ((double *)out->data)[k] = keep ? ((const double *)x->data)[k] * scale : 0.0;
            break;
        case DT_BF16: {
            float v = dt_bf16_to_f32(((const uint16_t *)x->data)[k]);
            ((uint16_t *)out->data)[k] = dt_f32_to_bf16(keep ? v * scale32 : 0.0f);
            break;
        }
        default: {
            float v = dt_f16_to_f32(((const uint16_t *)x->data)[k]);
            ((uint16_t *)out->data)[k] = dt_f32_to_f16(keep ? v * scale32 : 0.0f);
            break;
        }
        }
    }
    return DT_OK;
}
