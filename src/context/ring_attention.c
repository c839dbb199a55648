/* Ring attention (dtensor/context.h): the blocks' math (online softmax forward, the
 * log-sum-exp backward) and the two ring drivers. Rank-local data is copied into f64 once;
 * every block step reads (batch x head) slices of it. The transfers are context/ring.h's; this
 * file knows which block is where. Shapes: BH = the product of q's local leading dims, BHkv
 * k's and v's (fewer with grouped-query heads: query head h reads kv head h / G), Tl = this
 * rank's rows, Tb = a block's rows; q (BH, Tl, D), k (BHkv, Tb, D), v (BHkv, Tb, Dv). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "comm/comm_impl.h"
#include "context/ring.h"
#include "core/check.h"
#include "core/fiber.h"
#include "dtensor/context.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "trace/trace_impl.h"

static const char FN[] = "dt_ring_sdpa";

int64_t dt_cp_position(int64_t T, int cp, int64_t i) {
    if (T < 0 || cp < 1 || i < 0 || i >= T) {
        if (T < 0)
            dt_error(DT_ERR_ARG, "dt_cp_position: argument T = %lld is negative", (long long)T);
        else if (cp < 1)
            dt_error(DT_ERR_ARG, "dt_cp_position: argument cp = %d is not positive", cp);
        else
            dt_error(DT_ERR_ARG, "dt_cp_position: argument i = %lld is not in [0, %lld)",
                     (long long)i, (long long)T);
        return -1;
    }
    int64_t c = (T + 2 * cp - 1) / (2 * cp);
    for (int k = 0; k < 2 * cp; k++) {
        int64_t chunk = k % 2 == 0 ? k / 2 : 2 * cp - 1 - k / 2;
        int64_t lo = c * chunk < T ? c * chunk : T, hi = c * (chunk + 1) < T ? c * (chunk + 1) : T;
        if (i < hi - lo) return lo + i;
        i -= hi - lo;
    }
    return -1; /* not reached: the chunks cover T */
}

/* ---- the ring's geometry ------------------------------------------------------------------- */

typedef struct ring {
    dt_ctx *ctx;
    dt_comm *comm; /* the cp group, lane 1 (the communication thread's) */
    int n, me;
    int causal, lb;
    int64_t T, BH, BHkv, Hq, G, D, Dv, chunk; /* Hq: local query heads; chunk: the largest
                                                 block's rows */
    double scale;
} ring;

static int64_t rows_of(const ring *g, int o) {
    int64_t lo = g->chunk * o < g->T ? g->chunk * o : g->T;
    int64_t hi = g->chunk * (o + 1) < g->T ? g->chunk * (o + 1) : g->T;
    return hi - lo;
}

/* Original positions of the rows rank o holds. */
static void positions(const ring *g, int o, int64_t *pos) {
    int64_t lo = g->chunk * o < g->T ? g->chunk * o : g->T;
    for (int64_t j = 0; j < rows_of(g, o); j++)
        pos[j] = g->lb ? dt_cp_position(g->T, g->n, lo + j) : lo + j;
}

/* Block of rank o, in doubles: k then v, packed for its rows. */
static size_t block_len(const ring *g, int o) {
    return (size_t)(g->BHkv * rows_of(g, o) * (g->D + g->Dv));
}

static int masked(const ring *g, int64_t pq, int64_t pk) { return g->causal && pk > pq; }

/* The kv slice query slice b reads: its batch's kv head h / G. */
static int64_t kv_of(const ring *g, int64_t b) {
    int64_t Hkv = g->Hq / g->G;
    return b / g->Hq * Hkv + b % g->Hq / g->G;
}

/* ---- the math of one block ------------------------------------------------------------------ */

/* sum a[e] b[e] in four running sums (four independent chains of multiply-adds instead of one:
 * the blocks' loops spend most of their time here). */
static double dot(const double *a, const double *b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t e = 0;
    for (; e + 4 <= n; e += 4) {
        s0 += a[e] * b[e], s1 += a[e + 1] * b[e + 1];
        s2 += a[e + 2] * b[e + 2], s3 += a[e + 3] * b[e + 3];
    }
    for (; e < n; e++) s0 += a[e] * b[e];
    return (s0 + s1) + (s2 + s3);
}

