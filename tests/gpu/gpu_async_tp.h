/* gpu_check's async tensor parallelism section (gpu_async_tp.c). */
#ifndef DT_TEST_GPU_ASYNC_TP_H
#define DT_TEST_GPU_ASYNC_TP_H

#include "rank_helpers.h"

void gpu_check_async_tp(void (*report)(int ok, const char *what, const char *detail));

#endif
