/* The tiled (flash) CPU attention kernels against a naive f64 attention written here (explicit
 * T x T softmax per row): forward output and log-sum-exp, backward dq/dk/dv by the textbook
 * formulas and by central finite differences of the kernel's own forward; lengths off the
 * tile sizes, grouped-query heads, causal or not; the seq-first (B, T, H, D) layout read in
 * place; and the memory an autograd-recorded call keeps for backward (out and the lse rows,
 * nothing of T x T). */
#include "kernel_check.h"
#include "rank_helpers.h"

#include "autograd/saved.h"
#include "core/pool.h"
#include "ops/cpu/simd.h"

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
    int64_t B, Hq, Hkv, Tq, Tk, D, Dv; /* Dv 0: D */
} acase;

static void check_case(dt_dtype dt, acase c, int causal) {
    int64_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, Tq = c.Tq, Tk = c.Tk, D = c.D, Dv = c.Dv ? c.Dv : c.D;
    dt_dtype lt = dt == DT_F64 ? DT_F64 : DT_F32;
    tens q = mk(dt, SH(B, Hq, Tq, D), -2, 2), k = mk(dt, SH(B, Hkv, Tk, D), -2, 2);
    tens v = mk(dt, SH(B, Hkv, Tk, Dv), -2, 2), go = mk(dt, SH(B, Hq, Tq, Dv), -1, 1);
    tens o = mk_out(dt, SH(B, Hq, Tq, Dv)), l = mk_out(lt, SH(B, Hq, Tq));
    tens dq = mk_out(dt, SH(B, Hq, Tq, D)), dk = mk_out(dt, SH(B, Hkv, Tk, D));
    tens dv = mk_out(dt, SH(B, Hkv, Tk, Dv));
    double scale = 1.0 / sqrt((double)D);
    naive n = naive_attention(&q, &k, &v, &go, B, Hq, Hkv, Tq, Tk, D, Dv, causal, scale);
    char what[160];
    snprintf(what, sizeof what, "B %lld, heads %lld/%lld, Tq %lld, Tk %lld, D %lld, Dv %lld%s",
             (long long)B, (long long)Hq, (long long)Hkv, (long long)Tq, (long long)Tk,
             (long long)D, (long long)Dv, causal ? ", causal" : "");
    cr_log_info("%s [%s]", what, dt_dtype_name(dt));
    OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, 0, DT_SDPA_ALL_HEADS, scale, &o.t, &l.t));
    expect(what, &o.t, n.out, o.n);
    expect(what, &l.t, n.lse, l.n);
    OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &l.t, causal, 0, DT_SDPA_ALL_HEADS, scale,
                            &dq.t, &dk.t, &dv.t));
    expect("dq", &dq.t, n.dq, q.n);
    expect("dk", &dk.t, n.dk, k.n);
    expect("dv", &dv.t, n.dv, v.n);
}

/* Lengths around the tiles (32 query rows, 64 keys, 16-key vectors): one row, a part tile, one
 * past a tile, one past four, whole tiles, 100 (off all three); grouped heads 4/2 and 4/1, head
 * dims 16, 32, 64 and 80 (four vectors and one more), batch 2; fewer and more queries than
 * keys (causal rows past the keys see them all). */
