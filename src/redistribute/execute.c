/* Runs a plan on one rank: each step turns this rank's dense local block into the block the
 * next placements give it, with one collective over the step's group or a local copy.
 * Shapes: before = layout of this rank under step->before, after = under step->after. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "redistribute/execute.h"

typedef struct layout {
    int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
    size_t numel;
} layout;

typedef struct exec {
    const dt_plan *plan;
    const dt_mesh *mesh;
    int ndim;
    size_t es;
    const dt_mem_ops *mem; /* of the tensor's device: every buffer below lives there */
    void *cur;             /* this rank's block under the current placements */
    int owned;
} exec;

static void layout_at(const exec *x, const int *coord, const dt_placement *pl, layout *out) {
    dt_shard_layout(x->plan->mesh_ndim, x->plan->mesh_shape, coord, x->ndim, x->plan->shape, pl,
                    out->shape, out->off);
    out->numel = dt_shape_numel(out->shape, x->ndim);
}

/* Coordinate of member k of the group over the dims of M (row-major in mesh order). */
static void member_coord(const exec *x, unsigned M, int k, int *coord) {
    memcpy(coord, x->mesh->coord, sizeof(int) * DT_MESH_MAX_NDIM);
    for (int m = x->plan->mesh_ndim - 1; m >= 0; m--) {
        if (!(M & (1u << m))) continue;
        coord[m] = k % x->plan->mesh_shape[m];
        k /= x->plan->mesh_shape[m];
    }
}

/* Blocks along dim d are contiguous in a dense array when every dim before d has extent 1. */
static int leading_ones(const int64_t *shape, int d) {
    for (int i = 0; i < d; i++)
        if (shape[i] != 1) return 0;
    return 1;
}

static size_t inner_numel(const int64_t *shape, int ndim, int d) {
    return dt_shape_numel(shape + d + 1, ndim - d - 1);
}

typedef struct group {
    int n;
    layout *before, *after; /* per member */
    size_t *counts, *displs;
} group;

static dt_status group_init(const exec *x, const dt_plan_step *s, group *g) {
    g->n = s->group_size;
    g->before = malloc(sizeof(layout) * (size_t)g->n);
    g->after = malloc(sizeof(layout) * (size_t)g->n);
    g->counts = malloc(sizeof(size_t) * (size_t)g->n);
    g->displs = malloc(sizeof(size_t) * (size_t)g->n);
    if (!g->before || !g->after || !g->counts || !g->displs)
        return dt_error(DT_ERR_NOMEM, "redistribute: out of memory for a group of %d", g->n);
    int coord[DT_MESH_MAX_NDIM];
    for (int k = 0; k < g->n; k++) {
        member_coord(x, s->mesh_mask, k, coord);
        layout_at(x, coord, s->before, &g->before[k]);
        layout_at(x, coord, s->after, &g->after[k]);
    }
    return DT_OK;
}

static void group_free(group *g) {
    free(g->before);
    free(g->after);
    free(g->counts);
    free(g->displs);
}

static void *alloc_elems(const exec *x, size_t n) { return x->mem->alloc(n * x->es); }

/* S(d) -> R: gather the members' blocks along d. */
static dt_status gather(exec *x, const dt_plan_step *s, dt_comm *c, const group *g, int me,
                        void *out) {
    int d = s->before[__builtin_ctz(s->mesh_mask)].dim;
    const layout *a = &g->after[me];
    size_t inner = inner_numel(a->shape, x->ndim, d);
    for (int k = 0; k < g->n; k++) {
        g->counts[k] = g->before[k].numel;
        g->displs[k] = (size_t)(g->before[k].off[d] - a->off[d]) * inner;
    }
    if (leading_ones(a->shape, d)) return dt_all_gatherv(c, x->cur, out, g->counts, g->displs, x->plan->dtype);
    int boxes;
    DT_CHECK(dt_comm_gather_boxes_here(c, x->es, x->cur, out, &boxes));
    if (boxes) { /* no packed buffer: each block straight to its place */
        dt_box *recv = calloc((size_t)g->n, sizeof *recv);
        if (!recv) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
        for (int k = 0; k < g->n; k++) {
            memcpy(recv[k].ext, g->before[k].shape, sizeof recv[k].ext);
            recv[k].off[d] = g->before[k].off[d] - a->off[d];
        }
        dt_status st = dt_comm_gather_boxes(c, x->ndim, x->es, x->cur, g->before[me].shape, out,
                                            a->shape, recv);
        free(recv);
        return st;
    }
    void *tmp = alloc_elems(x, a->numel);
    if (!tmp) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
    dt_status st = dt_all_gatherv(c, x->cur, tmp, g->counts, NULL, x->plan->dtype);
    const char *block = tmp;
    int64_t off[DT_MAX_NDIM] = {0};
    for (int k = 0; st == DT_OK && k < g->n; k++) {
        off[d] = g->before[k].off[d] - a->off[d];
        st = x->mem->box_copy(out, a->shape, off, block, g->before[k].shape, NULL,
                              g->before[k].shape, x->ndim, x->es);
        block += g->counts[k] * x->es;
    }
    x->mem->free(tmp);
    return st;
}

