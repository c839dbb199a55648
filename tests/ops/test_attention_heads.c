/* Attention with q split by heads over whole k and v (dt_sdpa_heads; attention's q-heads rule):
 * the CPU kernels on a range of query heads against a naive f64 attention of the whole call
 * written here, and the sharded op on meshes of 2 and 4 (grouped-query ratios 1, 2 and 4, even
 * and uneven head chunks) against one rank's f64 values, with the placements the rule gives:
 * q, out and dq Shard on the heads, dk and dv Partial(sum). */
#include "kernel_check.h"
#include "rank_helpers.h"

/* Naive f64 attention of q (B, Hq, T, D) and k, v (B, Hkv, T, D), heads first, at grad_out go:
 * out, lse, dq, dk, dv (dk and dv summed over every query head that reads the kv head). */
typedef struct ref {
    double *out, *lse, *dq, *dk, *dv;
} ref;

static ref naive(const double *q, const double *k, const double *v, const double *go, int64_t B,
                 int64_t Hq, int64_t Hkv, int64_t T, int64_t D, int causal) {
    size_t nq = (size_t)(B * Hq * T * D), nk = (size_t)(B * Hkv * T * D);
    ref r = {talloc(nq * 8), talloc((size_t)(B * Hq * T) * 8), talloc(nq * 8), talloc(nk * 8),
             talloc(nk * 8)};
    double *p = talloc((size_t)T * 8), *dp = talloc((size_t)T * 8), scale = 1 / sqrt((double)D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < T; i++) {
                size_t qi = (size_t)((b * Hq + h) * T + i), kh = (size_t)(b * Hkv + h / (Hq / Hkv));
                double mx = -INFINITY, sum = 0, dot = 0;
                for (int64_t j = 0; j < T; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += q[qi * D + d] * k[(kh * T + j) * D + d];
                    p[j] = causal && j > i ? -INFINITY : s * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j < T; j++)
                    sum += p[j] = exp(p[j] - mx);
                r.lse[qi] = mx + log(sum);
                for (int64_t j = 0; j < T; j++) {
                    p[j] /= sum, dp[j] = 0;
                    for (int64_t d = 0; d < D; d++)
                        dp[j] += go[qi * D + d] * v[(kh * T + j) * D + d];
                    dot += p[j] * dp[j];
                }
                for (int64_t d = 0; d < D; d++) {
                    double o = 0, g = 0;
                    for (int64_t j = 0; j < T; j++) {
                        o += p[j] * v[(kh * T + j) * D + d];
                        g += p[j] * (dp[j] - dot) * scale * k[(kh * T + j) * D + d];
                    }
                    r.out[qi * D + d] = o, r.dq[qi * D + d] = g;
                }
                for (int64_t j = 0; j < T; j++)
                    for (int64_t d = 0; d < D; d++) {
                        size_t kj = (size_t)(kh * T + j) * (size_t)D + (size_t)d;
                        r.dk[kj] += p[j] * (dp[j] - dot) * scale * q[qi * D + d];
                        r.dv[kj] += p[j] * go[qi * D + d];
                    }
            }
    return r;
}

/* Heads [h0, h0 + n) of x (B, H, T, D), heads first: (B, n, T, D), or seq_first (B, T, n, D). */
static void heads_of(const double *x, double *dst, int64_t B, int64_t H, int64_t T, int64_t D,
                     int64_t h0, int64_t n, int sf) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < n; h++)
            for (int64_t t = 0; t < T; t++) {
                size_t o = (size_t)(sf ? (b * T + t) * n + h : (b * n + h) * T + t);
                memcpy(dst + o * (size_t)D, x + (size_t)(((b * H + h0 + h) * T + t) * D),
                       sizeof(double) * (size_t)D);
            }
}

static tens from(dt_dtype dt, shp s, const double *v) {
    tens r = mk_shape(dt, s);
    memcpy(r.v, v, r.n * sizeof(double));
    store(&r);
    return r;
}

