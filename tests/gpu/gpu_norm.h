/* gpu_check's norm backward section (gpu_norm.c). */
#ifndef DT_TEST_GPU_NORM_H
#define DT_TEST_GPU_NORM_H

#include "rank_helpers.h"

void gpu_check_norm(void (*report)(int ok, const char *what, const char *detail));

#endif
