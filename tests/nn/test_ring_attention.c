/* Ring attention (dt_ring_sdpa) on real local ranks against full attention on one rank: the
 * library's dt_sdpa on replicated q, k, v (and its autograd for the gradients), f64, for
 * cp = 2, 3, 4, sequence lengths that 2 * cp divides and ones it does not, causal in the
 * load-balanced order and in plain order, and non-causal, grouped-query heads (also sharded
 * over tp), batch sharded over dp, one case in f32; forward and backward. The ring
 * sends cp - 1 key/value blocks per rank forward, and cp - 1 plus cp (the gradients' trip
 * home) backward, counted from the rank's point-to-point calls. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "helpers.h"

typedef struct rcase {
    const char *mesh; /* the cp dim is the last */
    int causal, lb;
    int64_t B, H, T, D, Dv;
    int64_t Hkv; /* 0: H; fewer: grouped-query attention */
    int f32;     /* the ring in f32 (the reference stays f64) */
} rcase;

static const rcase cases[] = {
    {"cp=2", 1, 1, 1, 2, 8, 3, 2},  {"cp=2", 1, 1, 1, 2, 7, 3, 2},
    {"cp=3", 1, 1, 1, 2, 12, 3, 2}, {"cp=3", 1, 1, 2, 1, 10, 4, 3},
    {"cp=4", 1, 1, 1, 2, 16, 3, 2}, {"cp=4", 1, 1, 1, 2, 13, 2, 2},
    {"cp=4", 1, 0, 1, 1, 11, 3, 2}, {"cp=3", 0, 0, 1, 2, 7, 3, 4},
    {"cp=4", 1, 1, 1, 1, 3, 2, 2}, /* a rank with no rows */
    {"dp=2,cp=2", 1, 1, 2, 2, 9, 3, 2},
    {"cp=3", 1, 1, 1, 4, 11, 3, 2, 2},      /* grouped-query heads */
    {"tp=2,cp=2", 1, 1, 1, 4, 10, 2, 3, 2}, /* and the heads sharded over tp */
    {"cp=3", 1, 1, 1, 2, 10, 3, 2, 0, 1},   /* f32 */
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static int world_of(const char *mesh) {
    return strcmp(mesh, "cp=2") == 0 ? 2 : strcmp(mesh, "cp=3") == 0 ? 3 : 4;
}

/* x (B, H, T, E) with its sequence rows in the order row i <- position pos(i). */
static void reorder(const double *x, double *out, int64_t BH, int64_t T, int64_t E, int cp,
                    int lb) {
    for (int64_t b = 0; b < BH; b++)
        for (int64_t i = 0; i < T; i++) {
            int64_t p = lb ? dt_cp_position(T, cp, i) : i;
            memcpy(out + (b * T + i) * E, x + (b * T + p) * E, sizeof(double) * (size_t)E);
        }
}

typedef struct arg {
    const rcase *c;
} arg;

/* f64 agrees to rounding; f32 to its precision. */
static dt_status near(const char *what, int k, const double *got, const double *want, size_t n) {
    double tol = cases[k].f32 ? 1e-5 : 1e-12;
    for (size_t i = 0; i < n; i++)
        R_CHECK(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                "case %d: %s[%zu] = %.17g, full attention gives %.17g", k, what, i, got[i],
                want[i]);
    return DT_OK;
}

/* A ring input of dtype dt from f64 host data, and a ring result back in f64. */
static dt_status make(dt_mesh *m, const double *h, size_t n, dt_dtype dt, const int64_t *shape,
                      const dt_placement *pl, dt_tensor **out) {
    float *f = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) f[i] = (float)h[i];
    dt_status st = dt_tensor_distribute(m, dt == DT_F32 ? (const void *)f : (const void *)h, dt,
                                        4, shape, dt_mesh_ndim(m), pl, DT_ALL_RANKS, out);
    free(f);
    return st;
}

