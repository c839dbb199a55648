/* What other layers (op dispatch) use of redistribute beyond the public API. */
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

#endif
