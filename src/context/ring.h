/* The ring exchange context parallelism runs on: every member of a group sends one buffer to
 * the next member and receives one from the previous, on the rank's communication thread, so
 * the caller computes meanwhile. Knows nothing of attention. */
#ifndef DT_CONTEXT_RING_H
#define DT_CONTEXT_RING_H

#include <stddef.h>

#include "dtensor/comm.h"

/* Starts the shift on comm (group size n > 1, used by the communication thread only: a mesh's
 * lane-1 communicator): send_count doubles of send go to group rank (me + 1) % n, recv_count
 * from (me - 1 + n) % n land in recv. Even ranks send first, odd ranks receive first, so the
 * rendezvous sends of a ring of any size cannot all wait at once. The buffers stay untouched
 * until dt_request_wait. Collective over the group, in the same order on every member. */
dt_status dt_ring_shift_start(dt_comm *comm, const double *send, size_t send_count, double *recv,
                              size_t recv_count, dt_request **out);

#endif
