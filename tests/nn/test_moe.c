/* MoE with expert parallelism (dtensor/moe.h) on real local ranks against a dense per-token
 * loop written here in f64 (its gradients checked by central finite differences): forward
 * and backward, gradients of x, the router weight and w1/w2/w3, for ep = 2 and 4 (and dp x ep)
 * with skewed routing (one expert takes every token, one none), and ep = 1 with tokens and
 * experts replicated there; the plan against a direct
 * count of the router's choices (send buckets, tokens_per_expert, exchanged counts); the
 * auxiliary loss against its formula. The capacity by hand and bad input: test_moe_plan.c. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

#include "moe_ref.h"

/* ---- the cases and where their tokens live ------------------------------------------------ */

typedef struct mcase {
    const char *mesh; /* ep is the last mesh dim */
    int64_t B, T;     /* x (B, T, D) */
    int shard[3];     /* the x dim each mesh dim shards, -1: replicated */
    dt_moe_opts o;
    int f32; /* the layer in f32 (the reference stays f64) */
} mcase;

static const mcase cases[] = {
    {"ep=2", 4, 2, {0}, {.top_k = 2, .score = DT_MOE_SOFTMAX}},
    {"ep=4", 4, 3, {0}, {.top_k = 2, .score = DT_MOE_SIGMOID, .route_norm = 1}},
    {"ep=4", 2, 6, {1}, {.top_k = 3, .score = DT_MOE_SOFTMAX, .route_norm = 1}},
    {"ep=4", 2, 3, {1}, {.top_k = 1, .score = DT_MOE_SOFTMAX}}, /* a rank with no tokens */
    {"dp=2,ep=2", 4, 4, {0, 1}, {.top_k = 2, .score = DT_MOE_SOFTMAX}},
    {"dp=2,ep=2", 8, 2, {0, 0}, {.top_k = 2, .score = DT_MOE_SOFTMAX}}, /* batch over dp x ep */
    /* tokens replicated over tp: the tp ranks repeat the work (no expert tensor parallelism) */
    {"dp=2,tp=2,ep=2", 4, 4, {0, -1, 1}, {.top_k = 2, .score = DT_MOE_SIGMOID, .route_norm = 1}},
    {"ep=2", 4, 3, {0}, {.top_k = 2, .score = DT_MOE_SOFTMAX, .capacity_factor = 1.0}},
    {"ep=4",
     4,
     4,
     {0},
     {.top_k = 2, .score = DT_MOE_SIGMOID, .capacity_factor = 1.25, .drop = DT_MOE_DROP_POSITION}},
    {"ep=2", 4, 2, {0}, {.top_k = 2, .score = DT_MOE_SOFTMAX, .route_norm = 1}, 1},
    /* a one-rank ep dim: tokens and experts Replicate there (a one-rank model's layout) */
    {"ep=1", 4, 2, {-1}, {.top_k = 2, .score = DT_MOE_SOFTMAX}},
    {"dp=2,ep=1", 4, 2, {0, -1}, {.top_k = 2, .score = DT_MOE_SIGMOID, .route_norm = 1}, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The mesh's dim sizes from its text ("dp=2,ep=2"); returns the number of dims. */
static int mesh_dims(const mcase *c, int *shape) {
    int nd = 0;
    for (const char *p = c->mesh; (p = strchr(p, '=')) != NULL; p++)
        shape[nd++] = atoi(p + 1);
    return nd;
}

static int world_of(const mcase *c) {
    int shape[3], nd = mesh_dims(c, shape), n = 1;
    for (int m = 0; m < nd; m++)
        n *= shape[m];
    return n;
}

/* torch.chunk's piece i of n parts of len. */
static void chunk(int64_t len, int parts, int i, int64_t *lo, int64_t *hi) {
    int64_t c = (len + parts - 1) / parts;
    *lo = c * i < len ? c * i : len, *hi = c * (i + 1) < len ? c * (i + 1) : len;
}

/* The global tokens (b * T + t) of the rank at coord, in its local row-major order; mesh dims
 * sharding one dim split it in mesh-dim order (the outer one first). */
static int64_t rank_tokens(const mcase *c, const int *coord, int64_t *tok) {
    int shape[3], nd = mesh_dims(c, shape);
    int64_t lo[2] = {0, 0}, hi[2] = {c->B, c->T};
    for (int m = 0; m < nd; m++) {
        int d = c->shard[m];
        if (d < 0) continue;
        int64_t l, h;
        chunk(hi[d] - lo[d], shape[m], coord[m], &l, &h);
        hi[d] = lo[d] + h, lo[d] += l;
    }
    int64_t n = 0;
    for (int64_t b = lo[0]; b < hi[0]; b++)
        for (int64_t t = lo[1]; t < hi[1]; t++)
            tok[n++] = b * c->T + t;
    return n;
}

/* The coordinate of mesh rank `rank` (row-major); 0 when a replicated dim is not at 0, so each
 * set of tokens is visited once. */
static int coord_of(const mcase *c, int rank, int *coord) {
    int shape[3], nd = mesh_dims(c, shape), first = 1;
    for (int m = nd - 1; m >= 0; m--) {
        coord[m] = rank % shape[m], rank /= shape[m];
        if (c->shard[m] < 0 && coord[m] != 0) first = 0;
    }
    return first;
}

/* The capacity drop, per rank, written from the definition: each expert keeps its
 * C = ceil(cf * Nl * k / E) assignments with the largest gates (ties: earlier first), or its
 * first C in assignment order. */
static void capacity(const mcase *c, ref *r) {
    int k = c->o.top_k, nr = world_of(c);
    memset(r->keep, 1, (size_t)(r->N * k));
    if (c->o.capacity_factor <= 0) return;
    int64_t *tok = malloc(sizeof(int64_t) * (size_t)r->N);
    for (int rank = 0; rank < nr; rank++) {
        int coord[3];
        if (!coord_of(c, rank, coord)) continue;
        int64_t nl = rank_tokens(c, coord, tok);
        int64_t cap = (int64_t)ceil(c->o.capacity_factor * (double)(nl * k) / E);
        for (int e = 0; e < E; e++) {
            int64_t taken = 0;
            for (;;) { /* take the best remaining assignment of e, until cap */
                int64_t best = -1;
                for (int64_t a = 0; a < nl * k; a++) {
                    int64_t g = tok[a / k] * k + a % k;
                    if (r->choice[g] != e || r->keep[g] != 1) continue;
                    if (best < 0)
                        best = g;
                    else if (c->o.drop == DT_MOE_DROP_PROBS && r->gate[g] > r->gate[best])
                        best = g;
                }
                if (best < 0) break;
                r->keep[best] = taken < cap ? 2 : 0; /* 2: taken, kept */
                taken++;
            }
        }
    }
    for (int64_t i = 0; i < r->N * k; i++)
        r->keep[i] = r->keep[i] != 0;
    free(tok);
}

/* What every rank compares against, made on the main thread. */
typedef struct expect {
    const mcase *c;
    ref r;
    double *wgt, *out, *g[5];
} expect;

static void expect_make(const mcase *c, int k, expect *x) {
    int64_t N = c->B * c->T;
    ref *r = &x->r;
    *r = (ref){.N = N, .o = c->o};
    r->x = malloc(sizeof(double) * (size_t)(N * D)), r->rw = malloc(sizeof(double) * E * D);
    r->w1 = malloc(sizeof(double) * E * D * H), r->w2 = malloc(sizeof(double) * E * H * D);
    r->w3 = malloc(sizeof(double) * E * D * H);
    r->choice = malloc(sizeof(int64_t) * (size_t)(N * c->o.top_k));
    r->score = malloc(sizeof(double) * (size_t)(N * E));
    r->gate = malloc(sizeof(double) * (size_t)(N * c->o.top_k));
    r->keep = malloc((size_t)(N * c->o.top_k));
    uint64_t s = 100 + (uint64_t)k;
    for (int64_t i = 0; i < N * D; i++) /* feature 0 near 1: the skew's handle */
        r->x[i] = i % D == 0 ? 1 + 0.25 * moe_rnd(s, (uint64_t)i) : 0.5 * moe_rnd(s, (uint64_t)i);
    for (int i = 0; i < E * D; i++)
        r->rw[i] = i % D ? moe_rnd(s + 1, (uint64_t)i) : i / D == ALL ? 6 : i / D == NONE ? -6 : 0;
    for (int i = 0; i < E * D * H; i++)
        r->w1[i] = 0.5 * moe_rnd(s + 2, (uint64_t)i), r->w2[i] = 0.5 * moe_rnd(s + 3, (uint64_t)i),
        r->w3[i] = 0.5 * moe_rnd(s + 4, (uint64_t)i);
    x->c = c;
    x->wgt = malloc(sizeof(double) * (size_t)(N * D)),
    x->out = malloc(sizeof(double) * (size_t)(N * D));
    for (int64_t i = 0; i < N * D; i++)
        x->wgt[i] = moe_rnd(s + 5, (uint64_t)i);
    int64_t n[5] = {N * D, E * D, E * D * H, E * H * D, E * D * H};
    for (int i = 0; i < 5; i++)
        x->g[i] = malloc(sizeof(double) * (size_t)n[i]);
    moe_ref_route(r);
    capacity(c, r);
    moe_ref_forward(r, x->wgt, x->out);
    moe_ref_gradients(r, x->wgt, x->g);
    moe_ref_check_fd(r, x->wgt, x->g);
    /* the skew is there: every token picked ALL, none picked NONE */
    int64_t all = 0, none = 0;
    for (int64_t i = 0; i < N * c->o.top_k; i++)
        all += r->choice[i] == ALL, none += r->choice[i] == NONE;
    cr_assert(all == N && none == 0, "case %d: expert %d got %lld of %lld tokens, %d got %lld", k,
              ALL, (long long)all, (long long)N, NONE, (long long)none);
    int64_t drops = 0; /* and a capacity drops something */
    for (int64_t i = 0; i < N * c->o.top_k; i++)
        drops += !r->keep[i];
    cr_assert((drops > 0) == (c->o.capacity_factor > 0), "case %d: %lld assignments dropped", k,
              (long long)drops);
}

static void expect_free(expect *x) {
    ref *r = &x->r;
    free(r->x), free(r->rw), free(r->w1), free(r->w2), free(r->w3), free(r->choice);
    free(r->score), free(r->gate), free(r->keep), free(x->wgt), free(x->out);
    for (int i = 0; i < 5; i++)
        free(x->g[i]);
}

/* ---- on the ranks -------------------------------------------------------------------------- */

/* f64 agrees to rounding, f32 to its precision. */
static dt_status near(int k, const char *what, const double *got, const double *want, size_t n) {
    double tol = cases[k].f32 ? 1e-4 : 1e-10;
    for (size_t i = 0; i < n; i++)
        R_CHECK(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                "case %d: %s[%zu] = %.17g, the dense loop gives %.17g", k, what, i, got[i],
                want[i]);
    return DT_OK;
}

/* The plan of this rank against a direct count of the reference's choices; and how many
 * all_to_all calls the router's own backward makes (dispatch's choice for its ops). */
static dt_status check_plan(const expect *x, int k, dt_mesh *mesh, dt_tensor *xt, dt_tensor *rw,
                            uint64_t *router_a2a) {
    const mcase *c = x->c;
    const ref *r = &x->r;
    int tk = c->o.top_k, nd = dt_mesh_ndim(mesh), epd = nd - 1, ep = dt_mesh_dim_size(mesh, epd);
    int coord[3];
    for (int m = 0; m < nd; m++)
        coord[m] = dt_mesh_coord(mesh, m);
    int me = coord[epd];
    int64_t El = E / ep, tok[64], ptok[64];
    dt_tensor *gates, *experts;
    R_OK(dt_moe_router(xt, rw, &c->o, &gates, &experts, NULL));
    dt_tensor_info ei;
    R_OK(dt_tensor_info_get(experts, &ei));
    int64_t nl = rank_tokens(c, coord, tok);
    R_CHECK((int64_t)ei.local_numel == nl * tk, "case %d: %zu local ids for %lld tokens", k,
            ei.local_numel, (long long)nl);
    const int64_t *ids = ei.local_data;
    for (int64_t a = 0; a < nl * tk; a++)
        R_CHECK(ids[a] == r->choice[tok[a / tk] * tk + a % tk],
                "case %d: local assignment %lld picked expert %lld, the dense loop %lld", k,
                (long long)a, (long long)ids[a], (long long)r->choice[tok[a / tk] * tk + a % tk]);
    dt_moe_plan *plan;
    R_OK(dt_moe_plan_create(experts, gates, E, epd, &c->o, &plan));
    dt_moe_plan_info in;
    R_OK(dt_moe_plan_info_get(plan, &in));
    R_CHECK(in.ep == ep && in.me == me && in.experts == E && in.local_experts == El &&
                in.tokens == nl && in.top_k == tk,
            "case %d: plan header", k);
    int64_t cap =
        c->o.capacity_factor > 0 ? (int64_t)ceil(c->o.capacity_factor * (double)(nl * tk) / E) : -1;
    R_CHECK(in.capacity == cap, "case %d: capacity %lld, want %lld", k, (long long)in.capacity,
            (long long)cap);
    /* direct counts: routed and kept per expert, the send buckets in order, by expert */
    int64_t routed[E] = {0}, kept[E] = {0}, sent[4] = {0}, n = 0, dropped = 0;
    for (int e = 0; e < E; e++)
        for (int64_t a = 0; a < nl * tk; a++) {
            int64_t g = tok[a / tk] * tk + a % tk;
            if (r->choice[g] != e) continue;
            routed[e]++, dropped += !r->keep[g];
            if (!r->keep[g]) continue;
            kept[e]++, sent[e / El]++;
            R_CHECK(n < in.nsend && in.send_order[n] == a,
                    "case %d: send row %lld is assignment %lld, want %lld (expert %d)", k,
                    (long long)n, (long long)(n < in.nsend ? in.send_order[n] : -1), (long long)a,
                    e);
            n++;
        }
    R_CHECK(n == in.nsend && dropped == in.dropped,
            "case %d: %lld rows sent (want %lld), %lld "
            "dropped (want %lld)",
            k, (long long)in.nsend, (long long)n, (long long)in.dropped, (long long)dropped);
    for (int e = 0; e < E; e++)
        R_CHECK(in.routed_per_expert[e] == routed[e] && in.tokens_per_expert[e] == kept[e],
                "case %d: expert %d routed %lld kept %lld, want %lld and %lld", k, e,
                (long long)in.routed_per_expert[e], (long long)in.tokens_per_expert[e],
                (long long)routed[e], (long long)kept[e]);
    for (int q = 0; q < ep; q++)
        R_CHECK(in.send_counts[q] == sent[q], "case %d: %lld rows to ep rank %d, want %lld", k,
                (long long)in.send_counts[q], q, (long long)sent[q]);
    /* what arrives: each ep peer's kept assignments to this rank's experts */
    int64_t nrecv = 0;
    for (int q = 0; q < ep; q++) {
        int pc[3] = {coord[0], coord[1], coord[2]}, rows = 0;
        pc[epd] = q;
        int64_t pn = rank_tokens(c, pc, ptok);
        for (int64_t j = 0; j < El; j++) {
            int64_t want = 0;
            for (int64_t a = 0; a < pn * tk; a++) {
                int64_t g = ptok[a / tk] * tk + a % tk;
                want += r->keep[g] && r->choice[g] == me * El + j;
            }
            R_CHECK(in.recv_per_expert[q * El + j] == want,
                    "case %d: %lld rows from ep rank %d for expert %lld, want %lld", k,
                    (long long)in.recv_per_expert[q * El + j], q, (long long)(me * El + j),
                    (long long)want);
            rows += (int)want;
        }
        R_CHECK(in.recv_counts[q] == rows, "case %d: recv_counts[%d]", k, q);
        nrecv += rows;
    }
    R_CHECK(in.nrecv == nrecv, "case %d: nrecv %lld, want %lld", k, (long long)in.nrecv,
            (long long)nrecv);
    R_OK(dt_moe_plan_destroy(plan));
    dt_tensor *gl;
    R_OK(dt_sum(gates, NULL, 0, 0, &gl));
    R_OK(dt_comm_stats_reset(dt_mesh_ctx(mesh)));
    R_OK(dt_backward(gl));
    *router_a2a = t_issued(dt_mesh_ctx(mesh), DT_COLL_ALL_TO_ALL);
    dt_tensor_release(gates), dt_tensor_release(experts), dt_tensor_release(gl);
    return DT_OK;
}

/* A tensor of dtype dt from f64 host data, and a tensor back in f64. */
static dt_status make(dt_mesh *m, const double *h, size_t n, dt_dtype dt, int ndim,
                      const int64_t *shape, const dt_placement *pl, dt_tensor **out) {
    float *f = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)h[i];
    dt_status st = dt_tensor_distribute(m, dt == DT_F32 ? (const void *)f : (const void *)h, dt,
                                        ndim, shape, dt_mesh_ndim(m), pl, DT_ALL_RANKS, out);
    free(f);
    return st;
}

static dt_status full_f64(dt_tensor *t, double *out, size_t n) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    if (info.dtype == DT_F64) return dt_tensor_full_tensor(t, out, n * 8);
    float *f = malloc(n * sizeof(float) + 4);
    dt_status st = dt_tensor_full_tensor(t, f, n * sizeof(float));
    for (size_t i = 0; st == DT_OK && i < n; i++)
        out[i] = f[i];
    free(f);
    return st;
}

