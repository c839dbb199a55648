/* Argument checks and index plans shared by the CPU and CUDA kernels (kernel_args.h). */
#include "ops/kernel_args.h"
#include "core/check.h"

dt_status dt_bcast_init(dt_bcast *it, const char *fn, const dt_local *out,
                        const dt_local *const *in, int nin) {
    int nd = out->ndim;
    int64_t st[3][DT_MAX_NDIM];
    for (int k = 0; k < nin; k++) {
        const dt_local *t = in[k];
        if (t->ndim > nd)
            return dt_error(DT_ERR_SHAPE, "%s: input %d has %d dims, the output only %d", fn, k,
                            t->ndim, nd);
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int td = d - (nd - t->ndim);
            int64_t sz = td < 0 ? 1 : t->shape[td];
            if (sz != out->shape[d] && sz != 1)
                return dt_error(DT_ERR_SHAPE, "%s: input %d dim %d has size %lld, cannot "
                                "broadcast to %lld", fn, k, td, (long long)sz,
                                (long long)out->shape[d]);
            st[k][d] = sz == 1 ? 0 : s;
            s *= sz;
        }
    }
    it->ndim = 0;
    for (int d = 0; d < nd; d++) {
        if (out->shape[d] == 1) continue;
        int p = it->ndim - 1, merge = p >= 0;
        for (int k = 0; k < nin && merge; k++)
            merge = it->stride[k][p] == st[k][d] * out->shape[d];
        if (merge) {
            it->shape[p] *= out->shape[d];
            for (int k = 0; k < nin; k++) it->stride[k][p] = st[k][d];
        } else {
            it->shape[it->ndim] = out->shape[d];
            for (int k = 0; k < nin; k++) it->stride[k][it->ndim] = st[k][d];
            it->ndim++;
        }
    }
    if (it->ndim == 0) {
        it->ndim = 1;
        it->shape[0] = 1;
        for (int k = 0; k < nin; k++) it->stride[k][0] = 0;
    }
    return DT_OK;
}

static size_t batch_numel(const dt_local *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim - 2; d++) n *= (size_t)t->shape[d];
    return n;
}

/* Strides in matrices of t's batch dims, aligned to out's nb batch dims (0 when broadcast). */
static dt_status batch_strides(const char *fn, const dt_local *t, const dt_local *out, int nb,
                               int64_t *st, const char *name) {
    int tb = t->ndim - 2;
    int64_t s = 1;
    for (int d = nb - 1; d >= 0; d--) {
        int td = d - (nb - tb);
        int64_t sz = td < 0 ? 1 : t->shape[td];
        if (sz != out->shape[d] && sz != 1)
            return dt_error(DT_ERR_SHAPE, "%s: %s batch dim %d has size %lld, out %lld", fn, name,
                            td, (long long)sz, (long long)out->shape[d]);
        st[d] = sz == 1 ? 0 : s;
        s *= sz;
    }
    return DT_OK;
}

dt_status dt_matmul_check(const char *fn, const dt_local *a, const dt_local *b, int trans,
                          const dt_local *out, dt_matmul_dims *m) {
    dt_dtype dt = a->dtype;
    if (dt_matmul_is_float8(dt)) {
        if (!dt_matmul_is_float8(b->dtype) || out->dtype != DT_F32)
            return dt_error(DT_ERR_DTYPE, "%s: a float8 GEMM takes float8 a and b and gives f32 "
                            "(got %s, %s, out %s)", fn, dt_dtype_name(dt),
                            dt_dtype_name(b->dtype), dt_dtype_name(out->dtype));
    } else if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16) {
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(dt));
    } else if (b->dtype != dt || out->dtype != dt) {
        return dt_error(DT_ERR_DTYPE, "%s: dtypes %s, %s, out %s differ", fn, dt_dtype_name(dt),
                        dt_dtype_name(b->dtype), dt_dtype_name(out->dtype));
    }
    int nb = out->ndim - 2;
    if (a->ndim < 2 || b->ndim < 2 || nb < a->ndim - 2 || nb < b->ndim - 2)
        return dt_error(DT_ERR_SHAPE, "%s: needs 2+ dims (a %d, b %d, out %d)", fn, a->ndim,
                        b->ndim, out->ndim);
    if (trans & ~(DT_MM_TRANS_A | DT_MM_TRANS_B))
        return dt_error(DT_ERR_ARG, "%s: trans %d has bits other than DT_MM_TRANS_A/B", fn, trans);
    int ta = (trans & DT_MM_TRANS_A) != 0, tb = (trans & DT_MM_TRANS_B) != 0;
    int64_t M = a->shape[a->ndim - (ta ? 1 : 2)], K = a->shape[a->ndim - (ta ? 2 : 1)];
    int64_t bK = b->shape[b->ndim - (tb ? 1 : 2)], N = b->shape[b->ndim - (tb ? 2 : 1)];
    if (bK != K || out->shape[nb] != M || out->shape[nb + 1] != N)
        return dt_error(DT_ERR_SHAPE, "%s: (%lld, %lld) @ b with K %lld, N %lld into (%lld, %lld)",
                        fn, (long long)M, (long long)K, (long long)bK, (long long)N,
                        (long long)out->shape[nb], (long long)out->shape[nb + 1]);
    DT_CHECK(batch_strides(fn, a, out, nb, m->sa, "a"));
    DT_CHECK(batch_strides(fn, b, out, nb, m->sb, "b"));
    m->nb = nb, m->M = M, m->K = K, m->N = N;
    m->batches = batch_numel(out);
    m->b_batches = batch_numel(b);
    return DT_OK;
}

