/* Dependency records in traces: a tensor- and sequence-parallel transformer block, forward and
 * backward on a 2x2 (dp, tp) mesh, traced and parsed back (jansson). Each collective's consumers
 * (the events whose deps list it) are checked against the block's data flow, known here from
 * the calls the test makes; plus ids, deps, collective args, cross-rank sequence numbers and
 * step spans. */
#include <jansson.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "helpers.h"
#include "trace/trace_impl.h"

enum { B = 2, T = 8, C = 16, H = 4, D = C / H, F = 4 * C, RANKS = 4, STEPS = 2 };

/* The tensors of the block, by index. */
enum {
    X,
    G1,
    B1,
    WQ,
    WK,
    WV,
    WO,
    G2,
    B2,
    W1,
    W2, /* input and weights */
    N1,
    N1G,
    PQ,
    VQ,
    Q,
    PK,
    VK,
    K,
    PV,
    VV,
    V,
    Y,
    YT,
    YC,
    A,
    HH,
    N2,
    N2G,
    F1,
    GG,
    M,
    OUT,
    LOSS,
    NT
};

/* One call of the forward: the events it recorded are the ids in (lo, hi]. */
typedef struct call {
    int out, reads[3], nreads;
    int moves; /* an explicit redistribute: its output is a collective's */
    int64_t lo, hi;
} call;

enum { MAXCALLS = 32 };
static call calls[RANKS][STEPS][MAXCALLS];
static int ncalls;
static char dir[256];

static dt_status weight(dt_mesh *mesh, int ndim, const int64_t *shape, const char *pl,
                        unsigned seed, dt_tensor **out) {
    float x[F * C];
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    t_fill(DT_F32, x, n, seed);
    dt_placement p[2];
    int np;
    dt_status st = dt_placements_parse(pl, p, 2, &np);
    if (st == DT_OK)
        st = dt_tensor_distribute(mesh, x, DT_F32, ndim, shape, np, p, DT_ALL_RANKS, out);
    return st == DT_OK ? dt_tensor_set_requires_grad(*out, 1) : st;
}

/* Runs one call and keeps its range; ids come from the rank's recorder. */
#define CALL(expr, o, mv, ...)                                                                     \
    do {                                                                                           \
        call *c_ = &cs[n++];                                                                       \
        int r_[] = {__VA_ARGS__};                                                                  \
        *c_ = (call){.out = (o), .moves = (mv), .nreads = (int)(sizeof r_ / sizeof r_[0])};        \
        memcpy(c_->reads, r_, sizeof r_);                                                          \
        c_->lo = dt_trace_last_id(ctx->trace);                                                     \
        R_OK(expr);                                                                                \
        c_->hi = dt_trace_last_id(ctx->trace);                                                     \
    } while (0)

