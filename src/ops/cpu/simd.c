/* The run-time SIMD paths of simd.h: one text per loop (a macro over the vector type), expanded
 * for 1, 4, 8 and 16 lanes, the wide ones compiled for AVX2 / AVX-512F with GCC's target
 * attribute, so the binary runs anywhere and takes the widest path the CPU has. */
#include "ops/cpu/simd.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/vexp.h"

/* ---- the loops, for a float vector type VF of L lanes, int vector VI, exp EXP -------------- */

/* Loads and stores of a whole vector (a constant size: one vector move) or of the row's tail. */
#define LD(v, p) (full ? memcpy(&(v), (p), sizeof(v)) : memcpy(&(v), (p), m))
#define ST(p, v) (full ? memcpy((p), &(v), sizeof(v)) : memcpy((p), &(v), m))

/* o = x OP y over n contiguous floats: whole vectors first, then the tail, whose unused lanes
 * compute 0 OP 1 (no invalid operation to flag) and are never stored. Unlike the loops below,
 * no tail test per vector: the binary kernel's small rows are dispatch's hot path (the LD/ST
 * form cost 10 more instructions per cached 4x4 add). */
#define ARITH_LOOP(SUF, NAME, ATTR, VF, L, OP)                                                     \
    static ATTR void NAME##_##SUF(int64_t n, const float *x, const float *y, float *o) {           \
        int64_t i = 0;                                                                             \
        for (; i + L <= n; i += L) {                                                               \
            VF a, b;                                                                               \
            memcpy(&a, x + i, sizeof a), memcpy(&b, y + i, sizeof b);                              \
            VF r = a OP b;                                                                         \
            memcpy(o + i, &r, sizeof r);                                                           \
        }                                                                                          \
        if (i < n) {                                                                               \
            size_t m = (size_t)(n - i) * sizeof(float);                                            \
            VF a = {0}, b = a + 1.0f;                                                              \
            memcpy(&a, x + i, m), memcpy(&b, y + i, m);                                            \
            VF r = a OP b;                                                                         \
            memcpy(o + i, &r, m);                                                                  \
        }                                                                                          \
    }

