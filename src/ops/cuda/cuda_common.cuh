/* Device helpers shared by the CUDA kernels: dtype tags with f32/f64 load and store (bf16 and
 * f16 through core/half.h so they round exactly as on the CPU), dtype dispatch on the host,
 * warp and block reductions, N-D index math and the row-major GEMM behind matmul and sdpa.
 * Internal to src/ops/cuda; never included by C files. */
#ifndef DT_OPS_CUDA_COMMON_CUH
#define DT_OPS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "core/check.h"
#include "core/cuda/cuda_rt.h"
#include "core/half.h"
#include "ops/cpu/elementwise.h"
#include "ops/cuda/cuda_kernels.h"

#define DT_CU_THREADS 256

/* The bound rank, or return DT_ERR_DEVICE from the calling kernel entry point. */
#define DT_CU_RANK(r, fn)                                                                          \
    dt_cuda_rank *r = dt_cuda_current();                                                           \
    if (!r) return dt_error(DT_ERR_DEVICE, "%s: no CUDA device bound to this thread", fn)

/* Grid-stride loop over [0, n) with 64-bit indices. */
#define DT_CU_FOR(i, n)                                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);                \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- dtypes ----------------------------------------------------------------------------- */

/* 16-bit floats as distinct types so templates can tell them apart from each other. */
struct dt_cu_bf16 { uint16_t v; };
struct dt_cu_f16 { uint16_t v; };

/* C: the type arithmetic runs in (the CPU's CT); ld widens, st narrows with one rounding. */
#define DT_CU_FN static __host__ __device__ __forceinline__
template <typename T> struct dt_cu_t;
#define DT_CU_TYPE(T, CT, LD, ST)                                                                  \
    template <> struct dt_cu_t<T> {                                                                \
        typedef CT C;                                                                              \
        DT_CU_FN CT ld(T x) { return LD; }                                                         \
        DT_CU_FN T st(CT x) { return ST; }                                                         \
    };
DT_CU_TYPE(float, float, x, x)
DT_CU_TYPE(double, double, x, x)
DT_CU_TYPE(dt_cu_bf16, float, dt_bf16_to_f32(x.v), dt_cu_bf16{dt_f32_to_bf16(x)})
DT_CU_TYPE(dt_cu_f16, float, dt_f16_to_f32(x.v), dt_cu_f16{dt_f32_to_f16(x)})
DT_CU_TYPE(int32_t, int32_t, x, x)
DT_CU_TYPE(int64_t, int64_t, x, x)
#undef DT_CU_TYPE

/* Calls fn(T{}) with the storage type of dt (integer types only when Ints): one generic
 * lambda in place of a switch per launch site. Callers reject bad dtypes first with the CPU's
 * message; the default is a safety net. */
template <bool Ints, typename Fn> static dt_status dt_cu_visit(dt_dtype dt, Fn &&fn) {
    switch (dt) {
    case DT_F32: return fn(float{});
    case DT_F64: return fn(double{});
    case DT_BF16: return fn(dt_cu_bf16{});
    case DT_F16: return fn(dt_cu_f16{});
    case DT_I32: if constexpr (Ints) return fn(int32_t{}); break;
    case DT_I64: if constexpr (Ints) return fn(int64_t{}); break;
    default: break;
    }
    return dt_error(DT_ERR_DTYPE, "dtensor CUDA kernel: dtype %s not handled", dt_dtype_name(dt));
}

/* Copies of whole elements by size (data movement never looks at the bits). */
template <typename Fn> static dt_status dt_cu_visit_size(size_t es, Fn &&fn) {
    switch (es) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
    default: return dt_error(DT_ERR_DTYPE, "dtensor CUDA kernel: element size %zu", es);
    }
}

