/* Element-wise reduction of n equally long arrays: the arithmetic behind all_reduce,
 * reduce_scatter and Partial placements. Knows nothing of ranks. */
#ifndef DT_CORE_REDUCE_H
#define DT_CORE_REDUCE_H

#include <stddef.h>

#include "dtensor/types.h"

/* dst[i] = op(srcs[0][i], ..., srcs[n-1][i]), reduced in source order, bf16/f16 accumulated
 * in f32 and rounded once. dst may alias any source. dtype and op must be valid. */
void dt_reduce_n(dt_dtype dtype, dt_reduce_op op, void *dst, const void *const *srcs, int n,
                 size_t count);

/* Fills count elements with the identity of op (0 for sum/avg, 1 for prod, -inf/+inf or the
 * integer extremes for max/min). */
void dt_fill_identity(dt_dtype dtype, dt_reduce_op op, void *dst, size_t count);

#endif
