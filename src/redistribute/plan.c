/* Minimum-cost redistribution plans: Dijkstra over the states "one placement per mesh dim".
 *
 * An edge changes one mesh dim (or, fused, several mesh dims holding the same placement in
 * the same way, as one collective over their flattened group). Nested sharding fixes which
 * edges exist: a tensor dim sharded by several mesh dims is split by the lowest first, so
 * only the highest of them can gather or re-shard it, and a new shard of a dim goes below
 * (at a higher mesh dim than) the ones already there. A fused edge must see the same
 * torch.chunk layout over the flattened group as the nested one, or it is not offered. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/box.h"
#include "core/check.h"
#include "redistribute/plan_impl.h"

/* 4 bits per mesh dim: 0 = R, 1 + op = P(op) for sum..min, 5 + d = S(d), 13 + i = the
 * search's i-th NormP (at most three distinct p per search: they come from src and dst). */
typedef uint32_t state_t;
#define NORM_CODE 13
#define MAX_ORDS 3

typedef struct search {
    int mnd;
    const int *ms;
    int nd;
    const int64_t *shape;
    size_t es;
    int integer; /* i32/i64: an avg truncates, so P(avg) -> P(sum) is no local step */
    dt_cost_model model;
    int opts[DT_MESH_MAX_NDIM][3], nopts[DT_MESH_MAX_NDIM]; /* per mesh dim: R, src, dst */
    double ords[MAX_ORDS];                                  /* the p of each NormP code */
    int nords;
} search;

static int enc(const search *S, dt_placement p) {
    if (p.kind == DT_PLACEMENT_REPLICATE) return 0;
    if (p.kind == DT_PLACEMENT_SHARD) return 5 + p.dim;
    if (p.op != DT_REDUCE_NORM) return 1 + (int)p.op;
    for (int i = 0; i < S->nords; i++)
        if (S->ords[i] == p.norm_ord) return NORM_CODE + i;
    return -1; /* not in the table: dt_plan_search registers every p first */
}

static dt_placement dec(const search *S, int c) {
    if (c == 0) return dt_replicate();
    if (c < 5) return dt_partial((dt_reduce_op)(c - 1));
    if (c >= NORM_CODE) return dt_norm_partial(S->ords[c - NORM_CODE]);
    return dt_shard(c - 5);
}

static state_t pack(const search *S, const dt_placement *p) {
    state_t s = 0;
    for (int m = 0; m < S->mnd; m++) s |= (state_t)enc(S, p[m]) << (4 * m);
    return s;
}

static void unpack(const search *S, state_t s, dt_placement *p) {
    for (int m = 0; m < S->mnd; m++) p[m] = dec(S, (int)((s >> (4 * m)) & 15u));
}

/* Mesh dims of size > 1 that shard tensor dim d (size-1 dims never split anything). */
static unsigned sharders(const search *S, const dt_placement *p, int d) {
    unsigned mask = 0;
    for (int m = 0; m < S->mnd; m++)
        if (p[m].kind == DT_PLACEMENT_SHARD && p[m].dim == d && S->ms[m] > 1) mask |= 1u << m;
    return mask;
}

static int lowest(unsigned mask) { return __builtin_ctz(mask); }
static int highest(unsigned mask) { return 31 - __builtin_clz(mask); }

/* Every dim of mask is above every dim of other. */
static int above(unsigned mask, unsigned other) {
    return !other || !mask || lowest(mask) > highest(other);
}

/* M is the innermost part of the nest that shards d. */
static int innermost(unsigned shard_mask, unsigned M) {
    return (shard_mask & M) == M && above(M, shard_mask & ~M);
}

/* Partials reduce in mesh-dim order: P(op) at top may go only if no lower mesh dim holds a
 * Partial of another kind (NormP of another p is another kind). */
static int partial_ok(const search *S, const dt_placement *p, int top, dt_placement a) {
    for (int m = 0; m < top; m++)
        if (p[m].kind == DT_PLACEMENT_PARTIAL && !dt_placement_equal(p[m], a) && S->ms[m] > 1)
            return 0;
    return 1;
}

static void chunk(int64_t len, int64_t n, int64_t c, int64_t *lo, int64_t *size) {
    int64_t ch = (len + n - 1) / n;
    int64_t a = ch * c < len ? ch * c : len, b = ch * (c + 1) < len ? ch * (c + 1) : len;
    *lo = a;
    *size = b - a;
}

