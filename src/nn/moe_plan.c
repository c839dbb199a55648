/* The MoE routing plan (dtensor/moe.h): this rank's assignments bucketed by destination
 * expert (so by destination ep rank), the capacity drop, and the count exchange over the ep
 * group. Pure bookkeeping on host integers; the rows themselves move in moe_experts.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/moe_impl.h"

static const char FN[] = "dt_moe_plan_create";

void dt_moe_plan_retain(dt_moe_plan *plan) {
    atomic_fetch_add(&plan->refs, 1);
}

dt_status dt_moe_plan_destroy(dt_moe_plan *plan) {
    if (!plan || atomic_fetch_sub(&plan->refs, 1) != 1) return DT_OK;
    free(plan->routed), free(plan->kept), free(plan->send_counts), free(plan->send_order);
    free(plan->recv_per_expert), free(plan->recv_counts), free(plan->expert_rows);
    dt_mesh_release(plan->mesh);
    free(plan);
    return DT_OK;
}

dt_status dt_moe_plan_info_get(const dt_moe_plan *plan, dt_moe_plan_info *out) {
    DT_ARG_NOT_NULL(plan);
    DT_ARG_NOT_NULL(out);
    *out = plan->info;
    return DT_OK;
}

/* The token placements every MoE input shares: ep_dim shards a token dim (not the last),
 * or is Replicate when it has one rank (the same thing there), no mesh dim is Partial. */
dt_status dt_moe_check_tokens(const char *fn, const char *arg, const dt_tensor *t, int ep_dim) {
    for (int m = 0; m < t->mesh->ndim; m++) {
        dt_placement p = t->placements[m];
        char text[32];
        dt_placements_format(&p, 1, text, sizeof text);
        if (p.kind == DT_PLACEMENT_PARTIAL)
            return dt_error(DT_ERR_PLACEMENT, "%s: %s is %s on mesh dim %d (Partial tokens)", fn,
                            arg, text, m);
        int whole = p.kind == DT_PLACEMENT_REPLICATE && t->mesh->shape[m] == 1;
        if (m == ep_dim && !whole && !(p.kind == DT_PLACEMENT_SHARD && p.dim < t->ndim - 1))
            return dt_error(DT_ERR_PLACEMENT,
                            "%s: %s is %s on mesh dim %d (ep); it must shard a "
                            "token dim (each ep rank routes its own tokens)",
                            fn, arg, text, m);
        if (p.kind == DT_PLACEMENT_SHARD && p.dim == t->ndim - 1)
            return dt_error(DT_ERR_PLACEMENT, "%s: %s shards its last dim on mesh dim %d", fn, arg,
                            m);
    }
    return DT_OK;
}

typedef struct ranked {
    double gate;
    int64_t id;
} ranked;

/* Larger gate first, then the earlier assignment. */
static int by_gate(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->gate != b->gate) return a->gate > b->gate ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static double gate_at(const dt_tensor *g, int64_t i) {
    return g->dtype == DT_F64 ? ((const double *)g->data)[i] : ((const float *)g->data)[i];
}

/* keep[id] = 0 for the assignments expert e drops: all but its first `cap` by the policy. */
static dt_status drop(const dt_tensor *gates, dt_moe_drop policy, const int64_t *ids, int64_t n,
                      int64_t cap, unsigned char *keep) {
    if (n <= cap) return DT_OK;
    if (policy == DT_MOE_DROP_POSITION) {
        for (int64_t i = cap; i < n; i++)
            keep[ids[i]] = 0;
        return DT_OK;
    }
    ranked *r = malloc(sizeof(ranked) * (size_t)n);
    if (!r) return dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    for (int64_t i = 0; i < n; i++)
        r[i] = (ranked){gate_at(gates, ids[i]), ids[i]};
    qsort(r, (size_t)n, sizeof *r, by_gate);
    for (int64_t i = cap; i < n; i++)
        keep[r[i].id] = 0;
    free(r);
    return DT_OK;
}