Test(flash_attention, forward_and_backward_match_naive_f64) {
    const acase cases[] = {
        {1, 4, 2, 1, 1, 16},     {2, 4, 2, 7, 7, 16},     {1, 4, 1, 65, 65, 32},
        {2, 4, 4, 33, 33, 64},   {1, 4, 2, 257, 257, 16}, {1, 2, 1, 40, 130, 32},
        {1, 2, 2, 130, 40, 16},  {1, 2, 1, 5, 0, 16},     {2, 4, 2, 64, 64, 32},
        {1, 4, 2, 100, 100, 80}, {1, 2, 1, 96, 200, 64},  {1, 4, 1, 128, 128, 32},
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

/* The f32 SIMD paths (forced through dt_simd_set_cap: AVX-512 with fused multiply-adds, the
 * portable tiles in AVX2, SSE and scalar) on head dims off the 16-lane vectors, Dv != D and
 * lengths off the tiles: each path against the naive f64 (tol_of: 1e-5 relative), and every
 * output of the portable paths bit for bit equal to the scalar-capped path's. The AVX-512
 * path rounds differently (fused multiply-adds, f32 row sums): held to the tolerance only. */
static const acase simd_cases[] = {
    {1, 4, 2, 77, 77, 20, 40}, {2, 2, 1, 33, 70, 48, 8},   {1, 4, 4, 130, 130, 72, 0},
    {1, 2, 1, 65, 65, 3, 17},  {1, 4, 2, 256, 256, 32, 0}, {1, 4, 2, 100, 100, 80, 0},
    {1, 2, 1, 50, 90, 32, 80},
};

static void paths_same_bits(const char *what, const tens *a, const tens *b) {
    cr_expect(!memcmp(a->t.data, b->t.data, a->n * sizeof(float)), "%s differs between paths",
              what);
}

Test(flash_attention, simd_paths_match_naive_and_each_others_bits) {
    int best = (int)dt_simd_cpu_best();
    for (size_t i = 0; i < LEN(simd_cases); i++)
        for (int causal = 0; causal < 2; causal++) {
            acase c = simd_cases[i];
            int64_t Dv = c.Dv ? c.Dv : c.D;
            tens q = mk(DT_F32, SH(c.B, c.Hq, c.Tq, c.D), -2, 2);
            tens k = mk(DT_F32, SH(c.B, c.Hkv, c.Tk, c.D), -2, 2);
            tens v = mk(DT_F32, SH(c.B, c.Hkv, c.Tk, Dv), -2, 2);
            tens go = mk(DT_F32, SH(c.B, c.Hq, c.Tq, Dv), -1, 1);
            memset(q.t.data, 0, sizeof(float) * (size_t)c.D); /* a row whose scores' max is 0 */
            tens r[2][5]; /* [scalar path, this path][out, lse, dq, dk, dv] */
            double scale = 1.0 / sqrt((double)c.D);
            for (int p = DT_SIMD_SCALAR; p <= best; p++) {
                tens *o = r[p != DT_SIMD_SCALAR];
                o[0] = mk_out(DT_F32, SH(c.B, c.Hq, c.Tq, Dv));
                o[1] = mk_out(DT_F32, SH(c.B, c.Hq, c.Tq));
                o[2] = mk_out(DT_F32, SH(c.B, c.Hq, c.Tq, c.D));
                o[3] = mk_out(DT_F32, SH(c.B, c.Hkv, c.Tk, c.D));
                o[4] = mk_out(DT_F32, SH(c.B, c.Hkv, c.Tk, Dv));
                dt_simd_set_cap((dt_simd)p);
                OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, 0, DT_SDPA_ALL_HEADS, scale, &o[0].t,
                               &o[1].t));
                OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &o[1].t, causal, 0,
                                        DT_SDPA_ALL_HEADS, scale, &o[2].t, &o[3].t, &o[4].t));
                check_case(DT_F32, c, causal); /* this path against the naive f64 */
                dt_simd_set_cap(DT_SIMD_COUNT);
                if (p == DT_SIMD_SCALAR || p == DT_SIMD_AVX512) continue;
                cr_log_info("path %s, case %zu%s", dt_simd_name((dt_simd)p), i,
                            causal ? ", causal" : "");
                const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
                for (int t = 0; t < 5; t++)
                    paths_same_bits(names[t], &r[1][t], &r[0][t]);
            }
        }
    free_all();
}

/* The outputs of one path at 1, 2 and 3 pool threads, bit for bit (work items own their rows
 * and sum in one order; the layouts' loss parity relies on it): f32 and bf16, causal or not,
 * grouped heads, lengths off the tiles, head dims 32 and 80, both layouts; and the forward
 * without lse gives the same out. */
