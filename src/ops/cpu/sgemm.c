/* dt_sgemm (sgemm.h): B packed into k-major micro-panels of NR columns (zero-padded), A read in
 * place, then MC x NC output tiles handed to the pool, each computed by one thread with an MR x NR
 * register-blocked micro-kernel: AVX-512, AVX2+FMA, or a portable fmaf loop. */
#include "ops/cpu/sgemm.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/pool.h"
#include "ops/cpu/transpose16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

/* A micro-kernel: c (m <= MR rows, n <= NR columns, row stride ldc) = (first ? 0 : c) + the kc
 * steps of a (m x kc, element (r, k) at a[r ars + k acs], read in place: A is the large operand
 * of a model's GEMMs, and a broadcast costs the same from any address in cache) times b (kc rows
 * of NR floats, ldb apart: a packed panel, zero past column n, or a row-major B read in place,
 * whose panels all hold NR columns), each element one fma per step in k order. No more than NR
 * floats of a row of b are read. Rows >= m and columns >= n of c are neither read nor written,
 * nor are rows >= m of a. */
typedef void (*kern_fn)(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int m, int n, int first);

/* ---- the portable kernel: the reference the vector ones must match bit for bit ------------ */

enum { SC_MR = 4, SC_NR = 4 };

static void kern_scalar(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b,
                        int64_t ldb, float *c, int64_t ldc, int m, int n, int first) {
    float acc[SC_MR][SC_NR] = {{0}};
    for (int r = 0; r < m && !first; r++)
        for (int j = 0; j < n; j++)
            acc[r][j] = c[r * ldc + j];
    for (int64_t k = 0; k < kc; k++, b += ldb)
        for (int r = 0; r < m; r++)
            for (int j = 0; j < n; j++)
                acc[r][j] = fmaf(a[r * ars + k * acs], b[j], acc[r][j]);
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++)
            c[r * ldc + j] = acc[r][j];
}

#if HAVE_X86
#define AVX512 __attribute__((target("avx512f")))
#define AVX2   __attribute__((target("avx2,fma")))

/* AVX-512: MR rows x 32 columns, 2 MR accumulators (two FMA ports x four cycles of latency need
 * eight chains); per k, two vector loads and MR broadcasts feed 2 MR FMAs. Columns past n go
 * through masks (a zero mask reads nothing, so no read past the row). A read in place (8 rows)
 * has its k steps contiguous; a transposed A (the weight gradients' g^T, 12 rows) has each k
 * step's rows contiguous and its k steps M floats apart, a new cache line a step: twelve rows
 * share the B panel's loads among more FMAs. */
enum { Z_MR = 8, Z_MR_T = 12, Z_NR = 32, PF_AHEAD = 16 };

/* pf: prefetch A's step PF_AHEAD ahead. A transposed A has its k steps M floats apart, a 4 KiB
 * page every few steps, where the hardware's stride prefetch stops: without it a row panel's
 * first pass over a k block waits on L3 at each page. mr is a constant at each call. */
static inline __attribute__((always_inline)) AVX512 void
kern_avx512_body(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                 float *c, int64_t ldc, int m, int n, int first, int pf, const int mr) {
    __m512 acc[Z_MR_T][2];
    const float *row[Z_MR_T]; /* rows past m repeat the last (read, never stored) */
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++)
        row[r] = a + (r < m ? r : m - 1) * ars;
    __mmask16 k0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    __mmask16 k1 = n >= 32 ? 0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        if (!first && r < m) {
            acc[r][0] = _mm512_maskz_loadu_ps(k0, c + r * ldc);
            acc[r][1] = _mm512_maskz_loadu_ps(k1, c + r * ldc + 16);
        } else {
            acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        }
    }
    /* b's rows hold NR floats (a zero-padded panel, or B's own whole rows): no masks */
    for (int64_t k = 0, o = 0; k < kc; k++, o += acs, b += ldb) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        if (pf && k + PF_AHEAD < kc)
            _mm_prefetch((const char *)(row[0] + o + PF_AHEAD * acs), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            __m512 x = _mm512_set1_ps(row[r][o]);
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        if (r >= m) break;
        _mm512_mask_storeu_ps(c + r * ldc, k0, acc[r][0]);
        _mm512_mask_storeu_ps(c + r * ldc + 16, k1, acc[r][1]);
    }
}