/* Cuts the current block along dim d into the members' after-chunks, packed in member order.
 * Returns the current block itself when the chunks already lie that way. */
static dt_status split_along(exec *x, const group *g, int me, int d, void **packed, int *owned) {
    const layout *b = &g->before[me];
    size_t total = 0;
    for (int k = 0; k < g->n; k++) {
        int64_t shape[DT_MAX_NDIM];
        memcpy(shape, b->shape, sizeof shape);
        shape[d] = g->after[k].shape[d];
        g->counts[k] = dt_shape_numel(shape, x->ndim);
        total += g->counts[k];
    }
    if (leading_ones(b->shape, d)) {
        *packed = x->cur;
        *owned = 0;
        return DT_OK;
    }
    char *buf = alloc_elems(x, total), *p = buf;
    if (!buf) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
    dt_status st = DT_OK;
    for (int k = 0; k < g->n && st == DT_OK; k++) {
        int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM] = {0};
        memcpy(shape, b->shape, sizeof shape);
        shape[d] = g->after[k].shape[d];
        off[d] = g->after[k].off[d] - b->off[d];
        st = x->mem->box_copy(p, shape, NULL, x->cur, b->shape, off, shape, x->ndim, x->es);
        p += g->counts[k] * x->es;
    }
    if (st != DT_OK) {
        x->mem->free(buf);
        return st;
    }
    *packed = buf;
    *owned = 1;
    return DT_OK;
}

/* S(i) -> S(j): each member gets this rank's block cut to its chunk of j; this rank gets
 * every member's piece of i cut to its own chunk of j. Sub-box exchange: no packing where
 * the backend copies between ranks directly. */
static dt_status all_to_all(exec *x, const dt_plan_step *s, dt_comm *c, const group *g, int me,
                            void *out) {
    unsigned m0 = (unsigned)__builtin_ctz(s->mesh_mask);
    int i = s->before[m0].dim, j = s->after[m0].dim;
    const layout *b = &g->before[me], *a = &g->after[me];
    dt_box *send = calloc((size_t)g->n * 2, sizeof *send), *recv = send + g->n;
    if (!send) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
    for (int k = 0; k < g->n; k++) {
        memcpy(send[k].ext, b->shape, sizeof b->shape);
        send[k].ext[j] = g->after[k].shape[j];
        send[k].off[j] = g->after[k].off[j] - b->off[j];
        memcpy(recv[k].ext, a->shape, sizeof a->shape);
        recv[k].ext[i] = g->before[k].shape[i];
        recv[k].off[i] = g->before[k].off[i] - a->off[i];
    }
    dt_status st = dt_comm_exchange_boxes(c, x->ndim, x->es, x->cur, b->shape, send, out, a->shape,
                                          recv);
    free(send);
    return st;
}

static dt_status own_cur(exec *x, size_t numel);

/* P(op) -> S(d): reduce-scatter the members' chunks of d. A pending p-norm reduces the parts
 * raised to p (in this rank's own copy) and takes the root of its chunk. */
