/* CPU cumsum: one running sum per row along the dim, in double for floats (each output
 * rounded once to the dtype) and in i64 for integers. */
#include <stdint.h>

#include "core/check.h"
#include "core/half.h"
#include "ops/kernels.h"

#define SCAN(T, ACC, LD, ST)                                                                       \
    for (int64_t b = 0; b < outer; b++)                                                            \
        for (int64_t j = 0; j < inner; j++) {                                                      \
            const T *s = (const T *)x->data + b * L * inner + j;                                   \
            T *o = (T *)out->data + b * L * inner + j;                                             \
            ACC acc = 0;                                                                           \
            for (int64_t t = 0; t < L; t++) {                                                      \
                acc += (ACC)LD(s[t * inner]);                                                      \
                o[t * inner] = ST(acc);                                                            \
            }                                                                                      \
        }

#define ID(v) (v)
#define TO_F32(v) ((float)(v))
#define TO_I32(v) ((int32_t)(v))
#define TO_BF16(v) dt_f32_to_bf16((float)(v))
#define TO_F16(v) dt_f32_to_f16((float)(v))

dt_status dt_cpu_cumsum(const dt_local *x, int dim, dt_local *out) {
    if (dim < 0 || dim >= x->ndim)
        return dt_error(DT_ERR_ARG, "dt_cpu_cumsum: dim %d of a %d-D tensor", dim, x->ndim);
    int64_t L = x->shape[dim], inner = 1, outer = 1;
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    switch (x->dtype) {
    case DT_F32: SCAN(float, double, ID, TO_F32) break;
    case DT_F64: SCAN(double, double, ID, ID) break;
    case DT_BF16: SCAN(uint16_t, double, dt_bf16_to_f32, TO_BF16) break;
    case DT_F16: SCAN(uint16_t, double, dt_f16_to_f32, TO_F16) break;
    case DT_I32: SCAN(int32_t, int64_t, ID, TO_I32) break;
    case DT_I64: SCAN(int64_t, int64_t, ID, ID) break;
    default:
        return dt_error(DT_ERR_DTYPE, "dt_cpu_cumsum: unknown dtype %d", (int)x->dtype);
    }
    return DT_OK;
}