static void thread_bits(dt_dtype dt, acase c, int causal, int sf) {
    int64_t Dv = c.Dv ? c.Dv : c.D;
    shp sq = sf ? SH(c.B, c.Tq, c.Hq, c.D) : SH(c.B, c.Hq, c.Tq, c.D);
    shp sk = sf ? SH(c.B, c.Tk, c.Hkv, c.D) : SH(c.B, c.Hkv, c.Tk, c.D);
    shp sv = sf ? SH(c.B, c.Tk, c.Hkv, Dv) : SH(c.B, c.Hkv, c.Tk, Dv);
    shp so = sf ? SH(c.B, c.Tq, c.Hq, Dv) : SH(c.B, c.Hq, c.Tq, Dv);
    shp sl = sf ? SH(c.B, c.Tq, c.Hq) : SH(c.B, c.Hq, c.Tq);
    tens q = mk(dt, sq, -2, 2), k = mk(dt, sk, -2, 2), v = mk(dt, sv, -2, 2),
         go = mk(dt, so, -1, 1);
    tens r[3][6]; /* [threads - 1][out, lse, dq, dk, dv, out without lse] */
    double scale = 1.0 / sqrt((double)c.D);
    for (int th = 0; th < 3; th++) {
        tens *o = r[th];
        o[0] = mk_out(dt, so), o[1] = mk_out(DT_F32, sl), o[2] = mk_out(dt, sq);
        o[3] = mk_out(dt, sk), o[4] = mk_out(dt, sv), o[5] = mk_out(dt, so);
        cr_assert_eq(dt_pool_set_threads(th + 1), DT_OK);
        OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, sf, DT_SDPA_ALL_HEADS, scale, &o[0].t, &o[1].t));
        OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, sf, DT_SDPA_ALL_HEADS, scale, &o[5].t, NULL));
        OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &o[1].t, causal, sf, DT_SDPA_ALL_HEADS,
                                scale, &o[2].t, &o[3].t, &o[4].t));
    }
    const char *names[6] = {"out", "lse", "dq", "dk", "dv", "out without lse"};
    for (int th = 0; th < 3; th++)
        for (int t = 0; t < 6; t++) {
            const tens *a = &r[th][t], *b = t == 5 ? &r[0][0] : &r[0][t];
            size_t bytes = a->n * dt_dtype_size(a->t.dtype);
            cr_expect(!memcmp(a->t.data, b->t.data, bytes),
                      "%s [%s%s%s] differs at %d thread(s), case Tq %lld, D %lld, Dv %lld",
                      names[t], dt_dtype_name(dt), causal ? ", causal" : "",
                      sf ? ", seq-first" : "", th + 1, (long long)c.Tq, (long long)c.D,
                      (long long)Dv);
        }
}

Test(flash_attention, thread_count_gives_the_same_bits) {
    const acase cases[] = {
        {2, 4, 2, 100, 100, 32, 0},
        {1, 4, 1, 70, 150, 80, 0},
        {3, 2, 2, 257, 257, 32, 16},
    };
    for (int p = 0; p < 2; p++) { /* the best path here, then the portable (scalar) one */
        dt_simd_set_cap(p ? DT_SIMD_SCALAR : DT_SIMD_COUNT);
        for (size_t i = 0; i < LEN(cases); i++)
            for (int causal = 0; causal < 2; causal++)
                for (int sf = 0; sf < 2; sf++)
                    thread_bits(DT_F32, cases[i], causal, sf);
        thread_bits(DT_BF16, cases[0], 1, 1);
    }
    dt_simd_set_cap(DT_SIMD_COUNT);
    free_all();
}

/* L(q, k, v) = sum(out * go) by the kernel's own f64 forward; its central differences
 * against the backward's dq, dk, dv, every element, on a case that spans two query tiles. */
static double loss_of(tens *q, tens *k, tens *v, const tens *go, tens *o, int causal,
                      double scale) {
    OK(dt_cpu_sdpa(&q->t, &k->t, &v->t, causal, 0, DT_SDPA_ALL_HEADS, scale, &o->t, NULL));
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
        OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, 0, DT_SDPA_ALL_HEADS, scale, &o.t, &l.t));
        OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &l.t, causal, 0, DT_SDPA_ALL_HEADS, scale,
                                &g[0].t, &g[1].t, &g[2].t));
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

/* ---- the seq-first layout ------------------------------------------------------------------ */

/* (B, H, T, D) -> (B, T, H, D) of es-byte elements, written here as plain loops. */
static void to_seq_first(const void *src, void *dst, size_t es, int64_t B, int64_t H, int64_t T,
                         int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                memcpy((char *)dst + (size_t)(((b * T + t) * H + h) * D) * es,
                       (const char *)src + (size_t)(((b * H + h) * T + t) * D) * es,
                       (size_t)D * es);
}

