/* Writing a shard from its global indices, and converting elements between dtypes, on the
 * shard's device: a constant, arange, eye, and the Philox draws (core/philox.h) of the random
 * fills, each element computed from its flat index in the global tensor so that no shard
 * depends on the others. The per-element math is here, header-only, shared by the CPU kernels
 * (core/fill.c) and the CUDA ones (core/cuda/fill.cu). Knows nothing of meshes or
 * placements: the caller passes the box a shard covers. */
#ifndef DT_CORE_FILL_H
#define DT_CORE_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "core/float8.h"
#include "core/half.h"
#include "core/philox.h"
#include "dtensor/block.h"
#include "dtensor/types.h"

#if defined(__CUDACC__)
#define DT_FILL_FN static inline __host__ __device__
#else
#define DT_FILL_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_fill_kind {
    DT_FILL_BITS,    /* every element is `bits` */
    DT_FILL_ARANGE,  /* global element i = start + i * step */
    DT_FILL_EYE,     /* 2-D: 1 where row == column, else 0 */
    DT_FILL_UNIFORM, /* lo + (hi - lo) * U, U uniform in [0, 1) */
    DT_FILL_NORMAL,  /* mean + std * Z, Z standard normal */
} dt_fill_kind;

/* What to write into a dense box of the global tensor. Zero-initialise, set the kind's
 * fields. */
typedef struct dt_fill {
    dt_fill_kind kind;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];        /* the global tensor's */
    int64_t local_shape[DT_MAX_NDIM];  /* the box: dst is dense row-major of this shape */
    int64_t local_offset[DT_MAX_NDIM]; /* where the box starts in the global tensor */
    uint64_t bits;                     /* BITS: one element's bytes, in the low bytes */
    double start, step;                /* ARANGE of float dtypes (computed in f64) */
    int64_t istart, istep;             /* ARANGE of integer dtypes (the caller checked range) */
    double lo, hi;                     /* UNIFORM (computed in f64, rounded once) */
    double mean, std;                  /* NORMAL (likewise) */
    uint64_t seed, offset;             /* UNIFORM, NORMAL: Philox key and first block */
} dt_fill;

/* ---- per element ------------------------------------------------------------------------ */

DT_FILL_FN int dt_fill_is_random(const dt_fill *f) {
    return f->kind == DT_FILL_UNIFORM || f->kind == DT_FILL_NORMAL;
}

/* Elements per Philox block: f64 takes 64 bits a draw, the others 32; log2 of it, so that
 * the per-element index math is shifts and masks. */
DT_FILL_FN int dt_fill_per_block(dt_dtype dtype) {
    return dtype == DT_F64 ? 2 : 4;
}
DT_FILL_FN int dt_fill_block_shift(dt_dtype dtype) {
    return dtype == DT_F64 ? 1 : 2;
}

/* Random bits of a uniform draw: the output type's significand, so U is exact and < 1. */
DT_FILL_FN int dt_fill_unit_bits(dt_dtype dtype) {
    return dtype == DT_F64 ? 53 : dtype == DT_BF16 ? 8 : dtype == DT_F16 ? 11 : 24;
}

/* The global flat index of element k of the box. */
DT_FILL_FN uint64_t dt_fill_index(const dt_fill *f, uint64_t k) {
    uint64_t gi = 0, stride = 1;
    for (int d = f->ndim - 1; d >= 0; d--) {
        uint64_t ls = (uint64_t)f->local_shape[d];
        gi += ((uint64_t)f->local_offset[d] + k % ls) * stride;
        k /= ls;
        stride *= (uint64_t)f->shape[d];
    }
    return gi;
}

/* The Philox block holding global element gi's draw. */
DT_FILL_FN dt_philox4 dt_fill_block(const dt_fill *f, uint64_t gi) {
    return dt_philox_block(f->seed, f->offset + (gi >> dt_fill_block_shift(f->dtype)));
}

/* The uniform U in [0, 1) of global element gi of a draw of dtype (x: its block): what a
 * rand fill stores (exact in dtype), and what dropout compares with p. */
