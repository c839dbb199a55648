/* CUDA pointwise kernels: unary maps, broadcasting binary ops and where, one thread per output
 * element in grid-stride loops. Broadcast shapes are collapsed on the host exactly as the CPU
 * does; the per-element math is ops/cpu/elementwise.h, so only libm vs CUDA math differ. */
#include "ops/cuda/cuda_common.cuh"
#include "ops/kernel_args.h"

static const char *const unary_names[DT_UNARY_COUNT] = {
    "neg", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "gelu", "silu", "tanh", "sigmoid",
    "pow_scalar", "add_scalar", "mul_scalar", "sign",
};

/* elementwise.h's forms by overload, so one template covers every dtype. */
static __device__ __forceinline__ float ew_unary(dt_unary f, float x, float s) {
    return dt_ew_unary_f32(f, x, s);
}
static __device__ __forceinline__ double ew_unary(dt_unary f, double x, double s) {
    return dt_ew_unary_f64(f, x, s);
}
#define DEFINE_INT_FORMS(SUF, T)                                                                   \
    static __device__ __forceinline__ T ew_unary(dt_unary f, T x, T s) {                           \
        switch (f) {                                                                               \
        case DT_UNARY_NEG: return dt_ew_neg_##SUF(x);                                              \
        case DT_UNARY_ABS: return dt_ew_abs_##SUF(x);                                              \
        case DT_UNARY_RELU: return dt_ew_relu_##SUF(x);                                            \
        case DT_UNARY_SIGN: return dt_ew_sign_##SUF(x);                                            \
        case DT_UNARY_ADD_SCALAR: return dt_ew_add_##SUF(x, s);                                    \
        case DT_UNARY_MUL_SCALAR: return dt_ew_mul_##SUF(x, s);                                    \
        default: return x;                                                                         \
        }                                                                                          \
    }                                                                                              \
    static __device__ __forceinline__ T ew_binary(dt_binary f, T a, T b) {                         \
        return dt_ew_binary_##SUF(f, a, b);                                                        \
    }
DEFINE_INT_FORMS(i32, int32_t)
DEFINE_INT_FORMS(i64, int64_t)
static __device__ __forceinline__ float ew_binary(dt_binary f, float a, float b) {
    return dt_ew_binary_f32(f, a, b);
}
static __device__ __forceinline__ double ew_binary(dt_binary f, double a, double b) {
    return dt_ew_binary_f64(f, a, b);
}

/* ---- unary ------------------------------------------------------------------------------ */

/* x and y may be the same buffer: each element is read before it is written, by one thread. */
template <typename T>
__global__ void unary_kernel(dt_unary f, typename dt_cu_t<T>::C s, const T *x, T *y, size_t n) {
    typedef dt_cu_t<T> D;
    DT_CU_FOR(i, n) y[i] = D::st(ew_unary(f, D::ld(x[i]), s));
}

dt_status dt_cuda_unary(dt_unary f, double scalar, const dt_local *x, dt_local *out) {
    if ((unsigned)f >= DT_UNARY_COUNT)
        return dt_error(DT_ERR_ARG, "dt_cuda_unary: unknown unary op %d", (int)f);
    int is_int = x->dtype == DT_I32 || x->dtype == DT_I64;
    if (is_int && !dt_ew_unary_int_ok(f))
        return dt_error(DT_ERR_DTYPE, "dt_cuda_unary: %s is not defined for dtype %s",
                        unary_names[f], dt_dtype_name(x->dtype));
    if (dt_dtype_size(x->dtype) == 0)
        return dt_error(DT_ERR_DTYPE, "dt_cuda_unary: unknown dtype %d", (int)x->dtype);
    DT_CU_RANK(r, "dt_cuda_unary");
    size_t n = dt_cu_numel(x);
    if (n == 0) return DT_OK;
    int64_t si = dt_ew_scalar_i64(scalar);
    return dt_cu_visit<true>(x->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        typedef typename dt_cu_t<T>::C C;
        /* Scalars as the CPU casts them: f32 math for bf16/f16, truncation for integers. */
        C s;
        if constexpr (std::is_integral<C>::value) s = (C)si;
        else s = (C)scalar;
        unary_kernel<T><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            f, s, (const T *)x->data, (T *)out->data, n);
        return DT_CUDA_LAUNCH_CHECK("dt_cuda_unary");
    });
}

/* ---- broadcasting ----------------------------------------------------------------------- */

/* Offsets of output element i in the first NIN inputs. */
template <int NIN>
__device__ __forceinline__ void bcast_offsets(const dt_bcast &it, uint64_t i, int64_t *off) {
    for (int k = 0; k < NIN; k++) off[k] = 0;
    for (int d = it.ndim - 1; d > 0; d--) {
        uint64_t s = (uint64_t)it.shape[d], j = i % s;
        i /= s;
        for (int k = 0; k < NIN; k++) off[k] += (int64_t)j * it.stride[k][d];
    }
    for (int k = 0; k < NIN; k++) off[k] += (int64_t)i * it.stride[k][0];
}