static AVX512 void kern_avx512(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b,
                               int64_t ldb, float *c, int64_t ldc, int m, int n, int first) {
    kern_avx512_body(kc, a, ars, acs, b, ldb, c, ldc, m, n, first, 0, Z_MR);
}

/* A transposed A (ars 1): with all Z_MR_T rows, each k step's rows are one run at a, read at
 * constant offsets from one pointer (the general body's row pointers spill in its loop). */
static AVX512 void kern_avx512_t(int64_t kc, const float *a, int64_t ars, int64_t acs,
                                 const float *b, int64_t ldb, float *c, int64_t ldc, int m, int n,
                                 int first) {
    if (m < Z_MR_T) {
        kern_avx512_body(kc, a, ars, acs, b, ldb, c, ldc, m, n, first, 1, Z_MR_T);
        return;
    }
    __m512 acc[Z_MR_T][2];
    __mmask16 k0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
    __mmask16 k1 = n >= 32 ? 0xffff : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
#pragma GCC unroll 12
    for (int r = 0; r < Z_MR_T; r++) {
        acc[r][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k0, c + r * ldc);
        acc[r][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k1, c + r * ldc + 16);
    }
    for (int64_t k = 0; k < kc; k++, a += acs, b += ldb) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        _mm_prefetch((const char *)(a + PF_AHEAD * acs), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int r = 0; r < Z_MR_T; r++) {
            __m512 x = _mm512_set1_ps(a[r]);
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < Z_MR_T; r++) {
        _mm512_mask_storeu_ps(c + r * ldc, k0, acc[r][0]);
        _mm512_mask_storeu_ps(c + r * ldc + 16, k1, acc[r][1]);
    }
}

/* B^T's panel (B given as (N, K), row stride cs): dst[k 32 + c] = src[c cs + k] for c < cols,
 * in 16 x 16 blocks: sixteen rows' next 16 k steps loaded (masked past K), transposed in
 * registers, stored as 16 k rows (a 16-lane gather per k was 3.7 cycles an element on the
 * model's weights; element by element, ten times that). Columns >= cols get zeros. */
static AVX512 void pack_t_avx512(const float *src, int64_t cs, int64_t K, int cols, float *dst) {
    for (int g = 0; g < Z_NR / 16 && g * 16 < cols; g++) {
        int rows = cols - g * 16 < 16 ? cols - g * 16 : 16;
        const float *s = src + (int64_t)g * 16 * cs;
        float *d = dst + g * 16;
        for (int64_t k0 = 0; k0 < K; k0 += 16) {
            int kn = K - k0 < 16 ? (int)(K - k0) : 16;
            __mmask16 km = kn == 16 ? 0xffff : (__mmask16)((1u << kn) - 1);
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = i < rows ? _mm512_maskz_loadu_ps(km, s + i * cs + k0) : _mm512_setzero_ps();
            dt_transpose16(r);
            for (int j = 0; j < kn; j++)
                _mm512_storeu_ps(d + (k0 + j) * Z_NR, r[j]);
        }
    }
}

/* AVX2+FMA: 6 rows x 16 columns, 12 accumulators of the 16 registers. */
enum { Y_MR = 6, Y_NR = 16 };

static AVX2 void kern_avx2(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b,
                           int64_t ldb, float *c, int64_t ldc, int m, int n, int first) {
    static const int32_t lane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    __m256i nn = _mm256_set1_epi32(n);
    __m256i k0 = _mm256_cmpgt_epi32(nn, _mm256_loadu_si256((const __m256i *)lane));
    __m256i k1 = _mm256_cmpgt_epi32(nn, _mm256_loadu_si256((const __m256i *)(lane + 8)));
    __m256 acc[Y_MR][2];
    const float *row[Y_MR];
#pragma GCC unroll 6
    for (int r = 0; r < Y_MR; r++)
        row[r] = a + (r < m ? r : m - 1) * ars;
#pragma GCC unroll 6
    for (int r = 0; r < Y_MR; r++) {
        if (!first && r < m) {
            acc[r][0] = _mm256_maskload_ps(c + r * ldc, k0);
            acc[r][1] = _mm256_maskload_ps(c + r * ldc + 8, k1);
        } else {
            acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        }
    }
    for (int64_t k = 0, o = 0; k < kc; k++, o += acs, b += ldb) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int r = 0; r < Y_MR; r++) {
            __m256 x = _mm256_broadcast_ss(row[r] + o);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < Y_MR; r++) {
        if (r >= m) break;
        _mm256_maskstore_ps(c + r * ldc, k0, acc[r][0]);
        _mm256_maskstore_ps(c + r * ldc + 8, k1, acc[r][1]);
    }
}

