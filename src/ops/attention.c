/* Scaled dot-product attention on (batch..., heads, T, D) inputs, and its backward: batch and
 * head dims shard (tensor-parallel attention with heads sharded); the sequence and feature
 * dims stay whole. Grouped-query attention (torch's enable_gqa): k and v may have fewer heads
 * than q, query head h reading kv head h / (Hq / Hkv); heads then shard only where every
 * shard keeps whole groups.
 *
 * With seq_first (dt_sdpa_seq_first) q, k, v and out are (..., T, H, D), the projections'
 * layout, and the heads are dim nd - 2; the kernels address that layout directly.
 *
 * The forward's other output is each query row's log-sum-exp (..., Hq, Tq), computed when
 * asked for or when autograd records the call: the backward (q, k, v, grad_out, lse) ->
 * dq, with dk and dv as its other outputs, rebuilds the probabilities from it. */
#include <math.h>
#include <string.h>

#include "core/check.h"
#include "ops/grad.h"
#include "ops/kernel_args.h"
#include "ops/op_impl.h"

static dt_status infer_forward(const op_input *in, op_out *out) {
    const op_input *q = &in[0], *k = &in[1], *v = &in[2];
    int nd = q->ndim;
    if (nd < 2 || k->ndim != nd || v->ndim != nd)
        return dt_error(DT_ERR_SHAPE, "scaled_dot_product_attention: q, k, v must have the same "
                                      "number of dims (at least 2)");
    for (int d = 0; d < nd - 2; d++) {
        if (k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d]) continue;
        /* The head dim (nd - 3) of k and v may divide q's: grouped-query attention. */
        int gqa = d == nd - 3 && k->shape[d] > 0 && v->shape[d] == k->shape[d] &&
                  q->shape[d] % k->shape[d] == 0;
        if (!gqa)
            return dt_error(DT_ERR_SHAPE, "scaled_dot_product_attention: dim %d differs (q %lld, "
                            "k %lld, v %lld)%s", d, (long long)q->shape[d],
                            (long long)k->shape[d], (long long)v->shape[d],
                            d == nd - 3 ? ": k and v heads must be equal and divide q's" : "");
    }
    if (k->shape[nd - 1] != q->shape[nd - 1] || v->shape[nd - 2] != k->shape[nd - 2])
        return dt_error(DT_ERR_SHAPE, "scaled_dot_product_attention: q/k feature sizes or k/v "
                                      "lengths differ");
    if (q->dtype != k->dtype || q->dtype != v->dtype || q->dtype == DT_I32 || q->dtype == DT_I64)
        return dt_error(DT_ERR_DTYPE, "scaled_dot_product_attention: q, k, v must share a float "
                                      "dtype");
    out->ndim = nd;
    for (int d = 0; d < nd - 1; d++) out->shape[d] = q->shape[d];
    out->shape[nd - 1] = v->shape[nd - 1];
    out->dtype = q->dtype;
    return DT_OK;
}

/* The log-sum-exp rows of q: (..., Tq). */
static op_out lse_spec(const op_input *q) {
    op_out o = {.ndim = q->ndim - 1, .dtype = dt_sdpa_lse_dtype(q->dtype)};
    for (int d = 0; d < o.ndim; d++) o.shape[d] = q->shape[d];
    return o;
}

/* x's spec with dims nd - 2 - back and nd - 1 - back swapped: a seq_first input seen heads
 * first ((..., T, H, D) as (..., H, T, D); back 0 for the lse rows, (..., Tq, Hq)). */
static op_input swap_dims(const op_input *x, int back, int64_t *shape) {
    op_input s = *x;
    if (x->ndim <= 0) return s;
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    int a = x->ndim - 2 - back;
    if (a >= 0) shape[a] = x->shape[a + 1], shape[a + 1] = x->shape[a];
    s.shape = shape;
    return s;
}

static int same_spec(const op_input *a, const op_out *b) {
    if (a->ndim != b->ndim || a->dtype != b->dtype) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static dt_status infer_heads_first(dt_op op, const op_input *in, int n, op_out *out);

/* seq_first: the heads-first checks on the swapped specs, the output swapped back. */
static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    if (!a->seq_first) return infer_heads_first(op, in, n, out);
    if (in[0].ndim < 3)
        return dt_error(DT_ERR_SHAPE, "%s: seq_first takes q as (..., T, H, D), got %d-D",
                        dt_op_name(op), in[0].ndim);
    op_input h[5];
    int64_t shapes[5][DT_MAX_NDIM];
    for (int i = 0; i < n && i < 5; i++)
        h[i] = swap_dims(&in[i], i == 4 ? 0 : 1, shapes[i]);
    DT_CHECK(infer_heads_first(op, h, n, out));
    int d = out->ndim - 3;
    int64_t t = out->shape[d];
    out->shape[d] = out->shape[d + 1], out->shape[d + 1] = t;
    return DT_OK;
}