/* The nested split of tensor dim d over the dims of M (in state p) equals the flat split over
 * their flattened group, for every outer chunk length the other sharders leave. */
static int flat_is_nested(const search *S, const dt_placement *p, int d, unsigned M) {
    unsigned outer = sharders(S, p, d) & ~M;
    int od[DT_MESH_MAX_NDIM], md[DT_MESH_MAX_NDIM], no = 0, nm = 0;
    int64_t nouter = 1, group = 1, seen[8];
    int nseen = 0;
    for (int m = 0; m < S->mnd; m++) {
        if (outer & (1u << m)) od[no++] = m, nouter *= S->ms[m];
        if (M & (1u << m)) md[nm++] = m, group *= S->ms[m];
    }
    for (int64_t k = 0; k < nouter; k++) {
        int64_t len = S->shape[d], rem = k, lo, sz;
        int64_t coords[DT_MESH_MAX_NDIM];
        for (int i = no - 1; i >= 0; i--) coords[i] = rem % S->ms[od[i]], rem /= S->ms[od[i]];
        for (int i = 0; i < no; i++) chunk(len, S->ms[od[i]], coords[i], &lo, &len);
        int dup = 0;
        for (int i = 0; i < nseen; i++) dup |= seen[i] == len;
        if (dup) continue;
        if (nseen < 8) seen[nseen++] = len;
        for (int64_t f = 0; f < group; f++) {
            int64_t nl = len, noff = 0, r2 = f, flo, fsz;
            for (int i = nm - 1; i >= 0; i--) coords[i] = r2 % S->ms[md[i]], r2 /= S->ms[md[i]];
            for (int i = 0; i < nm; i++) {
                chunk(nl, S->ms[md[i]], coords[i], &lo, &sz);
                noff += lo;
                nl = sz;
            }
            chunk(len, group, f, &flo, &fsz);
            if (nl != fsz || (nl && noff != flo)) return 0;
        }
    }
    return 1;
}

/* What moving the dims of M from p to q is, or -1 when it is not one step. */
static int classify(const search *S, const dt_placement *p, const dt_placement *q, unsigned M) {
    int m0 = lowest(M), top = highest(M), fused = M != (1u << m0);
    dt_placement a = p[m0], b = q[m0];
    if (a.kind == DT_PLACEMENT_SHARD) {
        if (!innermost(sharders(S, p, a.dim), M)) return -1;
        if (fused && !flat_is_nested(S, p, a.dim, M)) return -1;
        if (b.kind == DT_PLACEMENT_REPLICATE) return DT_STEP_ALL_GATHER;
        if (b.kind == DT_PLACEMENT_SHARD && above(M, sharders(S, p, b.dim)) &&
            (!fused || flat_is_nested(S, q, b.dim, M)))
            return DT_STEP_ALL_TO_ALL;
        return -1;
    }
    if (a.kind == DT_PLACEMENT_REPLICATE) {
        if (fused) return -1;
        if (b.kind == DT_PLACEMENT_SHARD) return above(M, sharders(S, p, b.dim)) ? DT_STEP_SLICE : -1;
        /* A pending norm is only ever reduced: no local step splits a value into parts whose
         * norm it is (the value's sign would be lost). */
        return b.op == DT_REDUCE_NORM ? -1 : DT_STEP_TO_PARTIAL;
    }
    if (b.kind == DT_PLACEMENT_PARTIAL) {
        /* sum -> avg multiplies each part by n (exact); avg -> sum divides it, which for
         * integers truncates each part: sum_i trunc(a_i / n) != trunc(sum_i a_i / n). */
        int avg_sum = (a.op == DT_REDUCE_AVG && b.op == DT_REDUCE_SUM && !S->integer) ||
                      (a.op == DT_REDUCE_SUM && b.op == DT_REDUCE_AVG);
        return !fused && avg_sum ? DT_STEP_SCALE : -1;
    }
    if (!partial_ok(S, p, top, a)) return -1;
    if (b.kind == DT_PLACEMENT_REPLICATE) return DT_STEP_ALL_REDUCE;
    if (!above(M, sharders(S, p, b.dim))) return -1;
    if (fused && !flat_is_nested(S, q, b.dim, M)) return -1;
    return DT_STEP_REDUCE_SCATTER;
}