static dt_status full_f64(dt_tensor *t, double *out, size_t n) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    if (info.dtype == DT_F64) return dt_tensor_full_tensor(t, out, n * 8);
    float *f = malloc(n * sizeof(float) + 4);
    dt_status st = dt_tensor_full_tensor(t, f, n * sizeof(float));
    for (size_t i = 0; st == DT_OK && i < n; i++) out[i] = f[i];
    free(f);
    return st;
}

static dt_status body(dt_ctx *ctx, void *p) {
    const rcase *c = ((arg *)p)->c;
    int k = (int)(c - cases);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh), cpd = mnd - 1, cp = dt_mesh_dim_size(mesh, cpd);
    int64_t Hkv = c->Hkv ? c->Hkv : c->H, BH = c->B * c->H, BHkv = c->B * Hkv;
    int64_t sq[4] = {c->B, c->H, c->T, c->D}, sk[4] = {c->B, Hkv, c->T, c->D};
    int64_t sv[4] = {c->B, Hkv, c->T, c->Dv}, so[4] = {c->B, c->H, c->T, c->Dv};
    size_t nq = (size_t)(BH * c->T * c->D), nk = (size_t)(BHkv * c->T * c->D);
    size_t nv = (size_t)(BHkv * c->T * c->Dv), no = (size_t)(BH * c->T * c->Dv);
    double *hq = malloc(nq * 8), *hk = malloc(nk * 8), *hv = malloc(nv * 8), *hw = malloc(no * 8);
    double *pq = malloc(nq * 8), *pk = malloc(nk * 8), *pv = malloc(nv * 8), *pw = malloc(no * 8);
    size_t most = nq > no ? nq : no;
    double *ref = malloc(no * 8), *got = malloc(most * 8), *tmp = malloc(most * 8);
    double *rg[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nv * 8)};
    for (size_t i = 0; i < nq; i++) hq[i] = t_value(1 + (uint64_t)k, i) / 8;
    for (size_t i = 0; i < nk; i++) hk[i] = t_value(2, i) / 8;
    for (size_t i = 0; i < nv; i++) hv[i] = t_value(3, i) / 4;
    for (size_t i = 0; i < no; i++) hw[i] = t_value(4, i);
    /* The reference: full attention, replicated, and d sum(out * w) / d (q, k, v). */
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    dt_tensor *rq, *rk, *rv, *rw, *ro, *rp, *rl;
    R_OK(dt_tensor_distribute(mesh, hq, DT_F64, 4, sq, mnd, rep, DT_ALL_RANKS, &rq));
    R_OK(dt_tensor_distribute(mesh, hk, DT_F64, 4, sk, mnd, rep, DT_ALL_RANKS, &rk));
    R_OK(dt_tensor_distribute(mesh, hv, DT_F64, 4, sv, mnd, rep, DT_ALL_RANKS, &rv));
    R_OK(dt_tensor_distribute(mesh, hw, DT_F64, 4, so, mnd, rep, DT_ALL_RANKS, &rw));
    dt_tensor *rin[3] = {rq, rk, rv};
    for (int i = 0; i < 3; i++) R_OK(dt_tensor_set_requires_grad(rin[i], 1));
    R_OK(dt_sdpa(rq, rk, rv, c->causal, &ro));
    R_OK(dt_mul(ro, rw, &rp));
    R_OK(dt_sum(rp, NULL, 0, 0, &rl));
    R_OK(dt_backward(rl));
    const size_t nin[3] = {nq, nk, nv};
    const int64_t bh_in[3] = {BH, BHkv, BHkv};
    R_OK(dt_tensor_full_tensor(ro, ref, no * 8));
    for (int i = 0; i < 3; i++) R_OK(dt_tensor_full_tensor(dt_tensor_grad(rin[i]), rg[i], nin[i] * 8));
    /* The ring: the sequence in the chosen order, sharded over cp (and the batch over dp). */
    reorder(hq, pq, BH, c->T, c->D, cp, c->lb), reorder(hk, pk, BHkv, c->T, c->D, cp, c->lb);
    reorder(hv, pv, BHkv, c->T, c->Dv, cp, c->lb), reorder(hw, pw, BH, c->T, c->Dv, cp, c->lb);
    dt_placement pl[2]; /* dp shards the batch, tp the heads, cp the sequence */
    if (mnd == 2) pl[0] = dt_shard(c->mesh[0] == 't' ? 1 : 0), pl[1] = dt_shard(2);
    else pl[0] = dt_shard(2);
    dt_tensor *q, *kk, *v, *w, *o, *prod, *loss;
    dt_dtype dt = c->f32 ? DT_F32 : DT_F64;
    R_OK(make(mesh, pq, nq, dt, sq, pl, &q));
    R_OK(make(mesh, pk, nk, dt, sk, pl, &kk));
    R_OK(make(mesh, pv, nv, dt, sv, pl, &v));
    R_OK(make(mesh, pw, no, dt, so, pl, &w));
    dt_tensor *in[3] = {q, kk, v};
    for (int i = 0; i < 3; i++) R_OK(dt_tensor_set_requires_grad(in[i], 1));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_ring_sdpa(q, kk, v, cpd, c->causal, c->lb, &o));
    uint64_t fs = t_issued(ctx, DT_COLL_SEND), fr = t_issued(ctx, DT_COLL_RECV);
    R_CHECK(fs == (uint64_t)(cp - 1) && fr == (uint64_t)(cp - 1),
            "case %d: forward sent %llu and received %llu blocks, want %d each", k,
            (unsigned long long)fs, (unsigned long long)fr, cp - 1);
    R_OK(full_f64(o, tmp, no));
    reorder(ref, got, BH, c->T, c->Dv, cp, c->lb); /* the reference in the ring's order */
    dt_status st = near("out", k, tmp, got, no);
    if (st != DT_OK) return st;
    R_OK(dt_mul(o, w, &prod));
    R_OK(dt_sum(prod, NULL, 0, 0, &loss));
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_backward(loss));
    uint64_t bs = t_issued(ctx, DT_COLL_SEND);
    R_CHECK(bs == (uint64_t)(cp - 1 + cp), "case %d: backward sent %llu blocks, want %d", k,
            (unsigned long long)bs, 2 * cp - 1);
    static const char *const names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        int64_t E = i < 2 ? c->D : c->Dv;
        size_t n = nin[i];
        R_CHECK(dt_tensor_grad(in[i]) != NULL, "case %d: %s missing", k, names[i]);
        R_OK(full_f64(dt_tensor_grad(in[i]), tmp, n));
        reorder(rg[i], got, bh_in[i], c->T, E, cp, c->lb);
        if ((st = near(names[i], k, tmp, got, n)) != DT_OK) return st;
    }
    dt_tensor *all[] = {rq, rk, rv, rw, ro, rp, rl, q, kk, v, w, o, prod, loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    double *bufs[] = {hq, hk, hv, hw, pq, pk, pv, pw, ref, got, tmp, rg[0], rg[1], rg[2]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ring_attention, equals_full_attention_forward_and_backward) {
    for (int k = 0; k < NCASES; k++) {
        arg a = {&cases[k]};
        t_run(world_of(cases[k].mesh), body, &a);
    }
}

Test(ring_attention, load_balanced_order) {
    /* T = 8 over cp = 2: chunks of 2, order 0, 3, 1, 2: rows 0 1 6 7 2 3 4 5. */
    static const int64_t want[8] = {0, 1, 6, 7, 2, 3, 4, 5};
    for (int64_t i = 0; i < 8; i++) cr_assert_eq(dt_cp_position(8, 2, i), want[i]);
    /* Every length and cp: a permutation. */
    for (int cp = 1; cp <= 5; cp++)
        for (int64_t T = 0; T <= 23; T++) {
            int seen[23] = {0};
            for (int64_t i = 0; i < T; i++) {
                int64_t p = dt_cp_position(T, cp, i);
                cr_assert(p >= 0 && p < T && !seen[p], "T %lld cp %d row %lld -> %lld",
                          (long long)T, cp, (long long)i, (long long)p);
                seen[p] = 1;
            }
        }
    cr_assert_eq(dt_cp_position(8, 0, 0), -1);
    cr_assert_eq(dt_cp_position(8, 2, 8), -1);
}

static dt_status errors_body(dt_ctx *ctx, void *p) {
    (void)p;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "cp=2", &mesh));
    int64_t s[3] = {2, 6, 3};
    dt_placement r = dt_replicate(), sh = dt_shard(1);
    dt_tensor *a, *b, *o = T_SENTINEL(dt_tensor *);
    R_OK(dt_tensor_zeros(mesh, DT_F64, 3, s, 1, &r, &a));
    R_OK(dt_tensor_zeros(mesh, DT_F64, 3, s, 1, &sh, &b));
    R_ERR(dt_ring_sdpa(a, a, a, 0, 1, 1, &o), DT_ERR_PLACEMENT, "it must shard the sequence, S(1)");
    R_ERR(dt_ring_sdpa(b, b, b, 1, 1, 1, &o), DT_ERR_ARG, "cp_dim = 1");
    R_ERR(dt_ring_sdpa(b, a, b, 0, 1, 1, &o), DT_ERR_PLACEMENT, "placements differ");
    R_CHECK(o == T_SENTINEL(dt_tensor *), "out set on failure");
    dt_tensor_release(a), dt_tensor_release(b);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ring_attention, errors) { t_run(2, errors_body, NULL); }

