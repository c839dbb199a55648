/* CPU dropout: the keep mask from the Philox draw of each element's global flat index, the
 * draw dt_tensor_rand makes for it (core/fill.h), so any shard of any placement agrees with
 * the unsharded op bit for bit. Kept values times 1 / (1 - p) in f32 (f64 for f64). The
 * intra-op pool shares out the elements; each is computed alone. */
#include <stdint.h>

#include "core/check.h"
#include "core/fill.h"
#include "core/pool.h"
#include "ops/kernels.h"

#define PIECE 8192 /* elements a pool chunk holds at least: smaller stays serial */

typedef struct {
    const dt_fill *f;
    double p;
    const void *x;
    void *y;
} dropout_job;

/* Local elements [begin, end): each one's draw depends only on its global index. */
static void dropout_range(void *arg, int64_t begin, int64_t end) {
    const dropout_job *j = arg;
    const dt_fill *f = j->f;
    dt_dtype dt = f->dtype;
    double p = j->p, scale = 1.0 / (1.0 - p);
    float scale32 = (float)scale;
    uint64_t have = UINT64_MAX;
    int shift = dt_fill_block_shift(dt);
    dt_philox4 blk = {{0, 0, 0, 0}};
    for (size_t k = (size_t)begin; k < (size_t)end; k++) {
        uint64_t gi = dt_fill_index(f, k);
        if (gi >> shift != have) {
            have = gi >> shift;
            blk = dt_fill_block(f, gi);
        }
        int keep = dt_fill_unit(dt, gi, blk) >= p;
        switch (dt) {
        case DT_F32:
            ((float *)j->y)[k] = keep ? ((const float *)j->x)[k] * scale32 : 0.0f;
            break;
        case DT_F64:
            ((double *)j->y)[k] = keep ? ((const double *)j->x)[k] * scale : 0.0;
            break;
        case DT_BF16: {
            float v = dt_bf16_to_f32(((const uint16_t *)j->x)[k]);
            ((uint16_t *)j->y)[k] = dt_f32_to_bf16(keep ? v * scale32 : 0.0f);
            break;
        }
        default: {
            float v = dt_f16_to_f32(((const uint16_t *)j->x)[k]);
            ((uint16_t *)j->y)[k] = dt_f32_to_f16(keep ? v * scale32 : 0.0f);
            break;
        }
        }
    }
}

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
    dropout_job j = {.f = &f, .p = p, .x = x->data, .y = out->data};
    dt_parallel_for((int64_t)n, PIECE, dropout_range, &j);
    return DT_OK;
}