DT_FILL_FN double dt_fill_unit(dt_dtype dtype, uint64_t gi, dt_philox4 x) {
    int per = dt_fill_per_block(dtype), lane = (int)(gi & (uint64_t)(per - 1));
    return dt_rng_unit(dt_rng_word(x, per == 2, lane), dt_fill_unit_bits(dtype));
}

/* Stores v (float dtypes: rounded once from f64; bf16 and f16 through f32, as everywhere). */
DT_FILL_FN void dt_fill_store_f(dt_dtype dt, void *dst, size_t k, double v) {
    switch (dt) {
    case DT_F32:
        ((float *)dst)[k] = (float)v;
        break;
    case DT_F64:
        ((double *)dst)[k] = v;
        break;
    case DT_BF16:
        ((uint16_t *)dst)[k] = dt_f32_to_bf16((float)v);
        break;
    case DT_F16:
        ((uint16_t *)dst)[k] = dt_f32_to_f16((float)v);
        break;
    case DT_F8E4M3:
        ((uint8_t *)dst)[k] = dt_f32_to_f8e4m3((float)v);
        break;
    case DT_F8E5M2:
        ((uint8_t *)dst)[k] = dt_f32_to_f8e5m2((float)v);
        break;
    default:
        break;
    }
}

DT_FILL_FN void dt_fill_store_i(dt_dtype dt, void *dst, size_t k, int64_t v) {
    if (dt == DT_I32)
        ((int32_t *)dst)[k] = (int32_t)(uint32_t)(uint64_t)v;
    else
        ((int64_t *)dst)[k] = v;
}

/* Writes element k of dst, global element gi; x is dt_fill_block(f, gi) for random kinds. */
DT_FILL_FN void dt_fill_elem(const dt_fill *f, uint64_t gi, dt_philox4 x, void *dst, size_t k) {
    int is_int = f->dtype == DT_I32 || f->dtype == DT_I64;
    int per = dt_fill_per_block(f->dtype), lane = (int)(gi & (uint64_t)(per - 1));
    switch (f->kind) {
    case DT_FILL_BITS: {
        int es = f->dtype == DT_F64 || f->dtype == DT_I64   ? 8
                 : is_int || f->dtype == DT_F32             ? 4
                 : f->dtype == DT_BF16 || f->dtype == DT_F16 ? 2
                                                             : 1;
        if (es == 1)
            ((uint8_t *)dst)[k] = (uint8_t)f->bits;
        else if (es == 8)
            ((uint64_t *)dst)[k] = f->bits;
        else if (es == 4)
            ((uint32_t *)dst)[k] = (uint32_t)f->bits;
        else
            ((uint16_t *)dst)[k] = (uint16_t)f->bits;
        break;
    }
    case DT_FILL_ARANGE:
        if (is_int)
            dt_fill_store_i(f->dtype, dst, k,
                            (int64_t)((uint64_t)f->istart + gi * (uint64_t)f->istep));
        else
            dt_fill_store_f(f->dtype, dst, k,
                            DT_RNG_ADD(f->start, DT_RNG_MUL((double)gi, f->step)));
        break;
    case DT_FILL_EYE: {
        uint64_t cols = (uint64_t)f->shape[1];
        int one = gi / cols == gi % cols;
        if (is_int)
            dt_fill_store_i(f->dtype, dst, k, one);
        else
            dt_fill_store_f(f->dtype, dst, k, one ? 1.0 : 0.0);
        break;
    }
    case DT_FILL_UNIFORM: {
        double u = dt_fill_unit(f->dtype, gi, x);
        dt_fill_store_f(f->dtype, dst, k,
                        DT_RNG_ADD(f->lo, DT_RNG_MUL(u, DT_RNG_ADD(f->hi, -f->lo))));
        break;
    }
    case DT_FILL_NORMAL:
        dt_fill_store_f(f->dtype, dst, k,
                        DT_RNG_ADD(f->mean, DT_RNG_MUL(f->std, dt_rng_normal(x, per == 2, lane))));
        break;
    }
}

/* ---- casts ------------------------------------------------------------------------------ */

