/* bf16 and IEEE f16 <-> f32 conversions, round to nearest even. Plain C, header-only, so the
 * CPU and CUDA paths share one definition of the per-element math (cuda_bf16.h's turn every NaN
 * into one canonical NaN, so device code uses these too). */
#ifndef DT_CORE_HALF_H
#define DT_CORE_HALF_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DT_HALF_FN static inline __host__ __device__
#else
#define DT_HALF_FN static inline
#endif

DT_HALF_FN float dt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

DT_HALF_FN uint16_t dt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

DT_HALF_FN float dt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1fu) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        exp = 113u;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

DT_HALF_FN uint16_t dt_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u; /* NaN */
    if (abs >= 0x477ff000u) return sign | 0x7c00u; /* rounds to inf */
    if (abs < 0x38800000u) {                       /* result is subnormal or zero */
        if (abs < 0x33000000u) return sign;         /* below half the smallest subnormal */
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(abs >> 23);         /* 14 .. 24 */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return sign | (uint16_t)half;
    }
    uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u); /* round mantissa to 10 bits */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

#endif