/* B^T's panel as pack_t_avx512 makes it, 16 columns: two 8-lane gathers a k. */
static AVX2 void pack_t_avx2(const float *src, int64_t cs, int64_t K, int cols, float *dst) {
    static const int32_t lane[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    __m256i l0 = _mm256_loadu_si256((const __m256i *)lane);
    __m256i l1 = _mm256_loadu_si256((const __m256i *)(lane + 8));
    __m256i nn = _mm256_set1_epi32(cols), step = _mm256_set1_epi32((int)cs);
    __m256i i0 = _mm256_mullo_epi32(l0, step), i1 = _mm256_mullo_epi32(l1, step);
    __m256 m0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, l0));
    __m256 m1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, l1));
    __m256 z = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        _mm256_storeu_ps(dst + k * Y_NR, _mm256_mask_i32gather_ps(z, src + k, i0, m0, 4));
        _mm256_storeu_ps(dst + k * Y_NR + 8, _mm256_mask_i32gather_ps(z, src + k, i1, m1, 4));
    }
}
#endif

/* ---- choosing a path ---------------------------------------------------------------------- */

/* pack_t: B^T's panel (see pack_t_avx512); NULL: the scalar loop. */
typedef struct path {
    int mr, mr_t, nr; /* mr_t: the rows kern_t's blocks hold */
    kern_fn kern;
    kern_fn kern_t; /* the same sums, for a transposed A (rs 1) */
    void (*pack_t)(const float *src, int64_t cs, int64_t K, int cols, float *dst);
} path;

static path path_of(dt_simd s) {
#if HAVE_X86
    if (s == DT_SIMD_AVX512)
        return (path){Z_MR, Z_MR_T, Z_NR, kern_avx512, kern_avx512_t, pack_t_avx512};
    if (s == DT_SIMD_AVX2) return (path){Y_MR, Y_MR, Y_NR, kern_avx2, kern_avx2, pack_t_avx2};
#endif
    (void)s;
    return (path){SC_MR, SC_MR, SC_NR, kern_scalar, kern_scalar, NULL};
}

dt_simd dt_sgemm_path(void) {
    dt_simd s = dt_simd_level(); /* already capped by what the CPU runs */
#if HAVE_X86
    if (s >= DT_SIMD_AVX512) return DT_SIMD_AVX512;
    if (s >= DT_SIMD_AVX2 && __builtin_cpu_supports("fma")) return DT_SIMD_AVX2;
#endif
    (void)s;
    return DT_SIMD_SCALAR;
}

/* DT_SGEMM: -1 unset, 0 never, 1 always (read once; a benign race, every thread reads the
 * same). */
static int sgemm_env = -2;

/* The largest M x N x K the packed path takes by default: below it, OpenBLAS's own packing,
 * thread wake-up and yield-spinning cost more than its faster large-shape kernel gains (the
 * crossover measured in bench/bench_sgemm.c). */
#define PREFER_MAX_MNK ((int64_t)1 << 27)

int dt_sgemm_preferred(int64_t M, int64_t N, int64_t K) {
    if (sgemm_env == -2) {
        const char *e = getenv("DT_SGEMM");
        sgemm_env = e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "1") ? 1 : -1;
    }
    if (sgemm_env == 0 || dt_sgemm_path() == DT_SIMD_SCALAR) return 0;
    if (sgemm_env == 1) return 1;
    /* products too large for int64 overflow none: each factor is checked first */
    if (M > PREFER_MAX_MNK || N > PREFER_MAX_MNK || K > PREFER_MAX_MNK) return 0;
    return M * N <= PREFER_MAX_MNK && M * N * K <= PREFER_MAX_MNK;
}

/* ---- packing and tiles ---------------------------------------------------------------------- */

/* Tile sizes: a k block of at most KC steps of a B panel (48 KiB for AVX-512) and MC rows of A's
 * k block (96 KiB) stay in L1 and L2 while the tile's MR x NR blocks run; K up to KC (the
 * model's 128 and 384) is one pass over C. MC x NC tiles give the pool a dozen or more items on
 * the model's shapes, so two to four threads finish together. */
enum { KC = 384, MC = 64, NC = 128 };

