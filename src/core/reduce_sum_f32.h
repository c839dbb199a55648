/* One-pass f32 sums of n sources (core/reduce.h's arithmetic, the same bits). */
#ifndef DT_CORE_REDUCE_SUM_F32_H
#define DT_CORE_REDUCE_SUM_F32_H

#include <stddef.h>

/* dst[i] = srcs[0][i] + ... + srcs[n-1][i] added left to right, divided by n when avg, stored
 * with streaming stores (no fence) when stream; dst may be one of the sources. Returns 0, having
 * done nothing, where it does not apply (no vector path, or dst not 4-byte aligned). */
int dt_sum_f32(float *dst, const float *const *srcs, int n, size_t count, int avg, int stream);

/* Tests: 0 keeps the SSE2 path even where the CPU has AVX2; 1 goes back to AVX2 where it has. */
void dt_sum_f32_use_avx2(int on);

#endif
