/* CPU matmul: batched GEMM with NumPy batch broadcasting. f32 goes to the library's packed
 * sgemm (sgemm.h) where it beats OpenBLAS, f32/f64 otherwise to OpenBLAS when built with it,
 * else to a cache-blocked i-k-j loop; bf16/f16 are widened to f32 a block of rows at a time and take the f32 path, so products accumulate in f32; float8 operands likewise
 * (exactly: every float8 value is an f32), into an f32 result. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/float8.h"
#include "core/half.h"
#include "core/pool.h"
#include "core/ranks.h"
#include "dt_config.h"
#include "ops/cpu/sgemm.h"
#include "ops/kernel_args.h"
#include "ops/kernels.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if DT_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define KB 128 /* k-block: KB x NB of B stays in L2 */
#define NB 256 /* j-block: four rows of C blocks stay in L1 */
#define MB 256 /* rows of a bf16/f16 A widened at a time */

/* c0..c3[j] += x0..x3 * b[j] for j < n. Full blocks run the constant trip count NB on restrict
 * parameters: GCC's -O2 cost model vectorises no loop that needs alias checks or a scalar
 * epilogue, and these are the loops that matter. */
#define DEFINE_AXPY(SUF, T)                                                                        \
    static void axpy4_##SUF(T *restrict c0, T *restrict c1, T *restrict c2, T *restrict c3,        \
                            const T *restrict b, T x0, T x1, T x2, T x3, int64_t n) {              \
        if (n == NB) {                                                                             \
            for (int64_t j = 0; j < NB; j++) {                                                     \
                T bv = b[j];                                                                       \
                c0[j] += x0 * bv;                                                                  \
                c1[j] += x1 * bv;                                                                  \
                c2[j] += x2 * bv;                                                                  \
                c3[j] += x3 * bv;                                                                  \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t j = 0; j < n; j++) {                                                          \
            T bv = b[j];                                                                           \
            c0[j] += x0 * bv;                                                                      \
            c1[j] += x1 * bv;                                                                      \
            c2[j] += x2 * bv;                                                                      \
            c3[j] += x3 * bv;                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void axpy1_##SUF(T *restrict c0, const T *restrict b, T x0, int64_t n) {                \
        if (n == NB) {                                                                             \
            for (int64_t j = 0; j < NB; j++) c0[j] += x0 * b[j];                                   \
            return;                                                                                \
        }                                                                                          \
        for (int64_t j = 0; j < n; j++) c0[j] += x0 * b[j];                                        \
    }

/* C (M, N) = A (M, K) @ B (K, N), all dense; B's KB x NB block is reused by four rows. */
#define DEFINE_GEMM_LOOP(SUF, T)                                                                   \
    DEFINE_AXPY(SUF, T)                                                                            \
    static void gemm_loop_##SUF(int64_t M, int64_t N, int64_t K, const T *A, const T *B,           \
                                T *C) {                                                            \
        memset(C, 0, (size_t)(M * N) * sizeof(T));                                                 \
        for (int64_t k0 = 0; k0 < K; k0 += KB) {                                                   \
            int64_t k1 = k0 + KB < K ? k0 + KB : K;                                                \
            for (int64_t j0 = 0; j0 < N; j0 += NB) {                                               \
                int64_t jn = N - j0 < NB ? N - j0 : NB;                                            \
                int64_t i = 0;                                                                     \
                for (; i + 4 <= M; i += 4) {                                                       \
                    T *c = C + i * N + j0;                                                         \
                    const T *a = A + i * K;                                                        \
                    for (int64_t k = k0; k < k1; k++)                                              \
                        axpy4_##SUF(c, c + N, c + 2 * N, c + 3 * N, B + k * N + j0, a[k],          \
                                    a[K + k], a[2 * K + k], a[3 * K + k], jn);                     \
                }                                                                                  \
                for (; i < M; i++)                                                                 \
                    for (int64_t k = k0; k < k1; k++)                                              \
                        axpy1_##SUF(C + i * N + j0, B + k * N + j0, A[i * K + k], jn);             \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_GEMM_LOOP(f32, float)
DEFINE_GEMM_LOOP(f64, double)

/* Buffers reused across the batch: widened A/B/C for bf16/f16, B and A transposed for the loop
 * path. last_b remembers which B is already widened or transposed (a broadcast B is shared). */
typedef struct mm_ctx {
    int tb;
    int64_t N, K;
    void *fa, *fb, *fc, *bt, *at;
    const void *last_b, *last_bt;
} mm_ctx;

/* ta: A is given as (K, M), read in place by the packed and BLAS paths, transposed into a
 * buffer for the loop path. */
#define DEFINE_GEMM(SUF, T, BLAS)                                                                  \
    static dt_status gemm_##SUF(mm_ctx *cx, int ta, int64_t M, const T *A, const T *B, T *C) {     \
        int64_t N = cx->N, K = cx->K;                                                              \
        if (packed_##SUF(BLAS, M, N, K)) return packed_gemm_##SUF(ta, cx->tb, M, N, K, A, B, C);   \
        if (BLAS && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX) {                                \
            blas_##SUF(ta, cx->tb, M, N, K, A, B, C);                                              \
            return DT_OK;                                                                          \
        }                                                                                          \
        if (ta) { /* (K, M) -> (M, K); A differs per batch matrix */                               \
            if (!cx->at && !(cx->at = dt_host_alloc((size_t)(M * K) * sizeof(T))))                 \
                return dt_error(DT_ERR_NOMEM, "dt_cpu_matmul: no memory for %lldx%lld",            \
                                (long long)M, (long long)K);                                       \
            T *at = cx->at;                                                                        \
            for (int64_t k = 0; k < K; k++)                                                        \
                for (int64_t i = 0; i < M; i++)                                                    \
                    at[i * K + k] = A[k * M + i];                                                  \
            A = at;                                                                                \
        }                                                                                          \
        if (cx->tb) { /* (N, K) -> (K, N) once per distinct B */                                   \
            if (!cx->bt && !(cx->bt = dt_host_alloc((size_t)(K * N) * sizeof(T))))                 \
                return dt_error(DT_ERR_NOMEM, "dt_cpu_matmul: no memory for %lldx%lld",            \
                                (long long)K, (long long)N);                                       \
            T *bt = cx->bt;                                                                        \
            if (cx->last_bt != B)                                                                  \
                for (int64_t j = 0; j < N; j++)                                                    \
                    for (int64_t k = 0; k < K; k++) bt[k * N + j] = B[j * K + k];                  \
            cx->last_bt = B;                                                                       \
            B = bt;                                                                                \
        }                                                                                          \
        gemm_loop_##SUF(M, N, K, A, B, C);                                                         \
        return DT_OK;                                                                              \
    }

#if DT_HAVE_OPENBLAS
#define HAVE_BLAS 1
static void blas_f32(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                     const float *B, float *C) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0f, A, ta ? (int)M : (int)K, B, tb ? (int)K : (int)N,
                0.0f, C, (int)N);
}
static void blas_f64(int ta, int tb, int64_t M, int64_t N, int64_t K, const double *A,
                     const double *B, double *C) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0, A, ta ? (int)M : (int)K, B, tb ? (int)K : (int)N, 0.0,
                C, (int)N);
}
#else
#define HAVE_BLAS 0
#define blas_f32(...) ((void)0)
#define blas_f64(...) ((void)0)
#endif

