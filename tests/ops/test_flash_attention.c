/* The tiled (flash) CPU attention kernels against a naive f64 attention written here (explicit
 * T x T softmax per row): forward output and log-sum-exp, backward dq/dk/dv by the textbook
 * formulas and by central finite differences of the kernel's own forward; lengths off the
 * tile sizes, grouped-query heads, causal or not; and the memory an autograd-recorded call
 * keeps for backward (out and the lse rows, nothing of T x T). */
#include "kernel_check.h"
#include "rank_helpers.h"

#include "autograd/saved.h"

/* Naive attention in f64 of q (B, Hq, Tq, D), k/v (B, Hkv, Tk, D/Dv), go (grad of out):
 * out, lse, and dq, dk, dv (zeroed here) of sum(out * go). */
typedef struct naive {
    double *out, *lse, *dq, *dk, *dv;
} naive;

static naive naive_attention(const tens *q, const tens *k, const tens *v, const tens *go, int64_t B,
                             int64_t Hq, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv,
                             int causal, double scale) {
    naive n = {talloc(q->n / (size_t)D * (size_t)Dv * 8 + 8), talloc(q->n / (size_t)D * 8 + 8),
               talloc(q->n * 8 + 8), talloc(k->n * 8 + 8), talloc(v->n * 8 + 8)};
    memset(n.dk, 0, k->n * 8), memset(n.dv, 0, v->n * 8);
    double *p = talloc((size_t)Tk * 8 + 8), *dp = talloc((size_t)Tk * 8 + 8);
    int64_t g = Hq / Hkv;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Tq; i++) {
                size_t qi = (size_t)((b * Hq + h) * Tq + i), kh = (size_t)(b * Hkv + h / g);
                double mx = -INFINITY, sum = 0, dot = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += q->v[qi * D + d] * k->v[(kh * Tk + j) * D + d];
                    p[j] = causal && j > i ? -INFINITY : s * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j < Tk; j++)
                    sum += p[j] = exp(p[j] - mx);
                n.lse[qi] = Tk ? mx + log(sum) : -INFINITY;
                for (int64_t j = 0; j < Tk; j++)
                    p[j] /= sum;
                for (int64_t e = 0; e < Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Tk; j++)
                        acc += p[j] * v->v[(kh * Tk + j) * Dv + e];
                    n.out[qi * Dv + e] = acc;
                }
                for (int64_t j = 0; j < Tk; j++) {
                    dp[j] = 0;
                    for (int64_t e = 0; e < Dv; e++)
                        dp[j] += go->v[qi * Dv + e] * v->v[(kh * Tk + j) * Dv + e];
                    dot += p[j] * dp[j];
                }
                for (int64_t d = 0; d < D; d++)
                    n.dq[qi * D + d] = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    double ds = p[j] * (dp[j] - dot) * scale;
                    size_t kj = (size_t)(kh * Tk + j);
                    for (int64_t d = 0; d < D; d++) {
                        n.dq[qi * D + d] += ds * k->v[kj * D + d];
                        n.dk[kj * D + d] += ds * q->v[qi * D + d];
                    }
                    for (int64_t e = 0; e < Dv; e++)
                        n.dv[kj * Dv + e] += p[j] * go->v[qi * Dv + e];
                }
            }
    return n;
}

typedef struct acase {
    int64_t B, Hq, Hkv, Tq, Tk, D;
} acase;