/* Whether heads [h0, h0 + n) of hq read their kv heads (of hkv) as the kernels take them. */
static int fits(int64_t hq, int64_t hkv, int64_t h0, int64_t n) {
    int64_t g = hq / hkv;
    return (h0 % g == 0 && n % g == 0) || h0 / g == (h0 + n - 1) / g;
}

/* Every range of query heads that fits, in both layouts, causal or not: out, lse and dq of
 * those heads, and dk, dv as the naive call's with grad_out zero on every other head (the
 * range's share), zero where no head of the range reads. */
static void check_ranges(dt_dtype dt, int64_t Hq, int64_t Hkv) {
    const int64_t B = 2, T = 19, D = 8;
    size_t nq = (size_t)(B * Hq * T * D), nk = (size_t)(B * Hkv * T * D);
    double *qv = talloc(nq * 8), *kv = talloc(nk * 8), *vv = talloc(nk * 8), *gv = talloc(nq * 8);
    for (size_t i = 0; i < nq; i++)
        qv[i] = 2 * urand() - 1, gv[i] = 2 * urand() - 1;
    for (size_t i = 0; i < nk; i++)
        kv[i] = 2 * urand() - 1, vv[i] = 2 * urand() - 1;
    tens q0 = from(dt, SH((int64_t)nq), qv), k0 = from(dt, SH((int64_t)nk), kv),
         v0 = from(dt, SH((int64_t)nk), vv), g0 = from(dt, SH((int64_t)nq), gv);
    /* the values as stored (bf16 / f16 would round) */
    qv = q0.v, kv = k0.v, vv = v0.v, gv = g0.v;
    double *gm = talloc(nq * 8), *buf = talloc(nq * 8);
    for (int64_t h0 = 0; h0 < Hq; h0++)
        for (int64_t n = 1; h0 + n <= Hq; n++) {
            if (!fits(Hq, Hkv, h0, n)) continue;
            for (size_t i = 0; i < nq; i++) { /* grad_out on the range's heads only */
                int64_t h = (int64_t)(i / (size_t)(T * D)) % Hq;
                gm[i] = h >= h0 && h < h0 + n ? gv[i] : 0;
            }
            for (int sf = 0; sf < 2; sf++)
                for (int causal = 0; causal < 2; causal++) {
                    ref w = naive(qv, kv, vv, gm, B, Hq, Hkv, T, D, causal);
                    shp sq = sf ? SH(B, T, n, D) : SH(B, n, T, D),
                        sk = sf ? SH(B, T, Hkv, D) : SH(B, Hkv, T, D),
                        sl = sf ? SH(B, T, n) : SH(B, n, T);
                    double *kk = talloc(nk * 8), *vk = talloc(nk * 8);
                    heads_of(qv, buf, B, Hq, T, D, h0, n, sf);
                    tens q = from(dt, sq, buf);
                    heads_of(gm, buf, B, Hq, T, D, h0, n, sf);
                    tens g = from(dt, sq, buf);
                    heads_of(kv, kk, B, Hkv, T, D, 0, Hkv, sf);
                    heads_of(vv, vk, B, Hkv, T, D, 0, Hkv, sf);
                    tens k = from(dt, sk, kk), v = from(dt, sk, vk);
                    dt_dtype lt = dt == DT_F64 ? DT_F64 : DT_F32;
                    tens o = mk_out(dt, sq), l = mk_out(lt, sl), dq = mk_out(dt, sq),
                         dk = mk_out(dt, sk), dv = mk_out(dt, sk);
                    dt_sdpa_heads hs = {h0, Hq};
                    double sc = 1 / sqrt((double)D);
                    OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, sf, hs, sc, &o.t, &l.t));
                    OK(dt_cpu_sdpa_backward(&g.t, &q.t, &k.t, &v.t, &l.t, causal, sf, hs, sc, &dq.t,
                                            &dk.t, &dv.t));
                    cr_log_info("Hq %lld Hkv %lld heads [%lld, %lld) sf %d causal %d",
                                (long long)Hq, (long long)Hkv, (long long)h0, (long long)(h0 + n),
                                sf, causal);
                    heads_of(w.out, buf, B, Hq, T, D, h0, n, sf);
                    expect("out", &o.t, buf, o.n);
                    heads_of(w.lse, buf, B, Hq, T, 1, h0, n, sf);
                    expect("lse", &l.t, buf, l.n);
                    heads_of(w.dq, buf, B, Hq, T, D, h0, n, sf);
                    expect("dq", &dq.t, buf, dq.n);
                    heads_of(w.dk, kk, B, Hkv, T, D, 0, Hkv, sf);
                    expect("dk", &dk.t, kk, dk.n);
                    heads_of(w.dv, vk, B, Hkv, T, D, 0, Hkv, sf);
                    expect("dv", &dv.t, vk, dv.n);
                }
        }
}