/* The fewest tiles a product is cut into where its rows allow (see dt_sgemm). */
enum { MIN_TILES = 4 };

/* The k steps of one packing item (8 KiB of an AVX-512 panel). */
enum { PACK_K = 64 };

/* The most row panels (MR rows each) for which a row-major B is read in place. Packing copies B
 * once and gives the kernel contiguous panels that stay in L1; read in place, a panel's rows are
 * N floats apart and fall into a few cache sets, so each k block is fetched from L2 again for
 * every row panel. Thread CPU time per call on this Xeon (AVX-512), in place against packed:
 * M 8 0.51x, 16 0.71x, 32 0.90x, 64 1.00x, 128 1.11x, 512 1.13x (N 128, K 384 or 512). */
enum { INPLACE_MAX_MP = 4 };

typedef struct job {
    path pt; /* pt.mr: the rows of the kernel this product runs */
    int ta;  /* A transposed (rs 1): kern_t */
    int64_t M, N, K;
    dt_sgemm_mat A, B;
    float *C;
    int64_t ldc;
    /* B's panel q, k step k at b + q bq + k bk (kernels read bk as their ldb): the packed
     * panels (b = the buffer, bq = K NR, bk = NR), or B itself read in place (b = B.p, bq = NR,
     * bk = B.rs) when it is row-major and every panel has all NR columns. */
    const float *b;
    int64_t bq, bk;
    float *bp;        /* the packed panels (NULL when B is read in place) */
    int64_t kb;       /* the k block: K cut into equal blocks of at most KC */
    int64_t kp;       /* k steps a packing item copies */
    int64_t mp, np;   /* panel counts */
    int64_t mcp, ncp; /* panels per tile, each way */
    int64_t mt, nt;   /* tiles each way */
} job;

/* Packing item i: k steps [k0, k1) of B's panel q (columns q NR .. + NR), stored k-major
 * (dst[k NR + c]), zero past N. Items cut a panel along k too, so that both threads pack when
 * N has few panels (the model's 128 columns are four). */
static void pack_b(const job *j, int64_t i) {
    int nr = j->pt.nr;
    int64_t per = (j->K + j->kp - 1) / j->kp, q = i / per;
    int64_t k0 = i % per * j->kp, k1 = k0 + j->kp < j->K ? k0 + j->kp : j->K, K = k1 - k0;
    int64_t j0 = q * nr, cols = j->N - j0 < nr ? j->N - j0 : nr;
    float *dst = j->bp + q * nr * j->K + k0 * nr;
    const float *src = j->B.p + j0 * j->B.cs + k0 * j->B.rs;
    if (cols < nr) memset(dst, 0, (size_t)(nr * K) * sizeof(float));
    if (j->B.cs == 1) { /* row-major: each k's NR columns are one run */
        for (int64_t k = 0; k < K; k++)
            memcpy(dst + k * nr, src + k * j->B.rs, (size_t)cols * sizeof(float));
    } else if (j->B.rs == 1 && j->pt.pack_t && j->B.cs <= INT32_MAX / 32) {
        j->pt.pack_t(src, j->B.cs, K, (int)cols, dst); /* transposed (N, K), gathered */
    } else { /* any other strides: read each column along k */
        for (int64_t c = 0; c < cols; c++)
            for (int64_t k = 0; k < K; k++)
                dst[k * nr + c] = src[c * j->B.cs + k * j->B.rs];
    }
}

static void pack_range(void *arg, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++)
        pack_b(arg, i);
}

/* Tile t: panels of rows [ti mcp, +mcp) by panels of columns [tj ncp, +ncp); k blocks outermost
 * so each C element's chain runs k = 0 .. K-1 in order whatever the tile shape. */