/* Elements the busiest rank receives in a step from p to q, for a step of the given kind
 * over a group of n. A rank's block is a product over tensor dims, and each tensor dim's
 * extent depends only on the mesh dims that shard it; so the dims the step leaves alone
 * contribute their largest extent (at coordinate 0) as a factor, and only the mesh dims that
 * shard the dims it changes are enumerated (sampled at 0, 1, n-2 and n-1, where torch.chunk
 * sizes change, when they span more than 4096 coordinates). */
static double max_received(const search *S, const dt_placement *p, const dt_placement *q,
                           int kind, double n) {
    int zero[DT_MESH_MAX_NDIM] = {0};
    int64_t bs[DT_MAX_NDIM], bo[DT_MAX_NDIM], as[DT_MAX_NDIM], ao[DT_MAX_NDIM];
    dt_shard_layout(S->mnd, S->ms, zero, S->nd, S->shape, p, bs, bo);
    if (kind == DT_STEP_ALL_REDUCE || kind == DT_STEP_REDUCE_SCATTER) { /* ring, by input */
        double in = (double)dt_shape_numel(bs, S->nd);
        return (kind == DT_STEP_ALL_REDUCE ? 2 : 1) * in * (n - 1) / n;
    }
    unsigned changed = 0; /* tensor dims whose sharding differs */
    for (int m = 0; m < S->mnd; m++) {
        if (dt_placement_equal(p[m], q[m])) continue;
        if (p[m].kind == DT_PLACEMENT_SHARD) changed |= 1u << p[m].dim;
        if (q[m].kind == DT_PLACEMENT_SHARD) changed |= 1u << q[m].dim;
    }
    double rest = 1;
    for (int d = 0; d < S->nd; d++)
        if (!(changed & (1u << d))) rest *= (double)bs[d];
    int dims[DT_MESH_MAX_NDIM], nd = 0, sizes[DT_MESH_MAX_NDIM];
    int64_t total = 1;
    for (int m = 0; m < S->mnd; m++) {
        int hits = (p[m].kind == DT_PLACEMENT_SHARD && (changed & (1u << p[m].dim))) ||
                   (q[m].kind == DT_PLACEMENT_SHARD && (changed & (1u << q[m].dim)));
        if (S->ms[m] > 1 && hits) {
            dims[nd++] = m;
            total *= S->ms[m];
        }
    }
    int sample = total > 4096;
    int64_t combos = 1;
    for (int i = 0; i < nd; i++)
        combos *= sizes[i] = sample && S->ms[dims[i]] > 4 ? 4 : S->ms[dims[i]];
    double worst = 0;
    for (int64_t k = 0; k < combos; k++) {
        int coord[DT_MESH_MAX_NDIM] = {0};
        int64_t rem = k;
        for (int i = nd - 1; i >= 0; i--) {
            int c = (int)(rem % sizes[i]), size = S->ms[dims[i]];
            rem /= sizes[i];
            coord[dims[i]] = !sample || size <= 4 ? c : (c < 2 ? c : size - 4 + c);
        }
        dt_shard_layout(S->mnd, S->ms, coord, S->nd, S->shape, p, bs, bo);
        dt_shard_layout(S->mnd, S->ms, coord, S->nd, S->shape, q, as, ao);
        double out = 1, overlap = 1;
        for (int d = 0; d < S->nd; d++) {
            if (!(changed & (1u << d))) continue;
            int64_t lo = bo[d] > ao[d] ? bo[d] : ao[d];
            int64_t hi = bo[d] + bs[d] < ao[d] + as[d] ? bo[d] + bs[d] : ao[d] + as[d];
            out *= (double)as[d];
            overlap *= hi > lo ? (double)(hi - lo) : 0;
        }
        /* gather and all_to_all: all of the new block but what the rank already holds */
        if (out - overlap > worst) worst = out - overlap;
    }
    return rest * worst;
}

