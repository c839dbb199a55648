/* What other layers (op dispatch) use of redistribute beyond the public API. */
#ifndef DT_REDISTRIBUTE_IMPL_H
#define DT_REDISTRIBUTE_IMPL_H

#include "redistribute/plan_impl.h"

/* The mesh's cached plan from t's placements to dst (normalised), planned on a miss. Call on
 * the rank's own thread. */
dt_status dt_redistribute_cached_plan(dt_tensor *t, const dt_placement *dst,
                                      const dt_plan **plan_out);

/* Changes whenever the rank's cost model does: caches of choices priced with it key on it. */
uint64_t dt_cost_model_version(dt_ctx *ctx);

#endif
