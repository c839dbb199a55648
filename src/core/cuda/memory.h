/* Device forms of core/box.h and core/reduce.h, queued on the bound rank's compute stream
 * (core/cuda/cuda_rt.h); pointers are device pointers (any device the current one can reach).
 * Same contracts and the same arithmetic as the host forms: reductions in source order, bf16
 * and f16 accumulated in f32 and rounded once. Built with CUDA only. */
#ifndef DT_CORE_CUDA_MEMORY_H
#define DT_CORE_CUDA_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/types.h"

#ifdef __cplusplus
extern "C" {
#endif

dt_status dt_cuda_box_copy(void *dst, const int64_t *dst_shape, const int64_t *dst_off,
                           const void *src, const int64_t *src_shape, const int64_t *src_off,
                           const int64_t *box, int ndim, size_t elem_size);
dt_status dt_cuda_reduce_n(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs,
                           int n, size_t count);
dt_status dt_cuda_fill_identity(dt_dtype dtype, dt_reduce_op op, void *dst, size_t count);
dt_status dt_cuda_scale(dt_dtype dtype, void *buf, size_t count, int64_t mul, int64_t div);
dt_status dt_cuda_pow_abs(dt_dtype dtype, void *buf, size_t count, double e);

#ifdef __cplusplus
}
#endif
#endif