static dt_status reduce_scatter(exec *x, const dt_plan_step *s, dt_comm *c, const group *g,
                                int me, void *out) {
    unsigned m0 = (unsigned)__builtin_ctz(s->mesh_mask);
    dt_placement from = s->before[m0];
    dt_reduce_op op = from.op;
    if (op == DT_REDUCE_NORM) {
        DT_CHECK(own_cur(x, g->before[me].numel));
        DT_CHECK(dt_norm_partial_pre(x->mem, x->plan->dtype, x->cur, g->before[me].numel,
                                     from.norm_ord));
        op = dt_norm_partial_reduce_op(from.norm_ord);
    }
    const int d = s->after[m0].dim;
    const layout *b = &g->before[me];
    if (!leading_ones(b->shape, d)) { /* strided chunks: reduced where they lie */
        dt_box *boxes = calloc((size_t)g->n, sizeof *boxes);
        if (!boxes) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
        for (int k = 0; k < g->n; k++) {
            memcpy(boxes[k].ext, b->shape, sizeof boxes[k].ext);
            boxes[k].ext[d] = g->after[k].shape[d];
            boxes[k].off[d] = g->after[k].off[d] - b->off[d];
        }
        dt_status st = dt_comm_reduce_scatter_boxes(c, x->ndim, x->cur, b->shape, boxes, out,
                                                    x->plan->dtype, op);
        free(boxes);
        if (st == DT_OK && from.op == DT_REDUCE_NORM)
            st = dt_norm_partial_post(x->mem, x->plan->dtype, out, g->after[me].numel,
                                      from.norm_ord);
        return st;
    }
    void *send = NULL;
    int owned = 0;
    DT_CHECK(split_along(x, g, me, d, &send, &owned));
    dt_status st = dt_reduce_scatterv(c, send, out, g->counts, x->plan->dtype, op);
    if (owned) x->mem->free(send);
    if (st == DT_OK && from.op == DT_REDUCE_NORM)
        st = dt_norm_partial_post(x->mem, x->plan->dtype, out, g->after[me].numel, from.norm_ord);
    return st;
}

/* The current block, writable. */
static dt_status own_cur(exec *x, size_t numel) {
    if (x->owned) return DT_OK;
    void *p = alloc_elems(x, numel);
    if (!p) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
    dt_status st = x->mem->copy(p, x->cur, numel * x->es);
    if (st != DT_OK) {
        x->mem->free(p);
        return st;
    }
    x->cur = p;
    x->owned = 1;
    return DT_OK;
}

static dt_status run_step(exec *x, const dt_plan_step *s, dt_comm *c) {
    layout b, a;
    layout_at(x, x->mesh->coord, s->before, &b);
    layout_at(x, x->mesh->coord, s->after, &a);
    int m0 = __builtin_ctz(s->mesh_mask);
    switch (s->kind) {
    case DT_STEP_RELABEL: return DT_OK;
    case DT_STEP_TO_PARTIAL:
        if (s->after[m0].op != DT_REDUCE_SUM || x->mesh->coord[m0] == 0) return DT_OK;
        DT_CHECK(own_cur(x, b.numel));
        return x->mem->zero(x->cur, b.numel * x->es);
    case DT_STEP_SCALE: {
        DT_CHECK(own_cur(x, b.numel));
        int64_t n = x->plan->mesh_shape[m0];
        if (s->before[m0].op == DT_REDUCE_AVG) return x->mem->scale(x->plan->dtype, x->cur, b.numel, 1, n);
        return x->mem->scale(x->plan->dtype, x->cur, b.numel, n, 1);
    }
    default: break;
    }
    void *out = alloc_elems(x, a.numel);
    if (!out) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory");
    dt_status st = DT_OK;
    if (s->kind == DT_STEP_SLICE) {
        int64_t off[DT_MAX_NDIM];
        for (int d = 0; d < x->ndim; d++) off[d] = a.off[d] - b.off[d];
        st = x->mem->box_copy(out, a.shape, NULL, x->cur, b.shape, off, a.shape, x->ndim, x->es);
    } else if (s->kind == DT_STEP_ALL_REDUCE && s->before[m0].op == DT_REDUCE_NORM) {
        double ord = s->before[m0].norm_ord;
        st = own_cur(x, b.numel);
        if (st == DT_OK) st = dt_norm_partial_pre(x->mem, x->plan->dtype, x->cur, b.numel, ord);
        if (st == DT_OK)
            st = dt_all_reduce(c, x->cur, out, b.numel, x->plan->dtype,
                               dt_norm_partial_reduce_op(ord));
        if (st == DT_OK) st = dt_norm_partial_post(x->mem, x->plan->dtype, out, a.numel, ord);
    } else if (s->kind == DT_STEP_ALL_REDUCE) {
        st = dt_all_reduce(c, x->cur, out, b.numel, x->plan->dtype, s->before[m0].op);
    } else {
        group g = {0};
        int me = dt_comm_rank(c);
        st = group_init(x, s, &g);
        if (st == DT_OK && s->kind == DT_STEP_ALL_GATHER) st = gather(x, s, c, &g, me, out);
        if (st == DT_OK && s->kind == DT_STEP_ALL_TO_ALL) st = all_to_all(x, s, c, &g, me, out);
        if (st == DT_OK && s->kind == DT_STEP_REDUCE_SCATTER)
            st = reduce_scatter(x, s, c, &g, me, out);
        group_free(&g);
    }
    if (st != DT_OK) {
        x->mem->free(out);
        return st;
    }
    if (x->owned) x->mem->free(x->cur);
    x->cur = out;
    x->owned = 1;
    return DT_OK;
}