/* Folds block (k, v) of Tb rows into the running (o, m, l) of the Tl query rows. */
static void block_forward(const ring *g, const double *q, const int64_t *pq, int64_t Tl,
                          const double *kv, const int64_t *pk, int64_t Tb, double *o, double *m,
                          double *l) {
    const int64_t D = g->D, Dv = g->Dv;
    double *s = malloc(sizeof(double) * (size_t)(Tb ? Tb : 1));
    for (int64_t b = 0; b < g->BH && s; b++) {
        int64_t c = kv_of(g, b);
        const double *kb = kv + c * Tb * D, *vb = kv + g->BHkv * Tb * D + c * Tb * Dv;
        for (int64_t i = 0; i < Tl; i++) {
            const double *qi = q + (b * Tl + i) * D;
            double mb = -INFINITY;
            for (int64_t j = 0; j < Tb; j++) {
                if (masked(g, pq[i], pk[j])) continue;
                s[j] = dot(qi, kb + j * D, D) * g->scale;
                mb = s[j] > mb ? s[j] : mb;
            }
            if (mb == -INFINITY) continue; /* every key of the block is in this row's future */
            double *oi = o + (b * Tl + i) * Dv, *mi = m + b * Tl + i, *li = l + b * Tl + i;
            double mn = *mi > mb ? *mi : mb, alpha = exp(*mi - mn); /* exp(-inf) = 0 at first */
            *li *= alpha;
            for (int64_t e = 0; e < Dv; e++) oi[e] *= alpha;
            for (int64_t j = 0; j < Tb; j++) {
                if (masked(g, pq[i], pk[j])) continue;
                double p = exp(s[j] - mn);
                *li += p;
                for (int64_t e = 0; e < Dv; e++) oi[e] += p * vb[j * Dv + e];
            }
            *mi = mn;
        }
    }
    free(s);
}

/* Adds block (k, v)'s part of dq, and its dk, dv (packed like the block) into dkv, from the
 * forward's log-sum-exp and delta = rowsum(dO * O). */
static void block_backward(const ring *g, const double *q, const double *dout, const double *lse,
                           const double *delta, const int64_t *pq, int64_t Tl, const double *kv,
                           const int64_t *pk, int64_t Tb, double *dq, double *dkv) {
    const int64_t D = g->D, Dv = g->Dv;
    for (int64_t b = 0; b < g->BH; b++) {
        int64_t c = kv_of(g, b);
        const double *kb = kv + c * Tb * D, *vb = kv + g->BHkv * Tb * D + c * Tb * Dv;
        double *dkb = dkv + c * Tb * D, *dvb = dkv + g->BHkv * Tb * D + c * Tb * Dv;
        for (int64_t i = 0; i < Tl; i++) {
            const double *qi = q + (b * Tl + i) * D, *doi = dout + (b * Tl + i) * Dv;
            double *dqi = dq + (b * Tl + i) * D;
            for (int64_t j = 0; j < Tb; j++) {
                if (masked(g, pq[i], pk[j])) continue;
                double p = exp(dot(qi, kb + j * D, D) * g->scale - lse[b * Tl + i]);
                double dp = dot(doi, vb + j * Dv, Dv);
                for (int64_t e = 0; e < Dv; e++) dvb[j * Dv + e] += p * doi[e];
                double ds = p * (dp - delta[b * Tl + i]) * g->scale;
                for (int64_t e = 0; e < D; e++) {
                    dqi[e] += ds * kb[j * D + e];
                    dkb[j * D + e] += ds * qi[e];
                }
            }
        }
    }
}

/* ---- local data in and out -------------------------------------------------------------- */

static void to_f64(const dt_tensor *t, double *dst) {
    if (!t->local_numel) return; /* an empty shard's data may be NULL */
    if (t->dtype == DT_F64) memcpy(dst, t->data, t->local_numel * sizeof(double));
    else
        for (size_t i = 0; i < t->local_numel; i++) dst[i] = ((const float *)t->data)[i];
}

static void from_f64(const double *src, dt_tensor *t) {
    if (!t->local_numel) return;
    if (t->dtype == DT_F64) memcpy(t->data, src, t->local_numel * sizeof(double));
    else
        for (size_t i = 0; i < t->local_numel; i++) ((float *)t->data)[i] = (float)src[i];
}