static dt_status body(dt_ctx *ctx, void *p) {
    const expect *x = p;
    const mcase *c = x->c;
    int k = (int)(c - cases);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int nd = dt_mesh_ndim(mesh), epd = nd - 1;
    dt_placement px[3], pw[3], rep[3] = {dt_replicate(), dt_replicate(), dt_replicate()};
    for (int m = 0; m < nd; m++) {
        px[m] = c->shard[m] < 0 ? dt_replicate() : dt_shard(c->shard[m]);
        pw[m] = m == epd && c->shard[m] >= 0 ? dt_shard(0) : dt_replicate();
    }
    int64_t sx[3] = {c->B, c->T, D}, sr[2] = {E, D}, s13[3] = {E, D, H}, s2[3] = {E, H, D};
    size_t nx = (size_t)(c->B * c->T * D), n[5] = {nx, E * D, E * D * H, E * H * D, E * D * H};
    dt_dtype dt = c->f32 ? DT_F32 : DT_F64;
    dt_tensor *t[6], *out, *prod, *loss;
    R_OK(make(mesh, x->r.x, n[0], dt, 3, sx, px, &t[0]));
    R_OK(make(mesh, x->r.rw, n[1], dt, 2, sr, rep, &t[1]));
    R_OK(make(mesh, x->r.w1, n[2], dt, 3, s13, pw, &t[2]));
    R_OK(make(mesh, x->r.w2, n[3], dt, 3, s2, pw, &t[3]));
    R_OK(make(mesh, x->r.w3, n[4], dt, 3, s13, pw, &t[4]));
    R_OK(make(mesh, x->wgt, n[0], dt, 3, sx, px, &t[5]));
    for (int i = 0; i < 5; i++)
        R_OK(dt_tensor_set_requires_grad(t[i], 1));
    dt_tensor *px0, *pr0; /* the plan check's own leaves: its backward must not touch t's */
    uint64_t ra = 0;
    R_OK(dt_tensor_distribute(mesh, x->r.x, DT_F64, 3, sx, nd, px, DT_ALL_RANKS, &px0));
    R_OK(dt_tensor_distribute(mesh, x->r.rw, DT_F64, 2, sr, nd, rep, DT_ALL_RANKS, &pr0));
    R_OK(dt_tensor_set_requires_grad(px0, 1));
    R_OK(dt_tensor_set_requires_grad(pr0, 1));
    dt_status st = check_plan(x, k, mesh, px0, pr0, &ra);
    if (st != DT_OK) return st;
    dt_tensor_release(px0), dt_tensor_release(pr0);
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_moe_forward(t[0], t[1], t[2], t[3], t[4], epd, &c->o, &out, NULL));
    uint64_t f = t_issued(ctx, DT_COLL_ALL_TO_ALL);
    R_CHECK(f == 3,
            "case %d: the forward made %llu all_to_all calls, want 3 (counts, rows there "
            "and back)",
            k, (unsigned long long)f);
    double *got = malloc(sizeof(double) * E * D * H);
    R_OK(full_f64(out, got, nx));
    if ((st = near(k, "out", got, x->out, nx)) != DT_OK) return st;
    R_OK(dt_mul(out, t[5], &prod));
    R_OK(dt_sum(prod, NULL, 0, 0, &loss));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_backward(loss));
    uint64_t b = t_issued(ctx, DT_COLL_ALL_TO_ALL);
    R_CHECK(b == 2 + ra,
            "case %d: the backward made %llu all_to_all calls, want 2 and the "
            "router's %llu",
            k, (unsigned long long)b, (unsigned long long)ra);
    static const char *const names[5] = {"dx", "drouter_w", "dw1", "dw2", "dw3"};
    for (int i = 0; i < 5; i++) {
        R_CHECK(dt_tensor_grad(t[i]) != NULL, "case %d: %s missing", k, names[i]);
        R_OK(full_f64(dt_tensor_grad(t[i]), got, n[i]));
        if ((st = near(k, names[i], got, x->g[i], n[i])) != DT_OK) return st;
    }
    free(got);
    for (int i = 0; i < 6; i++)
        dt_tensor_release(t[i]);
    dt_tensor_release(out), dt_tensor_release(prod), dt_tensor_release(loss);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(moe, equals_dense_loop_forward_and_backward) {
    for (int k = 0; k < NCASES; k++) {
        expect x;
        expect_make(&cases[k], k, &x);
        t_run(world_of(&cases[k]), body, &x);
        expect_free(&x);
    }
}