Test(kernels, sdpa_heads_range_matches_naive_f64) {
    const int64_t cases[][2] = {{4, 4}, {4, 2}, {8, 2}, {6, 3}, {4, 1}};
    const dt_dtype dts[] = {DT_F64, DT_F32, DT_BF16};
    for (size_t d = 0; d < LEN(dts); d++)
        for (size_t c = 0; c < LEN(cases); c++)
            check_ranges(dts[d], cases[c][0], cases[c][1]);
}

/* A range that splits a group unevenly, or runs past the call's heads, is a named error. */
Test(kernels, sdpa_heads_bad_range_is_named) {
    tens q = mk(DT_F32, SH(1, 2, 4, 8), -1, 1), k = mk(DT_F32, SH(1, 2, 4, 8), -1, 1);
    tens o = mk_out(DT_F32, SH(1, 2, 4, 8));
    dt_status st = dt_cpu_sdpa(&q.t, &k.t, &k.t, 0, 0, (dt_sdpa_heads){3, 8}, 1, &o.t, NULL);
    cr_assert_eq(st, DT_ERR_SHAPE);
    cr_assert(strstr(dt_last_error(), "heads [3, 5) of 8"), "%s", dt_last_error());
    st = dt_cpu_sdpa(&q.t, &k.t, &k.t, 0, 0, (dt_sdpa_heads){7, 8}, 1, &o.t, NULL);
    cr_assert_eq(st, DT_ERR_SHAPE);
    cr_assert(strstr(dt_last_error(), "do not fit"), "%s", dt_last_error());
    st = dt_cpu_sdpa(&q.t, &k.t, &k.t, 0, 0, (dt_sdpa_heads){0, 5}, 1, &o.t, NULL);
    cr_assert_eq(st, DT_ERR_SHAPE, "5 query heads over 2 kv heads");
}

/* ---- the sharded op ----------------------------------------------------------------------- */

typedef struct shard_run {
    int64_t Hq, Hkv;
    /* rule: 1 the q-heads rule (dk, dv Partial(sum)), 2 the heads rule (whole groups per rank:
     * k and v sliced in place, dk, dv Shard(1)), 0 another */
    int ranks, rule;
} shard_run;

enum { B = 2, T = 13, D = 4 };

/* q (B, Hq, T, D) Shard(1), k and v Replicate, f64: dt_sdpa_lse and dt_sdpa_backward at
 * grad_out w; every output's values against naive, and where the rule applies, out, lse and
 * dq Shard(1) with dk and dv Partial(sum), and no collective in either call. */