/* f32 takes the packed sgemm where it is faster than OpenBLAS (small and middling shapes), and
 * for every shape where there is no OpenBLAS and the CPU has a vector path. */
static int packed_f32(int blas, int64_t M, int64_t N, int64_t K) {
    return blas ? dt_sgemm_preferred(M, N, K) : dt_sgemm_path() != DT_SIMD_SCALAR;
}
/* dt_sgemm reads a transposed operand in place with the same sums in the same order, so the
 * bits equal those of a transposed copy. */
static dt_status packed_gemm_f32(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                                 const float *B, float *C) {
    dt_sgemm_mat a = {A, ta ? 1 : K, ta ? M : 1}, b = {B, tb ? 1 : N, tb ? K : 1};
    return dt_sgemm(M, N, K, a, b, C, N);
}
#define packed_f64(...)      0
#define packed_gemm_f64(...) DT_ERR_DTYPE

DEFINE_GEMM(f32, float, HAVE_BLAS)
DEFINE_GEMM(f64, double, HAVE_BLAS)

/* bf16/f16: B widened once per distinct B, A and C a block of MB rows at a time (ta: A given
 * as (K, M), its rows gathered from columns while widening). */
#define DEFINE_GEMM_HALF(SUF, LOAD, STORE)                                                         \
    static dt_status gemm_##SUF(mm_ctx *cx, int ta, int64_t M, const uint16_t *A,                  \
                                const uint16_t *B, uint16_t *C) {                                  \
        int64_t N = cx->N, K = cx->K, mb = M < MB ? M : MB;                                        \
        if (!cx->fa) {                                                                             \
            cx->fa = dt_host_alloc((size_t)(mb * K) * sizeof(float));                              \
            cx->fb = dt_host_alloc((size_t)(K * N) * sizeof(float));                               \
            cx->fc = dt_host_alloc((size_t)(mb * N) * sizeof(float));                              \
            if (!cx->fa || !cx->fb || !cx->fc)                                                     \
                return dt_error(DT_ERR_NOMEM, "dt_cpu_matmul: no memory to widen %s blocks",       \
                                #SUF);                                                             \
        }                                                                                          \
        float *fa = cx->fa, *fb = cx->fb, *fc = cx->fc;                                            \
        if (cx->last_b != B) {                                                                     \
            for (int64_t i = 0; i < K * N; i++)                                                    \
                fb[i] = LOAD(B[i]);                                                                \
            cx->last_bt = NULL; /* fb's contents changed under the same pointer */                 \
        }                                                                                          \
        cx->last_b = B;                                                                            \
        for (int64_t i0 = 0; i0 < M; i0 += MB) {                                                   \
            int64_t m = M - i0 < MB ? M - i0 : MB;                                                 \
            if (ta)                                                                                \
                for (int64_t i = 0; i < m; i++)                                                    \
                    for (int64_t k = 0; k < K; k++)                                                \
                        fa[i * K + k] = LOAD(A[k * M + i0 + i]);                                   \
            else                                                                                   \
                for (int64_t i = 0; i < m * K; i++)                                                \
                    fa[i] = LOAD(A[i0 * K + i]);                                                   \
            DT_CHECK(gemm_f32(cx, 0, m, fa, fb, fc));                                              \
            uint16_t *c = C + i0 * N;                                                              \
            for (int64_t i = 0; i < m * N; i++)                                                    \
                c[i] = STORE(fc[i]);                                                               \
        }                                                                                          \
        return DT_OK;                                                                              \
    }

DEFINE_GEMM_HALF(bf16, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_GEMM_HALF(f16, dt_f16_to_f32, dt_f32_to_f16)

static void widen_f8(dt_dtype dt, const uint8_t *src, float *dst, int64_t n) {
    dt_f8_format f = dt_f8_format_of(dt == DT_F8E5M2);
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt_f8_to_f32_fmt(src[i], f);
}

/* Rows i0 .. i0+m of A^T, A given as (K, M), widened into dst (m, K). */
static void widen_f8_cols(dt_dtype dt, const uint8_t *A, int64_t M, int64_t K, int64_t i0,
                          int64_t m, float *dst) {
    dt_f8_format f = dt_f8_format_of(dt == DT_F8E5M2);
    for (int64_t i = 0; i < m; i++)
        for (int64_t k = 0; k < K; k++)
            dst[i * K + k] = dt_f8_to_f32_fmt(A[k * M + i0 + i], f);
}

/* float8 A (da) and B (db), f32 C: B widened once per distinct B, A a block of MB rows at a
 * time, each block's product written straight into C. */
static dt_status gemm_f8(mm_ctx *cx, dt_dtype da, dt_dtype db, int ta, int64_t M, const uint8_t *A,
                         const uint8_t *B, float *C) {
    int64_t N = cx->N, K = cx->K, mb = M < MB ? M : MB;
    if (!cx->fa) {
        cx->fa = dt_host_alloc((size_t)(mb * K) * sizeof(float));
        cx->fb = dt_host_alloc((size_t)(K * N) * sizeof(float));
        if (!cx->fa || !cx->fb)
            return dt_error(DT_ERR_NOMEM, "dt_cpu_matmul: no memory to widen float8 blocks");
    }
    if (cx->last_b != B) {
        widen_f8(db, B, cx->fb, K * N);
        cx->last_bt = NULL; /* fb's contents changed under the same pointer */
    }
    cx->last_b = B;
    for (int64_t i0 = 0; i0 < M; i0 += MB) {
        int64_t m = M - i0 < MB ? M - i0 : MB;
        if (ta)
            widen_f8_cols(da, A, M, K, i0, m, cx->fa);
        else
            widen_f8(da, A + i0 * K, cx->fa, m * K);
        DT_CHECK(gemm_f32(cx, 0, m, cx->fa, cx->fb, C + i0 * N));
    }
    return DT_OK;
}

static dt_status gemm_any(dt_dtype dt, dt_dtype db, mm_ctx *cx, int ta, int64_t M, const void *A,
                          const void *B, void *C) {
    if (dt == DT_F8E4M3 || dt == DT_F8E5M2) return gemm_f8(cx, dt, db, ta, M, A, B, C);
    switch (dt) {
    case DT_F32: return gemm_f32(cx, ta, M, A, B, C);
    case DT_F64: return gemm_f64(cx, ta, M, A, B, C);
    case DT_BF16: return gemm_bf16(cx, ta, M, A, B, C);
    case DT_F16: return gemm_f16(cx, ta, M, A, B, C);
    default: return DT_ERR_DTYPE;
    }
}

/* OpenBLAS's kernels for CPUs its build does not know. Debian 12's OpenBLAS (0.3.21, built for
 * every x86 core and choosing at load) names newer Xeons (Sapphire Rapids, with AVX-512 and
 * AMX) "Prescott" and runs its SSE3 GEMM there: a third of the speed its AVX-512 kernels give
 * on the same core. When the user has not chosen (OPENBLAS_CORETYPE), the library asks it for
 * the kernels the CPU can run, once, while the library loads. */
#if DT_HAVE_OPENBLAS && (defined(__x86_64__) || defined(__i386__))
/* Present in builds that choose their kernels at load (DYNAMIC_ARCH); weak, so a build
 * without them links and keeps what it has. */
extern char *openblas_get_corename(void) __attribute__((weak));
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

/* The kernels for this CPU's vector units: OpenBLAS's names. */
static const char *best_coretype(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

/* The fallback cores a dynamic OpenBLAS picks for a CPU it cannot name. */
static int generic(const char *name) {
    return !strcasecmp(name, "Prescott") || !strcasecmp(name, "Core2") ||
           !strcasecmp(name, "Nehalem") || !strcasecmp(name, "Sandybridge");
}

__attribute__((constructor)) static void dt_blas_pick_kernels(void) {
    if (!openblas_get_corename || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) return;
    if (getenv("OPENBLAS_CORETYPE") || getenv("DT_BLAS_KEEP_CORE")) return;
    const char *now = openblas_get_corename(), *want = best_coretype();
    if (!now || !want || !generic(now)) return;
    /* gotoblas_dynamic_init reads the choice from the environment; set only for the call. */
    if (setenv("OPENBLAS_CORETYPE", want, 0) != 0) return;
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
}
#endif

/* While more than one in-process rank runs, the GEMM uses one thread (the ranks are threads on
 * the same cores already, and OpenBLAS's own spinning threads would fight them); otherwise the
 * rank's share of the cores (core/pool.h: DT_NUM_THREADS, else the affinity mask), the same
 * threads the intra-op pool uses: a GEMM never runs inside dt_parallel_for, so the two never
 * add up past the share. Told each new count by core/ranks.h as the ranks start and stop, and
 * once by the first GEMM of a process that never starts local ranks. */
static void gemm_fit_threads(int running) {
#if DT_HAVE_OPENBLAS
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    openblas_set_num_threads(running > 1 ? 1 : dt_pool_share(1));
    pthread_mutex_unlock(&mu);
#else
    (void)running;
#endif
}

static void gemm_fit_first(void) { gemm_fit_threads(dt_process_ranks()); }

dt_status dt_cpu_matmul(const dt_local *a, const dt_local *b, int trans, dt_local *out) {
    static pthread_once_t fitted = PTHREAD_ONCE_INIT;
    pthread_once(&fitted, gemm_fit_first);
    dt_matmul_dims m;
    DT_CHECK(dt_matmul_check("dt_cpu_matmul", a, b, trans, out, &m));
    dt_dtype dt = a->dtype;
    int nb = m.nb;
    int64_t M = m.M, K = m.K, N = m.N;
    const int64_t *sa = m.sa, *sb = m.sb;
    size_t es = dt_dtype_size(dt), esb = dt_dtype_size(b->dtype), eso = dt_dtype_size(out->dtype);
    size_t batches = m.batches;
    if (batches == 0 || M == 0 || N == 0) return DT_OK;
    if (K == 0) { /* empty sums; all-zero bits are 0 in every float dtype */
        memset(out->data, 0, batches * (size_t)(M * N) * eso);
        return DT_OK;
    }
    int ta = (trans & DT_MM_TRANS_A) != 0;
    mm_ctx cx = {.tb = (trans & DT_MM_TRANS_B) != 0, .N = N, .K = K};
    dt_status st = DT_OK;
    if (m.b_batches == 1 && (!ta || batches == 1)) {
        /* (B..., M, K) @ (K, N): one GEMM over B*M rows (a transposed a's rows are not one
         * matrix's). */
        st = gemm_any(dt, b->dtype, &cx, ta, (int64_t)batches * M, a->data, b->data, out->data);
    } else {
        int64_t idx[DT_MAX_NDIM] = {0}, oa = 0, ob = 0;
        for (size_t i = 0; i < batches && st == DT_OK; i++) {
            st = gemm_any(dt, b->dtype, &cx, ta, M,
                          (const char *)a->data + (size_t)(oa * M * K) * es,
                          (const char *)b->data + (size_t)(ob * K * N) * esb,
                          (char *)out->data + i * (size_t)(M * N) * eso);
            for (int d = nb - 1; d >= 0; d--) {
                oa += sa[d];
                ob += sb[d];
                if (++idx[d] < out->shape[d]) break;
                oa -= sa[d] * out->shape[d];
                ob -= sb[d] * out->shape[d];
                idx[d] = 0;
            }
        }
    }
    dt_host_free(cx.fa);
    dt_host_free(cx.fb);
    dt_host_free(cx.fc);
    dt_host_free(cx.bt);
    dt_host_free(cx.at);
    return st;
}

/* Registered when the library loads, before any rank can start. */
__attribute__((constructor)) static void gemm_watch_ranks(void) {
    dt_process_ranks_watch(gemm_fit_threads);
}