/* t's seq-first copy (values and storage). */
static tens seq_first_of(const tens *t, int64_t B, int64_t H, int64_t T, int64_t D) {
    shp s = t->t.ndim == 4 ? SH(B, T, H, D) : SH(B, T, H);
    tens r = mk_shape(t->t.dtype, s);
    to_seq_first(t->t.data, r.t.data, dt_dtype_size(t->t.dtype), B, H, T, D);
    to_seq_first(t->v, r.v, sizeof(double), B, H, T, D);
    return r;
}

/* Bits of got (seq-first) equal the heads-first want's, element by element. */
static void same_bits(const char *what, const tens *got, const tens *want, int64_t B, int64_t H,
                      int64_t T, int64_t D) {
    size_t es = dt_dtype_size(got->t.dtype), n = got->n * es;
    char *w = talloc(n + 1);
    to_seq_first(want->t.data, w, es, B, H, T, D);
    for (size_t i = 0; i < got->n; i++)
        cr_assert(!memcmp((char *)got->t.data + i * es, w + i * es, es),
                  "%s [%s] element %zu: seq-first %.10g, heads-first %.10g", what,
                  dt_dtype_name(got->t.dtype), i, t_get(got->t.dtype, got->t.data, i),
                  t_get(got->t.dtype, w, i));
}

/* The kernels on (B, T, H, D) blocks: the naive f64 attention (its heads-first results put in
 * seq-first order) within the dtype's tolerance, and the heads-first kernels' bits exactly
 * (the same sums, only the addresses differ). */
static void check_seq_first(dt_dtype dt, acase c, int causal) {
    int64_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, Tq = c.Tq, Tk = c.Tk, D = c.D;
    dt_dtype lt = dt == DT_F64 ? DT_F64 : DT_F32;
    tens q = mk(dt, SH(B, Hq, Tq, D), -2, 2), k = mk(dt, SH(B, Hkv, Tk, D), -2, 2);
    tens v = mk(dt, SH(B, Hkv, Tk, D), -2, 2), go = mk(dt, SH(B, Hq, Tq, D), -1, 1);
    double scale = 1.0 / sqrt((double)D);
    naive n = naive_attention(&q, &k, &v, &go, B, Hq, Hkv, Tq, Tk, D, D, causal, scale);
    /* heads-first kernels, the bits to match */
    tens o = mk_out(dt, SH(B, Hq, Tq, D)), l = mk_out(lt, SH(B, Hq, Tq));
    tens dq = mk_out(dt, SH(B, Hq, Tq, D)), dk = mk_out(dt, SH(B, Hkv, Tk, D));
    tens dv = mk_out(dt, SH(B, Hkv, Tk, D));
    OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, 0, DT_SDPA_ALL_HEADS, scale, &o.t, &l.t));
    OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &l.t, causal, 0, DT_SDPA_ALL_HEADS, scale,
                            &dq.t, &dk.t, &dv.t));
    /* seq-first inputs and outputs */
    tens qs = seq_first_of(&q, B, Hq, Tq, D), ks = seq_first_of(&k, B, Hkv, Tk, D);
    tens vs = seq_first_of(&v, B, Hkv, Tk, D), gs = seq_first_of(&go, B, Hq, Tq, D);
    tens os = mk_out(dt, SH(B, Tq, Hq, D)), ls = mk_out(lt, SH(B, Tq, Hq));
    tens dqs = mk_out(dt, SH(B, Tq, Hq, D)), dks = mk_out(dt, SH(B, Tk, Hkv, D));
    tens dvs = mk_out(dt, SH(B, Tk, Hkv, D));
    char what[160];
    snprintf(what, sizeof what, "seq-first B %lld, heads %lld/%lld, Tq %lld, Tk %lld, D %lld%s",
             (long long)B, (long long)Hq, (long long)Hkv, (long long)Tq, (long long)Tk,
             (long long)D, causal ? ", causal" : "");
    cr_log_info("%s [%s]", what, dt_dtype_name(dt));
    OK(dt_cpu_sdpa(&qs.t, &ks.t, &vs.t, causal, 1, DT_SDPA_ALL_HEADS, scale, &os.t, &ls.t));
    OK(dt_cpu_sdpa_backward(&gs.t, &qs.t, &ks.t, &vs.t, &ls.t, causal, 1, DT_SDPA_ALL_HEADS, scale,
                            &dqs.t, &dks.t, &dvs.t));
    double *w = talloc(q.n * 8 + k.n * 8 + 8);
    to_seq_first(n.out, w, 8, B, Hq, Tq, D), expect(what, &os.t, w, os.n);
    to_seq_first(n.lse, w, 8, B, Hq, Tq, 1), expect("lse", &ls.t, w, ls.n);
    to_seq_first(n.dq, w, 8, B, Hq, Tq, D), expect("dq", &dqs.t, w, dqs.n);
    to_seq_first(n.dk, w, 8, B, Hkv, Tk, D), expect("dk", &dks.t, w, dks.n);
    to_seq_first(n.dv, w, 8, B, Hkv, Tk, D), expect("dv", &dvs.t, w, dvs.n);
    same_bits("out", &os, &o, B, Hq, Tq, D);
    same_bits("lse", &ls, &l, B, Hq, Tq, 1);
    same_bits("dq", &dqs, &dq, B, Hq, Tq, D);
    same_bits("dk", &dks, &dk, B, Hkv, Tk, D);
    same_bits("dv", &dvs, &dv, B, Hkv, Tk, D);
}

