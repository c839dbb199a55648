/* OCP 8-bit floats <-> f32, header-only so the CPU and CUDA kernels share one definition.
 *   e4m3 (torch's float8_e4m3fn): bias 7, no infinities, max 448, NaN = S.1111.111 only.
 *   e5m2 (float8_e5m2): bias 15, IEEE-like, max 57344, +-inf = S.11111.00, NaN = S.11111.xx.
 * To f8: round to nearest, ties to even; a finite value past the largest finite one saturates
 * to +-max (torchao's saturated float8 cast), as does +-inf in e4m3 (which has none); e5m2
 * keeps +-inf. NaN stays NaN (e4m3 0x7f, e5m2 0x7e, with the sign). To f32: exact. */
#ifndef DT_CORE_FLOAT8_H
#define DT_CORE_FLOAT8_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DT_F8_FN static inline __host__ __device__
#else
#define DT_F8_FN static inline
#endif

#define DT_F8E4M3_MAX 448.0f
#define DT_F8E5M2_MAX 57344.0f

/* One format: mantissa bits, exponent bias, the largest finite code (sign clear). */
typedef struct dt_f8_format {
    int man, bias;
    uint32_t max_code;
    int has_inf;
} dt_f8_format;

DT_F8_FN dt_f8_format dt_f8_format_of(int e5m2) {
    dt_f8_format f = {3, 7, 0x7eu, 0};
    if (e5m2) f.man = 2, f.bias = 15, f.max_code = 0x7bu, f.has_inf = 1;
    return f;
}

DT_F8_FN float dt_f8_to_f32_fmt(uint8_t h, dt_f8_format f) {
    uint32_t sign = (uint32_t)(h & 0x80u) << 24;
    uint32_t exp = (h & 0x7fu) >> f.man, man = h & ((1u << f.man) - 1u);
    uint32_t emax = f.man == 3 ? 15u : 31u, u;
    if (f.has_inf && exp == emax) {
        u = man ? 0x7fc00000u : 0x7f800000u;
    } else if (!f.has_inf && exp == emax && man == (1u << f.man) - 1u) {
        u = 0x7fc00000u;
    } else if (exp != 0) {
        u = ((exp + 127u - (uint32_t)f.bias) << 23) | (man << (23 - f.man));
    } else { /* subnormal: man quanta of 2^(1 - bias - man), exact in f32 */
        float q = f.man == 3 ? 0.001953125f : 1.52587890625e-05f;
        float v = (float)man * q;
        memcpy(&u, &v, sizeof u);
    }
    u |= sign;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

DT_F8_FN uint8_t dt_f32_to_f8_fmt(float x, dt_f8_format f) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | (f.has_inf ? 0x7eu : 0x7fu);
    if (abs == 0x7f800000u) return sign | (f.has_inf ? 0x7cu : f.max_code);
    uint32_t min_normal = (uint32_t)(128 - f.bias) << 23; /* 2^(1 - bias) as f32 bits */
    if (abs < min_normal) {
        /* Subnormal or zero: n quanta of 2^(1 - bias - man), n = round(abs / quantum). */
        uint32_t ef = abs >> 23;
        int shift = 151 - f.bias - f.man - (int)ef; /* >= 24 - man here */
        if (ef == 0 || shift > 24) return sign; /* below half a quantum */
        uint32_t m = (abs & 0x7fffffu) | 0x800000u;
        uint32_t n = m >> shift, rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (n & 1u))) n++;
        return sign | (uint8_t)n; /* n = 2^man is the smallest normal: the carry is right */
    }
    int drop = 23 - f.man;
    uint32_t r = (abs + (1u << (drop - 1)) - 1u + ((abs >> drop) & 1u)) >> drop;
    uint32_t code = r - ((uint32_t)(127 - f.bias) << f.man);
    if (code > f.max_code) code = f.max_code; /* saturate (e4m3's 0x7f is NaN, not a number) */
    return sign | (uint8_t)code;
}

DT_F8_FN float dt_f8e4m3_to_f32(uint8_t h) { return dt_f8_to_f32_fmt(h, dt_f8_format_of(0)); }
DT_F8_FN float dt_f8e5m2_to_f32(uint8_t h) { return dt_f8_to_f32_fmt(h, dt_f8_format_of(1)); }
DT_F8_FN uint8_t dt_f32_to_f8e4m3(float x) { return dt_f32_to_f8_fmt(x, dt_f8_format_of(0)); }
DT_F8_FN uint8_t dt_f32_to_f8e5m2(float x) { return dt_f32_to_f8_fmt(x, dt_f8_format_of(1)); }

#endif
