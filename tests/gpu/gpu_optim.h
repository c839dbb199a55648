/* gpu_check's optimizer section (gpu_optim.c). */
#ifndef DT_TEST_GPU_OPTIM_H
#define DT_TEST_GPU_OPTIM_H

#include "rank_helpers.h"

void gpu_check_optim(void (*report)(int ok, const char *what, const char *detail));

#endif
