/* dt_tensor_redistribute_to on 4 real local ranks, world = pp=2 x tp=2: between a mesh and
 * another of a different shape over the same ranks, between the two pipeline stages'
 * sub-meshes (disjoint ranks), between a mesh and its sub-meshes, and between meshes equal by
 * value; even, uneven and empty shards, Partial on either side. Expected values come from the
 * unsharded tensor: every target rank's block is cut from it with dt_shard_layout, and the
 * gradient of sum(y * w) is w (independent of the move). The messages each rank sends are the
 * plan's, after the argument check's (each target rank outside the source mesh and the source
 * mesh's first rank trade one message each way). Also: meshes compared by value in op dispatch, and a two-stage pipeline. The plans
 * alone are tested in test_xplan.c. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

/* The meshes of the world, made alike on every rank: A = pp=2,tp=2; B = 4 ranks in a row;
 * C, D = the tp sub-meshes of stage pp=0 (ranks 0,1) and pp=1 (ranks 2,3); E = the pp
 * sub-mesh at tp=0 (ranks 0,2); F = another 2x2 over the same ranks (equal to A). */
enum { A, B, C, D, E, F, NMESH };

typedef struct world {
    dt_mesh *m[NMESH];
} world;

static dt_status world_make(dt_ctx *ctx, world *w) {
    const char *tp[1] = {"tp"}, *pp[1] = {"pp"};
    int at0[2] = {0, 0}, at1[2] = {1, 0};
    R_OK(dt_mesh_create_str(ctx, "pp=2,tp=2", &w->m[A]));
    R_OK(dt_mesh_create_str(ctx, "w=4", &w->m[B]));
    R_OK(dt_mesh_submesh_at(w->m[A], tp, 1, at0, &w->m[C]));
    R_OK(dt_mesh_submesh_at(w->m[A], tp, 1, at1, &w->m[D]));
    R_OK(dt_mesh_submesh_at(w->m[A], pp, 1, at0, &w->m[E]));
    R_OK(dt_mesh_create_str(ctx, "a=2,b=2", &w->m[F]));
    return DT_OK;
}

static void world_free(world *w) {
    for (int i = 0; i < NMESH; i++) dt_mesh_release(w->m[i]);
}

typedef struct xcase {
    int src_mesh;
    const char *src;
    int dst_mesh;
    const char *dst;
    int ndim;
    int64_t shape[3];
} xcase;