static dt_status shard_body(dt_ctx *ctx, void *arg) {
    const shard_run *r = arg;
    char ms[8];
    snprintf(ms, sizeof ms, "%d", r->ranks);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, ms, &mesh));
    int64_t sq[4] = {B, r->Hq, T, D}, sk[4] = {B, r->Hkv, T, D};
    size_t nq = (size_t)(B * r->Hq * T * D), nk = (size_t)(B * r->Hkv * T * D);
    double *v[4], *got = malloc(sizeof(double) * nq);
    for (int i = 0; i < 4; i++) {
        size_t n = i == 1 || i == 2 ? nk : nq;
        v[i] = malloc(sizeof(double) * n);
        for (size_t e = 0; e < n; e++)
            v[i][e] = t_value(31 + (uint64_t)i, e) / 3;
    }
    dt_placement heads = dt_shard(1), rep = dt_replicate();
    dt_tensor *x[4], *out = NULL, *lse = NULL, *g[3] = {0};
    for (int i = 0; i < 4; i++) {
        int kv = i == 1 || i == 2;
        R_OK(dt_tensor_distribute(mesh, v[i], DT_F64, 4, kv ? sk : sq, 1, kv ? &rep : &heads,
                                  DT_ALL_RANKS, &x[i]));
    }
    R_OK(dt_comm_stats_reset(ctx));
    R_OK(dt_sdpa_lse(x[0], x[1], x[2], 1, &out, &lse));
    R_OK(dt_sdpa_backward(x[0], x[1], x[2], x[3], lse, 1, &g[0], &g[1], &g[2]));
    uint64_t colls = t_issued_total(ctx);
    ref w = naive(v[0], v[1], v[2], v[3], B, r->Hq, r->Hkv, T, D, 1);
    dt_tensor *res[5] = {out, lse, g[0], g[1], g[2]};
    const double *want[5] = {w.out, w.lse, w.dq, w.dk, w.dv};
    const size_t n[5] = {nq, nq / D, nq, nk, nk};
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(res[i], &info));
        dt_placement_kind k = info.placements[0].kind;
        if (r->rule) {
            int shard = i < 3 || r->rule == 2;
            int ok = shard ? k == DT_PLACEMENT_SHARD && info.placements[0].dim == 1
                           : k == DT_PLACEMENT_PARTIAL && info.placements[0].op == DT_REDUCE_SUM;
            R_CHECK(ok, "%s placed kind %d dim %d, want %s", names[i], (int)k,
                    info.placements[0].dim, shard ? "S(1)" : "P(sum)");
        }
        R_OK(dt_tensor_full_tensor(res[i], got, n[i] * sizeof(double)));
        for (size_t e = 0; e < n[i]; e++)
            R_CHECK(fabs(got[e] - want[i][e]) <= 1e-10 * fmax(1, fabs(want[i][e])),
                    "%s element %zu: %.12g, one rank's f64 %.12g", names[i], e, got[e], want[i][e]);
    }
    /* the rule reads k and v in place: nothing moves (the full_tensor reads come after) */
    R_CHECK(!r->rule || colls == 0, "%llu collectives in forward and backward",
            (unsigned long long)colls);
    for (int i = 0; i < 4; i++)
        dt_tensor_release(x[i]), free(v[i]);
    for (int i = 0; i < 3; i++)
        dt_tensor_release(g[i]);
    dt_tensor_release(out), dt_tensor_release(lse);
    free(got);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* Grouped-query ratios 1, 2 and 4 on meshes of 2 and 4: the q-heads rule where the kv heads
 * cannot shard along (fewer kv heads than ranks), the heads rule where every rank holds whole
 * groups (ratio 1 always); uneven chunks (3 query heads over 2 ranks, 2 and 1; 6 over 4, 2, 2,
 * 2 and an empty rank); and 6 query heads over 2 kv heads on 4 ranks, whose chunk [2, 4)
 * straddles two groups: another rule, the same values. */
Test(kernels, sdpa_q_heads_rule_matches_one_rank_f64) {
    const shard_run runs[] = {
        {4, 4, 2, 2}, {4, 4, 4, 2}, {3, 3, 2, 2},               /* ratio 1 */
        {2, 1, 2, 1}, {4, 2, 4, 1}, {4, 2, 2, 2}, {6, 3, 4, 2}, /* ratio 2 */
        {4, 1, 2, 1}, {4, 1, 4, 1}, {8, 2, 4, 1}, {8, 2, 2, 2}, /* ratio 4 */
        {3, 1, 2, 1}, {6, 1, 4, 1},                             /* uneven, an empty rank */
        {6, 2, 4, 0},                                           /* groups straddled */
    };
    for (size_t i = 0; i < LEN(runs); i++) {
        dt_status st = dt_local_run(runs[i].ranks, shard_body, (void *)&runs[i], NULL);
        cr_assert_eq(st, DT_OK, "Hq %lld, Hkv %lld on %d ranks: %s", (long long)runs[i].Hq,
                     (long long)runs[i].Hkv, runs[i].ranks, dt_last_error());
    }
}