Test(flash_attention, seq_first_matches_naive_and_heads_first_bits) {
    const acase cases[] = {
        {2, 4, 2, 7, 7, 16},    {1, 4, 1, 65, 65, 32},  {2, 2, 2, 33, 33, 8},
        {1, 2, 1, 40, 130, 16}, {1, 2, 2, 130, 40, 16}, {1, 4, 2, 100, 100, 80},
    };
    const dt_dtype dts[] = {DT_F32, DT_F64};
    for (size_t di = 0; di < LEN(dts); di++)
        for (size_t i = 0; i < LEN(cases); i++)
            for (int causal = 0; causal < 2; causal++)
                check_seq_first(dts[di], cases[i], causal);
    check_seq_first(DT_BF16, (acase){2, 4, 2, 65, 65, 32}, 1);
    free_all();
}

/* Sharded and recorded: dt_sdpa_seq_first on (B, T, H, D) tensors placed R, S(0) (batch), S(1)
 * (the sequence, which it must gather) or S(2) (heads) over 2 ranks gives dt_sdpa's output on the
 * heads-first transposes (one rank, transposed back) and the same gradients, bit for bit, at a loss
 * sum(out * w). */
typedef struct layout_run {
    dt_placement pl;
    int64_t B, T, Hq, Hkv, D;
} layout_run;