/* ---- the auxiliary loss -------------------------------------------------------------------- */

/* E * sum_e f_e P_e from the definition. */
static double aux_direct(ref *r) {
    moe_ref_route(r);
    int k = r->o.top_k;
    double f[E] = {0}, P[E] = {0}, aux = 0;
    for (int64_t i = 0; i < r->N * k; i++)
        f[r->choice[i]] += 1.0 / (double)(r->N * k);
    for (int64_t t = 0; t < r->N; t++) {
        double s = 0;
        for (int e = 0; e < E; e++)
            s += r->score[t * E + e];
        for (int e = 0; e < E; e++)
            P[e] += r->score[t * E + e] / s / (double)r->N;
    }
    for (int e = 0; e < E; e++)
        aux += E * f[e] * P[e];
    return aux;
}

typedef struct aux_arg {
    expect x;
    double aux, drw[E * D]; /* the direct value and its central differences in router_w */
} aux_arg;

static dt_status aux_body(dt_ctx *ctx, void *p) {
    aux_arg *a = p;
    const mcase *c = a->x.c;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int64_t sx[3] = {c->B, c->T, D}, sr[2] = {E, D};
    dt_placement px = dt_shard(c->shard[0]), rep = dt_replicate();
    dt_tensor *x, *rw, *gates, *experts, *scores, *aux;
    R_OK(dt_tensor_distribute(mesh, a->x.r.x, DT_F64, 3, sx, 1, &px, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, a->x.r.rw, DT_F64, 2, sr, 1, &rep, DT_ALL_RANKS, &rw));
    R_OK(dt_tensor_set_requires_grad(rw, 1));
    R_OK(dt_moe_router(x, rw, &c->o, &gates, &experts, &scores));
    R_OK(dt_moe_aux_loss(scores, experts, &aux));
    double v, g[E * D];
    R_OK(dt_tensor_full_tensor(aux, &v, sizeof v));
    R_CHECK(fabs(v - a->aux) <= 1e-12 * (1 + fabs(a->aux)), "aux %.17g, direct %.17g", v, a->aux);
    R_OK(dt_backward(aux));
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(rw), g, sizeof g));
    for (int i = 0; i < E * D; i++)
        R_CHECK(fabs(g[i] - a->drw[i]) <= 1e-6 * (1 + fabs(a->drw[i])),
                "d aux / d router_w[%d] = %.12g, finite differences %.12g", i, g[i], a->drw[i]);
    dt_tensor *all[] = {x, rw, gates, experts, scores, aux};
    for (int i = 0; i < 6; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(moe, aux_loss_equals_its_formula) {
    for (int k = 0; k < 2; k++) { /* softmax on ep = 2, sigmoid on ep = 4 */
        aux_arg *a = calloc(1, sizeof *a);
        expect_make(&cases[k], k, &a->x);
        a->aux = aux_direct(&a->x.r);
        cr_assert(a->aux > 0, "aux %g", a->aux);
        for (int i = 0; i < E * D; i++) {
            double v = a->x.r.rw[i], h = 1e-6;
            a->x.r.rw[i] = v + h;
            double lp = aux_direct(&a->x.r);
            a->x.r.rw[i] = v - h;
            double lm = aux_direct(&a->x.r);
            a->x.r.rw[i] = v;
            a->drw[i] = (lp - lm) / (2 * h);
        }
        t_run(k ? 4 : 2, aux_body, a);
        expect_free(&a->x);
        free(a);
    }
}
