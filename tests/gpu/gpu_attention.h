/* gpu_check's attention section (gpu_attention.c). */
#ifndef DT_TEST_GPU_ATTENTION_H
#define DT_TEST_GPU_ATTENTION_H

#include "rank_helpers.h"

void gpu_check_attention(void (*report)(int ok, const char *what, const char *detail));

#endif
