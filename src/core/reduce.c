/* Blocked n-way reductions per dtype: one accumulator block, sources folded in order, so the
 * inner loops vectorise and every rank that reduces the same inputs gets the same bits. A large
 * result leaves through streaming stores (core/copy.h): the destination is not read first. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/copy.h"
#include "core/half.h"
#include "core/reduce.h"
#include "core/reduce_sum_f32.h"

#define BLOCK 256

#define ID(x) (x)
#define MAXOF(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define MINOF(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))

#define DEFINE_REDUCE(NAME, T, ACC, LOAD, STORE)                                                   \
    static void NAME(dt_reduce_op op, void *dst, const void *const *srcs, int n, size_t count,    \
                     int stream) {                                                                 \
        ACC acc[BLOCK];                                                                            \
        T out[BLOCK];                                                                              \
        for (size_t base = 0; base < count; base += BLOCK) {                                       \
            size_t m = count - base < BLOCK ? count - base : BLOCK;                                \
            const T *s0 = (const T *)srcs[0] + base;                                               \
            int k = 1;                                                                             \
            if ((op == DT_REDUCE_SUM || op == DT_REDUCE_AVG) && n >= 3) {                          \
                /* Sums three sources a pass, in the same order: same bits, a third of the     \
                 * passes over acc (reductions are compute-bound where memory is fast). */     \
                const T *s1 = (const T *)srcs[1] + base, *s2 = (const T *)srcs[2] + base;          \
                for (size_t i = 0; i < m; i++) acc[i] = LOAD(s0[i]) + LOAD(s1[i]) + LOAD(s2[i]);   \
                for (k = 3; k + 2 < n; k += 3) {                                                   \
                    const T *a = (const T *)srcs[k] + base, *b = (const T *)srcs[k + 1] + base;    \
                    const T *c = (const T *)srcs[k + 2] + base;                                    \
                    for (size_t i = 0; i < m; i++) acc[i] = acc[i] + LOAD(a[i]) + LOAD(b[i]) + LOAD(c[i]); \
                }                                                                                  \
            } else {                                                                               \
                for (size_t i = 0; i < m; i++) acc[i] = LOAD(s0[i]);                               \
            }                                                                                      \
            for (; k < n; k++) {                                                                   \
                const T *s = (const T *)srcs[k] + base;                                            \
                switch (op) {                                                                      \
                case DT_REDUCE_SUM:                                                                \
                case DT_REDUCE_AVG:                                                                \
                    for (size_t i = 0; i < m; i++) acc[i] += LOAD(s[i]);                           \
                    break;                                                                         \
                case DT_REDUCE_PROD:                                                               \
                    for (size_t i = 0; i < m; i++) acc[i] *= LOAD(s[i]);                           \
                    break;                                                                         \
                case DT_REDUCE_MAX:                                                                \
                    for (size_t i = 0; i < m; i++) acc[i] = MAXOF(acc[i], LOAD(s[i]));             \
                    break;                                                                         \
                case DT_REDUCE_MIN:                                                                \
                    for (size_t i = 0; i < m; i++) acc[i] = MINOF(acc[i], LOAD(s[i]));             \
                    break;                                                                         \
                default: break;                                                                    \
                }                                                                                  \
            }                                                                                      \
            if (op == DT_REDUCE_AVG)                                                               \
                for (size_t i = 0; i < m; i++) acc[i] /= (ACC)n;                                   \
            T *d = stream ? out : (T *)dst + base;                                                 \
            for (size_t i = 0; i < m; i++) d[i] = STORE(acc[i]);                                   \
            if (stream) dt_copy_stream_unfenced((T *)dst + base, out, m * sizeof(T));              \
        }                                                                                          \
    }