static const xcase cases[] = {
    /* A [S(0),S(0)] -> B [S(0)] on (8, 6), then uneven and empty shards between the two shapes. */
    {A, "S(0),S(0)", B, "S(0)", 2, {8, 6}},
    {A, "S(0),S(0)", B, "S(0)", 2, {5, 3}},
    {A, "S(0),S(1)", B, "S(1)", 2, {3, 5}},
    {B, "S(1)", A, "R,S(0)", 2, {5, 7}},
    {B, "S(0)", A, "S(1),S(0)", 3, {2, 3, 2}},
    {A, "R,R", B, "S(0)", 2, {1, 3}},
    /* Pipeline hand-off between disjoint stages, Partial on either side, a scalar. */
    {C, "S(0)", D, "S(1)", 2, {5, 3}},
    {C, "P(sum)", D, "S(0)", 2, {5, 3}},
    {C, "R", D, "P(sum)", 2, {4, 3}},
    {C, "S(1)", D, "P(avg)", 2, {4, 3}},
    {C, "R", D, "R", 0, {0}},
    /* Mesh to sub-mesh and back, and sub-meshes that share one rank (rank 3 is in neither). */
    {A, "S(0),S(1)", C, "S(1)", 2, {7, 5}},
    {A, "P(sum),S(0)", D, "R", 2, {5, 2}},
    {C, "S(0)", A, "S(1),R", 2, {6, 5}},
    {E, "S(1)", B, "S(0)", 2, {3, 6}},
    {C, "S(0)", E, "S(0)", 2, {5, 4}},
    /* Meshes equal by value: a same-mesh plan, the result on the target's mesh object. */
    {A, "P(sum),S(0)", F, "S(1),P(avg)", 2, {4, 6}},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int in_mesh(const dt_mesh *m) { return dt_mesh_rank(m) >= 0; }

/* Ranks of the union of both meshes take part; the others skip the case. */
static int takes_part(const world *w, const xcase *c) {
    return in_mesh(w->m[c->src_mesh]) || in_mesh(w->m[c->dst_mesh]);
}

static dt_status parse(const char *text, const dt_mesh *m, dt_placement *pl) {
    int n;
    R_OK(dt_placements_parse(text, pl, DT_MESH_MAX_NDIM, &n));
    R_CHECK(n == dt_mesh_ndim(m), "placements \"%s\" for a %d-D mesh", text, dt_mesh_ndim(m));
    return DT_OK;
}

/* A tensor of value full in placements pl on m; on a rank outside m one that holds nothing. */
static dt_status make(dt_mesh *m, const double *full, const xcase *c, const dt_placement *pl,
                      dt_tensor **out) {
    int mnd = dt_mesh_ndim(m);
    if (in_mesh(m))
        return dt_tensor_distribute(m, full, DT_F64, c->ndim, c->shape, mnd, pl, DT_ALL_RANKS, out);
    return dt_tensor_zeros(m, DT_F64, c->ndim, c->shape, mnd, pl, out);
}

/* This rank's block of y must be cut from full as its spec says (Partial by the convention:
 * P(sum) kept at coordinate 0, zeros elsewhere; P(avg) kept everywhere). */
static dt_status check_block(int k, dt_tensor *y, const double *full, const xcase *c) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(y, &info));
    dt_mesh *m = info.mesh;
    if (!in_mesh(m)) {
        R_CHECK(info.local_numel == 0, "case %d: a rank outside the target holds %zu elements", k,
                info.local_numel);
        return DT_OK;
    }
    int coord[DT_MESH_MAX_NDIM], zero = 0;
    for (int d = 0; d < info.mesh_ndim; d++) {
        coord[d] = dt_mesh_coord(m, d);
        zero |= info.placements[d].kind == DT_PLACEMENT_PARTIAL &&
                info.placements[d].op == DT_REDUCE_SUM && coord[d] != 0;
    }
    int64_t ls[DT_MAX_NDIM], off[DT_MAX_NDIM];
    int ms[DT_MESH_MAX_NDIM];
    for (int d = 0; d < info.mesh_ndim; d++) ms[d] = dt_mesh_dim_size(m, d);
    R_OK(dt_shard_layout(info.mesh_ndim, ms, coord, c->ndim, c->shape, info.placements, ls, off));
    size_t n = info.local_numel;
    double *got = malloc(n * 8 + 8);
    R_OK(dt_tensor_local_to_host(y, got, n * 8));
    dt_status st = DT_OK;
    for (size_t i = 0; i < n && st == DT_OK; i++) {
        size_t g = 0, rest = i; /* local index -> global index */
        int64_t idx[DT_MAX_NDIM];
        for (int d = c->ndim - 1; d >= 0; d--) idx[d] = (int64_t)(rest % (size_t)ls[d]), rest /= (size_t)ls[d];
        for (int d = 0; d < c->ndim; d++) g = g * (size_t)c->shape[d] + (size_t)(idx[d] + off[d]);
        double want = zero ? 0 : full[g];
        if (got[i] != want)
            st = t_fail(__FILE__, __LINE__, "case %d: rank %d's element %zu (global %zu) is %g, "
                                            "want %g", k, dt_ctx_rank(dt_mesh_ctx(m)), i, g, got[i],
                        want);
    }
    free(got);
    return st;
}

