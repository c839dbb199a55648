/* The CUDA memory table (core/device.h) and pointer classification. Built with CUDA only. */
#ifndef DT_CORE_CUDA_DEVICE_MEM_H
#define DT_CORE_CUDA_DEVICE_MEM_H

#include "core/device.h"

extern const dt_mem_ops dt_mem_cuda;

/* DT_DEVICE_CUDA when p is device (or managed) memory, once a rank has set up a GPU. */
dt_device_kind dt_cuda_kind_of(const void *p);

#endif
