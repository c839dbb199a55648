/* CUDA rotary embedding (interleaved pairs): one thread per pair, the CPU's operation order
 * with each product and sum rounded (no FMA), so f32 and f64 results are the CPU's bit for
 * bit. */
#include "ops/cuda/cuda_common.cuh"

static __device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
static __device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

/* Pair k of x (B, S, H, 2P): position t = (k / (H P)) % S, index i = k % P. */
template <typename T>
__global__ void rope_kernel(size_t pairs, int64_t S, int64_t H, int64_t P, const T *x,
                            const T *cs, const T *sn, T *y) {
    typedef dt_cu_t<T> D;
    typedef typename D::C C;
    DT_CU_FOR(k, pairs) {
        int64_t i = (int64_t)(k % (size_t)P), t = (int64_t)(k / (size_t)(H * P) % (size_t)S);
        C x0 = D::ld(x[2 * k]), x1 = D::ld(x[2 * k + 1]);
        C c = D::ld(cs[t * P + i]), s = D::ld(sn[t * P + i]);
        C a = mul_rn(x0, c), b = mul_rn(x1, s), e = mul_rn(x0, s), f = mul_rn(x1, c);
        y[2 * k] = D::st(add_rn(a, -b)); /* a - b exactly */
        y[2 * k + 1] = D::st(add_rn(e, f));
    }
}

dt_status dt_cuda_rope(const dt_local *x, const dt_local *cos, const dt_local *sin,
                       dt_local *out) {
    const char *fn = "dt_cuda_rope";
    if (x->ndim != 4 || x->shape[3] % 2 || cos->ndim != 2 || sin->ndim != 2 ||
        cos->shape[0] != x->shape[1] || cos->shape[1] != x->shape[3] / 2 ||
        sin->shape[0] != x->shape[1] || sin->shape[1] != x->shape[3] / 2)
        return dt_error(DT_ERR_SHAPE, "%s: x must be (B, T, H, D) with D even and cos, sin "
                                      "(T, D/2)", fn);
    dt_dtype dt = x->dtype;
    if (cos->dtype != dt || sin->dtype != dt || out->dtype != dt)
        return dt_error(DT_ERR_DTYPE, "%s: x, cos, sin and out dtypes differ", fn);
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(dt));
    DT_CU_RANK(r, fn);
    size_t pairs = dt_cu_numel(x) / 2;
    if (pairs == 0) return DT_OK;
    int64_t S = x->shape[1], H = x->shape[2], P = x->shape[3] / 2;
    return dt_cu_visit<false>(dt, [&](auto tag) {
        typedef decltype(tag) T;
        rope_kernel<T><<<dt_cuda_blocks(pairs, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            pairs, S, H, P, (const T *)x->data, (const T *)cos->data, (const T *)sin->data,
            (T *)out->data);
        return DT_CUDA_LAUNCH_CHECK(fn);
    });
}
