/* The measured checkpointing policy (dtensor/ac.h): entries keyed by what a region records,
 * the recomputation times and bytes measured into them, the agreement of the ranks and the
 * knapsack by ratio. Owns its entries; holds no tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ac_policy.h"
#include "autograd/autograd_impl.h"
#include "autograd/saved.h"
#include "core/check.h"
#include "dtensor/comm.h"
#include "dtensor/mesh.h"
#include "dtensor/tensor_impl.h"

enum { MEASURING, DECIDED, FAILED };

struct dt_ac_entry {
    int n;        /* tensors a region of this kind notes */
    int64_t *sig; /* per tensor: its op (-1 redistribute, -2 custom), dtype, ndim, shape */
    int nsig;
    bool *cand;     /* full checkpointing drops it (as first seen) */
    bool *keep;     /* DECIDED: the candidates kept */
    double *us;     /* the fastest recomputation seen, -1 none (then the ranks' slowest) */
    int64_t *bytes; /* a candidate's bytes (the largest seen, then the ranks' largest) */
    int64_t min_bytes;
    unsigned born; /* the rank's backward passes ended when first seen */
    int state;
    char why[256]; /* FAILED: the message */
};

struct dt_ac_policy {
    dt_ac_policy_options opt;
    dt_ctx *ctx; /* the rank it serves, from its first region */
    int refs;    /* the caller's handle, plus one per region alive */
    dt_ac_entry **e;
    int n, cap;
};

/* ---- the choice ---------------------------------------------------------------------- */

/* Whether candidate a goes before b: a larger us / bytes (cross-multiplied, so zero bytes
 * rank first), then the lower index. */
static bool before(const double *us, const int64_t *bytes, int a, int b) {
    double x = us[a] * (double)bytes[b], y = us[b] * (double)bytes[a];
    return x != y ? x > y : a < b;
}

void dt_ac_choose(int n, const double *us, const int64_t *bytes, int64_t room, bool *keep) {
    int *order = malloc(sizeof *order * (size_t)(n ? n : 1)), m = 0;
    for (int i = 0; i < n; i++)
        keep[i] = false;
    if (!order) return; /* keeps nothing: full checkpointing, within any budget */
    for (int i = 0; i < n; i++) {
        if (!(us[i] > 0) || bytes[i] < 0) continue;
        int k = m++; /* insertion sort: a block has tens of candidates */
        while (k > 0 && before(us, bytes, i, order[k - 1]))
            order[k] = order[k - 1], k--;
        order[k] = i;
    }
    for (int k = 0; k < m; k++)
        if (bytes[order[k]] <= room) keep[order[k]] = true, room -= bytes[order[k]];
    free(order);
}

/* ---- the policy object ----------------------------------------------------------------- */

dt_ac_policy_options dt_ac_policy_options_default(void) {
    return (dt_ac_policy_options){.budget_bytes = 0, .measure_steps = 1};
}

dt_status dt_ac_policy_create(const dt_ac_policy_options *opt, dt_ac_policy **out) {
    DT_ARG_NOT_NULL(opt);
    DT_ARG_NOT_NULL(out);
    DT_ARG(opt->budget_bytes > 0,
           "dt_ac_policy_create: argument opt->budget_bytes = %lld is not a positive number of "
           "bytes (the activation bytes each block may keep for backward on each rank)",
           (long long)opt->budget_bytes);
    DT_ARG(opt->measure_steps >= 1,
           "dt_ac_policy_create: argument opt->measure_steps = %d is below 1 (backward passes "
           "measured before choosing)",
           opt->measure_steps);
    dt_ac_policy *p = calloc(1, sizeof *p);
    if (!p) return dt_error(DT_ERR_NOMEM, "dt_ac_policy_create: out of memory");
    p->opt = *opt;
    p->refs = 1;
    *out = p;
    return DT_OK;
}

