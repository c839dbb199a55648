/* The packed sgemm (ops/cpu/sgemm.h) on every path this CPU runs (forced through
 * dt_simd_set_cap), over edge-tile, thin, odd, deep (K past one k block) and strided shapes in all
 * four transpose pairs: within K u sum|a b| (u = 2^-24) of a naive f64 loop, bit-equal to a naive
 * fmaf chain over k (its documented order), the same bits with 1 to 4 pool threads, no write
 * outside C's N columns, and no read past a row-major B read in place. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/pool.h"
#include "ops/cpu/sgemm.h"
#include "ops/kernels.h"

static uint64_t rng_state;

static float urand(void) { /* in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* An R x C matrix stored with padding (row stride C + 3) or transposed (column stride R + 2), so
 * strides other than the dense ones are read too. */
typedef struct mat {
    float *buf;
    dt_sgemm_mat m;
} mat;

static mat make(int64_t R, int64_t C, int trans) {
    int64_t ld = trans ? R + 2 : C + 3, n = trans ? C * ld : R * ld;
    mat x = {.buf = malloc(sizeof(float) * (size_t)n)};
    cr_assert(x.buf);
    for (int64_t i = 0; i < n; i++)
        x.buf[i] = urand();
    x.m = (dt_sgemm_mat){x.buf, trans ? 1 : ld, trans ? ld : 1};
    return x;
}

static float at(dt_sgemm_mat m, int64_t i, int64_t j) {
    return m.p[i * m.rs + j * m.cs];
}

/* The paths to force: scalar always, AVX2 and AVX-512 where this CPU has them. */
static int paths(dt_simd *out) {
    int n = 0;
    out[n++] = DT_SIMD_SCALAR;
    for (dt_simd s = DT_SIMD_AVX2; s <= DT_SIMD_AVX512; s++) {
        dt_simd_set_cap(s);
        if (dt_sgemm_path() == s) out[n++] = s;
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
    return n;
}

/* C with a sentinel band past column N (ldc = N + 5) and NaN in C's own cells beforehand. */
static void check_shape(int64_t M, int64_t N, int64_t K, int ta, int tb, const dt_simd *ps,
                        int np) {
    mat a = make(M, K, ta), b = make(K, N, tb);
    int64_t ldc = N + 5;
    float *c = malloc(sizeof(float) * (size_t)(M * ldc)),
          *fm = malloc(sizeof(float) * (size_t)(M * N));
    double *ref = malloc(sizeof(double) * (size_t)(M * N)),
           *mag = malloc(sizeof(double) * (size_t)(M * N));
    cr_assert(c && fm && ref && mag);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, g = 0;
            float f = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)at(a.m, i, k) * (double)at(b.m, k, j);
                s += p, g += fabs(p);
                f = fmaf(at(a.m, i, k), at(b.m, k, j), f);
            }
            ref[i * N + j] = s, mag[i * N + j] = g, fm[i * N + j] = f;
        }
    for (int p = 0; p < np; p++) {
        dt_simd_set_cap(ps[p]);
        for (int64_t i = 0; i < M * ldc; i++)
            c[i] = i % ldc < N ? NAN : 12345.0f;
        cr_assert_eq(dt_sgemm(M, N, K, a.m, b.m, c, ldc), DT_OK);
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) {
                double got = c[i * ldc + j], want = ref[i * N + j];
                /* an fma chain of K steps: |error| <= K u sum|a b| (plus the float rounding of
                 * the result, covered by the K + 1) */
                double tol = (double)(K + 1) * 0x1p-24 * mag[i * N + j];
                cr_assert(fabs(got - want) <= tol,
                          "%s %c%c M %lld N %lld K %lld: C[%lld][%lld] %.9g, f64 %.9g, tol %.3g",
                          dt_simd_name(ps[p]), ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M,
                          (long long)N, (long long)K, (long long)i, (long long)j, got, want, tol);
                cr_assert(memcmp(&c[i * ldc + j], &fm[i * N + j], sizeof(float)) == 0,
                          "%s %c%c M %lld N %lld K %lld: C[%lld][%lld] %a, fmaf chain %a",
                          dt_simd_name(ps[p]), ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M,
                          (long long)N, (long long)K, (long long)i, (long long)j, got,
                          (double)fm[i * N + j]);
            }
            for (int64_t j = N; j < ldc; j++)
                cr_assert(c[i * ldc + j] == 12345.0f, "%s wrote C[%lld][%lld] past N %lld",
                          dt_simd_name(ps[p]), (long long)i, (long long)j, (long long)N);
        }
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
    free(a.buf), free(b.buf), free(c), free(fm), free(ref), free(mag);
}