static dt_status infer_heads_first(dt_op op, const op_input *in, int n, op_out *out) {
    const char *name = dt_op_name(op);
    if (op == DT_OP_SDPA && n != 3) return dt_error(DT_ERR_ARG, "%s: takes q, k, v", name);
    if (op == DT_OP_SDPA) return infer_forward(in, out);
    if (n != 5) return dt_error(DT_ERR_ARG, "%s: takes q, k, v, grad_out, lse", name);
    op_out o;
    DT_CHECK(infer_forward(in, &o));
    op_out l = lse_spec(&in[0]);
    if (!same_spec(&in[3], &o))
        return dt_error(DT_ERR_SHAPE, "%s: grad_out must have the output's shape and dtype",
                        name);
    if (!same_spec(&in[4], &l))
        return dt_error(DT_ERR_SHAPE, "%s: lse must be (..., Tq) of %s, one per query row", name,
                        dt_dtype_name(l.dtype));
    out->ndim = in[0].ndim;
    memcpy(out->shape, in[0].shape, sizeof(int64_t) * (size_t)in[0].ndim);
    out->dtype = in[0].dtype;
    return DT_OK;
}

static int aux(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *o,
               int *for_grad) {
    (void)n, (void)a;
    if (op == DT_OP_SDPA) {
        o[0] = lse_spec(&in[0]);
        *for_grad = 1;
        return 1;
    }
    for (int i = 0; i < 2; i++) { /* dk, dv: Partial(sum) where q's heads split over whole k, v */
        o[i] = (op_out){.ndim = in[1 + i].ndim, .dtype = in[1 + i].dtype, .grad_of = 2 + i};
        memcpy(o[i].shape, in[1 + i].shape, sizeof(int64_t) * (size_t)in[1 + i].ndim);
    }
    *for_grad = 0;
    return 2;
}

/* Whether torch.chunk of hq query heads and hkv kv heads over m ranks gives every rank whole
 * groups: each boundary of the kv chunks, times the group size, is the q chunks' boundary. */
static int groups_aligned(int64_t hq, int64_t hkv, int m) {
    int64_t g = hq / hkv, cq = (hq + m - 1) / m, ck = (hkv + m - 1) / m;
    for (int i = 1; i < m; i++) {
        int64_t bq = cq * i < hq ? cq * i : hq, bk = ck * i < hkv ? ck * i : hkv;
        if (bq != g * bk) return 0;
    }
    return 1;
}

/* Whether every torch.chunk of hq query heads over m ranks reads its kv heads (of hkv, k and v
 * whole on every rank) as the kernels take them (dt_sdpa_heads): whole groups from a group's
 * start, or heads within one group. */
static int heads_fit(int64_t hq, int64_t hkv, int m) {
    if (hkv <= 0 || hq % hkv) return 0;
    int64_t g = hq / hkv, c = (hq + m - 1) / m;
    for (int i = 0; i < m; i++) {
        int64_t b = c * i < hq ? c * i : hq, e = c * (i + 1) < hq ? c * (i + 1) : hq;
        if (e > b && !(b % g == 0 && (e - b) % g == 0) && b / g != (e - 1) / g) return 0;
    }
    return 1;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)op, (void)mesh_total;
    int k = 0, nd = in[0].ndim;
    rule_row r = {.out = RP};
    for (int i = 0; i < n; i++) r.in[i] = RP;
    rows[k++] = r;
    for (int e = 0; e < nd - 2; e++) {
        /* the batch dims and the heads: dim nd - 3 heads first, nd - 2 seq_first (whose
         * nd - 3, the sequence, stays whole) */
        int d = a->seq_first && e == nd - 3 ? nd - 2 : e;
        int64_t hq = in[0].shape[d], hkv = in[1].shape[d];
        /* Grouped heads: the chunk boundaries must line up over this mesh dim; combine_ok
         * checks a head dim that several mesh dims split together. */
        if (hq != hkv && !groups_aligned(hq, hkv, mesh_size)) continue;
        r.out = SP(d);
        for (int i = 0; i < n; i++) r.in[i] = SP(d);
        rows[k++] = r;
    }
    /* q's heads split while k and v stay whole (tensor-parallel attention with fewer kv heads
     * than ranks): each rank reads the kv heads of its own query heads in place, no repeated
     * copies; the backward's dk and dv come out Partial(sum). Only where the heads cannot
     * shard k and v along (whole groups per rank): there the row above slices a whole k for
     * free and keeps dk, dv sharded, which sums nothing and holds no zeros. */
    int h = a->seq_first ? nd - 2 : nd - 3;
    if (nd >= 3 && !groups_aligned(in[0].shape[h], in[1].shape[h], mesh_size) &&
        heads_fit(in[0].shape[h], in[1].shape[h], mesh_size)) {
        r.out = SP(h);
        for (int i = 0; i < n; i++)
            r.in[i] = i == 1 || i == 2 ? RP : SP(h);
        rows[k++] = r;
    }
    return k;
}