static void entry_free(dt_ac_entry *e) {
    if (!e) return;
    free(e->sig), free(e->cand), free(e->keep), free(e->us), free(e->bytes);
    free(e);
}

void dt_ac_policy_retain(dt_ac_policy *p) {
    p->refs++;
}

void dt_ac_policy_unref(dt_ac_policy *p) {
    if (--p->refs) return;
    for (int i = 0; i < p->n; i++)
        entry_free(p->e[i]);
    free(p->e);
    free(p);
}

dt_status dt_ac_policy_destroy(dt_ac_policy *policy) {
    if (policy) dt_ac_policy_unref(policy);
    return DT_OK;
}

dt_status dt_ac_policy_bind(dt_ac_policy *p, dt_ctx *ctx) {
    if (!p->ctx) p->ctx = ctx;
    DT_ARG(p->ctx == ctx,
           "dt_ac_begin_measured: argument policy serves rank %d's context, not rank %d's "
           "(make one policy per rank)",
           dt_ctx_rank(p->ctx), dt_ctx_rank(ctx));
    return DT_OK;
}

/* ---- entries --------------------------------------------------------------------------- */

static int64_t bytes_of(const dt_tensor *t) {
    return (int64_t)(t->local_numel * dt_dtype_size(t->dtype));
}

/* What identifies a region's kind: each tensor's op, dtype and global shape, in order (the
 * same on every rank of an SPMD program, unlike local shapes). */
static int64_t *signature(dt_tensor *const *t, int n, int *nsig) {
    int len = 0;
    for (int i = 0; i < n; i++)
        len += 3 + t[i]->ndim;
    int64_t *s = malloc(sizeof *s * (size_t)(len ? len : 1));
    if (!s) return NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        s[k++] = dt_node_custom(t[i]) ? -2 : dt_node_op(t[i]);
        s[k++] = t[i]->dtype;
        s[k++] = t[i]->ndim;
        for (int d = 0; d < t[i]->ndim; d++)
            s[k++] = t[i]->shape[d];
    }
    *nsig = len;
    return s;
}

static dt_status entry_of(dt_ac_policy *p, dt_ctx *ctx, dt_tensor *const *t, int n,
                          const bool *cand, dt_ac_entry **out) {
    int nsig;
    int64_t *sig = signature(t, n, &nsig);
    if (!sig) return dt_error(DT_ERR_NOMEM, "dt_ac_end: out of memory");
    for (int i = 0; i < p->n; i++)
        if (p->e[i]->nsig == nsig && !memcmp(p->e[i]->sig, sig, sizeof *sig * (size_t)nsig)) {
            free(sig);
            *out = p->e[i];
            return DT_OK;
        }
    dt_ac_entry *e = calloc(1, sizeof *e);
    if (e) {
        *e = (dt_ac_entry){.n = n,
                           .sig = sig,
                           .nsig = nsig,
                           .state = MEASURING,
                           .born = dt_autograd_of(ctx)->backwards};
        e->cand = calloc((size_t)n, sizeof *e->cand);
        e->keep = calloc((size_t)n, sizeof *e->keep);
        e->us = malloc(sizeof *e->us * (size_t)n);
        e->bytes = calloc((size_t)n, sizeof *e->bytes);
    } else {
        free(sig);
    }
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        dt_ac_entry **g = realloc(p->e, sizeof *g * (size_t)cap);
        if (g) p->e = g, p->cap = cap;
    }
    if (!e || !e->cand || !e->keep || !e->us || !e->bytes || p->n == p->cap) {
        entry_free(e);
        return dt_error(DT_ERR_NOMEM, "dt_ac_end: out of memory for the policy's entry");
    }
    for (int i = 0; i < n; i++)
        e->cand[i] = cand[i], e->us[i] = -1;
    p->e[p->n++] = e;
    *out = e;
    return DT_OK;
}

void dt_ac_policy_timed(dt_ac_entry *e, int i, double us) {
    if (e->state != MEASURING) return;
    e->us[i] = e->us[i] < 0 ? us : fmin(e->us[i], us);
}