/* A tensor of t's spec with last dim `last`, filled from src (f64). */
static dt_status tensor_like(const dt_tensor *t, int64_t last, const double *src, dt_tensor **out) {
    int64_t shape[DT_MAX_NDIM];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[t->ndim - 1] = last;
    DT_CHECK(dt_tensor_alloc(t->mesh, t->device, t->dtype, t->ndim, shape, t->placements, out));
    from_f64(src, *out);
    return DT_OK;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* What backward needs besides the inputs: this rank's output and log-sum-exp, and the ring. */
typedef struct saved {
    ring g;
    int cp_dim;
    double *o, *lse;
} saved;

static void saved_free(void *p) {
    saved *s = p;
    free(s->o), free(s->lse), free(s);
}

static dt_status wait_req(dt_request **r) {
    dt_status st = *r ? dt_request_wait(*r, NULL) : DT_OK;
    *r = NULL;
    return st;
}

/* kv of this rank's block, packed (k then v), into buf. */
static void own_block(const dt_tensor *k, const dt_tensor *v, double *buf) {
    to_f64(k, buf);
    to_f64(v, buf + k->local_numel);
}

static void trace_step(const ring *g, double t0, const char *what, int s, int o) {
    if (g->ctx->trace)
        dt_trace_record(g->ctx, DT_LANE_COMPUTE, what, t0, "ring step %d: the block of cp rank %d",
                        s, o);
}

static _Thread_local dt_ring_observer_fn observer;
static _Thread_local void *observer_user;
DT_FIBER_LOCAL(observer)
DT_FIBER_LOCAL(observer_user)

void dt_ring_set_observer(dt_ring_observer_fn fn, void *user) {
    observer = fn, observer_user = user;
}

/* Step s on block o (positions pk) to the observer, if any. */
static void observe(const ring *g, int backward, int s, int o, const int64_t *pk) {
    if (!observer) return;
    int next = (g->me + 1) % g->n;
    dt_ring_step e = {.backward = backward, .step = s, .nsteps = g->n, .me = g->me,
                      .source = o, .next = next, .source_world = g->comm->members[o],
                      .next_world = g->comm->members[next], .rows = rows_of(g, o),
                      .positions = pk, .sends_kv = s < g->n - 1,
                      .sends_dkv = backward && g->n > 1};
    observer(observer_user, &e);
}

static dt_status ring_forward(const ring *g, const dt_tensor *q, const dt_tensor *k,
                              const dt_tensor *v, saved *sv) {
    int64_t Tl = rows_of(g, g->me);
    size_t cap = (size_t)(g->BHkv * g->chunk * (g->D + g->Dv));
    double *qd = malloc(sizeof(double) * (q->local_numel + 1));
    double *cur = malloc(sizeof(double) * (cap + 1)), *next = malloc(sizeof(double) * (cap + 1));
    double *m = malloc(sizeof(double) * (size_t)(g->BH * Tl + 1));
    int64_t *pq = malloc(sizeof(int64_t) * (size_t)(g->chunk + 1));
    int64_t *pk = malloc(sizeof(int64_t) * (size_t)(g->chunk + 1));
    sv->o = calloc((size_t)(g->BH * Tl * g->Dv) + 1, sizeof(double));
    sv->lse = calloc((size_t)(g->BH * Tl) + 1, sizeof(double));
    dt_status st = DT_OK;
    dt_request *req = NULL;
    if (!qd || !cur || !next || !m || !pq || !pk || !sv->o || !sv->lse) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for blocks of %zu elements", FN, cap);
        goto out;
    }
    to_f64(q, qd);
    own_block(k, v, cur);
    positions(g, g->me, pq);
    for (int64_t i = 0; i < g->BH * Tl; i++) m[i] = -INFINITY;
    for (int s = 0; s < g->n && st == DT_OK; s++) {
        int o = (g->me - s + g->n) % g->n, from = (o - 1 + g->n) % g->n;
        /* The next block travels while this one is computed. */
        if (s < g->n - 1)
            st = dt_ring_shift_start(g->comm, cur, block_len(g, o), next, block_len(g, from), &req);
        double t0 = g->ctx->trace ? dt_now_us() : 0;
        positions(g, o, pk);
        observe(g, 0, s, o, pk);
        if (st == DT_OK) block_forward(g, qd, pq, Tl, cur, pk, rows_of(g, o), sv->o, m, sv->lse);
        trace_step(g, t0, "ring_attention", s, o);
        dt_status w = wait_req(&req);
        st = st == DT_OK ? w : st;
        double *t = cur;
        cur = next, next = t;
    }
    for (int64_t i = 0; st == DT_OK && i < g->BH * Tl; i++) { /* lse holds l until here */
        double l = sv->lse[i];
        for (int64_t e = 0; e < g->Dv; e++) sv->o[i * g->Dv + e] /= l;
        sv->lse[i] = m[i] + log(l);
    }
out:
    if (req) dt_request_wait(req, NULL);
    free(qd), free(cur), free(next), free(m), free(pq), free(pk);
    return st;
}

