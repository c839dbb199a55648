/* Running a plan on this rank's shard. */
#ifndef DT_REDISTRIBUTE_EXECUTE_H
#define DT_REDISTRIBUTE_EXECUTE_H

#include "redistribute/plan_impl.h"

/* Applies plan to t (whose spec is plan's source) and returns a new tensor with the plan's
 * target placements. comms[i] is the communicator over step i's mesh dims (NULL for local
 * steps). Collective over the mesh. */
dt_status dt_plan_execute(const dt_plan *plan, dt_tensor *t, dt_comm *const *comms,
                          dt_tensor **out);

#endif