static void check_case(dt_dtype dt, acase c, int causal) {
    int64_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, Tq = c.Tq, Tk = c.Tk, D = c.D, Dv = c.D;
    dt_dtype lt = dt == DT_F64 ? DT_F64 : DT_F32;
    tens q = mk(dt, SH(B, Hq, Tq, D), -2, 2), k = mk(dt, SH(B, Hkv, Tk, D), -2, 2);
    tens v = mk(dt, SH(B, Hkv, Tk, Dv), -2, 2), go = mk(dt, SH(B, Hq, Tq, Dv), -1, 1);
    tens o = mk_out(dt, SH(B, Hq, Tq, Dv)), l = mk_out(lt, SH(B, Hq, Tq));
    tens dq = mk_out(dt, SH(B, Hq, Tq, D)), dk = mk_out(dt, SH(B, Hkv, Tk, D));
    tens dv = mk_out(dt, SH(B, Hkv, Tk, Dv));
    double scale = 1.0 / sqrt((double)D);
    naive n = naive_attention(&q, &k, &v, &go, B, Hq, Hkv, Tq, Tk, D, Dv, causal, scale);
    char what[160];
    snprintf(what, sizeof what, "B %lld, heads %lld/%lld, Tq %lld, Tk %lld, D %lld%s", (long long)B,
             (long long)Hq, (long long)Hkv, (long long)Tq, (long long)Tk, (long long)D,
             causal ? ", causal" : "");
    cr_log_info("%s [%s]", what, dt_dtype_name(dt));
    OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, scale, &o.t, &l.t));
    expect(what, &o.t, n.out, o.n);
    expect(what, &l.t, n.lse, l.n);
    OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &l.t, causal, scale, &dq.t, &dk.t, &dv.t));
    expect("dq", &dq.t, n.dq, q.n);
    expect("dk", &dk.t, n.dk, k.n);
    expect("dv", &dv.t, n.dv, v.n);
}

/* Lengths around the tiles (32 query rows, 64 keys): one row, a part tile, one past a tile,
 * one past four; grouped heads 4/2 and 4/1, head dims 16, 32 and 64, batch 2. */
Test(flash_attention, forward_and_backward_match_naive_f64) {
    const acase cases[] = {
        {1, 4, 2, 1, 1, 16},    {2, 4, 2, 7, 7, 16},     {1, 4, 1, 65, 65, 32},
        {2, 4, 4, 33, 33, 64},  {1, 4, 2, 257, 257, 16}, {1, 2, 1, 40, 130, 32},
        {1, 2, 2, 130, 40, 16}, {1, 2, 1, 5, 0, 16},
    };
    const dt_dtype dts[] = {DT_F32, DT_F64};
    for (size_t di = 0; di < LEN(dts); di++)
        for (size_t i = 0; i < LEN(cases); i++)
            for (int causal = 0; causal < 2; causal++)
                check_case(dts[di], cases[i], causal);
    for (int causal = 0; causal < 2; causal++) { /* bf16/f16: widened per tile */
        check_case(DT_BF16, (acase){2, 4, 2, 65, 65, 32}, causal);
        check_case(DT_F16, (acase){1, 4, 1, 70, 70, 16}, causal);
    }
    free_all();
}

/* L(q, k, v) = sum(out * go) by the kernel's own f64 forward; its central differences
 * against the backward's dq, dk, dv, every element, on a case that spans two query tiles. */
static double loss_of(tens *q, tens *k, tens *v, const tens *go, tens *o, int causal,
                      double scale) {
    OK(dt_cpu_sdpa(&q->t, &k->t, &v->t, causal, scale, &o->t, NULL));
    double s = 0;
    for (size_t i = 0; i < o->n; i++)
        s += ((double *)o->t.data)[i] * go->v[i];
    return s;
}

