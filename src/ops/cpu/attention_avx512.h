/* The CPU flash attention's f32 tile work in AVX-512F, for attention.c only: the tile product
 * (attention_tile.h's gemm: k terms added in order, multiply then add, no FMA, so the portable
 * loop's bits at any blocking, shape or thread count) and the forward's scale and row max. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DT_ATTN_AVX512 1
#include <immintrin.h>

#define DT_A512 __attribute__((target("avx512f")))

/* One block of MR rows x NV vectors of 16 columns kept in registers across the k terms; the
 * last vector's lanes outside `last` are neither read nor written. */
#define DT_ATTN_BLOCK(MR, NV)                                                                      \
    static DT_A512 void attn_blk_##MR##x##NV(                                                      \
        float *restrict c, int64_t ldc, const float *restrict a, int64_t ai, int64_t at,           \
        const float *restrict b, int64_t ldb, int64_t k, __mmask16 last) {                         \
        __m512 v[MR][NV];                                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                      \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) v[r][u] =                         \
                _mm512_maskz_loadu_ps(u == NV - 1 ? last : 0xffff, c + r * ldc + 16 * u);          \
        for (int64_t t = 0; t < k; t++) {                                                          \
            __m512 bv[NV];                                                                         \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) bv[u] =                           \
                _mm512_maskz_loadu_ps(u == NV - 1 ? last : 0xffff, b + t * ldb + 16 * u);          \
            _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++) {                                \
                __m512 x = _mm512_set1_ps(a[r * ai + t * at]);                                     \
                _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++) v[r][u] =                     \
                    _mm512_add_ps(v[r][u], _mm512_mul_ps(x, bv[u]));                               \
            }                                                                                      \
        }                                                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < MR; r++)                                      \
            _Pragma("GCC unroll 8") for (int u = 0; u < NV; u++)                                   \
                _mm512_mask_storeu_ps(c + r * ldc + 16 * u, u == NV - 1 ? last : 0xffff, v[r][u]); \
    }

/* 64 columns: 4 rows (16 accumulators); 32: 8 rows; 16 or fewer: 8 rows of one vector. */
DT_ATTN_BLOCK(4, 4)
DT_ATTN_BLOCK(1, 4)
DT_ATTN_BLOCK(8, 2)
DT_ATTN_BLOCK(1, 2)
DT_ATTN_BLOCK(8, 1)
DT_ATTN_BLOCK(1, 1)

/* Rows [0, m) of one column panel: blocks of MR rows, then the rest one row at a time. */
#define DT_ATTN_ROWS(MR, NV, LAST)                                                                 \
    do {                                                                                           \
        int i = 0;                                                                                 \
        for (; i + MR <= m; i += MR)                                                               \
            attn_blk_##MR##x##NV(c + i * ldc + j, ldc, a + i * ai, ai, at, b + j, ldb, k, LAST);   \
        for (; i < m; i++)                                                                         \
            attn_blk_1x##NV(c + i * ldc + j, ldc, a + i * ai, ai, at, b + j, ldb, k, LAST);        \
    } while (0)

/* c (m x n, rows ldc apart) += a . b as attention_tile.h's gemm defines it. */
static DT_A512 void attn_gemm_avx512(float *restrict c, int64_t ldc, const float *restrict a,
                                     int64_t ai, int64_t at, const float *restrict b, int64_t ldb,
                                     int m, int64_t n, int64_t k) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64)
        DT_ATTN_ROWS(4, 4, 0xffff);
    for (; j + 32 <= n; j += 32)
        DT_ATTN_ROWS(8, 2, 0xffff);
    for (; j < n; j += 16) {
        __mmask16 last = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        DT_ATTN_ROWS(8, 1, last);
    }
}

/* s[0, lim) *= scale, then *mx = the largest of them and *mx, and 1; or 0 (*mx untouched) when
 * that largest is a zero or a NaN is found: there the caller's scalar rule decides (which
 * zero, which NaN), so the bits stay those of the rule. */
static DT_A512 int attn_scale_max_avx512(float *s, int lim, float scale, float *mx) {
    __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(*mx);
    __mmask16 nan = 0;
    for (int c = 0; c < lim; c += 16) {
        __mmask16 k = lim - c >= 16 ? 0xffff : (__mmask16)((1u << (lim - c)) - 1);
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + c), vs);
        _mm512_mask_storeu_ps(s + c, k, x);
        nan |= _mm512_mask_cmp_ps_mask(k, x, x, _CMP_UNORD_Q);
        vm = _mm512_mask_max_ps(vm, k, vm, x);
    }
    float m = _mm512_reduce_max_ps(vm);
    if (nan || m == 0 || *mx != *mx) return 0; /* a NaN max carried in from earlier tiles stays */
    *mx = m;
    return 1;
}
#undef DT_ATTN_ROWS
#undef DT_ATTN_BLOCK
#else
#define DT_ATTN_AVX512 0
#endif