DEFINE_REDUCE(reduce_f32, float, float, ID, ID)
DEFINE_REDUCE(reduce_f64, double, double, ID, ID)
DEFINE_REDUCE(reduce_bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_REDUCE(reduce_f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16)
DEFINE_REDUCE(reduce_i32, int32_t, int32_t, ID, ID)
DEFINE_REDUCE(reduce_i64, int64_t, int64_t, ID, ID)

static void reduce(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs, int n,
                   size_t count, int stream) {
    if (dtype == DT_F32 && (op == DT_REDUCE_SUM || op == DT_REDUCE_AVG) &&
        dt_sum_f32(dst, (const float *const *)srcs, n, count, op == DT_REDUCE_AVG, stream))
        return;
    switch (dtype) {
    case DT_F32: reduce_f32(op, dst, srcs, n, count, stream); break;
    case DT_F64: reduce_f64(op, dst, srcs, n, count, stream); break;
    case DT_BF16: reduce_bf16(op, dst, srcs, n, count, stream); break;
    case DT_F16: reduce_f16(op, dst, srcs, n, count, stream); break;
    case DT_I32: reduce_i32(op, dst, srcs, n, count, stream); break;
    case DT_I64: reduce_i64(op, dst, srcs, n, count, stream); break;
    default: break;
    }
}

void dt_reduce_n(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs, int n,
                 size_t count) {
    int stream = count * dt_dtype_size(dtype) >= DT_STREAM_MIN_BYTES;
    reduce(dtype, op, dst, srcs, n, count, stream);
    if (stream) dt_stream_fence();
}

void dt_reduce_n_streamed(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs,
                          int n, size_t count) {
    reduce(dtype, op, dst, srcs, n, count, 1);
}

void dt_fill_identity(dt_dtype dtype, dt_reduce_op op, void *dst, size_t count) {
    double v = 0.0;
    if (op == DT_REDUCE_PROD) v = 1.0;
    if (op == DT_REDUCE_MAX) v = -INFINITY;
    if (op == DT_REDUCE_MIN) v = INFINITY;
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case DT_F32: ((float *)dst)[i] = (float)v; break;
        case DT_F64: ((double *)dst)[i] = v; break;
        case DT_BF16: ((uint16_t *)dst)[i] = dt_f32_to_bf16((float)v); break;
        case DT_F16: ((uint16_t *)dst)[i] = dt_f32_to_f16((float)v); break;
        case DT_I32:
            ((int32_t *)dst)[i] = isinf(v) ? (v > 0 ? INT32_MAX : INT32_MIN) : (int32_t)v;
            break;
        case DT_I64:
            ((int64_t *)dst)[i] = isinf(v) ? (v > 0 ? INT64_MAX : INT64_MIN) : (int64_t)v;
            break;
        default: break;
        }
    }
}

void dt_scale(dt_dtype dtype, void *buf, size_t count, int64_t mul, int64_t div) {
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case DT_F32: ((float *)buf)[i] = ((float *)buf)[i] * (float)mul / (float)div; break;
        case DT_F64: ((double *)buf)[i] = ((double *)buf)[i] * (double)mul / (double)div; break;
        case DT_BF16: {
            uint16_t *h = (uint16_t *)buf + i;
            *h = dt_f32_to_bf16(dt_bf16_to_f32(*h) * (float)mul / (float)div);
            break;
        }
        case DT_F16: {
            uint16_t *h = (uint16_t *)buf + i;
            *h = dt_f32_to_f16(dt_f16_to_f32(*h) * (float)mul / (float)div);
            break;
        }
        case DT_I32: ((int32_t *)buf)[i] = (int32_t)(((int32_t *)buf)[i] * mul / div); break;
        case DT_I64: ((int64_t *)buf)[i] = ((int64_t *)buf)[i] * mul / div; break;
        default: break;
        }
    }
}

void dt_pow_abs(dt_dtype dtype, void *buf, size_t count, double e) {
    float ef = (float)e;
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case DT_F32: ((float *)buf)[i] = powf(fabsf(((float *)buf)[i]), ef); break;
        case DT_F64: ((double *)buf)[i] = pow(fabs(((double *)buf)[i]), e); break;
        case DT_BF16: {
            uint16_t *h = (uint16_t *)buf + i;
            *h = dt_f32_to_bf16(powf(fabsf(dt_bf16_to_f32(*h)), ef));
            break;
        }
        case DT_F16: {
            uint16_t *h = (uint16_t *)buf + i;
            *h = dt_f32_to_f16(powf(fabsf(dt_f16_to_f32(*h)), ef));
            break;
        }
        default: return;
        }
    }
}