/* The placements of the step's mesh dims, "S(1)" or "R,P(sum)". */
static void step_placements(const dt_plan *plan, const dt_placement *pl, unsigned mask, char *buf,
                            size_t cap) {
    dt_placement some[DT_MESH_MAX_NDIM];
    int n = 0;
    for (int m = 0; m < plan->mesh_ndim; m++)
        if (mask & (1u << m)) some[n++] = pl[m];
    dt_placements_format(some, n, buf, cap);
}

/* A step run while the rank traces: its collectives name the event that produced the block
 * they read (*src) and the placements they move between; *src becomes the last of them. */
static dt_status run_step_traced(exec *x, const dt_plan_step *s, dt_comm *c, int64_t *src) {
    if (!dt_step_is_collective(s->kind)) return run_step(x, s, c);
    char from[40], to[40];
    step_placements(x->plan, s->before, s->mesh_mask, from, sizeof from);
    step_placements(x->plan, s->after, s->mesh_mask, to, sizeof to);
    dt_trace_coll_site prev = dt_trace_coll_tls;
    dt_trace_coll_tls = (dt_trace_coll_site){.input = *src, .from = from, .to = to};
    dt_trace_last_coll_tls = 0;
    dt_status st = run_step(x, s, c);
    if (dt_trace_last_coll_tls) *src = dt_trace_last_coll_tls;
    dt_trace_coll_tls = prev;
    return st;
}

dt_status dt_plan_execute(const dt_plan *plan, dt_tensor *t, dt_comm *const *comms,
                          dt_tensor **out) {
    exec x = {.plan = plan, .mesh = t->mesh, .ndim = t->ndim, .es = dt_dtype_size(t->dtype),
              .mem = dt_tensor_mem(t), .cur = t->data, .owned = 0};
    dt_ctx_bind(t->mesh->ctx);
    dt_status st = DT_OK;
    const int traced = t->mesh->ctx->trace && dt_trace_is_on(t->mesh->ctx->trace);
    int64_t src = t->trace_src; /* a step without a collective keeps the producer */
    for (int i = 0; i < plan->nsteps && st == DT_OK; i++)
        st = traced ? run_step_traced(&x, &plan->steps[i], comms[i], &src)
                    : run_step(&x, &plan->steps[i], comms[i]);
    if (st == DT_OK) { /* the result owns its data, even when no step copied it */
        int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
        dt_shard_layout(plan->mesh_ndim, plan->mesh_shape, t->mesh->coord, t->ndim, t->shape,
                        plan->dst, shape, off);
        st = own_cur(&x, dt_shape_numel(shape, t->ndim));
    }
    if (st == DT_OK)
        st = dt_tensor_new(t->mesh, t->device, t->dtype, t->ndim, t->shape, plan->dst, x.cur, true,
                           out);
    if (st != DT_OK && x.owned) x.mem->free(x.cur);
    if (st == DT_OK && traced) (*out)->trace_src = src;
    return st;
}