Test(sgemm, every_path_matches_naive_loops) {
    rng_state = (uint64_t)time(NULL);
    cr_log_info("seed %llu", (unsigned long long)rng_state);
    dt_simd ps[3];
    int np = paths(ps);
    for (int p = 0; p < np; p++)
        cr_log_info("path %s", dt_simd_name(ps[p]));
    /* 1 x N, M x 1, K = 1, tiles' edges on both micro-kernels (8 x 32, 6 x 16) and the 64 x 128
     * tiles, K past the 256-deep k block, and the model's own shapes */
    /* clang-format off */
    static const int64_t shapes[][3] = {
        {1, 1, 1},     {1, 37, 5},     {29, 1, 7},    {13, 17, 1},   {7, 13, 5},
        {8, 32, 16},   {9, 33, 17},    {6, 16, 3},    {65, 129, 31}, {17, 100, 257},
        {70, 45, 513}, {130, 260, 40}, {128, 96, 64},
        /* N a multiple of every path's NR (32, 16, 4) and at most 4 row panels (M up to 16 on
         * every path, 32 on AVX-512): a row-major B is read in place, its padded row stride as
         * ldb, over one and over several k blocks; with more rows it is packed */
        {1, 32, 1},    {9, 64, 3},     {16, 128, 513}, {13, 384, 130}, {5, 160, 800},
        {32, 96, 400}, {70, 128, 513},
        /* weight-gradient shapes: few output tiles (cut smaller so threads share them), K deep
         * enough for A's prefetch to run ahead and stop at the k block's end */
        {64, 128, 700}, {24, 96, 1100}, {128, 40, 390}, {8, 32, 600},
    };
    /* clang-format on */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            check_shape(shapes[s][0], shapes[s][1], shapes[s][2], t & 1, t >> 1, ps, np);
}

Test(sgemm, same_bits_with_any_thread_count) {
    rng_state = 7;
    const int64_t M = 200, N = 300, K = 270; /* many tiles, two k blocks */
    mat a = make(M, K, 0), b = make(K, N, 1);
    float *c[4];
    for (int t = 1; t <= 4; t++) {
        cr_assert_eq(dt_pool_set_threads(t), DT_OK);
        c[t - 1] = malloc(sizeof(float) * (size_t)(M * N));
        cr_assert(c[t - 1]);
        cr_assert_eq(dt_sgemm(M, N, K, a.m, b.m, c[t - 1], N), DT_OK);
        if (t > 1)
            cr_assert(memcmp(c[0], c[t - 1], sizeof(float) * (size_t)(M * N)) == 0,
                      "%d threads differ from 1 (path %s)", t, dt_simd_name(dt_sgemm_path()));
    }
    for (int t = 0; t < 4; t++)
        free(c[t]);
    free(a.buf), free(b.buf);
}

/* The weight gradients' products (g^T x: A transposed, a small M x N, K = B T rows) are cut
 * into more tiles than the default 64 x 128 when they would be few; with 1 to 3 threads each C
 * element is still the fmaf chain over k in order. */
Test(sgemm, small_outputs_split_with_the_same_bits) {
    rng_state = 5;
    static const int64_t shapes[][3] = {{64, 128, 2048}, {37, 70, 1031}, {128, 128, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        mat a = make(M, K, 1), b = make(K, N, 0);
        float *c = malloc(sizeof(float) * (size_t)(M * N)),
              *fm = malloc(sizeof(float) * (size_t)(M * N));
        cr_assert(c && fm);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float f = 0;
                for (int64_t k = 0; k < K; k++)
                    f = fmaf(at(a.m, i, k), at(b.m, k, j), f);
                fm[i * N + j] = f;
            }
        for (int t = 1; t <= 3; t++) {
            cr_assert_eq(dt_pool_set_threads(t), DT_OK);
            memset(c, 0xff, sizeof(float) * (size_t)(M * N)); /* NaN: a missed tile shows */
            cr_assert_eq(dt_sgemm(M, N, K, a.m, b.m, c, N), DT_OK);
            for (int64_t i = 0; i < M * N; i++)
                cr_assert(memcmp(&c[i], &fm[i], sizeof(float)) == 0,
                          "M %lld N %lld K %lld, %d threads: C[%lld] %a, fmaf chain %a",
                          (long long)M, (long long)N, (long long)K, t, (long long)i, (double)c[i],
                          (double)fm[i]);
        }
        free(a.buf), free(b.buf), free(c), free(fm);
    }
}

