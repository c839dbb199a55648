/* The transfers of async tensor parallelism's collective matmuls (nn/collective_mm.c): one
 * step in which every member of a group sends a buffer to the member `shift` places ahead and
 * receives one from the member `shift` places behind, on the rank's communication thread, so
 * the caller multiplies meanwhile. Knows nothing of tensors or matmuls. */
#ifndef DT_NN_TP_EXCHANGE_H
#define DT_NN_TP_EXCHANGE_H

#include <stddef.h>

#include "dtensor/comm.h"

/* Starts the step on comm (group size n > 1, 0 < shift < n; a mesh's lane-1 communicator,
 * used by the communication thread only): send_count elements of dtype at send go to group
 * rank (me + shift) % n, recv_count elements from (me - shift + n) % n land in recv. Along
 * each cycle of the shift, members at even positions send first and the others receive
 * first, so the rendezvous sends of a cycle of any length cannot all wait at once. Counted
 * as one send and one recv on the group. The buffers stay untouched until dt_request_wait.
 * Collective over the group, in the same order on every member. */
dt_status dt_tp_exchange_start(dt_comm *comm, int shift, const void *send, size_t send_count,
                               void *recv, size_t recv_count, dt_dtype dtype, dt_request **out);

#endif