dt_status dt_scatter_check(const char *fn, const dt_local *src, int dim, const dt_local *index,
                           const dt_local *out) {
    dt_dtype t = src->dtype;
    if (t != DT_F32 && t != DT_F64 && t != DT_BF16 && t != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: src must be a float dtype, not %s", fn,
                        dt_dtype_name(t));
    if (index->dtype != DT_I32 && index->dtype != DT_I64)
        return dt_error(DT_ERR_DTYPE, "%s: index must be i32 or i64, not %s", fn,
                        dt_dtype_name(index->dtype));
    int nd = src->ndim;
    if (dim < 0 || dim >= nd || index->ndim != nd || out->ndim != nd)
        return dt_error(DT_ERR_SHAPE, "%s: dim %d, src %d-D, index %d-D, out %d-D", fn, dim, nd,
                        index->ndim, out->ndim);
    return DT_OK;
}

dt_status dt_topk_check(const char *fn, const dt_local *x, int64_t k, int dim, int64_t *outer,
                        int64_t *len, int64_t *inner) {
    if (dt_dtype_size(x->dtype) == 0)
        return dt_error(DT_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)x->dtype);
    if (dim < 0 || dim >= x->ndim)
        return dt_error(DT_ERR_ARG, "%s: dim %d of a %d-D tensor", fn, dim, x->ndim);
    *len = x->shape[dim], *inner = 1, *outer = 1;
    if (k < 0 || k > *len)
        return dt_error(DT_ERR_ARG, "%s: k = %lld is not in [0, %lld]", fn, (long long)k,
                        (long long)*len);
    for (int d = 0; d < dim; d++) *outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) *inner *= x->shape[d];
    return DT_OK;
}

static int64_t batch_of(const dt_local *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim - 2; d++) n *= t->shape[d];
    return n;
}

/* t's shape with dims nd - 2 - back and nd - 1 - back swapped (nothing moves in memory): a
 * seq-first block seen heads first. */
static dt_local swapped(const dt_local *t, int back) {
    dt_local s = *t;
    int a = t->ndim - 2 - back;
    if (a >= 0) s.shape[a] = t->shape[a + 1], s.shape[a + 1] = t->shape[a];
    return s;
}

static dt_status sdpa_check(const char *fn, const dt_local *q, const dt_local *k, const dt_local *v,
                            const dt_local *out, const dt_local *lse, dt_sdpa_dims *dims);

/* The kv heads [*kv0, *kv0 + *kvn) that q's heads [heads.offset, + hq) of heads.total read,
 * of the hkv that k and v hold: whole groups from a group's start, or heads within one group
 * (a uniform count of query heads per kv head, as the kernels' items need). */
static dt_status heads_range(const char *fn, dt_sdpa_heads heads, int64_t hq, int64_t hkv,
                             int64_t *kv0, int64_t *kvn) {
    int64_t off = heads.offset, tot = heads.total;
    if (hkv <= 0 || tot % hkv || off < 0 || off + hq > tot)
        return dt_error(DT_ERR_SHAPE, "%s: heads [%lld, %lld) of %lld do not fit %lld kv heads", fn,
                        (long long)off, (long long)(off + hq), (long long)tot, (long long)hkv);
    int64_t g = tot / hkv;
    *kv0 = off / g;
    if (hq == 0)
        *kvn = 0;
    else if (off % g == 0 && hq % g == 0)
        *kvn = hq / g;
    else if ((off + hq - 1) / g == *kv0)
        *kvn = 1;
    else
        return dt_error(DT_ERR_SHAPE,
                        "%s: heads [%lld, %lld) of %lld split kv head groups of "
                        "%lld unevenly",
                        fn, (long long)off, (long long)(off + hq), (long long)tot, (long long)g);
    return DT_OK;
}