/* dt_cpu_matmul's f32 path, NN and NT (trans_b), gives the packed sgemm's bits where it takes
 * it (DT_SGEMM=1, set before the first GEMM of this test's process, forces it for every
 * shape). */
Test(sgemm, matmul_takes_it) {
    setenv("DT_SGEMM", "1", 1);
    if (dt_sgemm_path() == DT_SIMD_SCALAR) cr_skip_test("no vector path on this CPU");
    cr_assert(dt_sgemm_preferred(300, 300, 300));
    rng_state = 11;
    for (int tb = 0; tb < 2; tb++) {
        const int64_t M = 37, N = 45, K = 1500; /* past OpenBLAS's k block: its bits differ */
        float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N),
              *c = malloc(sizeof(float) * M * N), *d = malloc(sizeof(float) * M * N);
        cr_assert(a && b && c && d);
        for (int64_t i = 0; i < M * K; i++)
            a[i] = urand();
        for (int64_t i = 0; i < K * N; i++)
            b[i] = urand();
        dt_local la = {.data = a, .dtype = DT_F32, .ndim = 2, .shape = {M, K}};
        dt_local lb = {.data = b, .dtype = DT_F32, .ndim = 2, .shape = {tb ? N : K, tb ? K : N}};
        dt_local lc = {.data = c, .dtype = DT_F32, .ndim = 2, .shape = {M, N}};
        cr_assert_eq(dt_cpu_matmul(&la, &lb, tb, &lc), DT_OK);
        dt_sgemm_mat ma = {a, K, 1}, mb = {b, tb ? 1 : N, tb ? K : 1};
        cr_assert_eq(dt_sgemm(M, N, K, ma, mb, d, N), DT_OK);
        cr_assert(memcmp(c, d, sizeof(float) * M * N) == 0, "trans_b %d", tb);
        free(a), free(b), free(c), free(d);
    }
}

/* A dense row-major B (K, N) ending right at an unreadable page, with N a multiple of every
 * path's NR, so that dt_sgemm reads it in place (few row panels): a read past its
 * last row's N columns faults. The result is still the fmaf chain's. */
static void in_place_case(int64_t M, int64_t N, int64_t K, const dt_simd *ps, int np) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = sizeof(float) * (size_t)(K * N);
    size_t span = (bytes + page - 1) / page * page;
    char *map = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(map != MAP_FAILED);
    cr_assert_eq(mprotect(map + span, page, PROT_NONE), 0);
    float *b = (float *)(map + span - bytes);
    for (int64_t i = 0; i < K * N; i++)
        b[i] = urand();
    mat a = make(M, K, 0);
    float *c = malloc(sizeof(float) * (size_t)(M * N)),
          *fm = malloc(sizeof(float) * (size_t)(M * N));
    cr_assert(c && fm);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float f = 0;
            for (int64_t k = 0; k < K; k++)
                f = fmaf(at(a.m, i, k), b[k * N + j], f);
            fm[i * N + j] = f;
        }
    for (int p = 0; p < np; p++) {
        dt_simd_set_cap(ps[p]);
        cr_assert_eq(dt_sgemm(M, N, K, a.m, (dt_sgemm_mat){b, N, 1}, c, N), DT_OK);
        cr_assert(memcmp(c, fm, sizeof(float) * (size_t)(M * N)) == 0,
                  "%s differs from the fmaf chain", dt_simd_name(ps[p]));
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
    munmap(map, span + page);
    free(a.buf), free(c), free(fm);
}

Test(sgemm, in_place_b_reads_nothing_past_its_rows) {
    rng_state = 3;
    dt_simd ps[3];
    int np = paths(ps);
    in_place_case(13, 96, 450, ps, np);  /* few row panels on every path; two k blocks */
    in_place_case(24, 96, 1100, ps, np); /* 3 and 4 row panels (AVX-512, AVX2); 3 k blocks */
}