/* The trace of a forward on cp = 3: each rank records one compute event per ring step and one
 * send and one receive (on the cp group) per transfer, each transfer finished before the
 * step that reads its block begins; the transfers run on the communication thread, so they
 * may overlap the step before (how much is timing, not asserted). */
static dt_status trace_body(dt_ctx *ctx, void *p) {
    (void)p;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "cp=3", &mesh));
    int64_t s[3] = {2, 12, 4};
    dt_placement pl = dt_shard(1);
    dt_tensor *q, *o;
    R_OK(dt_tensor_ones(mesh, DT_F64, 3, s, 1, &pl, &q));
    R_OK(dt_trace_start(ctx));
    R_OK(dt_ring_sdpa(q, q, q, 0, 1, 1, &o));
    R_OK(dt_trace_stop(ctx));
    char path[96]; /* the context's address and the clock keep concurrent runs apart */
    snprintf(path, sizeof path, "/tmp/dt_ring_trace_%p_%lld_%d.json", (void *)ctx,
             (long long)time(NULL), dt_ctx_rank(ctx));
    R_OK(dt_trace_write(ctx, path));
    FILE *f = fopen(path, "r");
    R_CHECK(f != NULL, "cannot read %s", path);
    double step_ts[8], step_end[8], send_end[8];
    int nstep = 0, nsend = 0, nrecv = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *ts = strstr(line, "\"ts\":"), *dur = strstr(line, "\"dur\":");
        if (!ts || !dur) continue;
        double t0 = atof(ts + 5), d = atof(dur + 6);
        if (strstr(line, "\"name\":\"ring_attention\"") && nstep < 8)
            step_ts[nstep] = t0, step_end[nstep++] = t0 + d;
        else if (strstr(line, "\"name\":\"send\"") && strstr(line, "group cp") && nsend < 8)
            send_end[nsend++] = t0 + d;
        else if (strstr(line, "\"name\":\"recv\"") && strstr(line, "group cp"))
            nrecv++;
    }
    fclose(f);
    remove(path);
    R_CHECK(nstep == 3 && nsend == 2 && nrecv == 2, "%d steps, %d sends, %d receives", nstep,
            nsend, nrecv);
    for (int i = 0; i < nsend; i++)
        R_CHECK(send_end[i] <= step_ts[i + 1] + 1e-3 && step_end[i] <= step_ts[i + 1] + 1e-3,
                "transfer %d ends at %.3f, after step %d begins at %.3f", i, send_end[i], i + 1,
                step_ts[i + 1]);
    dt_tensor_release(q), dt_tensor_release(o);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(ring_attention, trace_shows_the_ring) { t_run(3, trace_body, NULL); }