static size_t numel_of(const xcase *c) {
    size_t n = 1;
    for (int d = 0; d < c->ndim; d++) n *= (size_t)c->shape[d];
    return n;
}

/* Forward: the blocks, and the messages this rank sent are the plan's. */
static dt_status forward_case(dt_ctx *ctx, world *w, int k) {
    const xcase *c = &cases[k];
    dt_mesh *sm = w->m[c->src_mesh], *dm = w->m[c->dst_mesh];
    dt_placement sp[DT_MESH_MAX_NDIM], dp[DT_MESH_MAX_NDIM];
    R_OK(parse(c->src, sm, sp));
    R_OK(parse(c->dst, dm, dp));
    size_t n = numel_of(c);
    double *full = malloc(n * 8);
    for (size_t i = 0; i < n; i++) full[i] = t_value(100 + (uint64_t)k, i);
    dt_tensor *x, *y;
    R_OK(make(sm, full, c, sp, &x));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_tensor_redistribute_to(x, dm, dt_mesh_ndim(dm), dp, &y));
    uint64_t sends = t_issued(ctx, DT_COLL_SEND), recvs = t_issued(ctx, DT_COLL_RECV);
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(y, &info));
    R_CHECK(info.mesh == dm, "case %d: the result lives on another mesh object", k);
    dt_status st = check_block(k, y, full, c);
    if (st != DT_OK) return st;
    if (!dt_mesh_equal(sm, dm)) { /* what the plan says this rank sends and receives */
        int sr[4], dr[4];
        dt_mesh_desc S = {.ndim = dt_mesh_ndim(sm), .ranks = sr}, Dd = {.ndim = dt_mesh_ndim(dm),
                                                                        .ranks = dr};
        for (int d = 0; d < S.ndim; d++) S.shape[d] = dt_mesh_dim_size(sm, d);
        for (int d = 0; d < Dd.ndim; d++) Dd.shape[d] = dt_mesh_dim_size(dm, d);
        for (int r = 0; r < dt_mesh_nranks(sm); r++) R_OK(dt_mesh_world_rank(sm, r, &sr[r]));
        for (int r = 0; r < dt_mesh_nranks(dm); r++) R_OK(dt_mesh_world_rank(dm, r, &dr[r]));
        dt_xplan *p;
        R_OK(dt_xplan_create(&S, &Dd, c->ndim, c->shape, DT_F64, sp, dp, NULL, &p));
        uint64_t want_s = 0, want_r = 0;
        int me = dt_ctx_rank(ctx);
        for (int i = 0; i < dt_xplan_ntransfers(p); i++) {
            dt_transfer t;
            R_OK(dt_xplan_transfer_get(p, i, &t));
            want_s += t.from == me && t.to != me;
            want_r += t.to == me && t.from != me;
        }
        dt_xplan_destroy(p);
        /* Before them, the arguments are compared: each target rank outside the source mesh
         * sends its description to the source mesh's first rank and hears the verdict back. */
        int outside = 0;
        for (int r = 0; r < dt_mesh_nranks(dm); r++) {
            int in_src = 0;
            for (int q = 0; q < dt_mesh_nranks(sm); q++) in_src |= sr[q] == dr[r];
            outside += !in_src;
            if (!in_src && dr[r] == me) want_s++, want_r++;
        }
        if (me == sr[0]) want_s += (uint64_t)outside, want_r += (uint64_t)outside;
        R_CHECK(sends == want_s && recvs == want_r,
                "case %d: rank %d sent %llu and received %llu messages, the plan and the "
                "argument check say %llu and %llu",
                k, me, (unsigned long long)sends, (unsigned long long)recvs,
                (unsigned long long)want_s, (unsigned long long)want_r);
        /* Case 0 moves nothing between ranks: every block stays where it is. */
        R_CHECK(k != 0 || sends + recvs == 0, "case 0: %llu messages",
                (unsigned long long)(sends + recvs));
    }
    dt_tensor_release(x), dt_tensor_release(y);
    free(full);
    return DT_OK;
}