Test(flash_attention, backward_matches_finite_differences) {
    const int64_t B = 1, Hq = 4, Hkv = 2, T = 37, D = 8;
    for (int causal = 0; causal < 2; causal++) {
        tens q = mk(DT_F64, SH(B, Hq, T, D), -1, 1), k = mk(DT_F64, SH(B, Hkv, T, D), -1, 1);
        tens v = mk(DT_F64, SH(B, Hkv, T, D), -1, 1), go = mk(DT_F64, SH(B, Hq, T, D), -1, 1);
        tens o = mk_out(DT_F64, SH(B, Hq, T, D)), l = mk_out(DT_F64, SH(B, Hq, T));
        tens g[3] = {mk_out(DT_F64, SH(B, Hq, T, D)), mk_out(DT_F64, SH(B, Hkv, T, D)),
                     mk_out(DT_F64, SH(B, Hkv, T, D))};
        double scale = 0.4, h = 1e-5;
        OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, scale, &o.t, &l.t));
        OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &l.t, causal, scale, &g[0].t, &g[1].t,
                                &g[2].t));
        tens *x[3] = {&q, &k, &v};
        for (int a = 0; a < 3; a++)
            for (size_t i = 0; i < x[a]->n; i++) {
                double *p = (double *)x[a]->t.data + i, keep = *p;
                *p = keep + h;
                double up = loss_of(&q, &k, &v, &go, &o, causal, scale);
                *p = keep - h;
                double down = loss_of(&q, &k, &v, &go, &o, causal, scale);
                *p = keep;
                double fd = (up - down) / (2 * h), got = ((double *)g[a].t.data)[i];
                cr_assert(fabs(got - fd) <= 1e-6 * fmax(1, fabs(fd)),
                          "d%c element %zu%s: backward %.10g, finite difference %.10g", "qkv"[a], i,
                          causal ? " (causal)" : "", got, fd);
            }
    }
    free_all();
}

/* ---- memory an autograd-recorded call keeps ------------------------------------------------ */

typedef struct mem_run {
    int64_t B, H, T, D;
    int64_t saved, kept, peak_fwd; /* bytes: node's saved lse, alive after forward, peak */
} mem_run;

static dt_status mem_body(dt_ctx *ctx, void *arg) {
    mem_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "1", &mesh));
    int64_t shape[4] = {r->B, r->H, r->T, r->D};
    size_t n = (size_t)(r->B * r->H * r->T * r->D);
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)t_value(9, i) / 4;
    dt_placement pl[1] = {dt_replicate()};
    dt_tensor *t[3], *out = NULL, *loss = NULL;
    for (int i = 0; i < 3; i++) {
        R_OK(dt_tensor_distribute(mesh, buf, DT_F32, 4, shape, 1, pl, DT_ALL_RANKS, &t[i]));
        R_OK(dt_tensor_set_requires_grad(t[i], 1));
    }
    free(buf);
    dt_tensor_memory before, after;
    R_OK(dt_ctx_tensor_memory(ctx, &before));
    R_OK(dt_ctx_reset_peak(ctx));
    R_OK(dt_sdpa(t[0], t[1], t[2], 1, &out));
    R_OK(dt_ctx_tensor_memory(ctx, &after));
    r->saved = dt_node_saved_bytes(out);
    r->kept = after.bytes - before.bytes;
    r->peak_fwd = after.peak_bytes - before.bytes;
    R_OK(dt_sum(out, NULL, 0, 0, &loss));
    R_OK(dt_backward(loss));
    R_CHECK(dt_tensor_grad(t[0]) && dt_tensor_grad(t[1]), "no gradients");
    dt_tensor_release(loss), dt_tensor_release(out);
    for (int i = 0; i < 3; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* At T = 1024 one head's probabilities alone would be 4 MiB; the call keeps its output and
 * 4 bytes per query row, and never holds more tensor memory than that. */
Test(flash_attention, saved_state_is_linear_in_length) {
    mem_run r = {.B = 2, .H = 2, .T = 1024, .D = 16};
    cr_assert_eq(dt_local_run(1, mem_body, &r, NULL), DT_OK, "%s", dt_last_error());
    int64_t rows = r.B * r.H * r.T, out_bytes = rows * r.D * 4;
    cr_assert_eq(r.saved, rows * 4, "saved %lld bytes, want the lse rows' %lld", (long long)r.saved,
                 (long long)(rows * 4));
    cr_assert_eq(r.kept, out_bytes + rows * 4, "kept %lld bytes, want out + lse = %lld",
                 (long long)r.kept, (long long)(out_bytes + rows * 4));
    cr_assert_eq(r.peak_fwd, r.kept, "peak %lld bytes during the forward, kept %lld",
                 (long long)r.peak_fwd, (long long)r.kept);
}