/* The ranks of mesh agree on e's figures (the slowest time, the largest bytes, the smallest
 * budget), then choose. */
static dt_status decide(const dt_ac_policy *p, dt_ac_entry *e, dt_mesh *mesh) {
    int n = e->n;
    double *v = malloc(sizeof *v * (size_t)(2 * n + 2));
    if (!v) return dt_error(DT_ERR_NOMEM, "dt_ac_end: out of memory");
    for (int i = 0; i < n; i++) {
        v[i] = e->cand[i] ? e->us[i] : -1;
        v[n + i] = e->cand[i] ? (double)e->bytes[i] : -1;
    }
    v[2 * n] = (double)e->min_bytes;
    v[2 * n + 1] = -(double)p->opt.budget_bytes;
    dt_comm *comm;
    dt_status st = dt_mesh_mask_comm(mesh, (1u << dt_mesh_ndim(mesh)) - 1, &comm);
    if (st == DT_OK) st = dt_all_reduce(comm, v, v, (size_t)(2 * n + 2), DT_F64, DT_REDUCE_MAX);
    if (st != DT_OK) {
        free(v);
        return st;
    }
    for (int i = 0; i < n; i++) {
        e->cand[i] = v[n + i] >= 0;
        e->us[i] = e->cand[i] ? v[i] : -1;
        e->bytes[i] = e->cand[i] ? (int64_t)v[n + i] : 0;
    }
    e->min_bytes = (int64_t)v[2 * n];
    int64_t budget = (int64_t)-v[2 * n + 1];
    free(v);
    if (e->min_bytes > budget) {
        snprintf(e->why, sizeof e->why,
                 "dt_ac_end: the measured policy's budget_bytes = %lld is below this block's "
                 "minimum of %lld bytes (what it keeps even under full checkpointing: its "
                 "outputs and what cannot be recomputed)",
                 (long long)budget, (long long)e->min_bytes);
        e->state = FAILED;
        return DT_OK;
    }
    dt_ac_choose(n, e->us, e->bytes, budget - e->min_bytes, e->keep);
    e->state = DECIDED;
    return DT_OK;
}

dt_status dt_ac_policy_plan(dt_ac_policy *p, dt_ctx *ctx, dt_tensor *const *t, int n,
                            const bool *cand, int64_t min_bytes, bool *keep,
                            dt_ac_entry **measure) {
    *measure = NULL;
    for (int i = 0; i < n; i++)
        keep[i] = false;
    if (!n) return DT_OK;
    dt_ac_entry *e = NULL;
    DT_CHECK(entry_of(p, ctx, t, n, cand, &e));
    unsigned ended = dt_autograd_of(ctx)->backwards;
    if (e->state == MEASURING && ended - e->born >= (unsigned)p->opt.measure_steps)
        DT_CHECK(decide(p, e, t[0]->mesh));
    if (e->state == FAILED) return dt_error(DT_ERR_ARG, "%s", e->why);
    if (e->state == DECIDED) {
        /* a tensor that was no candidate when measured is dropped: within the budget */
        for (int i = 0; i < n; i++)
            keep[i] = cand[i] && e->cand[i] && e->keep[i];
        return DT_OK;
    }
    for (int i = 0; i < n; i++)
        if (cand[i] && bytes_of(t[i]) > e->bytes[i]) e->bytes[i] = bytes_of(t[i]);
    if (min_bytes > e->min_bytes) e->min_bytes = min_bytes;
    *measure = e;
    return DT_OK;
}

/* ---- what it knows --------------------------------------------------------------------- */

int dt_ac_policy_nblocks(const dt_ac_policy *policy) {
    if (!policy) {
        dt_error(DT_ERR_ARG, "dt_ac_policy_nblocks: argument policy is NULL");
        return -1;
    }
    return policy->n;
}

