/* Element-wise reduction of n equally long arrays: the arithmetic behind all_reduce,
 * reduce_scatter and Partial placements. Knows nothing of ranks. */
#ifndef DT_CORE_REDUCE_H
#define DT_CORE_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/types.h"

/* dst[i] = op(srcs[0][i], ..., srcs[n-1][i]), reduced in source order, bf16/f16 accumulated
 * in f32 and rounded once. dst may alias any source. dtype and op must be valid. */
void dt_reduce_n(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs, int n,
                 size_t count);

/* dt_reduce_n with streaming stores whatever the count, and no fence: for a series of pieces of
 * one large result, ended by dt_stream_fence (core/copy.h). */
void dt_reduce_n_streamed(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs,
                          int n, size_t count);

/* Fills count elements with the identity of op (0 for sum/avg, 1 for prod, -inf/+inf or the
 * integer extremes for max/min). */
void dt_fill_identity(dt_dtype dtype, dt_reduce_op op, void *dst, size_t count);

/* buf[i] = buf[i] * mul / div in the dtype's arithmetic (f32 math for bf16/f16, integer
 * division truncating toward zero for i32/i64). */
void dt_scale(dt_dtype dtype, void *buf, size_t count, int64_t mul, int64_t div);

/* buf[i] = |buf[i]| ** e for float dtypes (f64 math for f64, f32 math otherwise); integer
 * dtypes are left alone (callers reject them): the transforms around a pending p-norm's
 * collective (dtensor/placement.h). */
void dt_pow_abs(dt_dtype dtype, void *buf, size_t count, double e);

#endif