static void price(const search *S, const dt_placement *p, const dt_placement *q, int kind,
                  unsigned M, dt_plan_step *st) {
    memset(st, 0, sizeof *st);
    st->kind = (dt_step_kind)kind;
    st->mesh_mask = M;
    st->group_size = 1;
    for (int m = 0; m < S->mnd; m++)
        if (M & (1u << m)) st->group_size *= S->ms[m];
    memcpy(st->before, p, sizeof(dt_placement) * (size_t)S->mnd);
    memcpy(st->after, q, sizeof(dt_placement) * (size_t)S->mnd);
    if (!dt_step_is_collective((dt_step_kind)kind)) return;
    double n = st->group_size, elems = max_received(S, p, q, kind, n);
    st->send_bytes = st->recv_bytes = (size_t)ceil(elems) * S->es;
    st->cost_us = S->model.latency_us + S->model.step_us * ceil(log2(n)) +
                  (double)st->recv_bytes / (S->model.bandwidth_gbps * 1e3);
}

/* ---- Dijkstra ---------------------------------------------------------------------------- */

typedef struct node {
    state_t s;
    double cost;
    int ncoll, nsteps, prev, done;
    dt_plan_step step; /* the edge that reached it */
} node;

typedef struct graph {
    node *nodes;
    int n, cap;
    int *table; /* open addressing: node index + 1, 0 = empty */
    int tcap;
    int *heap, nheap, hcap;
} graph;

#define MAX_STATES (1 << 21)

static unsigned hash(state_t s) { return (s * 2654435761u) ^ (s >> 15); }

static int better(const node *a, const node *b) {
    if (a->cost != b->cost) return a->cost < b->cost;
    if (a->ncoll != b->ncoll) return a->ncoll < b->ncoll;
    if (a->nsteps != b->nsteps) return a->nsteps < b->nsteps;
    return a->s < b->s;
}

static dt_status grow_table(graph *g) {
    int tcap = g->tcap ? g->tcap * 2 : 1024;
    int *t = calloc((size_t)tcap, sizeof *t);
    if (!t) return dt_error(DT_ERR_NOMEM, "redistribute planner: out of memory");
    for (int i = 0; i < g->n; i++) {
        unsigned h = hash(g->nodes[i].s) & (unsigned)(tcap - 1);
        while (t[h]) h = (h + 1) & (unsigned)(tcap - 1);
        t[h] = i + 1;
    }
    free(g->table);
    g->table = t;
    g->tcap = tcap;
    return DT_OK;
}

/* Index of the node for s, made (with infinite cost) if new. */
static dt_status find(graph *g, state_t s, int *idx_out) {
    if (2 * (g->n + 1) > g->tcap) DT_CHECK(grow_table(g));
    unsigned h = hash(s) & (unsigned)(g->tcap - 1);
    while (g->table[h]) {
        if (g->nodes[g->table[h] - 1].s == s) {
            *idx_out = g->table[h] - 1;
            return DT_OK;
        }
        h = (h + 1) & (unsigned)(g->tcap - 1);
    }
    if (g->n == MAX_STATES)
        return dt_error(DT_ERR_UNSUPPORTED, "redistribute planner: more than %d states to search; "
                                            "use fewer distinct placements", MAX_STATES);
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 256;
        node *nn = realloc(g->nodes, sizeof *nn * (size_t)cap);
        if (!nn) return dt_error(DT_ERR_NOMEM, "redistribute planner: out of memory");
        g->nodes = nn;
        g->cap = cap;
    }
    g->nodes[g->n] = (node){.s = s, .cost = INFINITY, .prev = -1};
    g->table[h] = ++g->n;
    *idx_out = g->n - 1;
    return DT_OK;
}

static int heap_less(const graph *g, int a, int b) {
    return better(&g->nodes[g->heap[a]], &g->nodes[g->heap[b]]);
}

static void heap_swap(graph *g, int a, int b) {
    int t = g->heap[a];
    g->heap[a] = g->heap[b];
    g->heap[b] = t;
}

static dt_status heap_push(graph *g, int idx) {
    if (g->nheap == g->hcap) {
        int cap = g->hcap ? g->hcap * 2 : 256;
        int *h = realloc(g->heap, sizeof *h * (size_t)cap);
        if (!h) return dt_error(DT_ERR_NOMEM, "redistribute planner: out of memory");
        g->heap = h;
        g->hcap = cap;
    }
    int i = g->nheap++;
    g->heap[i] = idx;
    while (i && heap_less(g, i, (i - 1) / 2)) heap_swap(g, i, (i - 1) / 2), i = (i - 1) / 2;
    return DT_OK;
}