dt_status dt_sdpa_check(const char *fn, int seq_first, dt_sdpa_heads heads, const dt_local *q,
                        const dt_local *k, const dt_local *v, const dt_local *out,
                        const dt_local *lse, dt_sdpa_dims *dims) {
    if (seq_first && q->ndim < 3)
        return dt_error(DT_ERR_SHAPE, "%s: seq_first q must be (..., T, H, D), got %d-D", fn,
                        q->ndim);
    if (heads.total > 0 && q->ndim < 3)
        return dt_error(DT_ERR_SHAPE,
                        "%s: a range of heads needs (..., H, T, D) blocks, got "
                        "%d-D",
                        fn, q->ndim);
    dt_local h[5];
    if (seq_first) {
        h[0] = swapped(q, 1), h[1] = swapped(k, 1), h[2] = swapped(v, 1), h[3] = swapped(out, 1);
        if (lse) h[4] = swapped(lse, 0);
        q = &h[0], k = &h[1], v = &h[2], out = &h[3], lse = lse ? &h[4] : NULL;
    }
    int nd = q->ndim;
    int64_t hkv = nd >= 3 ? k->shape[nd - 3] : 1, kv0 = 0, kvn = hkv;
    dt_local kw, vw;
    if (heads.total > 0) { /* checked as if k and v held only the kv heads q reads */
        if (v->ndim != nd || k->ndim != nd || v->shape[nd - 3] != hkv)
            return dt_error(DT_ERR_SHAPE, "%s: k and v must hold the same heads", fn);
        DT_CHECK(heads_range(fn, heads, q->shape[nd - 3], hkv, &kv0, &kvn));
        kw = *k, vw = *v;
        kw.shape[nd - 3] = vw.shape[nd - 3] = kvn;
        k = &kw, v = &vw;
        if (kvn == 0) { /* no query heads here: nothing to compute */
            *dims = (dt_sdpa_dims){.Hq = 0, .Hkv = hkv, .seq_first = seq_first};
            return DT_OK;
        }
    }
    DT_CHECK(sdpa_check(fn, q, k, v, out, lse, dims));
    dims->Hq = nd >= 3 ? q->shape[nd - 3] : 1;
    dims->Hkv = hkv;
    dims->kv0 = kv0, dims->kvn = kvn;
    dims->seq_first = seq_first;
    return DT_OK;
}

static dt_status sdpa_check(const char *fn, const dt_local *q, const dt_local *k, const dt_local *v,
                            const dt_local *out, const dt_local *lse, dt_sdpa_dims *dims) {
    dt_dtype dt = q->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "%s: dtype %s not supported (float dtypes only)", fn,
                        dt_dtype_name(dt));
    if (k->dtype != dt || v->dtype != dt || out->dtype != dt)
        return dt_error(DT_ERR_DTYPE, "%s: q, k, v and out dtypes differ", fn);
    if (lse && lse->dtype != dt_sdpa_lse_dtype(dt))
        return dt_error(DT_ERR_DTYPE, "%s: lse is %s, expected %s", fn, dt_dtype_name(lse->dtype),
                        dt_dtype_name(dt_sdpa_lse_dtype(dt)));
    int nd = q->ndim;
    if (nd < 2 || k->ndim != nd || v->ndim != nd || out->ndim != nd)
        return dt_error(DT_ERR_SHAPE, "%s: q, k, v, out need the same ndim >= 2", fn);
    dt_sdpa_dims d = {.g = 1, .Tq = q->shape[nd - 2], .D = q->shape[nd - 1],
                      .Tk = k->shape[nd - 2], .Dv = v->shape[nd - 1]};
    for (int i = 0; i < nd - 2; i++) {
        if (k->shape[i] == q->shape[i]) continue;
        if (i != nd - 3 || k->shape[i] <= 0 || q->shape[i] % k->shape[i])
            return dt_error(DT_ERR_SHAPE, "%s: k's leading dims differ from q's other than by a "
                                          "divisor of q's heads (dim %d)", fn, nd - 3);
        d.g = q->shape[i] / k->shape[i];
    }
    d.B = batch_of(k), d.R = d.g * d.Tq;
    if (batch_of(v) != d.B || batch_of(out) != batch_of(q) || k->shape[nd - 1] != d.D ||
        v->shape[nd - 2] != d.Tk || out->shape[nd - 2] != d.Tq || out->shape[nd - 1] != d.Dv)
        return dt_error(DT_ERR_SHAPE, "%s: shapes disagree (q (%lld, %lld), k (%lld, %lld), v "
                        "(%lld, %lld))", fn, (long long)d.Tq, (long long)d.D,
                        (long long)k->shape[nd - 2], (long long)k->shape[nd - 1],
                        (long long)v->shape[nd - 2], (long long)d.Dv);
    int64_t rows = 1;
    for (int i = 0; lse && i < lse->ndim; i++) rows *= lse->shape[i];
    if (lse && (lse->ndim != nd - 1 || lse->shape[nd - 2] != d.Tq || rows != batch_of(q) * d.Tq))
        return dt_error(DT_ERR_SHAPE, "%s: lse must hold one value per query row (%d dims)", fn,
                        nd - 1);
    *dims = d;
    return DT_OK;
}

static int same_spec(const dt_local *a, const dt_local *b) {
    if (a->ndim != b->ndim || a->dtype != b->dtype) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

dt_status dt_sdpa_grads_check(const char *fn, const dt_local *q, const dt_local *k,
                              const dt_local *v, const dt_local *dq, const dt_local *dk,
                              const dt_local *dv) {
    if (!same_spec(dq, q) || !same_spec(dk, k) || !same_spec(dv, v))
        return dt_error(DT_ERR_SHAPE, "%s: dq, dk, dv must have q's, k's and v's shapes and "
                                      "dtype", fn);
    return DT_OK;
}