static inline size_t dt_cu_numel(const dt_local *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

/* ---- reductions across threads ---------------------------------------------------------- */

/* NaN-propagating max/min exactly as the CPU's MAXOF/MINOF (a NaN, once in, stays). */
struct dt_cu_sum {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct dt_cu_max {
    template <typename T> __device__ __forceinline__ T operator()(T a, T v) const {
        return (v > a || v != v) ? v : a;
    }
};

template <typename T, typename Op> __device__ __forceinline__ T dt_cu_warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Whole-block reduction, result in every thread. blockDim.x is a multiple of 32; smem holds
 * 32 T. Ends with a barrier so smem may be reused at once. */
template <typename T, typename Op>
__device__ __forceinline__ T dt_cu_block_reduce(T v, Op op, T *smem) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = dt_cu_warp_reduce(v, op);
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    if (warp == 0) { /* a butterfly that skips absent partners: lane 0 gets all nw values */
        T w = smem[lane < nw ? lane : 0];
        for (int o = 16; o > 0; o >>= 1) {
            T u = __shfl_xor_sync(0xffffffffu, w, o);
            if ((lane ^ o) < nw) w = op(w, u);
        }
        if (lane == 0) smem[0] = w;
    }
    __syncthreads();
    T r = smem[0];
    __syncthreads();
    return r;
}

/* G threads per row (G == 32: a warp; else the whole block, G == blockDim.x): the row's
 * reduction in every thread of the group. */
template <int G, typename T, typename Op>
__device__ __forceinline__ T dt_cu_group_reduce(T v, Op op, T *smem) {
    if constexpr (G == 32) return dt_cu_warp_reduce(v, op);
    else return dt_cu_block_reduce(v, op, smem);
}

/* Threads per row for a row of n elements: a warp for short rows, a block for long ones. */
static inline int dt_cu_row_threads(int64_t n) {
    return n <= 1024 ? 32 : n <= 8192 ? 256 : 1024;
}

/* ---- index math ------------------------------------------------------------------------- */

/* Dims (row-major, last fastest) with one stride per dim: a flat index to an offset. */
struct dt_cu_dims {
    int n;
    int64_t size[DT_MAX_NDIM + 1];
    int64_t stride[DT_MAX_NDIM + 1];
};

__device__ __forceinline__ int64_t dt_cu_offset(const dt_cu_dims &d, uint64_t i) {
    int64_t off = 0;
    for (int k = d.n - 1; k > 0; k--) {
        uint64_t s = (uint64_t)d.size[k];
        off += (int64_t)(i % s) * d.stride[k];
        i /= s;
    }
    return d.n > 0 ? off + (int64_t)i * d.stride[0] : off;
}

/* ---- GEMM (matmul.cu) ------------------------------------------------------------------- */

/* cuBLAS storage type of a float dtype. */
static inline cudaDataType dt_cu_data_type(dt_dtype dt) {
    return dt == DT_F64 ? CUDA_R_64F : dt == DT_BF16 ? CUDA_R_16BF : dt == DT_F16 ? CUDA_R_16F
                                                                                 : CUDA_R_32F;
}

/* cuBLAS compute type for f32 GEMMs on r: TF32 tensor cores when the rank allows them. */
static inline cublasComputeType_t dt_cu_f32_compute(const dt_cuda_rank *r) {
    return r->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* Row-major batched GEMM on r's compute stream: C[i] (M, N) = A[i] (M, K) @ B[i] (K, N)
 * (B[i] given as (N, K) when trans has DT_CU_TRANS_B, A[i] as (K, M) when it has
 * DT_CU_TRANS_A), i < batch, strides in elements (0 broadcasts). C is dense per matrix;
 * K == 0 zeroes it. ab/c are the storage types, ct the compute type (alpha and beta are
 * double for CUBLAS_COMPUTE_64F, else float). */
enum { DT_CU_TRANS_B = 1, DT_CU_TRANS_A = 2 };
dt_status dt_cu_gemm(dt_cuda_rank *r, const char *fn, cudaDataType ab, cudaDataType c,
                     cublasComputeType_t ct, int trans, int64_t M, int64_t N, int64_t K,
                     const void *A, int64_t sa, const void *B, int64_t sb, void *C, int64_t sc,
                     int64_t batch);

#endif