static dt_status check(dt_tensor *experts, dt_tensor *gates, int64_t E, int ep_dim,
                       const dt_moe_opts *opts) {
    DT_CHECK(dt_tensor_check(FN, "experts", experts));
    DT_ARG_NOT_NULL(opts);
    int mnd = experts->mesh->ndim;
    DT_ARG(ep_dim >= 0 && ep_dim < mnd, "%s: argument ep_dim = %d is not in [0, %d)", FN, ep_dim,
           mnd);
    int ep = experts->mesh->shape[ep_dim];
    DT_ARG(E > 0 && E % ep == 0,
           "%s: argument num_experts = %lld is not a positive multiple of "
           "the ep size %d",
           FN, (long long)E, ep);
    DT_ARG(opts->top_k >= 1 && opts->top_k <= E, "%s: opts->top_k = %d is not in [1, %lld]", FN,
           opts->top_k, (long long)E);
    DT_ARG(opts->capacity_factor >= 0 && isfinite(opts->capacity_factor),
           "%s: opts->capacity_factor = %g is negative or not finite", FN, opts->capacity_factor);
    DT_ARG(opts->drop == DT_MOE_DROP_PROBS || opts->drop == DT_MOE_DROP_POSITION,
           "%s: opts->drop = %d is not a dt_moe_drop", FN, (int)opts->drop);
    if (experts->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: experts is %s (i64 expert ids)", FN,
                        dt_dtype_name(experts->dtype));
    if (experts->ndim < 2 || experts->shape[experts->ndim - 1] != opts->top_k)
        return dt_error(DT_ERR_SHAPE,
                        "%s: experts needs shape (..., top_k = %d), its last dim "
                        "is %lld",
                        FN, opts->top_k,
                        (long long)(experts->ndim ? experts->shape[experts->ndim - 1] : 0));
    if (experts->device.kind != DT_DEVICE_CPU)
        return dt_error(DT_ERR_UNSUPPORTED, "%s: CPU tensors only (for now)", FN);
    DT_CHECK(dt_moe_check_tokens(FN, "experts", experts, ep_dim));
    int need_gates = opts->capacity_factor > 0 && opts->drop == DT_MOE_DROP_PROBS;
    if (need_gates && !gates)
        return dt_error(DT_ERR_ARG,
                        "%s: argument gates is NULL; a capacity with the PROBS drop "
                        "ranks assignments by gate",
                        FN);
    if (gates && need_gates) {
        DT_CHECK(dt_tensor_check(FN, "gates", gates));
        if (gates->dtype != DT_F32 && gates->dtype != DT_F64)
            return dt_error(DT_ERR_DTYPE, "%s: gates is %s (f32 or f64)", FN,
                            dt_dtype_name(gates->dtype));
        int same = gates->ndim == experts->ndim && dt_mesh_equal(gates->mesh, experts->mesh);
        for (int d = 0; same && d < experts->ndim; d++)
            same = gates->shape[d] == experts->shape[d];
        for (int m = 0; same && m < mnd; m++)
            same = dt_placement_equal(gates->placements[m], experts->placements[m]);
        if (!same)
            return dt_error(DT_ERR_SHAPE,
                            "%s: gates and experts differ in shape, mesh or "
                            "placements",
                            FN);
    }
    return DT_OK;
}