/* ---- binary ----------------------------------------------------------------------------- */

template <typename T>
__global__ void binary_kernel(dt_binary f, dt_bcast it, const T *a, const T *b, T *o, size_t n) {
    typedef dt_cu_t<T> D;
    if (it.ndim == 1) { /* one flat dim: the common case, no division */
        int64_t sa = it.stride[0][0], sb = it.stride[1][0];
        DT_CU_FOR(i, n)
        o[i] = D::st(ew_binary(f, D::ld(a[(int64_t)i * sa]), D::ld(b[(int64_t)i * sb])));
        return;
    }
    DT_CU_FOR(i, n) {
        int64_t off[2];
        bcast_offsets<2>(it, i, off);
        o[i] = D::st(ew_binary(f, D::ld(a[off[0]]), D::ld(b[off[1]])));
    }
}

dt_status dt_cuda_binary(dt_binary f, const dt_local *a, const dt_local *b, dt_local *out) {
    if ((unsigned)f >= DT_BINARY_COUNT)
        return dt_error(DT_ERR_ARG, "dt_cuda_binary: unknown binary op %d", (int)f);
    if (dt_dtype_size(a->dtype) == 0 || a->dtype != b->dtype)
        return dt_error(DT_ERR_DTYPE, "dt_cuda_binary: dtypes %s and %s",
                        dt_dtype_name(a->dtype), dt_dtype_name(b->dtype));
    dt_bcast it;
    const dt_local *in[2] = {a, b};
    DT_CHECK(dt_bcast_init(&it, "dt_cuda_binary", out, in, 2));
    DT_CU_RANK(r, "dt_cuda_binary");
    size_t n = dt_cu_numel(out);
    if (n == 0) return DT_OK;
    return dt_cu_visit<true>(a->dtype, [&](auto tag) {
        typedef decltype(tag) T;
        binary_kernel<T><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            f, it, (const T *)a->data, (const T *)b->data, (T *)out->data, n);
        return DT_CUDA_LAUNCH_CHECK("dt_cuda_binary");
    });
}

/* ---- where ------------------------------------------------------------------------------ */

/* cond[off] != 0 as the CPU reads it: a bf16/f16 -0 is zero, NaN is true. */
static __device__ __forceinline__ bool cond_at(dt_dtype dt, const void *c, int64_t off) {
    switch (dt) {
    case DT_F32: return ((const float *)c)[off] != 0.0f;
    case DT_F64: return ((const double *)c)[off] != 0.0;
    case DT_BF16:
    case DT_F16: return (((const uint16_t *)c)[off] & 0x7fffu) != 0;
    case DT_I32: return ((const int32_t *)c)[off] != 0;
    case DT_I64: return ((const int64_t *)c)[off] != 0;
    default: return false;
    }
}

/* T is an unsigned type of the element size: where only moves bits. */
template <typename T>
__global__ void where_kernel(dt_bcast it, dt_dtype cdt, const void *c, const T *a, const T *b, T *o,
                             size_t n) {
    DT_CU_FOR(i, n) {
        int64_t off[3];
        bcast_offsets<3>(it, i, off);
        o[i] = cond_at(cdt, c, off[0]) ? a[off[1]] : b[off[2]];
    }
}

dt_status dt_cuda_where(const dt_local *cond, const dt_local *a, const dt_local *b,
                        dt_local *out) {
    size_t es = dt_dtype_size(a->dtype), cs = dt_dtype_size(cond->dtype);
    if (es == 0 || cs == 0 || a->dtype != b->dtype)
        return dt_error(DT_ERR_DTYPE, "dt_cuda_where: dtypes cond %s, a %s, b %s",
                        dt_dtype_name(cond->dtype), dt_dtype_name(a->dtype),
                        dt_dtype_name(b->dtype));
    dt_bcast it;
    const dt_local *in[3] = {cond, a, b};
    DT_CHECK(dt_bcast_init(&it, "dt_cuda_where", out, in, 3));
    DT_CU_RANK(r, "dt_cuda_where");
    size_t n = dt_cu_numel(out);
    if (n == 0) return DT_OK;
    return dt_cu_visit_size(es, [&](auto tag) {
        typedef decltype(tag) T;
        where_kernel<T><<<dt_cuda_blocks(n, DT_CU_THREADS), DT_CU_THREADS, 0, r->compute>>>(
            it, cond->dtype, cond->data, (const T *)a->data, (const T *)b->data, (T *)out->data,
            n);
        return DT_CUDA_LAUNCH_CHECK("dt_cuda_where");
    });
}
