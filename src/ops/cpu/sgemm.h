/* The library's own packed f32 GEMM for the small and middling shapes of a model step (where
 * OpenBLAS's thread start-up and packing dominate): AVX-512 and AVX2+FMA micro-kernels picked at
 * run time, output tiles split over the intra-op pool. CPU kernels only. */
#ifndef DT_OPS_CPU_SGEMM_H
#define DT_OPS_CPU_SGEMM_H

#include <stdint.h>

#include "dtensor/status.h"
#include "ops/cpu/simd.h"

/* A read-only f32 matrix: element (i, j) at p[i * rs + j * cs]. Row-major (rs = columns, cs =
 * 1) and its transpose (rs = 1, cs = rows) are the cases the packing reads fastest. */
typedef struct dt_sgemm_mat {
    const float *p;
    int64_t rs, cs;
} dt_sgemm_mat;

/* C (M, N), row-major with row stride ldc, = A (M, K) @ B (K, N); C's old contents are ignored
 * and must not overlap A or B. Each C element is one fused multiply-add chain over k = 0 .. K-1
 * in order, started from 0, whatever the path, tiling or thread count: the bits are the same on
 * every path (AVX-512, AVX2, the portable one) and with any pool size. Runs on the calling
 * thread's pool (core/pool.h); blocks. M, N, K >= 0 (K = 0 gives zeros). Out of memory:
 * DT_ERR_NOMEM, C untouched. */
dt_status dt_sgemm(int64_t M, int64_t N, int64_t K, dt_sgemm_mat A, dt_sgemm_mat B, float *C,
                   int64_t ldc);

/* The path dt_sgemm takes: DT_SIMD_AVX512, DT_SIMD_AVX2 (the CPU also needs FMA), or
 * DT_SIMD_SCALAR (the portable fmaf loop: slow, for tests and CPUs without either), from
 * dt_simd_level() (so DT_SIMD and dt_simd_set_cap cap it too). */
dt_simd dt_sgemm_path(void);

/* Whether dt_cpu_matmul should take dt_sgemm over OpenBLAS for this shape: a vector path is
 * available and the product is small enough that OpenBLAS's overheads outweigh its kernels
 * (measured in bench/bench_sgemm.c; docs/benchmarks.md). DT_SGEMM=0 turns it off, DT_SGEMM=1
 * takes it for every shape (read once). */
int dt_sgemm_preferred(int64_t M, int64_t N, int64_t K);

#endif