static dt_status layout_body(dt_ctx *ctx, void *arg) {
    const layout_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t sq[4] = {r->B, r->T, r->Hq, r->D}, sk[4] = {r->B, r->T, r->Hkv, r->D};
    size_t nq = (size_t)(r->B * r->T * r->Hq * r->D), nk = (size_t)(r->B * r->T * r->Hkv * r->D);
    float *buf = malloc(sizeof(float) * (4 * nq + 1)), *got = buf + 2 * nq, *want = buf + 3 * nq;
    dt_placement rep[1] = {dt_replicate()};
    /* x[0..3]: q, k, v, w seq-first, placed r->pl; y[0..3]: the same values replicated for the
     * heads-first reference */
    dt_tensor *x[4], *y[4], *t[12] = {0};
    for (int i = 0; i < 4; i++) {
        int kv = i == 1 || i == 2;
        size_t n = kv ? nk : nq;
        for (size_t e = 0; e < n; e++)
            buf[e] = (float)t_value(21 + i, e) / 3;
        R_OK(dt_tensor_distribute(mesh, buf, DT_F32, 4, kv ? sk : sq, 1, &r->pl, DT_ALL_RANKS,
                                  &x[i]));
        R_OK(dt_tensor_distribute(mesh, buf, DT_F32, 4, kv ? sk : sq, 1, rep, DT_ALL_RANKS, &y[i]));
        if (i < 3) R_OK(dt_tensor_set_requires_grad(x[i], 1));
        if (i < 3) R_OK(dt_tensor_set_requires_grad(y[i], 1));
    }
    R_OK(dt_sdpa_seq_first(x[0], x[1], x[2], 1, &t[0]));
    /* batch and heads shard in place (no move), the sequence never does */
    dt_tensor_info oi;
    R_OK(dt_tensor_info_get(t[0], &oi));
    int keeps = r->pl.kind == DT_PLACEMENT_SHARD && r->pl.dim != 1;
    R_CHECK(
        !keeps || dt_placement_equal(oi.placements[0], r->pl), "out placed %c(%d), inputs S(%d)",
        oi.placements[0].kind == DT_PLACEMENT_SHARD ? 'S' : 'R', oi.placements[0].dim, r->pl.dim);
    R_OK(dt_mul(t[0], x[3], &t[1]));
    R_OK(dt_sum(t[1], NULL, 0, 0, &t[2]));
    R_OK(dt_backward(t[2]));
    for (int i = 0; i < 3; i++)
        R_OK(dt_transpose(y[i], 1, 2, &t[3 + i]));
    R_OK(dt_sdpa(t[3], t[4], t[5], 1, &t[6]));
    R_OK(dt_transpose(t[6], 1, 2, &t[7]));
    R_OK(dt_mul(t[7], y[3], &t[8]));
    R_OK(dt_sum(t[8], NULL, 0, 0, &t[9]));
    R_OK(dt_backward(t[9]));
    dt_tensor *pairs[4][2] = {{t[0], t[7]},
                              {dt_tensor_grad(x[0]), dt_tensor_grad(y[0])},
                              {dt_tensor_grad(x[1]), dt_tensor_grad(y[1])},
                              {dt_tensor_grad(x[2]), dt_tensor_grad(y[2])}};
    for (int p = 0; p < 4; p++) {
        size_t n = p == 2 || p == 3 ? nk : nq;
        R_CHECK(pairs[p][0] && pairs[p][1], "pair %d: no gradient", p);
        R_OK(dt_tensor_full_tensor(pairs[p][0], got, n * sizeof(float)));
        R_OK(dt_tensor_full_tensor(pairs[p][1], want, n * sizeof(float)));
        for (size_t e = 0; e < n; e++)
            R_CHECK(!memcmp(&got[e], &want[e], sizeof(float)),
                    "%s element %zu: seq-first %.9g, heads-first %.9g",
                    (const char *[]){"out", "dq", "dk", "dv"}[p], e, got[e], want[e]);
    }
    free(buf);
    for (int i = 0; i < 12; i++)
        dt_tensor_release(t[i]);
    for (int i = 0; i < 4; i++)
        dt_tensor_release(x[i]), dt_tensor_release(y[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(flash_attention, seq_first_sharded_and_recorded_matches_heads_first) {
    const dt_placement pls[] = {dt_replicate(), dt_shard(0), dt_shard(1), dt_shard(2)};
    for (size_t i = 0; i < LEN(pls); i++) {
        layout_run r = {.pl = pls[i], .B = 2, .T = 37, .Hq = 4, .Hkv = 2, .D = 8};
        cr_assert_eq(dt_local_run(2, layout_body, &r, NULL), DT_OK, "placement %zu: %s", i,
                     dt_last_error());
    }
}

/* Bad layouts are named errors: a 2-D q, and a sequence that differs between q and k (read
 * as heads, a mismatch) under seq_first. */
Test(flash_attention, seq_first_bad_input_is_named) {
    tens q2 = mk(DT_F32, SH(7, 8), -1, 1), o2 = mk_out(DT_F32, SH(7, 8));
    cr_assert_eq(dt_cpu_sdpa(&q2.t, &q2.t, &q2.t, 0, 1, DT_SDPA_ALL_HEADS, 1.0, &o2.t, NULL),
                 DT_ERR_SHAPE);
    cr_assert(strstr(dt_last_error(), "seq_first"), "%s", dt_last_error());
    tens q = mk(DT_F32, SH(1, 5, 4, 8), -1, 1), k = mk(DT_F32, SH(1, 5, 3, 8), -1, 1);
    tens o = mk_out(DT_F32, SH(1, 5, 4, 8));
    cr_assert_eq(dt_cpu_sdpa(&q.t, &k.t, &k.t, 0, 1, DT_SDPA_ALL_HEADS, 1.0, &o.t, NULL),
                 DT_ERR_SHAPE);
    cr_assert(strstr(dt_last_error(), "divisor"), "%s", dt_last_error());
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