/* Grouped heads that several mesh dims split (nested: the first splits, the next splits each
 * piece) keep whole groups on every rank when the kv heads divide evenly over all of them;
 * one mesh dim alone was checked by rules. */
static int combine_ok(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_ndim,
                      const int *mesh_shape, const dt_placement (*in_pl)[DT_MESH_MAX_NDIM],
                      const dt_placement *out_pl) {
    (void)op, (void)n, (void)out_pl;
    int h = in[0].ndim - (a->seq_first ? 2 : 3);
    if (h < 0) return 1;
    int dims = 0, ranks = 1, whole_kv = 0, split_kv = 0;
    for (int m = 0; m < mesh_ndim; m++)
        if (in_pl[0][m].kind == DT_PLACEMENT_SHARD && in_pl[0][m].dim == h) {
            dims++, ranks *= mesh_shape[m];
            if (in_pl[1][m].kind == DT_PLACEMENT_SHARD)
                split_kv = 1;
            else
                whole_kv = 1;
        }
    /* q's heads split over whole k, v on several mesh dims: even chunks that fit (heads_fit);
     * never mixed with mesh dims that split k and v too */
    if (whole_kv)
        return !split_kv && (dims < 2 || (in[0].shape[h] % ranks == 0 &&
                                          heads_fit(in[0].shape[h], in[1].shape[h], ranks)));
    if (in[0].shape[h] == in[1].shape[h]) return 1;
    return dims < 2 || in[1].shape[h] % ranks == 0;
}

/* Which of the call's query heads this rank's q block holds, relative to the kv heads its k
 * block holds: {0, 0} (a plain call) where k's block is exactly the kv heads of q's. */
static dt_sdpa_heads heads_of(const local_call *c) {
    int nd = c->global[0].ndim, h = nd - (c->args->seq_first ? 2 : 3);
    if (h < 0 || nd < 3) return DT_SDPA_ALL_HEADS;
    int64_t hq = c->global[0].shape[h], hkv = c->global[1].shape[h];
    int64_t ql = c->in[0].shape[h], kl = c->in[1].shape[h], g = hkv > 0 ? hq / hkv : 1;
    int64_t qo = c->in_offset[0][h], ko = c->in_offset[1][h];
    if (ql * hkv == kl * hq && qo == ko * g) return DT_SDPA_ALL_HEADS;
    return (dt_sdpa_heads){qo - ko * g, kl * g};
}

static dt_status compute(local_call *c) {
    double scale = c->args->scalar;
    if (scale == 0) scale = 1.0 / sqrt((double)c->global[0].shape[c->global[0].ndim - 1]);
    const dt_local *in = c->in;
    dt_sdpa_heads heads = heads_of(c);
    if (c->op == DT_OP_SDPA)
        return c->k->sdpa(&in[0], &in[1], &in[2], c->args->causal, c->args->seq_first, heads, scale,
                          &c->out, c->naux ? &c->aux[0] : NULL);
    return c->k->sdpa_backward(&in[3], &in[0], &in[1], &in[2], &in[4], c->args->causal,
                               c->args->seq_first, heads, scale, &c->out, &c->aux[0], &c->aux[1]);
}

const op_family dt_family_attention = {
    .infer = infer, .rules = rules, .compute = compute, .aux = aux, .combine_ok = combine_ok,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* From the log-sum-exp the forward saved: one scaled_dot_product_attention_backward call,
 * sharded as the forward was (batch or heads), rebuilds P = exp(q k^T * scale - lse) a kv
 * head at a time and returns dq, dk and dv; no softmax pass and no (..., Tq, Tk) tensor. */
dt_status dt_grad_sdpa(const dt_grad_call *c, dt_tensor **gin) {
    if (c->nsaved < 1)
        return dt_error(DT_ERR_ARG, "dt_backward: scaled_dot_product_attention saved no "
                                    "log-sum-exp");
    dt_tensor *in[5] = {IN(0), IN(1), IN(2), c->grad, c->saved[0]}, *g[3], *aux[2];
    dt_status st = dt_op_call_aux(DT_OP_SDPA_BACKWARD, in, 5, c->args, &g[0], aux, 2);
    if (st != DT_OK) return st;
    g[1] = aux[0], g[2] = aux[1];
    for (int i = 0; i < 3; i++) {
        if (c->need[i])
            gin[i] = g[i];
        else
            dt_tensor_release(g[i]);
    }
    return DT_OK;
}