static dt_placement unpartial(dt_placement p) {
    return p.kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : p;
}

/* Backward: loss = sum(y * w) on the target mesh; d loss / d x = w whatever the move. Ranks
 * outside the target run dt_backward_with on the empty y, ranks outside the source mark the
 * empty x requires_grad, so every rank of the union records and replays the move. */
static dt_status backward_case(dt_ctx *ctx, world *w, int k) {
    (void)ctx;
    const xcase *c = &cases[k];
    dt_mesh *sm = w->m[c->src_mesh], *dm = w->m[c->dst_mesh];
    dt_placement sp[DT_MESH_MAX_NDIM], dp[DT_MESH_MAX_NDIM], wp[DT_MESH_MAX_NDIM];
    R_OK(parse(c->src, sm, sp));
    R_OK(parse(c->dst, dm, dp));
    for (int m = 0; m < dt_mesh_ndim(dm); m++) wp[m] = unpartial(dp[m]);
    size_t n = numel_of(c);
    double *xb = malloc(n * 8), *wb = malloc(n * 8), *gb = malloc(n * 8);
    for (size_t i = 0; i < n; i++) xb[i] = t_value(200 + (uint64_t)k, i), wb[i] = t_value(300, i);
    dt_tensor *x, *y, *wt, *prod, *loss;
    R_OK(make(sm, xb, c, sp, &x));
    R_OK(dt_tensor_set_requires_grad(x, 1));
    R_OK(dt_tensor_redistribute_to(x, dm, dt_mesh_ndim(dm), dp, &y));
    R_CHECK(dt_tensor_requires_grad(y), "case %d: y does not require grad", k);
    if (in_mesh(dm)) {
        R_OK(make(dm, wb, c, wp, &wt));
        R_OK(dt_mul(y, wt, &prod));
        R_OK(dt_sum(prod, NULL, 0, 0, &loss));
        R_OK(dt_backward(loss));
        dt_tensor_release(wt), dt_tensor_release(prod), dt_tensor_release(loss);
    } else {
        dt_tensor *g;
        R_OK(dt_tensor_zeros(dm, DT_F64, c->ndim, c->shape, dt_mesh_ndim(dm), wp, &g));
        R_OK(dt_backward_with(y, g));
        dt_tensor_release(g);
    }
    dt_tensor *gx = dt_tensor_grad(x);
    R_CHECK(gx != NULL, "case %d: x got no gradient", k);
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(gx, &info));
    R_CHECK(info.mesh == sm || dt_mesh_equal(info.mesh, sm), "case %d: x's gradient lives on "
                                                             "another mesh", k);
    for (int m = 0; m < dt_mesh_ndim(sm); m++)
        R_CHECK(dt_placement_equal(info.placements[m], sp[m]),
                "case %d: the gradient's placement on mesh dim %d differs from x's", k, m);
    if (in_mesh(sm)) {
        R_OK(dt_tensor_full_tensor(gx, gb, n * 8));
        for (size_t i = 0; i < n; i++)
            R_CHECK(gb[i] == wb[i], "case %d: d loss / d x [%zu] = %g, want w = %g", k, i, gb[i],
                    wb[i]);
    } else {
        R_CHECK(info.local_numel == 0, "case %d: an outside rank's gradient holds data", k);
    }
    dt_tensor_release(x), dt_tensor_release(y);
    free(xb), free(wb), free(gb);
    return DT_OK;
}

static dt_status cases_body(dt_ctx *ctx, void *arg) {
    int backward = *(int *)arg;
    world w;
    R_OK(world_make(ctx, &w));
    for (int k = 0; k < NCASES; k++) {
        if (!takes_part(&w, &cases[k])) continue;
        dt_status st = backward ? backward_case(ctx, &w, k) : forward_case(ctx, &w, k);
        if (st != DT_OK) return st;
    }
    world_free(&w);
    return DT_OK;
}

