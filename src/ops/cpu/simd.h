/* The fused kernels' f32 inner loops with a SIMD path chosen at run time: scalar (one lane),
 * SSE (4 lanes, the x86-64 baseline; NEON on arm64), AVX2 (8) or AVX-512F (16), the best the
 * CPU has, capped by DT_SIMD=scalar|sse|avx2|avx512 or dt_simd_set_cap. CPU kernels only. */
#ifndef DT_OPS_CPU_SIMD_H
#define DT_OPS_CPU_SIMD_H

#include <stdint.h>

typedef enum dt_simd {
    DT_SIMD_SCALAR,
    DT_SIMD_SSE,
    DT_SIMD_AVX2,
    DT_SIMD_AVX512,
    DT_SIMD_COUNT
} dt_simd;

/* The path the loops below take: the best this CPU runs (and this build compiled), capped by
 * the DT_SIMD environment variable (read once) or by dt_simd_set_cap. */
dt_simd dt_simd_level(void);

/* The best path this CPU runs, uncapped. */
dt_simd dt_simd_cpu_best(void);

/* Caps the path (tests and benchmarks force each in turn); DT_SIMD_COUNT removes the cap. Not
 * thread-safe against running kernels: set it between calls. */
void dt_simd_set_cap(dt_simd cap);

/* "scalar", "sse", "avx2", "avx512". */
const char *dt_simd_name(dt_simd s);

/* Elementwise loops: every path runs the same per-lane arithmetic (no fused multiply-add,
 * vexp.h's exp), so they give the same bits on every path.
 *   silu_mul: out = (g / (1 + exp(-g))) * u, the bits of silu then mul
 *   silu_mul_backward: with s = 1 / (1 + exp(-g)), du = dy (g / (1 + exp(-g))) and
 *   dg = dy u (s (1 + g (1 - s))). Outputs may alias inputs of the same index only. */
void dt_simd_silu_mul(int64_t n, const float *g, const float *u, float *out);
void dt_simd_silu_mul_backward(int64_t n, const float *g, const float *u, const float *dy,
                               float *dg, float *du);

/* Rows of a softmax, the arithmetic of ops/cpu/softmax.c's f32 rows so that the fused cross
 * entropy gives the bits of log_softmax and its backward: every path computes the same exps,
 * and the sums add them in one fixed order (four double lanes), so these too are the same bits
 * on every path.
 *   row_max: NaN wins.
 *   row_exp_sums: e = exp(x - mx); *chunked = the sum of e a DT_SIMD_CHUNK at a time (as
 *   log_softmax adds it), *whole = its sum over the row at once (as softmax adds it).
 *   softmax_grad: y = onehot g - (exp(x - mx) inv) g, onehot 1 at index t (none when t < 0):
 *   log_softmax's gradient for a picked target, inv = 1 / the whole sum. y may be x. */
#define DT_SIMD_CHUNK 256
float dt_simd_row_max(const float *x, int64_t n);
void dt_simd_row_exp_sums(const float *x, int64_t n, float mx, double *chunked, double *whole);
void dt_simd_softmax_grad(int64_t n, const float *x, float mx, float inv, float g, int64_t t,
                          float *y);

/* RMS norm with the residual add: h = x + r (exact, every path the same bits) returning the
 * sum of h^2 in double (reassociated as the row sums above); then y = (h k) w, exact. h may be
 * x or r; y may be h. */
double dt_simd_add_sumsq(int64_t n, const float *x, const float *r, float *h);
void dt_simd_scale_mul(int64_t n, const float *h, float k, const float *w, float *y);

/* Arithmetic of two contiguous rows, o = a op b, one IEEE operation per element: the same bits
 * on every path. o may be a or b. */
typedef enum dt_simd_arith_op {
    DT_SIMD_ADD,
    DT_SIMD_SUB,
    DT_SIMD_MUL,
    DT_SIMD_DIV,
    DT_SIMD_ARITH_COUNT
} dt_simd_arith_op;
void dt_simd_arith(dt_simd_arith_op op, int64_t n, const float *a, const float *b, float *o);

#endif