dt_status dt_ac_policy_block_get(const dt_ac_policy *policy, int i, dt_ac_policy_block *out) {
    DT_ARG_NOT_NULL(policy);
    DT_ARG_NOT_NULL(out);
    DT_ARG(i >= 0 && i < policy->n,
           "dt_ac_policy_block_get: argument i = %d is not a kind of region seen (%d)", i,
           policy->n);
    const dt_ac_entry *e = policy->e[i];
    dt_ac_policy_block b = {.ntensors = e->n,
                            .decided = e->state == DECIDED,
                            .min_bytes = e->min_bytes,
                            .kept_bytes = e->min_bytes};
    for (int k = 0; k < e->n; k++) {
        if (!e->cand[k]) continue;
        b.ncandidates++;
        b.candidate_bytes += e->bytes[k];
        double us = e->us[k] > 0 ? e->us[k] : 0;
        if (b.decided && e->keep[k])
            b.nkept++, b.kept_bytes += e->bytes[k], b.saved_us += us;
        else
            b.recompute_us += us;
    }
    *out = b;
    return DT_OK;
}

static const char *op_label(int64_t op) {
    return op == -1 ? "redistribute" : op == -2 ? "custom" : dt_op_name((dt_op)op);
}

dt_status dt_ac_policy_tensor_get(const dt_ac_policy *policy, int i, int k,
                                  dt_ac_policy_tensor *out) {
    DT_ARG_NOT_NULL(policy);
    DT_ARG_NOT_NULL(out);
    DT_ARG(i >= 0 && i < policy->n,
           "dt_ac_policy_tensor_get: argument i = %d is not a kind of region seen (%d)", i,
           policy->n);
    const dt_ac_entry *e = policy->e[i];
    DT_ARG(k >= 0 && k < e->n, "dt_ac_policy_tensor_get: argument k = %d is not below %d", k, e->n);
    int s = 0;
    for (int j = 0; j < k; j++)
        s += 3 + (int)e->sig[s + 2];
    *out = (dt_ac_policy_tensor){.op = op_label(e->sig[s]),
                                 .candidate = e->cand[k],
                                 .kept = e->state == DECIDED && e->cand[k] && e->keep[k],
                                 .bytes = e->cand[k] ? e->bytes[k] : 0,
                                 .us = e->us[k]};
    return DT_OK;
}

dt_status dt_ac_policy_print(const dt_ac_policy *policy, FILE *f) {
    DT_ARG_NOT_NULL(policy);
    DT_ARG_NOT_NULL(f);
    for (int i = 0; i < policy->n; i++) {
        const dt_ac_entry *e = policy->e[i];
        dt_ac_policy_block b;
        DT_CHECK(dt_ac_policy_block_get(policy, i, &b));
        fprintf(f,
                "region kind %d: %d tensors, %d candidates (%lld bytes), minimum %lld bytes, "
                "budget %lld: %s",
                i, b.ntensors, b.ncandidates, (long long)b.candidate_bytes, (long long)b.min_bytes,
                (long long)policy->opt.budget_bytes,
                e->state == DECIDED  ? "decided"
                : e->state == FAILED ? "budget below the minimum"
                                     : "measuring");
        if (b.decided)
            fprintf(f, ", kept %d (%lld bytes), saves %.1f us, recomputes %.1f us", b.nkept,
                    (long long)b.kept_bytes, b.saved_us, b.recompute_us);
        fputc('\n', f);
        for (int k = 0; k < e->n; k++) {
            dt_ac_policy_tensor t;
            DT_CHECK(dt_ac_policy_tensor_get(policy, i, k, &t));
            if (t.candidate)
                fprintf(f, "  #%-3d %-28s %10lld bytes %10.1f us  %s\n", k, t.op,
                        (long long)t.bytes, t.us,
                        !b.decided ? "-"
                        : t.kept   ? "kept"
                                   : "recomputed");
        }
    }
    return DT_OK;
}