Test(xmesh, forward_blocks_and_messages) {
    int backward = 0;
    t_run(4, cases_body, &backward);
}

Test(xmesh, backward_is_the_reverse_move) {
    int backward = 1;
    t_run(4, cases_body, &backward);
}

/* Meshes compare by value: made alike over the same ranks they are one mesh for ops; another
 * shape is not. Sub-meshes made either way are equal. */
static dt_status equal_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    world w;
    R_OK(world_make(ctx, &w));
    const char *tp[1] = {"tp"};
    dt_mesh *own;
    R_OK(dt_mesh_submesh(w.m[A], tp, 1, &own));
    int stage = dt_mesh_coord(w.m[A], 0);
    R_CHECK(dt_mesh_equal(w.m[A], w.m[F]) && !dt_mesh_equal(w.m[A], w.m[B]), "A, B, F");
    R_CHECK(dt_mesh_equal(own, w.m[stage ? D : C]) && !dt_mesh_equal(own, w.m[stage ? C : D]),
            "the own tp sub-mesh");
    R_CHECK(!dt_mesh_equal(w.m[C], w.m[E]) && !dt_mesh_equal(w.m[A], NULL), "C, E, NULL");
    R_CHECK((dt_mesh_rank(w.m[C]) >= 0) == (stage == 0), "membership of C");
    int64_t shape[2] = {6, 4};
    double a[24], b[24], s[24];
    for (int i = 0; i < 24; i++) a[i] = t_value(1, (size_t)i), b[i] = t_value(2, (size_t)i);
    dt_placement pa[2] = {dt_shard(0), dt_replicate()}, pf[2] = {dt_replicate(), dt_shard(1)},
                 pb[1] = {dt_shard(0)};
    dt_tensor *ta, *tf, *tb, *sum;
    R_OK(dt_tensor_distribute(w.m[A], a, DT_F64, 2, shape, 2, pa, DT_ALL_RANKS, &ta));
    R_OK(dt_tensor_distribute(w.m[F], b, DT_F64, 2, shape, 2, pf, DT_ALL_RANKS, &tf));
    R_OK(dt_tensor_distribute(w.m[B], b, DT_F64, 2, shape, 1, pb, DT_ALL_RANKS, &tb));
    R_OK(dt_add(ta, tf, &sum));
    R_OK(dt_tensor_full_tensor(sum, s, sizeof s));
    for (int i = 0; i < 24; i++) R_CHECK(s[i] == a[i] + b[i], "a + b [%d] = %g", i, s[i]);
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(sum, &info));
    R_CHECK(info.mesh == w.m[A], "the sum lives on input 0's mesh");
    dt_tensor *bad = T_SENTINEL(dt_tensor *);
    R_ERR(dt_add(ta, tb, &bad), DT_ERR_MESH, "input 1 lives on another mesh");
    R_CHECK(bad == T_SENTINEL(dt_tensor *), "out set on failure");
    /* Ops on a mesh this rank is not in run nothing and hold nothing. */
    dt_tensor *z, *z2;
    R_OK(dt_tensor_ones(w.m[D], DT_F64, 2, shape, 1, (dt_placement[]){dt_shard(0)}, &z));
    R_OK(dt_add(z, z, &z2));
    if (stage == 0) {
        R_OK(dt_tensor_info_get(z2, &info));
        R_CHECK(info.local_numel == 0, "outside D: %zu elements", info.local_numel);
        dt_comm *comm = T_SENTINEL(dt_comm *);
        R_ERR(dt_mesh_dim_comm(w.m[D], 0, &comm), DT_ERR_MESH, "is not in this mesh");
    }
    dt_tensor_release(ta), dt_tensor_release(tf), dt_tensor_release(tb);
    dt_tensor_release(sum), dt_tensor_release(z), dt_tensor_release(z2);
    dt_mesh_release(own);
    world_free(&w);
    return DT_OK;
}