/* ---- backward ----------------------------------------------------------------------------- */

static dt_status ring_backward(const ring *g, const dt_tensor *q, const dt_tensor *k,
                               const dt_tensor *v, const saved *sv, const dt_tensor *dout,
                               double *dq, double *dkv_out) {
    int64_t Tl = rows_of(g, g->me);
    size_t cap = (size_t)(g->BHkv * g->chunk * (g->D + g->Dv));
    double *qd = malloc(sizeof(double) * (q->local_numel + 1));
    double *dod = malloc(sizeof(double) * (dout->local_numel + 1));
    double *delta = malloc(sizeof(double) * (size_t)(g->BH * Tl + 1));
    double *cur = malloc(sizeof(double) * (cap + 1)), *next = malloc(sizeof(double) * (cap + 1));
    double *acc[2] = {malloc(sizeof(double) * (cap + 1)), malloc(sizeof(double) * (cap + 1))};
    double *in = malloc(sizeof(double) * (cap + 1));
    int64_t *pq = malloc(sizeof(int64_t) * (size_t)(g->chunk + 1));
    int64_t *pk = malloc(sizeof(int64_t) * (size_t)(g->chunk + 1));
    dt_status st = DT_OK;
    dt_request *kv_req = NULL, *dkv_req = NULL;
    if (!qd || !dod || !delta || !cur || !next || !acc[0] || !acc[1] || !in || !pq || !pk) {
        st = dt_error(DT_ERR_NOMEM, "dt_backward: %s: out of memory for blocks of %zu elements", FN,
                      cap);
        goto out;
    }
    to_f64(q, qd);
    to_f64(dout, dod);
    own_block(k, v, cur);
    positions(g, g->me, pq);
    for (int64_t i = 0; i < g->BH * Tl; i++) {
        double d = 0;
        for (int64_t e = 0; e < g->Dv; e++) d += dod[i * g->Dv + e] * sv->o[i * g->Dv + e];
        delta[i] = d;
    }
    memset(dq, 0, sizeof(double) * q->local_numel);
    /* Step s holds the block of cp rank o = me - s; its key/value gradient so far arrives from
     * the previous rank (which held it at step s - 1), gets this rank's part and moves on, so
     * after the last step each block's gradient reaches home. */
    for (int s = 0; s < g->n && st == DT_OK; s++) {
        int o = (g->me - s + g->n) % g->n, from = (o - 1 + g->n) % g->n;
        if (s < g->n - 1)
            st = dt_ring_shift_start(g->comm, cur, block_len(g, o), next, block_len(g, from),
                                     &kv_req);
        double *a = acc[s % 2]; /* the other one may still be on its way out */
        double t0 = g->ctx->trace ? dt_now_us() : 0;
        memset(a, 0, sizeof(double) * block_len(g, o));
        positions(g, o, pk);
        observe(g, 1, s, o, pk);
        if (st == DT_OK)
            block_backward(g, qd, dod, sv->lse, delta, pq, Tl, cur, pk, rows_of(g, o), dq, a);
        trace_step(g, t0, "ring_attention_backward", s, o);
        dt_status w = wait_req(&dkv_req); /* the gradient so far of block o */
        st = st == DT_OK ? w : st;
        for (size_t i = 0; s > 0 && st == DT_OK && i < block_len(g, o); i++) a[i] += in[i];
        if (st == DT_OK && g->n > 1)
            st = dt_ring_shift_start(g->comm, a, block_len(g, o), in, block_len(g, from), &dkv_req);
        w = wait_req(&kv_req);
        st = st == DT_OK ? w : st;
        double *t = cur;
        cur = next, next = t;
    }
    dt_status w = wait_req(&dkv_req); /* this rank's own block, home */
    st = st == DT_OK ? w : st;
    if (st == DT_OK)
        memcpy(dkv_out, g->n > 1 ? in : acc[0], sizeof(double) * block_len(g, g->me));
out:
    wait_req(&kv_req), wait_req(&dkv_req);
    free(qd), free(dod), free(delta), free(cur), free(next), free(acc[0]), free(acc[1]), free(in);
    free(pq), free(pk);
    return st;
}

