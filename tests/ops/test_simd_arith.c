/* dt_simd_arith (ops/cpu/simd.h), the f32 add, sub, mul and div of contiguous rows behind the
 * binary kernel: on every SIMD path this CPU runs (forced through dt_simd_set_cap), against a
 * plain one-element-at-a-time loop written here, bit for bit (NaN as NaN), tails and specials
 * (zeros of both signs, infinities, NaN, subnormals) included, in place too; and the binary
 * kernel itself (dt_cpu_binary) on equal shapes against the same loop. */
#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "ops/cpu/simd.h"
#include "ops/kernels.h"

static uint64_t rng = 0xa51d2026u;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}

/* One in eight elements special, the rest in [-4, 4). */
static void fill(float *x, int64_t n) {
    static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 1e30f};
    for (int64_t i = 0; i < n; i++) {
        float r = frand();
        x[i] = (rng & 7) == 0 ? special[(rng >> 3) % 8] : r;
    }
}

/* The reference: one IEEE operation per element, written out here. */
static float naive(int op, float a, float b) {
    volatile float x = a, y = b; /* one scalar operation each, whatever the compiler does */
    switch (op) {
    case DT_SIMD_ADD:
        return x + y;
    case DT_SIMD_SUB:
        return x - y;
    case DT_SIMD_MUL:
        return x * y;
    default:
        return x / y;
    }
}

static int same_bits(float got, float want) {
    if (isnan(want)) return isnan(got);
    return !memcmp(&got, &want, sizeof got);
}

static const int64_t LENS[] = {0, 1, 3, 7, 8, 15, 16, 17, 31, 32, 33, 100, 1000};
#define NLENS (sizeof LENS / sizeof LENS[0])

Test(simd_arith, every_path_gives_the_plain_loops_bits) {
    int best = (int)dt_simd_cpu_best();
    float a[1000], b[1000], o[1000], want[1000];
    for (size_t l = 0; l < NLENS; l++) {
        int64_t n = LENS[l];
        fill(a, n), fill(b, n);
        for (int op = 0; op < DT_SIMD_ARITH_COUNT; op++) {
            for (int64_t i = 0; i < n; i++)
                want[i] = naive(op, a[i], b[i]);
            for (int p = 0; p <= best; p++) {
                dt_simd_set_cap((dt_simd)p);
                o[n < 1000 ? n : 999] = 12345.0f; /* past the row: must stay */
                dt_simd_arith((dt_simd_arith_op)op, n, a, b, o);
                for (int64_t i = 0; i < n; i++)
                    cr_assert(same_bits(o[i], want[i]), "%s op %d n %lld [%lld]: %a, want %a",
                              dt_simd_name((dt_simd)p), op, (long long)n, (long long)i, o[i],
                              want[i]);
                if (n < 1000)
                    cr_assert_eq(o[n], 12345.0f, "%s op %d n %lld wrote past the row",
                                 dt_simd_name((dt_simd)p), op, (long long)n);
            }
        }
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
}

Test(simd_arith, in_place_on_either_input) {
    int best = (int)dt_simd_cpu_best();
    float a[100], b[100], x[100], want[100];
    fill(a, 100), fill(b, 100);
    for (int p = 0; p <= best; p++) {
        dt_simd_set_cap((dt_simd)p);
        for (int op = 0; op < DT_SIMD_ARITH_COUNT; op++) {
            for (int i = 0; i < 100; i++)
                want[i] = naive(op, a[i], b[i]);
            memcpy(x, a, sizeof x);
            dt_simd_arith((dt_simd_arith_op)op, 100, x, b, x);
            for (int i = 0; i < 100; i++)
                cr_assert(same_bits(x[i], want[i]), "%s op %d out = a [%d]",
                          dt_simd_name((dt_simd)p), op, i);
            memcpy(x, b, sizeof x);
            dt_simd_arith((dt_simd_arith_op)op, 100, a, x, x);
            for (int i = 0; i < 100; i++)
                cr_assert(same_bits(x[i], want[i]), "%s op %d out = b [%d]",
                          dt_simd_name((dt_simd)p), op, i);
        }
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
}

/* The kernel the dispatch calls: equal shapes take the row path, on every SIMD path. */
Test(simd_arith, binary_kernel_on_equal_shapes) {
    static const dt_binary ops[] = {DT_BINARY_ADD, DT_BINARY_SUB, DT_BINARY_MUL, DT_BINARY_DIV};
    int best = (int)dt_simd_cpu_best();
    enum { R = 5, C = 37 };
    float a[R * C], b[R * C], o[R * C];
    fill(a, R * C), fill(b, R * C);
    int64_t shape[2] = {R, C};
    dt_local la = {.data = a, .dtype = DT_F32, .ndim = 2}, lb = la, lo = la;
    memcpy(la.shape, shape, sizeof shape), memcpy(lb.shape, shape, sizeof shape);
    memcpy(lo.shape, shape, sizeof shape);
    lb.data = b, lo.data = o;
    for (int p = 0; p <= best; p++) {
        dt_simd_set_cap((dt_simd)p);
        for (int k = 0; k < 4; k++) {
            cr_assert_eq(dt_cpu_binary(ops[k], &la, &lb, &lo), DT_OK, "%s", dt_last_error());
            for (int i = 0; i < R * C; i++)
                cr_assert(same_bits(o[i], naive(k, a[i], b[i])), "%s binary %d [%d]: %a",
                          dt_simd_name((dt_simd)p), k, i, o[i]);
        }
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
}

/* A row's tail computes whole vectors: the lanes past it must raise no floating-point flag
 * that the row's own elements do not (0 / 0 would flag an invalid operation). */
Test(simd_arith, a_tail_raises_no_invalid_flag) {
    int best = (int)dt_simd_cpu_best();
    float a[3] = {1.0f, 2.0f, 3.0f}, b[3] = {4.0f, 5.0f, 6.0f}, o[3];
    for (int p = 0; p <= best; p++) {
        dt_simd_set_cap((dt_simd)p);
        for (int op = 0; op < DT_SIMD_ARITH_COUNT; op++) {
            feclearexcept(FE_ALL_EXCEPT);
            dt_simd_arith((dt_simd_arith_op)op, 3, a, b, o);
            cr_assert(!fetestexcept(FE_INVALID | FE_DIVBYZERO), "%s op %d: a flag from the tail",
                      dt_simd_name((dt_simd)p), op);
        }
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
}
