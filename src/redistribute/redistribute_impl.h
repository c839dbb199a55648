/* What other layers (op dispatch, autograd) use of redistribute beyond the public API. */
#ifndef DT_REDISTRIBUTE_IMPL_H
#define DT_REDISTRIBUTE_IMPL_H

#include <string.h>

#include "redistribute/plan_impl.h"

/* The mesh's cached plan from t's placements to dst (normalised), planned on a miss. Call on
 * the rank's own thread. */
dt_status dt_redistribute_cached_plan(dt_tensor *t, const dt_placement *dst,
                                      const dt_plan **plan_out);

/* Writes n placements (normalised) into cache key words, four to a word, as codes that are
 * equal exactly when dt_placement_equal says so, then one word per Partial(norm) with its p's
 * bits; returns the words written, at most DT_PLACEMENTS_KEY_WORDS. */
#define DT_PLACEMENTS_KEY_WORDS ((DT_MESH_MAX_NDIM + 3) / 4 + DT_MESH_MAX_NDIM)
static inline unsigned dt_placements_key(const dt_placement *p, int n, uint64_t *words) {
    unsigned nw = 0;
    uint64_t w = 0;
    for (int m = 0; m < n; m++) {
        unsigned v = p[m].kind == DT_PLACEMENT_SHARD     ? (unsigned)p[m].dim
                     : p[m].kind == DT_PLACEMENT_PARTIAL ? (unsigned)p[m].op
                                                         : 0;
        w |= (uint64_t)(((unsigned)p[m].kind + 1) << 12 | (v & 0xfff)) << (16 * (m % 4));
        if (m % 4 == 3 || m == n - 1) words[nw++] = w, w = 0;
    }
    for (int m = 0; m < n; m++)
        if (p[m].kind == DT_PLACEMENT_PARTIAL && p[m].op == DT_REDUCE_NORM) {
            double ord = p[m].norm_ord == 0 ? 0 : p[m].norm_ord; /* -0 and 0 are one p */
            memcpy(&words[nw++], &ord, sizeof ord);
        }
    return nw;
}

/* Changes whenever the rank's cost model does: caches of choices priced with it key on it. */
uint64_t dt_cost_model_version(dt_ctx *ctx);
/* The rank's cost model (dt_ctx_set_cost_model's, else the default): what dispatch prices
 * moves with, for ops that price routes of their own. */
dt_cost_model dt_cost_model_of(dt_ctx *ctx);

/* DT_DEBUG_ARGS (dtensor/agree.h): the ranks of t's mesh compare t's spec and the target as
 * given (ndst placements at dst) before a public redistribute (fn) checks and plans it, so a
 * target that is invalid on some ranks only fails them all alike. DT_OK at once when the mode
 * is off, and for a tensor that is not one (fn's own check reports it). */
dt_status dt_redistribute_agree(const char *fn, dt_tensor *t, int ndst, const dt_placement *dst);

/* Checks a public call's tensor and target (fn names it) and finds the plan from the
 * tensor's placements to the target, normalised. */
dt_status dt_redistribute_prepare(const char *fn, dt_tensor *t, int ndst, const dt_placement *dst,
                                  const dt_plan **plan_out);
/* Runs plan (made for t's spec) on t: *out is the moved tensor, or t itself retained when the
 * plan has nothing to do. Blocks; collective over the plan's groups. Records nothing. */
dt_status dt_redistribute_execute(dt_tensor *t, const dt_plan *plan, dt_tensor **out);
/* The cached plan to dst (checked and normalised by the caller), then execute. */
dt_status dt_redistribute_run(dt_tensor *t, const dt_placement *dst, dt_tensor **out);
/* Queues plan's run on t on the rank's communication thread; done (nullable) is called on the
 * waiting thread with t and the result before dt_request_wait hands the result over. */
typedef dt_status (*dt_redistribute_done_fn)(dt_tensor *in, dt_tensor *out);
dt_status dt_redistribute_submit(dt_tensor *t, const dt_plan *plan, dt_redistribute_done_fn done,
                                 dt_request **out);
/* The rank's dt_redistribute_mode (dt_ctx_set_redistribute_mode). */
int dt_redistribute_mode_of(dt_ctx *ctx);
/* A tensor moved to dst_mesh (xmesh.c), arguments checked there as fn; records nothing. */
dt_status dt_redistribute_to_run(dt_tensor *tensor, dt_mesh *dst_mesh, int ndst,
                                 const dt_placement *dst, dt_tensor **out);

#endif
