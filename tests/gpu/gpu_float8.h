/* gpu_check's float8 sections (gpu_float8.c, gpu_float8_lt.c). */
#ifndef DT_TEST_GPU_FLOAT8_H
#define DT_TEST_GPU_FLOAT8_H

void gpu_check_float8(void (*report)(int ok, const char *what, const char *detail));
/* The cuBLASLt float8 GEMM and its fallback (gpu_float8_lt.c). */
void gpu_check_float8_lt(void (*report)(int ok, const char *what, const char *detail));

#endif
