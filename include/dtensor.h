/* dtensor: sharded tensors on a device mesh, in the style of PyTorch's DTensor. */
#ifndef DTENSOR_H
#define DTENSOR_H

#include "dtensor/ac.h"
#include "dtensor/async_tp.h"
#include "dtensor/autograd.h"
#include "dtensor/checkpoint.h"
#include "dtensor/comm.h"
#include "dtensor/context.h"
#include "dtensor/create.h"
#include "dtensor/device.h"
#include "dtensor/explain.h"
#include "dtensor/fsdp.h"
#include "dtensor/mesh.h"
#include "dtensor/moe.h"
#include "dtensor/nccl.h"
#include "dtensor/nn.h"
#include "dtensor/ops.h"
#include "dtensor/optim.h"
#include "dtensor/parallel.h"
#include "dtensor/params.h"
#include "dtensor/pipeline.h"
#include "dtensor/placement.h"
#include "dtensor/redistribute.h"
#include "dtensor/runtime.h"
#include "dtensor/scope.h"
#include "dtensor/status.h"
#include "dtensor/tensor.h"
#include "dtensor/trace.h"
#include "dtensor/types.h"
#include "dtensor/ucx.h"

#endif