static int heap_pop(graph *g) {
    int top = g->heap[0];
    g->heap[0] = g->heap[--g->nheap];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < g->nheap && heap_less(g, l, m)) m = l;
        if (r < g->nheap && heap_less(g, r, m)) m = r;
        if (m == i) break;
        heap_swap(g, i, m);
        i = m;
    }
    return top;
}

static dt_status relax(graph *g, const search *S, int from, const dt_placement *p,
                       const dt_placement *q, int kind, unsigned M) {
    int to;
    DT_CHECK(find(g, pack(S, q), &to));
    node cand = g->nodes[from];
    node *dst = &g->nodes[to];
    if (dst->done) return DT_OK;
    price(S, p, q, kind, M, &cand.step);
    cand.s = dst->s;
    cand.cost += cand.step.cost_us;
    cand.ncoll += dt_step_is_collective((dt_step_kind)kind);
    cand.nsteps += 1;
    cand.prev = from;
    cand.done = 0;
    if (!better(&cand, dst)) return DT_OK;
    *dst = cand;
    return heap_push(g, to);
}

/* Every edge out of node idx. */
static dt_status expand(graph *g, const search *S, int idx) {
    dt_placement p[DT_MESH_MAX_NDIM], q[DT_MESH_MAX_NDIM];
    unpack(S, g->nodes[idx].s, p);
    for (int m = 0; m < S->mnd; m++) {
        for (int o = 0; o < S->nopts[m]; o++) {
            if (S->opts[m][o] == enc(S, p[m])) continue;
            memcpy(q, p, sizeof q);
            q[m] = dec(S, S->opts[m][o]);
            int kind = S->ms[m] == 1 ? DT_STEP_RELABEL : classify(S, p, q, 1u << m);
            if (kind >= 0) DT_CHECK(relax(g, S, idx, p, q, kind, 1u << m));
        }
    }
    return DT_OK;
}

/* All mesh dims of M hold the same placement. */
static int same_on(const dt_placement *p, unsigned M) {
    int first = lowest(M);
    for (int m = first + 1; m < DT_MESH_MAX_NDIM; m++)
        if ((M & (1u << m)) && !dt_placement_equal(p[m], p[first])) return 0;
    return 1;
}

/* Replaces runs of steps by one collective over their mesh dims flattened, where that is
 * valid and the model says it is cheaper: [S(0),S(0)] -> [R,R] is one all_gather over 4
 * ranks, not two, and gather-gather-all_to_all-slice-slice is one all_to_all over 8. A run
 * qualifies when its mesh dims hold one placement before it and one after it. Fusing after
 * the search, not during it, keeps a fused collective from winning on latency alone where
 * the unfused route moves less data. */
static void fuse(const search *S, dt_plan_step *steps, int *nsteps) {
    for (;;) {
        int best_i = -1, best_j = -1;
        double best_saving = 0;
        dt_plan_step best;
        for (int i = 0; i < *nsteps; i++) {
            unsigned M = 0;
            double cost = 0;
            for (int j = i; j < *nsteps; j++) {
                if (steps[j].kind == DT_STEP_RELABEL) break;
                M |= steps[j].mesh_mask;
                cost += steps[j].cost_us;
                if (j == i || !same_on(steps[i].before, M) || !same_on(steps[j].after, M)) continue;
                int kind = classify(S, steps[i].before, steps[j].after, M);
                if (kind < 0 || !dt_step_is_collective((dt_step_kind)kind)) continue;
                dt_plan_step f;
                price(S, steps[i].before, steps[j].after, kind, M, &f);
                /* Strictly cheaper: rounding must not decide a tie. */
                if (cost - f.cost_us > best_saving + 1e-9 * (cost + 1)) {
                    best_saving = cost - f.cost_us;
                    best_i = i;
                    best_j = j;
                    best = f;
                }
            }
        }
        if (best_i < 0) return;
        steps[best_i] = best;
        memmove(&steps[best_i + 1], &steps[best_j + 1],
                sizeof *steps * (size_t)(*nsteps - best_j - 1));
        *nsteps -= best_j - best_i;
    }
}

static void add_opt(search *S, int m, int code) {
    for (int i = 0; i < S->nopts[m]; i++)
        if (S->opts[m][i] == code) return;
    S->opts[m][S->nopts[m]++] = code;
}