Test(xmesh, meshes_compare_by_value) { t_run(4, equal_body, NULL); }

/* Bad arguments name themselves; nothing is handed back. */
static dt_status errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    world w;
    R_OK(world_make(ctx, &w));
    int64_t shape[1] = {4};
    dt_placement r = dt_replicate();
    dt_tensor *x, *y = T_SENTINEL(dt_tensor *);
    R_OK(dt_tensor_zeros(w.m[B], DT_F32, 1, shape, 1, &r, &x));
    R_ERR(dt_tensor_redistribute_to(x, NULL, 1, &r, &y), DT_ERR_ARG, "dst_mesh is NULL");
    R_ERR(dt_tensor_redistribute_to(x, w.m[A], 1, &r, &y), DT_ERR_PLACEMENT, "");
    R_ERR(dt_tensor_redistribute_to(x, w.m[A], 2, (dt_placement[]){dt_shard(1), dt_replicate()},
                                    &y),
          DT_ERR_PLACEMENT, "S(1)");
    R_CHECK(y == T_SENTINEL(dt_tensor *), "out set on failure");
    dt_mesh *sub = T_SENTINEL(dt_mesh *);
    R_ERR(dt_mesh_submesh_at(w.m[A], (const char *[]){"tp"}, 1, (int[]){2, 0}, &sub), DT_ERR_ARG,
          "coord[0] = 2");
    R_CHECK(sub == T_SENTINEL(dt_mesh *), "out set on failure");
    dt_tensor_release(x);
    world_free(&w);
    return DT_OK;
}

Test(xmesh, errors) { t_run(4, errors_body, NULL); }

/* ---- a two-stage pipeline on dp=2 x pp=2 x tp=2 ------------------------------------------
 * Stage 0 (pp=0, its (dp, tp) sub-mesh) computes h = x @ W0, hands h to stage 1's sub-mesh,
 * which computes loss = sum(h @ W1). The loss and both weights' gradients equal the
 * unpipelined model's (the same ops, every tensor replicated on the whole mesh). Stage-0 ranks
 * run their backward with dt_backward_with on the handed-off h they do not hold. */