static void tile_range(void *arg, int64_t begin, int64_t end) {
    const job *j = arg;
    int mr = j->pt.mr, nr = j->pt.nr;
    kern_fn kern = j->ta ? j->pt.kern_t : j->pt.kern;
    for (int64_t t = begin; t < end; t++) {
        int64_t p0 = t / j->nt * j->mcp, q0 = t % j->nt * j->ncp;
        int64_t p1 = p0 + j->mcp < j->mp ? p0 + j->mcp : j->mp;
        int64_t q1 = q0 + j->ncp < j->np ? q0 + j->ncp : j->np;
        for (int64_t k0 = 0; k0 < j->K; k0 += j->kb) {
            int64_t kc = j->K - k0 < j->kb ? j->K - k0 : j->kb;
            for (int64_t q = q0; q < q1; q++) {
                const float *b = j->b + q * j->bq + k0 * j->bk;
                int64_t c0 = q * nr;
                int n = j->N - c0 < nr ? (int)(j->N - c0) : nr;
                for (int64_t p = p0; p < p1; p++) {
                    int64_t r0 = p * mr;
                    int m = j->M - r0 < mr ? (int)(j->M - r0) : mr;
                    kern(kc, j->A.p + r0 * j->A.rs + k0 * j->A.cs, j->A.rs, j->A.cs, b, j->bk,
                         j->C + r0 * j->ldc + c0, j->ldc, m, n, k0 == 0);
                }
            }
        }
    }
}

dt_status dt_sgemm(int64_t M, int64_t N, int64_t K, dt_sgemm_mat A, dt_sgemm_mat B, float *C,
                   int64_t ldc) {
    if (M <= 0 || N <= 0) return DT_OK;
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++)
            memset(C + i * ldc, 0, (size_t)N * sizeof(float));
        return DT_OK;
    }
    job j = {
        .pt = path_of(dt_sgemm_path()), .M = M, .N = N, .K = K, .A = A, .B = B, .C = C, .ldc = ldc};
    j.ta = A.rs == 1 && A.cs != 1;
    if (j.ta) j.pt.mr = j.pt.mr_t;
    j.mp = (M + j.pt.mr - 1) / j.pt.mr;
    j.np = (N + j.pt.nr - 1) / j.pt.nr;
    j.mcp = (MC + j.pt.mr - 1) / j.pt.mr;
    j.ncp = (NC + j.pt.nr - 1) / j.pt.nr;
    j.mt = (j.mp + j.mcp - 1) / j.mcp;
    j.nt = (j.np + j.ncp - 1) / j.ncp;
    /* A small output (the weight gradients: M x N of 64 .. 384 each way, K = B T) would be one
     * to six tiles, too few for the pool's threads to finish together (one tile runs on one
     * thread): smaller tiles, columns first, until there are MIN_TILES. The shape alone decides
     * (never the thread count), and a tile's shape changes no sum. */
    while (j.mt * j.nt < MIN_TILES && (j.ncp > 1 || j.mcp > 1)) {
        if (j.ncp > 1) { /* columns first: a tile's rows keep reusing each B panel from L1 */
            j.ncp = (j.ncp + 1) / 2;
            j.nt = (j.np + j.ncp - 1) / j.ncp;
        } else {
            j.mcp = (j.mcp + 1) / 2;
            j.mt = (j.mp + j.mcp - 1) / j.mcp;
        }
    }
    j.kb = (K + (K + KC - 1) / KC - 1) / ((K + KC - 1) / KC);
    /* A row-major B whose panels are all whole is read where it lies (the kernels never read
     * past a panel's NR columns) when few row panels read it: no packing pass, no buffer. The
     * k block never changes a sum (each C element's chain runs on through C). A deep product
     * (the weight gradients, K = B T) packs B like any other: both threads share the copy and
     * its k blocks are KC long. (Reading it in place in 64-step k blocks, which fit the few L1
     * sets its rows fall into, lost once the transposed A had its 12-row kernel: make train's
     * one rank at T 256, each weight gradient 1.03-1.13x faster packed, best of 6 traced steps,
     * median of 4 alternating runs.) */
    if (B.cs == 1 && N % j.pt.nr == 0 && j.mp <= INPLACE_MAX_MP) {
        j.b = B.p, j.bq = j.pt.nr, j.bk = B.rs;
    } else {
        j.bp = dt_host_alloc((size_t)(j.np * j.pt.nr * K) * sizeof(float));
        if (!j.bp)
            return dt_error(DT_ERR_NOMEM, "dt_sgemm: no memory to pack %lldx%lld", (long long)K,
                            (long long)N);
        j.b = j.bp, j.bq = j.pt.nr * K, j.bk = j.pt.nr;
        j.kp = PACK_K;
        /* each item is an M-th of the work of its part of a column of tiles: two a chunk */
        dt_parallel_for(j.np * ((K + PACK_K - 1) / PACK_K), 2, pack_range, &j);
    }
    dt_parallel_for(j.mt * j.nt, 1, tile_range, &j);
    if (j.bp) dt_host_free(j.bp);
    return DT_OK;
}