/* Float to integer: truncated toward zero, saturated, NaN as 0 (defined, where C's cast is
 * not). Integer to integer wraps (two's complement), as torch's .to(torch.int32) does. */
DT_FILL_FN int64_t dt_cast_sat_i64(double v, int bits32) {
    double hi = bits32 ? 2147483647.0 : 9223372036854775807.0;
    int64_t max = bits32 ? INT32_MAX : INT64_MAX, min = bits32 ? INT32_MIN : INT64_MIN;
    if (v != v) return 0;
    if (v >= hi) return max;
    if (v <= -hi - 1.0) return min;
    return (int64_t)v;
}

/* dst[k] = src[k] converted from dtype `from` to `to`: floats to floats rounded once (f64 to
 * bf16/f16/float8 through f32; float8 saturating, core/float8.h), as torch and dt_convert_from_f64 do), i64 to floats rounded once
 * (to bf16/f16 through f32), i32 to floats exactly where the type holds it. */
DT_FILL_FN void dt_cast_elem(dt_dtype to, void *dst, dt_dtype from, const void *src, size_t k) {
    double dv = 0;
    int64_t iv = 0;
    int is_int = from == DT_I32 || from == DT_I64;
    switch (from) {
    case DT_F32:
        dv = ((const float *)src)[k];
        break;
    case DT_F64:
        dv = ((const double *)src)[k];
        break;
    case DT_BF16:
        dv = dt_bf16_to_f32(((const uint16_t *)src)[k]);
        break;
    case DT_F16:
        dv = dt_f16_to_f32(((const uint16_t *)src)[k]);
        break;
    case DT_F8E4M3:
        dv = dt_f8e4m3_to_f32(((const uint8_t *)src)[k]);
        break;
    case DT_F8E5M2:
        dv = dt_f8e5m2_to_f32(((const uint8_t *)src)[k]);
        break;
    case DT_I32:
        iv = ((const int32_t *)src)[k];
        break;
    default:
        iv = ((const int64_t *)src)[k];
        break;
    }
    float fv = is_int ? (float)iv : (float)dv;
    switch (to) {
    case DT_F32:
        ((float *)dst)[k] = fv;
        break;
    case DT_F64:
        ((double *)dst)[k] = is_int ? (double)iv : dv;
        break;
    case DT_BF16:
        ((uint16_t *)dst)[k] = dt_f32_to_bf16(fv);
        break;
    case DT_F16:
        ((uint16_t *)dst)[k] = dt_f32_to_f16(fv);
        break;
    case DT_F8E4M3:
        ((uint8_t *)dst)[k] = dt_f32_to_f8e4m3(fv);
        break;
    case DT_F8E5M2:
        ((uint8_t *)dst)[k] = dt_f32_to_f8e5m2(fv);
        break;
    case DT_I32:
        ((int32_t *)dst)[k] =
            is_int ? (int32_t)(uint32_t)(uint64_t)iv : (int32_t)dt_cast_sat_i64(dv, 1);
        break;
    default:
        ((int64_t *)dst)[k] = is_int ? iv : dt_cast_sat_i64(dv, 0);
        break;
    }
}

/* ---- one table per device --------------------------------------------------------------- */

typedef struct dt_fill_ops {
    const char *name;
    /* Writes the box f describes into dst (dense, f->local_shape, f->dtype). */
    dt_status (*fill)(const dt_fill *f, void *dst);
    /* dst[i] = src[i] converted, i < count; dst and src do not overlap. */
    dt_status (*cast)(dt_dtype to, void *dst, dt_dtype from, const void *src, size_t count);
} dt_fill_ops;

/* The table of a device kind; NULL for CUDA in builds without it. */
const dt_fill_ops *dt_fill_ops_of(dt_device_kind kind);

/* The CUDA forms (core/cuda/fill.cu), queued on the bound rank's compute stream. */
dt_status dt_cuda_fill(const dt_fill *f, void *dst);
dt_status dt_cuda_cast(dt_dtype to, void *dst, dt_dtype from, const void *src, size_t count);

#ifdef __cplusplus
}
#endif
#endif