static dt_status block_step(dt_ctx *ctx, dt_tensor **t, call *cs) {
    int n = 0;
    dt_placement gathered[2] = {dt_shard(0), dt_replicate()};
    int64_t s4[4] = {B, T, H, D}, s3[3] = {B, T, C};
    CALL(dt_layer_norm(t[X], t[G1], t[B1], 1e-5, &t[N1]), N1, 0, X, G1, B1);
    CALL(dt_tensor_redistribute(t[N1], 2, gathered, &t[N1G]), N1G, 1, N1);
    const int w3[3] = {WQ, WK, WV}, p3[3] = {PQ, PK, PV}, v3[3] = {VQ, VK, VV}, h3[3] = {Q, K, V};
    for (int i = 0; i < 3; i++) { /* (B,T,C) -> (B,T,H,D) -> (B,H,T,D), heads sharded */
        CALL(dt_linear(t[N1G], t[w3[i]], NULL, &t[p3[i]]), p3[i], 0, N1G, w3[i]);
        CALL(dt_view(t[p3[i]], 4, s4, &t[v3[i]]), v3[i], 0, p3[i]);
        CALL(dt_transpose(t[v3[i]], 1, 2, &t[h3[i]]), h3[i], 0, v3[i]);
    }
    CALL(dt_sdpa(t[Q], t[K], t[V], 1, &t[Y]), Y, 0, Q, K, V);
    CALL(dt_transpose(t[Y], 1, 2, &t[YT]), YT, 0, Y);
    CALL(dt_view(t[YT], 3, s3, &t[YC]), YC, 0, YT);
    CALL(dt_linear(t[YC], t[WO], NULL, &t[A]), A, 0, YC, WO); /* row parallel: P(sum) on tp */
    CALL(dt_add(t[X], t[A], &t[HH]), HH, 0, X, A);            /* reduce_scatter of A */
    CALL(dt_layer_norm(t[HH], t[G2], t[B2], 1e-5, &t[N2]), N2, 0, HH, G2, B2);
    CALL(dt_tensor_redistribute(t[N2], 2, gathered, &t[N2G]), N2G, 1, N2);
    CALL(dt_linear(t[N2G], t[W1], NULL, &t[F1]), F1, 0, N2G, W1);
    CALL(dt_unary_op(DT_OP_GELU, t[F1], &t[GG]), GG, 0, F1);
    CALL(dt_linear(t[GG], t[W2], NULL, &t[M]), M, 0, GG, W2);
    CALL(dt_add(t[HH], t[M], &t[OUT]), OUT, 0, HH, M);
    CALL(dt_sum(t[OUT], NULL, 0, 0, &t[LOSS]), LOSS, 0, OUT);
    ncalls = n;
    R_OK(dt_backward(t[LOSS]));
    /* As an optimizer's zero_grad: the next step's gradients start afresh (accumulated ones
     * would be read through a local R -> P step, which the placement check cannot follow). */
    for (int i = G1; i <= W2; i++)
        R_OK(dt_tensor_zero_grad(t[i]));
    for (int i = N1; i < NT; i++)
        dt_tensor_release(t[i]), t[i] = NULL;
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    dt_tensor *t[NT] = {0};
    int64_t vc[1] = {C}, cc[2] = {C, C}, fc[2] = {F, C}, cf[2] = {C, F}, x3[3] = {B, T, C};
    R_OK(weight(mesh, 3, x3, "S(0),S(1)", 1, &t[X]));
    R_OK(weight(mesh, 1, vc, "R,R", 2, &t[G1]));
    R_OK(weight(mesh, 1, vc, "R,R", 3, &t[B1]));
    R_OK(weight(mesh, 2, cc, "R,S(0)", 4, &t[WQ]));
    R_OK(weight(mesh, 2, cc, "R,S(0)", 5, &t[WK]));
    R_OK(weight(mesh, 2, cc, "R,S(0)", 6, &t[WV]));
    R_OK(weight(mesh, 2, cc, "R,S(1)", 7, &t[WO]));
    R_OK(weight(mesh, 1, vc, "R,R", 8, &t[G2]));
    R_OK(weight(mesh, 1, vc, "R,R", 9, &t[B2]));
    R_OK(weight(mesh, 2, fc, "R,S(0)", 10, &t[W1]));
    R_OK(weight(mesh, 2, cf, "R,S(1)", 11, &t[W2]));
    R_ERR(dt_trace_set_run_info(ctx, "block", -1, ""), DT_ERR_ARG, "gflops = -1");
    R_OK(dt_trace_set_run_info(ctx, "block", 12.5, "dp=2,tp=2 sequence_parallel"));
    R_OK(dt_trace_start(ctx));
    for (int s = 0; s < STEPS; s++) {
        R_OK(dt_trace_step(ctx, s));
        R_OK(block_step(ctx, t, calls[rank][s]));
    }
    R_OK(dt_trace_stop(ctx)); /* closes the last step's span */
    char path[512];
    snprintf(path, sizeof path, "%s/rank%d.json", dir, rank);
    R_OK(dt_trace_write(ctx, path));
    for (int i = 0; i < NT; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* ---- the trace as read back ----------------------------------------------------------------- */

typedef struct ev {
    int64_t id, step, seq;
    int tid, ndeps, coll;
    int64_t deps[DT_TRACE_MAX_DEPS];
    double ts, dur;
    const char *name, *detail, *op, *kind, *group, *from, *to, *comm;
    json_int_t group_size, bytes_in, bytes_out;
} ev;

typedef struct rank_trace {
    json_t *root;
    ev *e;
    int n;
    double gflops;
} rank_trace;

static const char *str_of(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void load(int r, rank_trace *rt) {
    char path[512];
    snprintf(path, sizeof path, "%s/rank%d.json", dir, r);
    json_error_t err;
    rt->root = json_load_file(path, 0, &err);
    cr_assert(rt->root && json_is_array(rt->root), "%s: %s (line %d)", path, err.text, err.line);
    size_t n = json_array_size(rt->root);
    rt->e = calloc(n, sizeof *rt->e);
    rt->n = 0;
    rt->gflops = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(rt->root, i), *a = json_object_get(o, "args");
        const char *ph = str_of(o, "ph"), *name = str_of(o, "name");
        cr_assert(ph && name && json_is_object(a), "event %zu of rank %d is malformed", i, r);
        cr_assert_eq(json_integer_value(json_object_get(o, "pid")), r, "pid of rank %d", r);
        if (!strcmp(ph, "M")) {
            if (!strcmp(name, "dt_run")) {
                rt->gflops = json_number_value(json_object_get(a, "gflops"));
                cr_assert_str_eq(str_of(a, "layout"), "dp=2,tp=2 sequence_parallel");
            }
            continue;
        }
        ev *e = &rt->e[rt->n++];
        e->tid = (int)json_integer_value(json_object_get(o, "tid"));
        e->ts = json_number_value(json_object_get(o, "ts"));
        e->dur = json_number_value(json_object_get(o, "dur"));
        e->name = name;
        e->detail = str_of(a, "detail");
        json_t *id = json_object_get(a, "id"), *st = json_object_get(a, "step");
        cr_assert(json_is_integer(id), "rank %d: event %s has no id", r, name);
        e->id = json_integer_value(id);
        e->step = json_is_integer(st) ? json_integer_value(st) : -1;
        json_t *deps = json_object_get(a, "deps");
        for (size_t k = 0; deps && k < json_array_size(deps); k++) {
            cr_assert(e->ndeps < DT_TRACE_MAX_DEPS);
            e->deps[e->ndeps++] = json_integer_value(json_array_get(deps, k));
        }
        e->op = str_of(a, "op");
        e->kind = str_of(a, "kind");
        e->coll = e->tid == DT_LANE_COMM || e->tid == DT_LANE_COMM_THREAD;
        if (e->coll) {
            const char *need[] = {"kind", "group", "comm"};
            const char *nums[] = {"group_size", "bytes_in", "bytes_out", "seq"};
            for (int k = 0; k < 3; k++)
                cr_assert(str_of(a, need[k]), "rank %d: collective %lld has no %s", r,
                          (long long)e->id, need[k]);
            for (int k = 0; k < 4; k++)
                cr_assert(json_is_integer(json_object_get(a, nums[k])),
                          "rank %d: collective %lld has no %s", r, (long long)e->id, nums[k]);
            e->group = str_of(a, "group");
            e->comm = str_of(a, "comm");
            e->from = str_of(a, "from");
            e->to = str_of(a, "to");
            e->group_size = json_integer_value(json_object_get(a, "group_size"));
            e->bytes_in = json_integer_value(json_object_get(a, "bytes_in"));
            e->bytes_out = json_integer_value(json_object_get(a, "bytes_out"));
            e->seq = json_integer_value(json_object_get(a, "seq"));
        }
    }
}

static const ev *by_id(const rank_trace *rt, int64_t id) {
    for (int i = 0; i < rt->n; i++)
        if (rt->e[i].id == id) return &rt->e[i];
    return NULL;
}

static int lists(const ev *e, int64_t id) {
    for (int k = 0; k < e->ndeps; k++)
        if (e->deps[k] == id) return 1;
    return 0;
}

/* The events of rank_trace in (lo, hi] on tid. */
static int in_range(const ev *e, const call *c) {
    return e->id > c->lo && e->id <= c->hi;
}

/* Expected consumers of collective id: marks want[i] for the events that should list it. */
static void expect(const rank_trace *rt, int r, int s, const ev *coll, char *want) {
    memset(want, 0, (size_t)rt->n);
    const call *cs = calls[r][s];
    for (int i = 0; i < ncalls; i++) {
        if (!in_range(coll, &cs[i])) continue;
        /* The collectives of the call, in order: each feeds the next; the last feeds the op
         * of the call itself (a move inside dispatch) or the calls that read the output of an
         * explicit redistribute. */
        const ev *next = NULL;
        for (int k = 0; k < rt->n && !next; k++)
            if (rt->e[k].coll && in_range(&rt->e[k], &cs[i]) && rt->e[k].id > coll->id)
                next = &rt->e[k];
        for (int k = 0; k < rt->n; k++) {
            const ev *e = &rt->e[k];
            if (next) {
                want[k] = e == next;
                continue;
            }
            /* (the "redistribute" op event spans the move itself: it reads nothing after) */
            int op_or_kernel = (e->tid == DT_LANE_OPS || e->tid == DT_LANE_COMPUTE) &&
                               strcmp(e->name, "redistribute") != 0;
            if (!cs[i].moves) {
                want[k] = op_or_kernel && in_range(e, &cs[i]);
                continue;
            }
            for (int j = i + 1; j < ncalls; j++)
                for (int q = 0; q < cs[j].nreads; q++)
                    if (cs[j].reads[q] == cs[i].out && op_or_kernel && in_range(e, &cs[j]))
                        want[k] = 1;
        }
        return;
    }
    cr_assert_fail("rank %d: collective %lld is outside every forward call", r,
                   (long long)coll->id);
}

/* The mesh dims of a group's label ("dp", "tp", "dp+tp") as a mask. */
static unsigned dims_of(const char *group) {
    return !strcmp(group, "dp") ? 1u : !strcmp(group, "tp") ? 2u : !strcmp(group, "dp+tp") ? 3u : 0;
}

/* Whether placements text pl ("S(0),R") holds to ("R" or "P(sum),R", one per dim of mask) on
 * the dims of mask. */
static int holds(const char *pl, unsigned mask, const char *to) {
    char a[256], b[64];
    snprintf(a, sizeof a, "%s", pl);
    snprintf(b, sizeof b, "%s", to);
    char *sa = NULL, *sb = NULL, *pa = strtok_r(a, ",", &sa), *pb = strtok_r(b, ",", &sb);
    for (int d = 0; pa; d++, pa = strtok_r(NULL, ",", &sa)) {
        if (!(mask & (1u << d))) continue;
        if (!pb || strcmp(pa, pb)) return 0;
        pb = strtok_r(NULL, ",", &sb);
    }
    return pb == NULL;
}

/* reader lists collective coll: an op (or its kernel, read through the op around it) whose
 * strategy takes some input in coll's target placement on coll's mesh dim, or a collective
 * that moves from it. */
static void check_reader(const rank_trace *t, int r, const ev *coll, const ev *reader) {
    unsigned mask = dims_of(coll->group);
    cr_assert(mask && coll->to, "rank %d: collective %lld on %s has no target", r,
              (long long)coll->id, coll->group);
    if (reader->coll) {
        cr_assert(reader->from && !strcmp(reader->from, coll->to),
                  "rank %d: collective %lld reads %lld's %s as %s", r, (long long)reader->id,
                  (long long)coll->id, coll->to, reader->from ? reader->from : "?");
        return;
    }
    const ev *op = reader;
    if (reader->tid == DT_LANE_COMPUTE) /* the op around the kernel: recorded next after it */
        for (int k = 0; k < t->n; k++)
            if (t->e[k].tid == DT_LANE_OPS && t->e[k].id > reader->id &&
                !strcmp(t->e[k].name, reader->name)) {
                op = &t->e[k];
                break;
            }
    cr_assert(op->tid == DT_LANE_OPS, "rank %d: %lld (%s) lists collective %lld", r,
              (long long)reader->id, reader->name, (long long)coll->id);
    /* The strategy text: "S(0),R | R,S(0) -> S(0),S(2)": inputs split by " | ". */
    char text[256];
    snprintf(text, sizeof text, "%s", op->detail);
    char *arrow = strstr(text, " -> ");
    cr_assert(arrow, "rank %d: op %lld has no strategy text", r, (long long)op->id);
    *arrow = '\0';
    int match = 0;
    for (char *in = text; in && !match;) {
        char *bar = strstr(in, " | ");
        if (bar) *bar = '\0';
        match = holds(in, mask, coll->to);
        in = bar ? bar + 3 : NULL;
    }
    cr_assert(match, "rank %d: %s %lld (-> %s on %s) read by %s %lld whose inputs are %s", r,
              coll->kind, (long long)coll->id, coll->to, coll->group, op->name, (long long)op->id,
              op->detail);
}

Test(trace_deps, block_forward_backward) {
    snprintf(dir, sizeof dir, "/tmp/dt_trace_deps_XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    t_run(RANKS, body, NULL);
    rank_trace rt[RANKS];
    for (int r = 0; r < RANKS; r++)
        load(r, &rt[r]);
    for (int r = 0; r < RANKS; r++) {
        const rank_trace *t = &rt[r];
        cr_assert_float_eq(t->gflops, 12.5, 1e-9, "rank %d: dt_run carries the gflops", r);
        char *want = calloc((size_t)t->n, 1);
        int checked_fwd = 0, gathers = 0, scatters = 0, bwd_colls = 0;
        for (int i = 0; i < t->n; i++) {
            const ev *e = &t->e[i];
            for (int j = 0; j < i; j++)
                cr_assert_neq(t->e[j].id, e->id, "rank %d: id %lld twice", r, (long long)e->id);
            for (int k = 0; k < e->ndeps; k++) {
                const ev *d = by_id(t, e->deps[k]);
                cr_assert(d && d->id < e->id && d->ts <= e->ts + e->dur,
                          "rank %d: event %lld (%s) depends on %lld, not an earlier event", r,
                          (long long)e->id, e->name, (long long)e->deps[k]);
            }
            /* A step stamps only the events inside its span. */
            if (e->step >= 0 && e->tid != DT_LANE_STEP) {
                const ev *span = NULL;
                for (int k = 0; k < t->n; k++)
                    if (t->e[k].tid == DT_LANE_STEP && t->e[k].step == e->step) span = &t->e[k];
                cr_assert(span && e->ts >= span->ts && e->ts + e->dur <= span->ts + span->dur,
                          "rank %d: event %lld of step %lld outside its span", r, (long long)e->id,
                          (long long)e->step);
            }
            for (int k = 0; k < t->n && e->step < 0 && e->tid != DT_LANE_STEP; k++)
                cr_assert(!(t->e[k].tid == DT_LANE_STEP && e->ts >= t->e[k].ts &&
                            e->ts + e->dur <= t->e[k].ts + t->e[k].dur),
                          "rank %d: event %lld inside step %lld's span carries no step", r,
                          (long long)e->id, (long long)t->e[k].step);
            if (!e->coll) continue;
            cr_assert(e->group_size > 0 && (e->bytes_in > 0 || e->bytes_out > 0));
            int s = (int)e->step;
            cr_assert(s >= 0 && s < STEPS, "rank %d: collective %lld has no step", r,
                      (long long)e->id);
            int fwd = e->id <= calls[r][s][ncalls - 1].hi;
            if (fwd) { /* the consumers the block's data flow gives */
                expect(t, r, s, e, want);
                int any = 0;
                const int64_t fwd_end = calls[r][s][ncalls - 1].hi;
                for (int k = 0; k < t->n; k++) {
                    /* Backward reads saved forward tensors too: those readers are checked by
                     * placement (each takes an input as the collective left it). */
                    if (t->e[k].id > fwd_end) {
                        if (lists(&t->e[k], e->id)) check_reader(t, r, e, &t->e[k]);
                        continue;
                    }
                    cr_assert_eq(lists(&t->e[k], e->id), want[k],
                                 "rank %d step %d: %s %lld (%s -> %s): event %lld (%s, tid %d) "
                                 "%s it but should %s",
                                 r, s, e->kind, (long long)e->id, e->from ? e->from : "?",
                                 e->to ? e->to : "?", (long long)t->e[k].id, t->e[k].name,
                                 t->e[k].tid, want[k] ? "does not list" : "lists",
                                 want[k] ? "" : "not");
                    any |= want[k];
                }
                cr_assert(any, "rank %d: forward collective %lld feeds nothing", r,
                          (long long)e->id);
                gathers += !strcmp(e->kind, "all_gather") && e->from && !strcmp(e->from, "S(1)") &&
                           !strcmp(e->to, "R");
                scatters += !strcmp(e->kind, "reduce_scatter") && e->from &&
                            !strcmp(e->from, "P(sum)") && !strcmp(e->to, "S(1)");
                checked_fwd++;
                continue;
            }
            /* Backward: a collective issued by an op's dispatch feeds that op (the op event of
             * its name around it, and its kernel) or the next collective of the same move. */
            bwd_colls++;
            const ev *owner = NULL;
            for (int k = i + 1; k < t->n && !owner && e->op; k++)
                if (t->e[k].tid == DT_LANE_OPS && !strcmp(t->e[k].name, e->op) && t->e[k].op &&
                    t->e[k].ts <= e->ts && /* a dispatched op's */
                    t->e[k].ts + t->e[k].dur >= e->ts + e->dur)
                    owner = &t->e[k];
            if (!owner) { /* a move of autograd's or the gradient sync: checked by placement */
                for (int k = 0; k < t->n; k++)
                    if (lists(&t->e[k], e->id)) check_reader(t, r, e, &t->e[k]);
                continue;
            }
            int listed_by_owner = lists(owner, e->id), by_next = 0, others = 0;
            for (int k = 0; k < t->n; k++) {
                const ev *c = &t->e[k];
                if (!lists(c, e->id) || c == owner) continue;
                if (c->coll && c->ts >= owner->ts && c->id < owner->id)
                    by_next++;
                else if (c->tid == DT_LANE_COMPUTE && c->ts >= owner->ts && c->id < owner->id &&
                         !strcmp(c->name, e->op))
                    ;
                else
                    others++;
            }
            cr_assert(listed_by_owner != (by_next > 0) && others == 0,
                      "rank %d: backward %s %lld of %s: owner lists it %d, next collectives %d, "
                      "others %d",
                      r, e->kind, (long long)e->id, e->op, listed_by_owner, by_next, others);
        }
        /* Per step: the SP all_gathers before the column-parallel matmuls, the reduce_scatters
         * after the row-parallel ones. */
        cr_assert_eq(gathers, 2 * STEPS, "rank %d: %d sequence all_gathers", r, gathers);
        cr_assert_eq(scatters, 2 * STEPS, "rank %d: %d reduce_scatters", r, scatters);
        cr_assert(checked_fwd >= 4 * STEPS && bwd_colls >= 4 * STEPS);
        int steps = 0;
        for (int i = 0; i < t->n; i++)
            steps += t->e[i].tid == DT_LANE_STEP;
        cr_assert_eq(steps, STEPS, "rank %d: %d step spans", r, steps);
        free(want);
    }
    /* The same collective on every member of its group: matched by (comm, seq), alike in kind
     * and bytes, and found on group_size ranks. */
    for (int r = 0; r < RANKS; r++)
        for (int i = 0; i < rt[r].n; i++) {
            const ev *e = &rt[r].e[i];
            if (!e->coll) continue;
            int found = 0;
            for (int q = 0; q < RANKS; q++)
                for (int k = 0; k < rt[q].n; k++) {
                    const ev *o = &rt[q].e[k];
                    if (!o->coll || o->seq != e->seq || strcmp(o->comm, e->comm)) continue;
                    found++;
                    cr_assert(!strcmp(o->kind, e->kind) && o->bytes_in == e->bytes_in &&
                                  o->bytes_out == e->bytes_out && !strcmp(o->group, e->group),
                              "seq %lld on %s: rank %d has %s %lld/%lld B, rank %d %s %lld/%lld",
                              (long long)e->seq, e->group, r, e->kind, (long long)e->bytes_in,
                              (long long)e->bytes_out, q, o->kind, (long long)o->bytes_in,
                              (long long)o->bytes_out);
                }
            cr_assert_eq(found, e->group_size, "rank %d: %s seq %lld on %s found on %d ranks", r,
                         e->kind, (long long)e->seq, e->group, found);
        }
    for (int r = 0; r < RANKS; r++)
        json_decref(rt[r].root), free(rt[r].e);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static int64_t mul_after[2]; /* the last id before each rank's mul */

/* An asynchronous redistribute: its all_gather runs on the comm thread (tid 4) and lists the
 * kernel that made its input; the op that reads the result lists the all_gather, the op that
 * reads only its input does not. */
static dt_status async_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "tp=2", &mesh));
    int64_t s[2] = {8, 4};
    float x[32];
    t_fill(DT_F32, x, 32, 5);
    dt_placement sh[1] = {dt_shard(0)}, rep[1] = {dt_replicate()};
    dt_tensor *a, *b, *y, *z, *w;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, s, 1, sh, DT_ALL_RANKS, &a));
    R_OK(dt_trace_start(ctx));
    R_OK(dt_add(a, a, &b)); /* the kernel the gather reads */
    dt_request *req;
    R_OK(dt_tensor_redistribute_async(b, 1, rep, &req));
    R_OK(dt_add(a, a, &w)); /* reads no gathered data */
    R_OK(dt_request_wait(req, &y));
    int64_t before_mul = dt_trace_last_id(ctx->trace);
    R_OK(dt_mul(y, y, &z)); /* reads it */
    R_OK(dt_trace_stop(ctx));
    char path[512];
    snprintf(path, sizeof path, "%s/async%d.json", dir, dt_ctx_rank(ctx));
    R_OK(dt_trace_write(ctx, path));
    mul_after[dt_ctx_rank(ctx)] = before_mul;
    dt_tensor *all[] = {a, b, y, z, w};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(trace_deps, async_redistribute) {
    snprintf(dir, sizeof dir, "/tmp/dt_trace_deps_XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    t_run(2, async_body, NULL);
    for (int r = 0; r < 2; r++) {
        char path[512];
        snprintf(path, sizeof path, "%s/async%d.json", dir, r);
        json_error_t err;
        json_t *root = json_load_file(path, 0, &err);
        cr_assert(root, "%s: %s", path, err.text);
        int64_t gather = 0, first_add_kernel = 0, gather_dep = -1;
        size_t i;
        json_t *o;
        json_array_foreach(root, i, o) {
            json_t *a = json_object_get(o, "args");
            const char *name = str_of(o, "name");
            int64_t tid = json_integer_value(json_object_get(o, "tid"));
            int64_t id = json_integer_value(json_object_get(a, "id"));
            json_t *deps = json_object_get(a, "deps");
            if (!strcmp(name, "add") && tid == DT_LANE_COMPUTE && !first_add_kernel)
                first_add_kernel = id;
            if (!strcmp(name, "all_gather")) {
                cr_assert_eq(tid, DT_LANE_COMM_THREAD, "rank %d: the async gather on tid %lld", r,
                             (long long)tid);
                gather = id;
                gather_dep =
                    json_array_size(deps) == 1 ? json_integer_value(json_array_get(deps, 0)) : -1;
            }
        }
        cr_assert(gather && first_add_kernel, "rank %d: no gather or add recorded", r);
        cr_assert_eq(gather_dep, first_add_kernel, "rank %d: the gather depends on %lld", r,
                     (long long)gather_dep);
        int readers = 0;
        json_array_foreach(root, i, o) {
            json_t *a = json_object_get(o, "args"), *deps = json_object_get(a, "deps");
            int64_t id = json_integer_value(json_object_get(a, "id"));
            int lists_it = 0;
            for (size_t k = 0; deps && k < json_array_size(deps); k++)
                lists_it |= json_integer_value(json_array_get(deps, k)) == gather;
            const char *name = str_of(o, "name");
            int want = !strcmp(name, "mul") && id > mul_after[r];
            cr_assert_eq(lists_it, want, "rank %d: %s %lld %s the async gather", r, name,
                         (long long)id, lists_it ? "lists" : "does not list");
            readers += lists_it;
        }
        cr_assert_eq(readers, 2, "rank %d: the mul and its kernel read the gather", r);
        json_decref(root);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(trace_deps, bad_arguments) {
    T_ERR(dt_trace_step(NULL, 0), DT_ERR_ARG, "ctx");
    T_ERR(dt_trace_set_run_info(NULL, "x", 1, "y"), DT_ERR_ARG, "ctx");
}