#define DEFINE_LOOPS(SUF, VF, VI, L, ATTR, EXP)                                                    \
    static ATTR void silu_mul_##SUF(int64_t n, const float *g, const float *u, float *out) {       \
        for (int64_t i = 0; i < n; i += L) {                                                       \
            size_t m = (size_t)(n - i < L ? n - i : L) * sizeof(float);                            \
            int full = n - i >= L;                                                                 \
            VF a = {0}, b = {0};                                                                   \
            LD(a, g + i), LD(b, u + i);                                                            \
            VF e = EXP(-a);                                                                        \
            VF y = (a / (1.0f + e)) * b;                                                           \
            ST(out + i, y);                                                                        \
        }                                                                                          \
    }                                                                                              \
    static ATTR void silu_mul_bwd_##SUF(int64_t n, const float *g, const float *u,                 \
                                        const float *dy, float *dg, float *du) {                   \
        for (int64_t i = 0; i < n; i += L) {                                                       \
            size_t m = (size_t)(n - i < L ? n - i : L) * sizeof(float);                            \
            int full = n - i >= L;                                                                 \
            VF a = {0}, b = {0}, d = {0};                                                          \
            LD(a, g + i), LD(b, u + i), LD(d, dy + i);                                             \
            VF e = EXP(-a);                                                                        \
            VF s = 1.0f / (1.0f + e);                                                              \
            VF yu = d * (a / (1.0f + e));                                                          \
            VF yg = (d * b) * (s * (1.0f + a * (1.0f - s)));                                       \
            ST(du + i, yu), ST(dg + i, yg);                                                        \
        }                                                                                          \
    }                                                                                              \
    static ATTR float row_max_##SUF(const float *x, int64_t n) {                                   \
        VF mx = {0};                                                                               \
        mx -= INFINITY;                                                                            \
        for (int64_t i = 0; i < n; i += L) {                                                       \
            VF v = mx; /* the tail's unused lanes keep the running max */                          \
            if (n - i >= L)                                                                        \
                memcpy(&v, x + i, sizeof v);                                                       \
            else                                                                                   \
                memcpy(&v, x + i, (size_t)(n - i) * sizeof(float));                                \
            VI take = (v > mx) | (v != v);                                                         \
            mx = DT_VSELECT(VF, VI, take, v, mx);                                                  \
        }                                                                                          \
        float r = -INFINITY;                                                                       \
        for (int l = 0; l < L; l++)                                                                \
            if (mx[l] > r || mx[l] != mx[l]) r = mx[l];                                            \
        return r;                                                                                  \
    }                                                                                              \
    static ATTR void exp_shift_##SUF(int64_t n, const float *x, float shift, float *e) {           \
        for (int64_t i = 0; i < n; i += L) {                                                       \
            size_t m = (size_t)(n - i < L ? n - i : L) * sizeof(float);                            \
            int full = n - i >= L;                                                                 \
            VF v = {0};                                                                            \
            LD(v, x + i);                                                                          \
            VF r = EXP(v - shift);                                                                 \
            ST(e + i, r);                                                                          \
        }                                                                                          \
    }                                                                                              \
    static ATTR double add_sumsq_##SUF(int64_t n, const float *x, const float *r, float *h) {      \
        double acc[L] = {0};                                                                       \
        for (int64_t i = 0; i < n; i += L) {                                                       \
            size_t m = (size_t)(n - i < L ? n - i : L) * sizeof(float);                            \
            int full = n - i >= L;                                                                 \
            VF a = {0}, b = {0};                                                                   \
            LD(a, x + i), LD(b, r + i);                                                            \
            VF v = a + b;                                                                          \
            ST(h + i, v);                                                                          \
            for (int l = 0; l < L; l++)                                                            \
                acc[l] += (double)v[l] * (double)v[l];                                             \
        }                                                                                          \
        double s = 0;                                                                              \
        for (int l = 0; l < L; l++)                                                                \
            s += acc[l];                                                                           \
        return s;                                                                                  \
    }                                                                                              \
    static ATTR void scale_mul_##SUF(int64_t n, const float *h, float k, const float *w,           \
                                     float *y) {                                                   \
        for (int64_t i = 0; i < n; i += L) {                                                       \
            size_t m = (size_t)(n - i < L ? n - i : L) * sizeof(float);                            \
            int full = n - i >= L;                                                                 \
            VF a = {0}, b = {0};                                                                   \
            LD(a, h + i), LD(b, w + i);                                                            \
            VF v = (a * k) * b;                                                                    \
            ST(y + i, v);                                                                          \
        }                                                                                          \
    }                                                                                              \
    ARITH_LOOP(SUF, add, ATTR, VF, L, +)                                                           \
    ARITH_LOOP(SUF, sub, ATTR, VF, L, -)                                                           \
    ARITH_LOOP(SUF, mul, ATTR, VF, L, *)                                                           \
    ARITH_LOOP(SUF, div, ATTR, VF, L, /)                                                           \
    static ATTR void softmax_grad_##SUF(int64_t n, const float *x, float mx, float inv, float g,   \
                                        float *y) {                                                \
        for (int64_t i = 0; i < n; i += L) {                                                       \
            size_t m = (size_t)(n - i < L ? n - i : L) * sizeof(float);                            \
            int full = n - i >= L;                                                                 \
            VF v = {0};                                                                            \
            LD(v, x + i);                                                                          \
            VF r = 0.0f - (EXP(v - mx) * inv) * g;                                                 \
            ST(y + i, r);                                                                          \
        }                                                                                          \
    }

typedef float v1f __attribute__((vector_size(4)));
typedef int32_t v1i __attribute__((vector_size(4)));
DT_VEXPF_DEFINE(vexpf1, v1f, v1i, )
DEFINE_LOOPS(scalar, v1f, v1i, 1, , vexpf1)
DEFINE_LOOPS(sse, dt_v4f, dt_v4i, 4, , dt_vexpf4)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_WIDE 1
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define AVX2   __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f")))
DT_VEXPF_DEFINE(vexpf8, v8f, v8i, AVX2)
DT_VEXPF_DEFINE(vexpf16, v16f, v16i, AVX512)
DEFINE_LOOPS(avx2, v8f, v8i, 8, AVX2, vexpf8)
DEFINE_LOOPS(avx512, v16f, v16i, 16, AVX512, vexpf16)
#else
#define HAVE_WIDE 0
#endif

/* ---- choosing a path ---------------------------------------------------------------------- */

typedef struct loops {
    void (*silu_mul)(int64_t, const float *, const float *, float *);
    void (*silu_mul_bwd)(int64_t, const float *, const float *, const float *, float *, float *);
    float (*row_max)(const float *, int64_t);
    void (*exp_shift)(int64_t, const float *, float, float *);
    void (*softmax_grad)(int64_t, const float *, float, float, float, float *);
    double (*add_sumsq)(int64_t, const float *, const float *, float *);
    void (*scale_mul)(int64_t, const float *, float, const float *, float *);
    void (*arith[DT_SIMD_ARITH_COUNT])(int64_t, const float *, const float *, float *);
} loops;

#define LOOPS(SUF)                                                                                 \
    {                                                                                              \
        silu_mul_##SUF, silu_mul_bwd_##SUF, row_max_##SUF, exp_shift_##SUF, softmax_grad_##SUF,    \
            add_sumsq_##SUF, scale_mul_##SUF, {add_##SUF, sub_##SUF, mul_##SUF, div_##SUF}         \
    }