/* Buckets, drops and send order from this rank's local ids; then the count exchange. */
static dt_status build(dt_moe_plan *p, const dt_tensor *experts, const dt_tensor *gates,
                       const dt_moe_opts *opts) {
    dt_moe_plan_info *in = &p->info;
    int64_t E = in->experts, El = in->local_experts, A = in->tokens * in->top_k;
    const int64_t *ids = experts->data;
    for (int64_t a = 0; a < A; a++)
        if (ids[a] < 0 || ids[a] >= E)
            return dt_error(DT_ERR_ARG,
                            "%s: experts holds %lld at local assignment %lld, not in "
                            "[0, %lld)",
                            FN, (long long)ids[a], (long long)a, (long long)E);
    int64_t *start = calloc((size_t)E + 1, sizeof(int64_t));
    int64_t *by_expert = malloc(sizeof(int64_t) * (size_t)(A + 1));
    unsigned char *keep = malloc((size_t)A + 1);
    dt_status st = DT_OK;
    if (!start || !by_expert || !keep) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for %lld assignments", FN, (long long)A);
        goto out;
    }
    /* Counting sort by expert, stable: each expert's assignments in assignment order. */
    for (int64_t a = 0; a < A; a++)
        p->routed[ids[a]]++, keep[a] = 1;
    for (int64_t e = 0; e < E; e++)
        start[e + 1] = start[e] + p->routed[e];
    for (int64_t e = 0; e < E; e++)
        p->kept[e] = 0;
    for (int64_t a = 0; a < A; a++)
        by_expert[start[ids[a]] + p->kept[ids[a]]++] = a;
    in->capacity = -1;
    if (opts->capacity_factor > 0) {
        in->capacity = (int64_t)ceil(opts->capacity_factor * (double)A / (double)E);
        for (int64_t e = 0; e < E && st == DT_OK; e++)
            st = drop(gates, opts->drop, by_expert + start[e], p->routed[e], in->capacity, keep);
    }
    int64_t n = 0;
    in->dropped = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t kept = 0;
        for (int64_t i = start[e]; i < start[e + 1]; i++)
            if (keep[by_expert[i]]) p->send_order[n++] = by_expert[i], kept++;
        p->kept[e] = kept;
        in->dropped += p->routed[e] - kept;
        p->send_counts[e / El] += kept;
    }
    in->nsend = n;
    /* Counts first: rank r learns how many rows of each of its experts come from each rank. */
    if (st == DT_OK) st = dt_all_to_all(p->comm, p->kept, p->recv_per_expert, (size_t)El, DT_I64);
    in->nrecv = 0;
    for (int r = 0; st == DT_OK && r < in->ep; r++)
        for (int64_t j = 0; j < El; j++) {
            int64_t c = p->recv_per_expert[r * El + j];
            p->recv_counts[r] += c, p->expert_rows[j] += c, in->nrecv += c;
        }
out:
    free(start), free(by_expert), free(keep);
    return st;
}

dt_status dt_moe_plan_create(dt_tensor *experts, dt_tensor *gates, int64_t num_experts, int ep_dim,
                             const dt_moe_opts *opts, dt_moe_plan **out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check(experts, gates, num_experts, ep_dim, opts));
    dt_moe_plan *p = calloc(1, sizeof *p);
    if (!p) return dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    atomic_init(&p->refs, 1);
    dt_mesh_retain(experts->mesh);
    p->mesh = experts->mesh, p->ep_dim = ep_dim, p->ndim = experts->ndim;
    memcpy(p->shape, experts->shape, sizeof(int64_t) * (size_t)experts->ndim);
    memcpy(p->placements, experts->placements, sizeof(dt_placement) * (size_t)p->mesh->ndim);
    dt_moe_plan_info *in = &p->info;
    in->ep = p->mesh->shape[ep_dim], in->me = p->mesh->coord[ep_dim];
    in->experts = num_experts, in->local_experts = num_experts / in->ep, in->top_k = opts->top_k;
    in->tokens = (int64_t)experts->local_numel / opts->top_k;
    size_t E = (size_t)num_experts, ep = (size_t)in->ep, A = experts->local_numel;
    p->routed = calloc(E, sizeof(int64_t)), p->kept = calloc(E, sizeof(int64_t));
    p->send_counts = calloc(ep, sizeof(int64_t)), p->send_order = calloc(A + 1, sizeof(int64_t));
    p->recv_per_expert = calloc(E, sizeof(int64_t)), p->recv_counts = calloc(ep, sizeof(int64_t));
    p->expert_rows = calloc((size_t)in->local_experts, sizeof(int64_t));
    dt_status st = DT_OK;
    if (!p->routed || !p->kept || !p->send_counts || !p->send_order || !p->recv_per_expert ||
        !p->recv_counts || !p->expert_rows)
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for %zu experts", FN, E);
    if (st == DT_OK) st = dt_mesh_dim_comm(p->mesh, ep_dim, &p->comm);
    if (st == DT_OK) st = build(p, experts, gates, opts);
    if (st != DT_OK) {
        dt_moe_plan_destroy(p);
        return st;
    }
    in->routed_per_expert = p->routed, in->tokens_per_expert = p->kept;
    in->send_counts = p->send_counts, in->send_order = p->send_order;
    in->recv_per_expert = p->recv_per_expert, in->recv_counts = p->recv_counts;
    *out = p;
    return DT_OK;
}
