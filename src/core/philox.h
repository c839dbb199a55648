/* Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC11) and the draws built on it: uniform numbers and Box-Muller normals. Plain C, header-only,
 * so that the CPU and CUDA fills (core/fill.c, core/cuda/fill.cu) share one definition and agree
 * bit for bit. No libm: log, sin and cos are written here with IEEE adds, multiplies, divides
 * and square roots only (correctly rounded on both sides), and every add and multiply goes
 * through DT_RNG_ADD/DT_RNG_MUL, which on the device are the _rn intrinsics nvcc never fuses
 * into an FMA (the host compiles in ISO C mode, whose default is -ffp-contract=off). */
#ifndef DT_CORE_PHILOX_H
#define DT_CORE_PHILOX_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DT_RNG_FN static inline __host__ __device__
#else
#define DT_RNG_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define DT_RNG_ADD(a, b) __dadd_rn((a), (b))
#define DT_RNG_MUL(a, b) __dmul_rn((a), (b))
#else
#define DT_RNG_ADD(a, b) ((a) + (b))
#define DT_RNG_MUL(a, b) ((a) * (b))
#endif

typedef struct dt_philox4 {
    uint32_t v[4];
} dt_philox4;

/* The bijection of the paper's Figure 2 with R = 10: each round multiplies words 0 and 2 by
 * the two round constants, swaps the halves and xors in the key; the key is bumped by the
 * Weyl constants (golden ratio, sqrt(3) - 1) before every round but the first. */
DT_RNG_FN dt_philox4 dt_philox4x32_10(dt_philox4 c, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c.v[0], p1 = (uint64_t)0xCD9E8D57u * c.v[2];
        dt_philox4 n = {{(uint32_t)(p1 >> 32) ^ c.v[1] ^ k0, (uint32_t)p1,
                         (uint32_t)(p0 >> 32) ^ c.v[3] ^ k1, (uint32_t)p0}};
        c = n;
    }
    return c;
}