static const loops table[DT_SIMD_COUNT] = {
    LOOPS(scalar),
    LOOPS(sse),
#if HAVE_WIDE
    LOOPS(avx2),
    LOOPS(avx512),
#endif
};

static const char *const names[DT_SIMD_COUNT] = {"scalar", "sse", "avx2", "avx512"};

const char *dt_simd_name(dt_simd s) {
    return (unsigned)s < DT_SIMD_COUNT ? names[s] : "?";
}

dt_simd dt_simd_cpu_best(void) {
#if HAVE_WIDE
    if (__builtin_cpu_supports("avx512f")) return DT_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2")) return DT_SIMD_AVX2;
#endif
    return DT_SIMD_SSE;
}

/* The table of dt_simd_level's path, kept once chosen (NULL: to choose again, after a cap). */
static _Atomic(const loops *) current;

/* The cap: -1 until read from DT_SIMD (a benign race: every thread reads the same). */
static int cap = -1;

static int env_cap(void) {
    const char *s = getenv("DT_SIMD");
    for (int i = 0; s && i < DT_SIMD_COUNT; i++)
        if (!strcmp(s, names[i])) return i;
    return DT_SIMD_COUNT;
}

void dt_simd_set_cap(dt_simd c) {
    cap = (unsigned)c <= DT_SIMD_COUNT ? (int)c : DT_SIMD_COUNT;
    atomic_store_explicit(&current, NULL, memory_order_relaxed);
}

dt_simd dt_simd_level(void) {
    static int best = -1;
    if (best < 0) best = (int)dt_simd_cpu_best();
    if (cap < 0) cap = env_cap();
    return (dt_simd)(cap < best ? cap : best);
}

__attribute__((noinline, cold)) static const loops *choose(void) {
    const loops *l = &table[dt_simd_level()];
    atomic_store_explicit(&current, l, memory_order_relaxed);
    return l;
}

static inline const loops *chosen(void) {
    const loops *l = atomic_load_explicit(&current, memory_order_relaxed);
    return l ? l : choose();
}

void dt_simd_silu_mul(int64_t n, const float *g, const float *u, float *out) {
    chosen()->silu_mul(n, g, u, out);
}

void dt_simd_silu_mul_backward(int64_t n, const float *g, const float *u, const float *dy,
                               float *dg, float *du) {
    chosen()->silu_mul_bwd(n, g, u, dy, dg, du);
}

float dt_simd_row_max(const float *x, int64_t n) {
    return chosen()->row_max(x, n);
}

/* Four double lanes over the groups of four, added pairwise, then the tail in order: the same
 * order on every path, so the sums depend only on the exps (which are the same bits). */
static void sum4(const float *e, int64_t n, double acc[4], double *chunk) {
    double c[4] = {0, 0, 0, 0};
    int64_t t = 0;
    for (; t + 4 <= n; t += 4)
        for (int l = 0; l < 4; l++)
            c[l] += (double)e[t + l], acc[l] += (double)e[t + l];
    double s = (c[0] + c[1]) + (c[2] + c[3]);
    for (; t < n; t++)
        s += (double)e[t];
    *chunk = s;
}

void dt_simd_row_exp_sums(const float *x, int64_t n, float mx, double *chunked, double *whole) {
    float e[DT_SIMD_CHUNK];
    double acc[4] = {0, 0, 0, 0}, sum = 0;
    int64_t m = 0;
    for (int64_t t0 = 0; t0 < n; t0 += DT_SIMD_CHUNK) {
        double c;
        m = n - t0 < DT_SIMD_CHUNK ? n - t0 : DT_SIMD_CHUNK;
        chosen()->exp_shift(m, x + t0, mx, e);
        sum4(e, m, acc, &c);
        sum += c;
    }
    *chunked = sum;
    /* the whole row's lanes, then its tail (the last chunk's, as chunks hold groups of four) */
    double w = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (int64_t t = m & ~(int64_t)3; t < m; t++)
        w += (double)e[t];
    *whole = w;
}

void dt_simd_softmax_grad(int64_t n, const float *x, float mx, float inv, float g, int64_t t,
                          float *y) {
    float xt = t >= 0 && t < n ? x[t] : 0; /* read first: y may be x */
    chosen()->softmax_grad(n, x, mx, inv, g, y);
    if (t >= 0 && t < n) y[t] = g - (dt_vexpf(xt - mx) * inv) * g;
}

double dt_simd_add_sumsq(int64_t n, const float *x, const float *r, float *h) {
    return chosen()->add_sumsq(n, x, r, h);
}

void dt_simd_scale_mul(int64_t n, const float *h, float k, const float *w, float *y) {
    chosen()->scale_mul(n, h, k, w, y);
}

void dt_simd_arith(dt_simd_arith_op op, int64_t n, const float *a, const float *b, float *o) {
    chosen()->arith[op](n, a, b, o);
}