static dt_status backward(void *state, dt_tensor *const *in, const bool *need, dt_tensor *grad,
                          dt_tensor **gin) {
    saved *sv = state;
    dt_tensor *q = in[0], *k = in[1], *v = in[2], *dout = grad;
    dt_status st = DT_OK;
    /* The output's gradient in the output's layout (q's placements). */
    int same = 1;
    for (int m = 0; m < q->mesh->ndim; m++)
        same &= dt_placement_equal(grad->placements[m], q->placements[m]);
    if (!same) DT_CHECK(dt_tensor_redistribute(grad, q->mesh->ndim, q->placements, &dout));
    double *dq = malloc(sizeof(double) * (q->local_numel + 1));
    double *dkv = malloc(sizeof(double) * (k->local_numel + v->local_numel + 1));
    if (!dq || !dkv) st = dt_error(DT_ERR_NOMEM, "dt_backward: %s: out of memory", FN);
    if (st == DT_OK) st = ring_backward(&sv->g, q, k, v, sv, dout, dq, dkv);
    if (st == DT_OK && need[0]) st = tensor_like(q, sv->g.D, dq, &gin[0]);
    if (st == DT_OK && need[1]) st = tensor_like(k, sv->g.D, dkv, &gin[1]);
    if (st == DT_OK && need[2]) st = tensor_like(v, sv->g.Dv, dkv + k->local_numel, &gin[2]);
    if (dout != grad) dt_tensor_release(dout);
    free(dq), free(dkv);
    return st;
}

/* ---- the entry point ---------------------------------------------------------------------- */

