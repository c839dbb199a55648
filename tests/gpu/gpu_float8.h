/* gpu_check's float8 section (gpu_float8.c). */
#ifndef DT_TEST_GPU_FLOAT8_H
#define DT_TEST_GPU_FLOAT8_H

void gpu_check_float8(void (*report)(int ok, const char *what, const char *detail));

#endif