static dt_status pipeline_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh, *st[2];
    R_OK(dt_mesh_create_str(ctx, "dp=2,pp=2,tp=2", &mesh));
    const char *dims[2] = {"dp", "tp"};
    for (int s = 0; s < 2; s++) R_OK(dt_mesh_submesh_at(mesh, dims, 2, (int[]){0, s, 0}, &st[s]));
    int stage = dt_mesh_coord(mesh, 1);
    enum { N = 6, K = 5, M = 4 };
    int64_t sx[2] = {N, K}, s0[2] = {K, M}, s1[2] = {M, 3}, sh[2] = {N, M};
    double x[N * K], w0[K * M], w1[M * 3], g0[K * M], g1[M * 3], r0[K * M], r1[M * 3];
    for (int i = 0; i < N * K; i++) x[i] = t_value(21, (size_t)i);
    for (int i = 0; i < K * M; i++) w0[i] = t_value(22, (size_t)i);
    for (int i = 0; i < M * 3; i++) w1[i] = t_value(23, (size_t)i);
    /* The unpipelined model. */
    dt_placement rrr[3] = {dt_replicate(), dt_replicate(), dt_replicate()};
    dt_tensor *X, *W0, *W1, *H, *Y, *L;
    R_OK(dt_tensor_distribute(mesh, x, DT_F64, 2, sx, 3, rrr, DT_ALL_RANKS, &X));
    R_OK(dt_tensor_distribute(mesh, w0, DT_F64, 2, s0, 3, rrr, DT_ALL_RANKS, &W0));
    R_OK(dt_tensor_distribute(mesh, w1, DT_F64, 2, s1, 3, rrr, DT_ALL_RANKS, &W1));
    R_OK(dt_tensor_set_requires_grad(W0, 1));
    R_OK(dt_tensor_set_requires_grad(W1, 1));
    R_OK(dt_mm(X, W0, &H));
    R_OK(dt_mm(H, W1, &Y));
    R_OK(dt_sum(Y, NULL, 0, 0, &L));
    R_OK(dt_backward(L));
    double ref_loss;
    R_OK(dt_tensor_full_tensor(L, &ref_loss, 8));
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(W0), r0, sizeof r0));
    R_OK(dt_tensor_full_tensor(dt_tensor_grad(W1), r1, sizeof r1));
    /* The pipeline: activations S(0) over dp and S(1) over tp. */
    dt_placement act[2] = {dt_shard(0), dt_shard(1)}, xs[2] = {dt_shard(0), dt_replicate()},
                 ws[2] = {dt_replicate(), dt_shard(1)}, w1s[2] = {dt_replicate(), dt_shard(0)};
    dt_tensor *h, *hand;
    if (stage == 0) {
        dt_tensor *xl, *w;
        R_OK(dt_tensor_distribute(st[0], x, DT_F64, 2, sx, 2, xs, DT_ALL_RANKS, &xl));
        R_OK(dt_tensor_distribute(st[0], w0, DT_F64, 2, s0, 2, ws, DT_ALL_RANKS, &w));
        R_OK(dt_tensor_set_requires_grad(w, 1));
        R_OK(dt_mm(xl, w, &h));
        R_OK(dt_tensor_redistribute_to(h, st[1], 2, act, &hand));
        dt_tensor *g;
        R_OK(dt_tensor_zeros(st[1], DT_F64, 2, sh, 2, act, &g));
        R_OK(dt_backward_with(hand, g));
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(w), g0, sizeof g0));
        for (int i = 0; i < K * M; i++)
            R_CHECK(fabs(g0[i] - r0[i]) <= 1e-12 * (1 + fabs(r0[i])), "dW0[%d] = %g, want %g", i,
                    g0[i], r0[i]);
        dt_tensor_release(xl), dt_tensor_release(w), dt_tensor_release(g);
    } else {
        dt_tensor *w, *y, *l;
        R_OK(dt_tensor_zeros(st[0], DT_F64, 2, sh, 2, act, &h)); /* stage 0's, held there */
        R_OK(dt_tensor_set_requires_grad(h, 1));
        R_OK(dt_tensor_redistribute_to(h, st[1], 2, act, &hand));
        R_OK(dt_tensor_distribute(st[1], w1, DT_F64, 2, s1, 2, w1s, DT_ALL_RANKS, &w));
        R_OK(dt_tensor_set_requires_grad(w, 1));
        R_OK(dt_mm(hand, w, &y));
        R_OK(dt_sum(y, NULL, 0, 0, &l));
        double loss;
        R_OK(dt_tensor_full_tensor(l, &loss, 8));
        R_CHECK(fabs(loss - ref_loss) <= 1e-12 * (1 + fabs(ref_loss)), "loss %g, want %g", loss,
                ref_loss);
        R_OK(dt_backward(l));
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(w), g1, sizeof g1));
        for (int i = 0; i < M * 3; i++)
            R_CHECK(fabs(g1[i] - r1[i]) <= 1e-12 * (1 + fabs(r1[i])), "dW1[%d] = %g, want %g", i,
                    g1[i], r1[i]);
        dt_tensor_release(w), dt_tensor_release(y), dt_tensor_release(l);
    }
    dt_tensor_release(h), dt_tensor_release(hand);
    dt_tensor *all[] = {X, W0, W1, H, Y, L};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    dt_mesh_release(st[0]), dt_mesh_release(st[1]), dt_mesh_release(mesh);
    return DT_OK;
}

Test(xmesh, two_stage_pipeline_equals_unpipelined) { t_run(8, pipeline_body, NULL); }