static dt_status check(dt_tensor *q, dt_tensor *k, dt_tensor *v, int cp_dim) {
    DT_CHECK(dt_tensor_check(FN, "q", q));
    DT_CHECK(dt_tensor_check(FN, "k", k));
    DT_CHECK(dt_tensor_check(FN, "v", v));
    int nd = q->ndim, mnd = q->mesh->ndim;
    DT_ARG(cp_dim >= 0 && cp_dim < mnd, "%s: argument cp_dim = %d is not in [0, %d)", FN, cp_dim,
           mnd);
    if (!dt_mesh_equal(k->mesh, q->mesh) || !dt_mesh_equal(v->mesh, q->mesh))
        return dt_error(DT_ERR_MESH, "%s: q, k and v must live on one mesh", FN);
    if (q->dtype != DT_F32 && q->dtype != DT_F64)
        return dt_error(DT_ERR_DTYPE, "%s: q is %s (f32 or f64 only)", FN, dt_dtype_name(q->dtype));
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return dt_error(DT_ERR_DTYPE, "%s: q, k and v dtypes differ", FN);
    if (nd < 2 || k->ndim != nd || v->ndim != nd)
        return dt_error(DT_ERR_SHAPE, "%s: q, k, v need the same number of dims (at least 2)", FN);
    for (int d = 0; d < nd - 1; d++) {
        if (v->shape[d] != k->shape[d] || (k->shape[d] != q->shape[d] && d != nd - 3))
            return dt_error(DT_ERR_SHAPE, "%s: dim %d differs (q %lld, k %lld, v %lld): self "
                                          "attention over one sequence", FN, d,
                            (long long)q->shape[d], (long long)k->shape[d],
                            (long long)v->shape[d]);
        if (d == nd - 3 && (k->shape[d] == 0 || q->shape[d] % k->shape[d] != 0))
            return dt_error(DT_ERR_SHAPE, "%s: k and v have %lld heads, which must divide q's "
                                          "%lld (grouped-query attention)", FN,
                            (long long)k->shape[d], (long long)q->shape[d]);
    }
    /* Grouped heads sharded over a mesh dim: every rank must hold whole groups. */
    if (nd > 2 && k->shape[nd - 3] && q->shape[nd - 3] != k->shape[nd - 3]) {
        int64_t G = q->shape[nd - 3] / k->shape[nd - 3];
        if (q->local_shape[nd - 3] != G * k->local_shape[nd - 3] ||
            q->local_offset[nd - 3] != G * k->local_offset[nd - 3])
            return dt_error(DT_ERR_PLACEMENT, "%s: the head shards split a group of %lld query "
                                              "heads from its kv head", FN, (long long)G);
    }
    if (k->shape[nd - 1] != q->shape[nd - 1])
        return dt_error(DT_ERR_SHAPE, "%s: q and k feature sizes differ", FN);
    if (q->device.kind != DT_DEVICE_CPU || k->device.kind != DT_DEVICE_CPU ||
        v->device.kind != DT_DEVICE_CPU)
        return dt_error(DT_ERR_UNSUPPORTED, "%s: CPU tensors only (for now)", FN);
    for (int m = 0; m < mnd; m++) {
        dt_placement p = q->placements[m];
        char text[32];
        dt_placements_format(&p, 1, text, sizeof text);
        if (!dt_placement_equal(k->placements[m], p) || !dt_placement_equal(v->placements[m], p))
            return dt_error(DT_ERR_PLACEMENT, "%s: q, k and v placements differ on mesh dim %d",
                            FN, m);
        if (m == cp_dim && !(p.kind == DT_PLACEMENT_SHARD && p.dim == nd - 2))
            return dt_error(DT_ERR_PLACEMENT, "%s: mesh dim %d (cp) is %s; it must shard the "
                                              "sequence, S(%d)", FN, m, text, nd - 2);
        if (m != cp_dim && (p.kind == DT_PLACEMENT_PARTIAL ||
                            (p.kind == DT_PLACEMENT_SHARD && p.dim >= nd - 2)))
            return dt_error(DT_ERR_PLACEMENT, "%s: mesh dim %d is %s: other mesh dims may only "
                                              "replicate or shard the leading dims", FN, m, text);
    }
    return DT_OK;
}

dt_status dt_ring_sdpa(dt_tensor *q, dt_tensor *k, dt_tensor *v, int cp_dim, int causal,
                       int load_balanced, dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check(q, k, v, cp_dim));
    int nd = q->ndim;
    saved *sv = calloc(1, sizeof *sv);
    if (!sv) return dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    ring *g = &sv->g;
    sv->cp_dim = cp_dim;
    g->ctx = q->mesh->ctx, g->causal = causal != 0, g->lb = load_balanced != 0;
    g->T = q->shape[nd - 2], g->D = q->shape[nd - 1], g->Dv = v->shape[nd - 1];
    g->BH = g->BHkv = 1;
    for (int d = 0; d < nd - 2; d++) g->BH *= q->local_shape[d], g->BHkv *= k->local_shape[d];
    g->Hq = nd > 2 ? q->local_shape[nd - 3] : 1;
    g->G = nd > 2 ? q->shape[nd - 3] / k->shape[nd - 3] : 1;
    g->scale = g->D ? 1 / sqrt((double)g->D) : 1;
    dt_status st = dt_mesh_lane_comm(q->mesh, 1u << cp_dim, 1, &g->comm);
    dt_tensor *o = NULL;
    if (st == DT_OK) {
        g->n = dt_comm_size(g->comm), g->me = dt_comm_rank(g->comm);
        g->chunk = (g->T + g->n - 1) / g->n;
        st = ring_forward(g, q, k, v, sv);
    }
    if (st == DT_OK) st = tensor_like(q, g->Dv, sv->o, &o);
    dt_tensor *in[3] = {q, k, v};
    if (st == DT_OK && dt_autograd_wants(in, 3)) {
        st = dt_autograd_record_custom("ring_sdpa", in, 3, o, backward, sv, saved_free);
        sv = NULL; /* the node owns it (or freed it) */
    }
    if (sv) saved_free(sv);
    if (st != DT_OK) {
        dt_tensor_release(o);
        return st;
    }
    *out = o;
    return DT_OK;
}
