/* What a local kernel sees: a dense row-major block of one rank's data and the device it lives
 * on. Nothing here reaches a mesh, a communicator or a context: kernels (src/ops/kernels.h,
 * users' kernels registered with dt_op_register) include this, not the tensor API. */
#ifndef DTENSOR_BLOCK_H
#define DTENSOR_BLOCK_H

#include "dtensor/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_device_kind { DT_DEVICE_CPU = 0, DT_DEVICE_CUDA = 1 } dt_device_kind;

/* index: the CUDA device ordinal; for dt_ctx_set_device, -1 picks one from the rank (local
 * rank modulo the number of GPUs). Ignored for the CPU. */
typedef struct dt_device {
    dt_device_kind kind;
    int index;
} dt_device;

typedef struct dt_block {
    void *data;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_device device; /* where data lives: for CUDA, data is device memory */
} dt_block;

#ifdef __cplusplus
}
#endif
#endif
