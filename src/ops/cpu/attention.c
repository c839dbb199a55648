/* CPU scaled dot-product attention, one (batch..., head) at a time: S = q k^T * scale, causal
 * mask (key j > query i), stable softmax per row, then S v. Both products go through
 * dt_cpu_matmul; bf16/f16 are widened to f32 per head, f64 stays f64. A readable reference,
 * not a flash kernel: S is materialised (Tq x Tk per head). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/half.h"
#include "ops/kernel_args.h"
#include "ops/kernels.h"

/* Row i of S (rows, Tk), query i % Tq, becomes softmax(S[i, :lim] * scale), zero past lim. */
#define DEFINE_SOFTROWS(SUF, CT, EXP)                                                              \
    static void softrows_##SUF(CT *S, int64_t rows, int64_t Tq, int64_t Tk, int causal,           \
                               CT scale) {                                                         \
        for (int64_t i = 0; i < rows; i++) {                                                       \
            CT *s = S + i * Tk;                                                                    \
            int64_t lim = causal && i % Tq + 1 < Tk ? i % Tq + 1 : Tk;                             \
            CT mx = -INFINITY;                                                                     \
            for (int64_t j = 0; j < lim; j++) {                                                    \
                s[j] *= scale;                                                                     \
                if (s[j] > mx || s[j] != s[j]) mx = s[j];                                          \
            }                                                                                      \
            double sum = 0.0;                                                                      \
            for (int64_t j = 0; j < lim; j++) {                                                    \
                s[j] = EXP(s[j] - mx);                                                             \
                sum += (double)s[j];                                                               \
            }                                                                                      \
            CT inv = (CT)(1.0 / sum);                                                              \
            for (int64_t j = 0; j < lim; j++) s[j] *= inv;                                         \
            for (int64_t j = lim; j < Tk; j++) s[j] = 0;                                           \
        }                                                                                          \
    }

DEFINE_SOFTROWS(f32, float, expf)
DEFINE_SOFTROWS(f64, double, exp)

static void widen(dt_dtype dt, const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = dt == DT_BF16 ? dt_bf16_to_f32(src[i]) : dt_f16_to_f32(src[i]);
}

static void narrow(dt_dtype dt, const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = dt == DT_BF16 ? dt_f32_to_bf16(src[i]) : dt_f32_to_f16(src[i]);
}

static int64_t batch_of(const dt_local *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim - 2; d++) n *= t->shape[d];
    return n;
}

static dt_local mat(void *data, dt_dtype dt, int64_t rows, int64_t cols) {
    dt_local m = {.data = data, .dtype = dt, .ndim = 2};
    m.shape[0] = rows;
    m.shape[1] = cols;
    return m;
}

dt_status dt_cpu_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                      double scale, dt_local *out) {
    dt_dtype dt = q->dtype;
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16 && dt != DT_F16)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_sdpa: dtype %s not supported (float dtypes only)",
                        dt_dtype_name(dt));
    if (k->dtype != dt || v->dtype != dt || out->dtype != dt)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_sdpa: q, k, v and out dtypes differ");
    if (q->ndim < 2 || k->ndim != q->ndim || v->ndim != q->ndim || out->ndim != q->ndim)
        return dt_error(DT_ERR_SHAPE, "dt_cpu_sdpa: q, k, v, out need the same ndim >= 2");
    int nd = q->ndim;
    int64_t g, Tq = q->shape[nd - 2], D = q->shape[nd - 1];
    int64_t Tk = k->shape[nd - 2], Dv = v->shape[nd - 1];
    /* B kv heads (times batch), each read by g query heads whose rows are adjacent in q: the
     * group's queries are one (g * Tq, D) matrix. */
    int64_t B = batch_of(k);
    if (!dt_gqa_groups(q, k, &g))
        return dt_error(DT_ERR_SHAPE, "dt_cpu_sdpa: k's leading dims differ from q's other than "
                                      "by a divisor of q's heads (dim %d)", nd - 3);
    if (batch_of(v) != B || batch_of(out) != batch_of(q) || k->shape[nd - 1] != D ||
        v->shape[nd - 2] != Tk || out->shape[nd - 2] != Tq || out->shape[nd - 1] != Dv)
        return dt_error(DT_ERR_SHAPE, "dt_cpu_sdpa: shapes disagree (q (%lld, %lld), k "
                        "(%lld, %lld), v (%lld, %lld))", (long long)Tq, (long long)D,
                        (long long)k->shape[nd - 2], (long long)k->shape[nd - 1],
                        (long long)v->shape[nd - 2], (long long)Dv);
    if (B == 0 || Tq == 0 || Dv == 0) return DT_OK;
    Tq *= g; /* rows per kv head; the causal mask reads the query as row % (Tq / g) */
    int half = dt == DT_BF16 || dt == DT_F16;
    dt_dtype ct = dt == DT_F64 ? DT_F64 : DT_F32;
    size_t es = dt_dtype_size(dt), cs = dt_dtype_size(ct);
    size_t nq = (size_t)(Tq * D), nk = (size_t)(Tk * D), nv = (size_t)(Tk * Dv),
           no = (size_t)(Tq * Dv);
    dt_status st = DT_OK;
    float *hq = NULL, *hk = NULL, *hv = NULL, *ho = NULL;
    void *S = dt_host_alloc((size_t)(Tq * Tk) * cs);
    if (half) {
        hq = dt_host_alloc(nq * sizeof(float));
        hk = dt_host_alloc(nk * sizeof(float));
        hv = dt_host_alloc(nv * sizeof(float));
        ho = dt_host_alloc(no * sizeof(float));
    }
    if (!S || (half && (!hq || !hk || !hv || !ho))) {
        st = dt_error(DT_ERR_NOMEM, "dt_cpu_sdpa: no memory for a %lldx%lld score matrix",
                      (long long)Tq, (long long)Tk);
        goto out;
    }
    for (int64_t b = 0; b < B; b++) {
        const char *qb = (const char *)q->data + (size_t)b * nq * es;
        const char *kb = (const char *)k->data + (size_t)b * nk * es;
        const char *vb = (const char *)v->data + (size_t)b * nv * es;
        char *ob = (char *)out->data + (size_t)b * no * es;
        if (half) {
            widen(dt, (const uint16_t *)qb, hq, nq);
            widen(dt, (const uint16_t *)kb, hk, nk);
            widen(dt, (const uint16_t *)vb, hv, nv);
        }
        dt_local mq = mat(half ? (void *)hq : (void *)qb, ct, Tq, D);
        dt_local mk = mat(half ? (void *)hk : (void *)kb, ct, Tk, D);
        dt_local mv = mat(half ? (void *)hv : (void *)vb, ct, Tk, Dv);
        dt_local ms = mat(S, ct, Tq, Tk);
        dt_local mo = mat(half ? (void *)ho : (void *)ob, ct, Tq, Dv);
        DT_CHECK_GOTO(dt_cpu_matmul(&mq, &mk, 1, &ms), st, out); /* (Tq, D) @ (Tk, D)^T */
        if (ct == DT_F64)
            softrows_f64(S, Tq, Tq / g, Tk, causal, scale);
        else
            softrows_f32(S, Tq, Tq / g, Tk, causal, (float)scale);
        DT_CHECK_GOTO(dt_cpu_matmul(&ms, &mv, 0, &mo), st, out); /* (Tq, Tk) @ (Tk, Dv) */
        if (half) narrow(dt, ho, (uint16_t *)ob, no);
    }
out:
    dt_host_free(ho);
    dt_host_free(hv);
    dt_host_free(hk);
    dt_host_free(hq);
    dt_host_free(S);
    return st;
}
