/* Internals of the pipeline executor (pipeline.c), its wire (pipeline_wire.c) and the
 * interleaved schedule (pipeline_interleaved.c). */
#ifndef DT_NN_PIPELINE_IMPL_H
#define DT_NN_PIPELINE_IMPL_H

#include "dtensor/comm.h"
#include "dtensor/pipeline.h"

/* Sends t's shard (this rank's local data, with a header holding the spec) to peer of comm;
 * t NULL sends a header saying "nothing" (a gradient that never came). Blocks until peer has
 * it (dt_send). */
dt_status dt_pipe_send(dt_comm *comm, int peer, dt_tensor *t);
/* Receives what dt_pipe_send sent into a new tensor on mesh (the same shape of mesh as the
 * sender's), NULL for "nothing"; a leaf that requires grad when the sent tensor did. */
dt_status dt_pipe_recv(dt_comm *comm, int peer, dt_mesh *mesh, dt_tensor **out);
/* Micro-batch i of nmicro of batch: rows [i, i + 1) * n / nmicro of each rank's shard along
 * tensor dim 0, with the batch's placements; what names it in errors is what. */
dt_status dt_pipe_micro_check(dt_tensor *batch, int nmicro, const char *what);
dt_status dt_pipe_micro(dt_tensor *batch, int i, int nmicro, const char *what, dt_tensor **out);

/* dt_pipeline_schedule_build's interleaved lists (pipeline_interleaved.c), for p >= 2 ranks,
 * v >= 2 chunks each, m micro-batches (a multiple of p), checked by the caller. */
dt_status dt_pipe_interleaved(int p, int v, int m, int stage, dt_pipeline_action *actions, int cap,
                              int *n_out);

#endif