dt_status dt_plan_search(int mesh_ndim, const int *mesh_shape, int ndim, const int64_t *shape,
                         dt_dtype dtype, const dt_placement *src, const dt_placement *dst,
                         const dt_cost_model *model, dt_plan **plan_out) {
    search S = {.mnd = mesh_ndim, .ms = mesh_shape, .nd = ndim, .shape = shape,
                .es = dt_dtype_size(dtype), .integer = dtype == DT_I32 || dtype == DT_I64,
                .model = model ? *model : dt_cost_model_default()};
    /* A mesh dim only ever holds its source placement, its target one, or R: every route
     * passes through those (Partial to Partial of another kind through R, shard to shard
     * directly), and other placements never make a plan cheaper. */
    for (int m = 0; m < 2 * mesh_ndim; m++) {
        dt_placement p = m < mesh_ndim ? src[m] : dst[m - mesh_ndim];
        if (p.kind != DT_PLACEMENT_PARTIAL || p.op != DT_REDUCE_NORM || enc(&S, p) >= 0) continue;
        if (S.nords == MAX_ORDS)
            return dt_error(DT_ERR_UNSUPPORTED, "redistribute planner: more than %d distinct "
                                                "NormP(p) in one plan", MAX_ORDS);
        S.ords[S.nords++] = p.norm_ord;
    }
    for (int m = 0; m < mesh_ndim; m++) {
        add_opt(&S, m, 0);
        add_opt(&S, m, enc(&S, src[m]));
        add_opt(&S, m, enc(&S, dst[m]));
    }
    graph g = {0};
    state_t goal = pack(&S, dst);
    int start, at = -1;
    dt_status st = find(&g, pack(&S, src), &start);
    if (st == DT_OK) {
        g.nodes[start].cost = 0;
        st = heap_push(&g, start);
    }
    while (st == DT_OK && g.nheap) {
        int idx = heap_pop(&g);
        if (g.nodes[idx].done) continue;
        g.nodes[idx].done = 1;
        if (g.nodes[idx].s == goal) {
            at = idx;
            break;
        }
        st = expand(&g, &S, idx);
    }
    dt_plan *plan = NULL;
    if (st == DT_OK && at < 0) { /* R everywhere reaches every state but a NormP one */
        char a[256], b[256];
        dt_placements_format(src, mesh_ndim, a, sizeof a);
        dt_placements_format(dst, mesh_ndim, b, sizeof b);
        st = dt_error(DT_ERR_PLACEMENT, "redistribute: no route from %s to %s: a pending norm "
                                        "(NormP) is only ever reduced, never made, and Partials "
                                        "reduce in mesh-dim order", a, b);
    }
    if (st == DT_OK && !(plan = calloc(1, sizeof *plan)))
        st = dt_error(DT_ERR_NOMEM, "redistribute planner: out of memory");
    if (st == DT_OK) {
        atomic_init(&plan->refs, 1);
        plan->nsteps = g.nodes[at].nsteps;
        plan->steps = calloc((size_t)(plan->nsteps ? plan->nsteps : 1), sizeof *plan->steps);
        if (!plan->steps) {
            free(plan);
            plan = NULL;
            st = dt_error(DT_ERR_NOMEM, "redistribute planner: out of memory");
        }
    }
    if (st == DT_OK) {
        for (int i = plan->nsteps - 1, k = at; i >= 0; i--, k = g.nodes[k].prev)
            plan->steps[i] = g.nodes[k].step;
        fuse(&S, plan->steps, &plan->nsteps);
        plan->cost_us = 0;
        plan->ncollectives = 0;
        for (int i = 0; i < plan->nsteps; i++) {
            plan->cost_us += plan->steps[i].cost_us;
            plan->ncollectives += dt_step_is_collective(plan->steps[i].kind);
        }
        plan->mesh_ndim = mesh_ndim;
        memcpy(plan->mesh_shape, mesh_shape, sizeof(int) * (size_t)mesh_ndim);
        plan->ndim = ndim;
        if (ndim) memcpy(plan->shape, shape, sizeof(int64_t) * (size_t)ndim);
        plan->dtype = dtype;
        memcpy(plan->src, src, sizeof(dt_placement) * (size_t)mesh_ndim);
        memcpy(plan->dst, dst, sizeof(dt_placement) * (size_t)mesh_ndim);
        *plan_out = plan;
    }
    free(g.nodes);
    free(g.table);
    free(g.heap);
    return st;
}
