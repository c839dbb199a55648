/* The measured checkpointing policy (dtensor/ac.h): one entry per kind of region, its
 * measurements and its choice. recompute.c runs the regions and asks this file what each
 * keeps; nothing here drops or recomputes a tensor. */
#ifndef DT_AUTOGRAD_AC_POLICY_H
#define DT_AUTOGRAD_AC_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "dtensor/ac.h"

typedef struct dt_ac_entry dt_ac_entry;

/* The knapsack by ratio over n candidates (us[i]: recompute microseconds, <= 0 when never
 * measured, such a one is never kept; bytes[i] >= 0): in decreasing order of us / bytes (ties:
 * the lower index first), candidate i is kept (keep[i]) when its bytes still fit in room. */
void dt_ac_choose(int n, const double *us, const int64_t *bytes, int64_t room, bool *keep);

void dt_ac_policy_retain(dt_ac_policy *p);
void dt_ac_policy_unref(dt_ac_policy *p);
/* DT_ERR_ARG when p already serves another rank's context (the first to use it owns it). */
dt_status dt_ac_policy_bind(dt_ac_policy *p, dt_ctx *ctx);

/* A closing region of p noted t[0..n); cand[i]: full checkpointing drops t[i]; min_bytes: the
 * bytes the region keeps alive anyway. Sets keep[i] (whether candidate i stays) and *measure
 * (the entry the dropped candidates' recomputation times go to; NULL once decided). Decides
 * when due: collective over t[0]'s mesh. On a failure keep is all false (full). */
dt_status dt_ac_policy_plan(dt_ac_policy *p, dt_ctx *ctx, dt_tensor *const *t, int n,
                            const bool *cand, int64_t min_bytes, bool *keep, dt_ac_entry **measure);
/* Tensor i of e's region was recomputed in us microseconds (ignored once decided). */
void dt_ac_policy_timed(dt_ac_entry *e, int i, double us);

#endif