/* Block b of the stream keyed by seed: counter (b low, b high, 0, 0), key (seed low, high). */
DT_RNG_FN dt_philox4 dt_philox_block(uint64_t seed, uint64_t b) {
    dt_philox4 c = {{(uint32_t)b, (uint32_t)(b >> 32), 0u, 0u}};
    return dt_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* ---- log and sin/cos of 2*pi*u, for Box-Muller ----------------------------------------- */

/* ln(u) for a normal u > 0 (here u in (0, 1]): u = m * 2^e with m in [sqrt(1/2), sqrt(2)),
 * ln(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series to s^23. */
DT_RNG_FN double dt_rng_log(double u) {
    uint64_t bits;
    memcpy(&bits, &u, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* m in [1, 2) */
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.4142135623730951) {
        m = DT_RNG_MUL(m, 0.5);
        e++;
    }
    double s = (m - 1.0) / DT_RNG_ADD(m, 1.0); /* m - 1 is exact (Sterbenz) */
    double z = DT_RNG_MUL(s, s);
    /* 1/3 + z/5 + z^2/7 + ... + z^10/23, by Horner */
    double p = 0.043478260869565216;
    p = DT_RNG_ADD(0.047619047619047616, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.05263157894736842, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.058823529411764705, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.06666666666666667, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.07692307692307693, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.09090909090909091, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.1111111111111111, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.14285714285714285, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.2, DT_RNG_MUL(z, p));
    p = DT_RNG_ADD(0.3333333333333333, DT_RNG_MUL(z, p));
    double lnm = DT_RNG_ADD(DT_RNG_MUL(2.0, s), DT_RNG_MUL(DT_RNG_MUL(2.0, s), DT_RNG_MUL(z, p)));
    /* e * ln2 in two parts (fdlibm's split: ln2_hi has 32 significant bits, so e * ln2_hi
     * is exact for |e| < 2^21). */
    double de = (double)e;
    return DT_RNG_ADD(DT_RNG_MUL(de, 6.93147180369123816490e-01),
                      DT_RNG_ADD(DT_RNG_MUL(de, 1.90821492927058770002e-10), lnm));
}

/* sin and cos of 2*pi*u for u in [0, 1) with at most 53 significant bits: u = q/4 + f with
 * |f| <= 1/8 exactly, so only x = 2*pi*f (|x| <= pi/4) goes through the Taylor series. */
DT_RNG_FN void dt_rng_sincos2pi(double u, double *sin_out, double *cos_out) {
    int q = (int)DT_RNG_MUL(u, 4.0);
    double f = DT_RNG_ADD(u, -0.25 * q); /* exact */
    if (f > 0.125) {
        f = DT_RNG_ADD(f, -0.25);
        q++;
    }
    double x = DT_RNG_MUL(f, 6.283185307179586), z = DT_RNG_MUL(x, x);
    /* sin x = x + x z (-1/3! + z/5! - ... + z^7/17!), cos x = 1 + z (-1/2! + ... + z^7/16!) */
    double ps = 2.8114572543455206e-15, pc = 4.779477332387385e-14;
    ps = DT_RNG_ADD(-7.647163731819816e-13, DT_RNG_MUL(z, ps));
    pc = DT_RNG_ADD(-1.1470745597729725e-11, DT_RNG_MUL(z, pc));
    ps = DT_RNG_ADD(1.6059043836821613e-10, DT_RNG_MUL(z, ps));
    pc = DT_RNG_ADD(2.08767569878681e-09, DT_RNG_MUL(z, pc));
    ps = DT_RNG_ADD(-2.505210838544172e-08, DT_RNG_MUL(z, ps));
    pc = DT_RNG_ADD(-2.755731922398589e-07, DT_RNG_MUL(z, pc));
    ps = DT_RNG_ADD(2.7557319223985893e-06, DT_RNG_MUL(z, ps));
    pc = DT_RNG_ADD(2.48015873015873e-05, DT_RNG_MUL(z, pc));
    ps = DT_RNG_ADD(-0.0001984126984126984, DT_RNG_MUL(z, ps));
    pc = DT_RNG_ADD(-0.001388888888888889, DT_RNG_MUL(z, pc));
    ps = DT_RNG_ADD(0.008333333333333333, DT_RNG_MUL(z, ps));
    pc = DT_RNG_ADD(0.041666666666666664, DT_RNG_MUL(z, pc));
    ps = DT_RNG_ADD(-0.16666666666666666, DT_RNG_MUL(z, ps));
    pc = DT_RNG_ADD(-0.5, DT_RNG_MUL(z, pc));
    double s = DT_RNG_ADD(x, DT_RNG_MUL(DT_RNG_MUL(x, z), ps));
    double c = DT_RNG_ADD(1.0, DT_RNG_MUL(z, pc));
    switch (q & 3) {
    case 0:
        *sin_out = s, *cos_out = c;
        break;
    case 1:
        *sin_out = c, *cos_out = -s;
        break;
    case 2:
        *sin_out = -s, *cos_out = -c;
        break;
    default:
        *sin_out = -c, *cos_out = s;
        break;
    }
}

/* ---- draws ------------------------------------------------------------------------------ */

/* Element i of a stream draws from block offset + i / per_block, lane i % per_block: 4 lanes
 * of 32 bits for 32- and 16-bit outputs, 2 lanes of 64 bits (two words, low first) for f64.
 * The pairing is fixed by i alone, so a draw never depends on which shard holds it. */

/* A uniform in [0, 1) with `bits` random bits (1..53) from the 64-bit word w: its top bits
 * times 2^-bits, exact in every output type when bits <= its significand. */
DT_RNG_FN double dt_rng_unit(uint64_t w, int bits) {
    return (double)(w >> (64 - bits)) * (1.0 / (double)(1ull << bits));
}

/* Lane of a block as a 64-bit word: lanes of 32 bits sit in the high half. */
DT_RNG_FN uint64_t dt_rng_word(dt_philox4 x, int wide, int lane) {
    return wide ? (uint64_t)x.v[2 * lane] | (uint64_t)x.v[2 * lane + 1] << 32
                : (uint64_t)x.v[lane] << 32;
}

/* A standard normal by Box-Muller from two uniform words: elements 2k and 2k+1 of a stream
 * take r cos(t) and r sin(t) of one pair (u1 in (0, 1], so the log is finite). wide: the
 * pair is lanes 0 and 1 of a 64-bit block and lane selects cos or sin; else the pair is
 * 32-bit lanes (lane & 2, lane | 1) with 24-bit uniforms. */
DT_RNG_FN double dt_rng_normal(dt_philox4 x, int wide, int lane) {
    int bits = wide ? 53 : 24;
    uint64_t w1 = wide ? dt_rng_word(x, 1, 0) : (uint64_t)x.v[lane & 2] << 32;
    uint64_t w2 = wide ? dt_rng_word(x, 1, 1) : (uint64_t)x.v[lane | 1] << 32;
    double u1 = (double)((w1 >> (64 - bits)) + 1) * (1.0 / (double)(1ull << bits));
    double u2 = dt_rng_unit(w2, bits);
    double s, c;
    dt_rng_sincos2pi(u2, &s, &c);
    double r = sqrt(DT_RNG_MUL(-2.0, dt_rng_log(u1)));
    return DT_RNG_MUL(r, (lane & 1) ? s : c);
}

#endif
