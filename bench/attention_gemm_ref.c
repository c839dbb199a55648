/* The CPU attention kernels as they were before the flash kernels (one kv head at a time, S
 * materialised, every product through dt_cpu_matmul): bench_attention's reference, kept in the
 * bench only. Same contracts as dt_cpu_sdpa and dt_cpu_sdpa_backward (ops/kernels.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention_gemm_ref.h"
#include "core/alloc.h"
#include "core/check.h"
#include "core/half.h"
#include "ops/cpu/vexp.h"
#include "ops/kernel_args.h"
#include "ops/kernels.h"

/* Row i of S (rows, Tk), query i % Tq, becomes softmax(S[i, :lim] * scale), zero past lim;
 * lse (NULL or rows) gets the row's log-sum-exp of the scaled scores. */
#define DEFINE_SOFTROWS(SUF, CT, EXP_ROW, LOG)                                                     \
    static void softrows_##SUF(CT *S, int64_t rows, int64_t Tq, int64_t Tk, int causal, CT scale,  \
                               CT *lse) {                                                          \
        for (int64_t i = 0; i < rows; i++) {                                                       \
            CT *s = S + i * Tk;                                                                    \
            int64_t lim = causal && i % Tq + 1 < Tk ? i % Tq + 1 : Tk;                             \
            CT mx = -INFINITY;                                                                     \
            for (int64_t j = 0; j < lim; j++) {                                                    \
                s[j] *= scale;                                                                     \
                if (s[j] > mx || s[j] != s[j]) mx = s[j];                                          \
            }                                                                                      \
            double sum = 0.0;                                                                      \
            EXP_ROW(s, s, lim, 1, -mx);                                                            \
            for (int64_t j = 0; j < lim; j++)                                                      \
                sum += (double)s[j];                                                               \
            CT inv = (CT)(1.0 / sum);                                                              \
            for (int64_t j = 0; j < lim; j++)                                                      \
                s[j] *= inv;                                                                       \
            for (int64_t j = lim; j < Tk; j++)                                                     \
                s[j] = 0;                                                                          \
            if (lse) lse[i] = lim ? mx + (CT)LOG(sum) : (CT)-INFINITY;                             \
        }                                                                                          \
    }

/* The backward's row pass: S (rows, Tk) holds q k^T and becomes P = exp(S * scale - lse),
 * zero past the mask; dP (rows, Tk) becomes dS * scale = P (dP - sum_j P dP) * scale. */
#define DEFINE_GRADROWS(SUF, CT, EXP_ROW)                                                          \
    static void gradrows_##SUF(CT *S, CT *dP, const CT *lse, int64_t rows, int64_t Tq, int64_t Tk, \
                               int causal, CT scale) {                                             \
        for (int64_t i = 0; i < rows; i++) {                                                       \
            CT *s = S + i * Tk, *dp = dP + i * Tk;                                                 \
            int64_t lim = causal && i % Tq + 1 < Tk ? i % Tq + 1 : Tk;                             \
            double dot = 0.0;                                                                      \
            EXP_ROW(s, s, lim, scale, -lse[i]);                                                    \
            for (int64_t j = 0; j < lim; j++)                                                      \
                dot += (double)s[j] * (double)dp[j];                                               \
            for (int64_t j = 0; j < lim; j++)                                                      \
                dp[j] = s[j] * (dp[j] - (CT)dot) * scale;                                          \
            for (int64_t j = lim; j < Tk; j++)                                                     \
                s[j] = dp[j] = 0;                                                                  \
        }                                                                                          \
    }

/* y[j] = exp(a x[j] + b), j < n: SIMD for f32 */
#define ROW_F32(y, x, n, a, b) dt_vexpf_affine(y, x, n, a, b)
#define ROW_F64(y, x, n, a, b)                                                                     \
    for (int64_t j_ = 0; j_ < (n); j_++)                                                           \
    (y)[j_] = exp((a) * (x)[j_] + (b))

DEFINE_SOFTROWS(f32, float, ROW_F32, log)
DEFINE_SOFTROWS(f64, double, ROW_F64, log)
DEFINE_GRADROWS(f32, float, ROW_F32)
DEFINE_GRADROWS(f64, double, ROW_F64)

static void widen(dt_dtype dt, const void *src, float *dst, size_t n) {
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = dt == DT_BF16 ? dt_bf16_to_f32(h[i]) : dt_f16_to_f32(h[i]);
}

static void narrow(dt_dtype dt, const float *src, void *dst, size_t n) {
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++)
        h[i] = dt == DT_BF16 ? dt_f32_to_bf16(src[i]) : dt_f32_to_f16(src[i]);
}

static dt_local mat(void *data, dt_dtype dt, int64_t rows, int64_t cols) {
    dt_local m = {.data = data, .dtype = dt, .ndim = 2};
    m.shape[0] = rows;
    m.shape[1] = cols;
    return m;
}

/* m (rows, cols) into t (cols, rows), f32 or f64 (es 4 or 8). */
static void transpose(const void *m, void *t, int64_t rows, int64_t cols, size_t es) {
    for (int64_t i = 0; i < rows; i++) {
        if (es == 8)
            for (int64_t j = 0; j < cols; j++)
                ((double *)t)[j * rows + i] = ((const double *)m)[i * cols + j];
        else
            for (int64_t j = 0; j < cols; j++)
                ((float *)t)[j * rows + i] = ((const float *)m)[i * cols + j];
    }
}

/* One operand of a kv head's computation: its data in the compute dtype (a bf16/f16 block
 * is widened into buf, or only given buf to be narrowed from when out is set). */
typedef struct operand {
    const dt_local *t;
    size_t n;   /* elements per kv head */
    float *buf; /* bf16/f16 only */
    int out;
} operand;

#define IN_OP(T, N)                                                                                \
    { .t = (T), .n = (size_t)(N) }
#define OUT_OP(T, N)                                                                               \
    { .t = (T), .n = (size_t)(N), .out = 1 }

static void *operand_at(operand *o, int64_t b, int half) {
    char *p = (char *)o->t->data + (size_t)b * o->n * dt_dtype_size(o->t->dtype);
    if (!half) return p;
    if (!o->out) widen(o->t->dtype, p, o->buf, o->n);
    return o->buf;
}

static void operand_done(operand *o, int64_t b, int half) {
    if (half && o->out)
        narrow(o->t->dtype, o->buf, (char *)o->t->data + (size_t)b * o->n * 2, o->n);
}

/* Allocates each operand's widening buffer (bf16/f16) and nbuf scratch matrices of rows x
 * cols compute elements; DT_ERR_NOMEM naming fn. */
static dt_status buffers(const char *fn, operand *ops, int nops, int half, void **scratch, int nbuf,
                         size_t bytes) {
    for (int i = 0; i < nbuf; i++) /* + 1: no keys is no scores */
        if (!(scratch[i] = dt_host_alloc(bytes + 1))) goto nomem;
    for (int i = 0; half && i < nops; i++)
        if (!(ops[i].buf = dt_host_alloc(ops[i].n * sizeof(float) + 1))) goto nomem;
    return DT_OK;
nomem:
    return dt_error(DT_ERR_NOMEM, "%s: no memory for its %zu-byte score matrices", fn, bytes);
}

static void buffers_free(operand *ops, int nops, void **scratch, int nbuf) {
    for (int i = 0; i < nops; i++)
        dt_host_free(ops[i].buf);
    for (int i = 0; i < nbuf; i++)
        dt_host_free(scratch[i]);
}

dt_status ref_gemm_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                        double scale, dt_local *out, dt_local *lse) {
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check("dt_cpu_sdpa", 0, DT_SDPA_ALL_HEADS, q, k, v, out, lse, &d));
    if (d.B == 0 || d.Tq == 0 || d.Dv == 0) return DT_OK;
    dt_dtype dt = q->dtype, ct = dt_sdpa_lse_dtype(dt);
    int half = dt == DT_BF16 || dt == DT_F16;
    size_t cs = dt_dtype_size(ct);
    enum { Q, K, V, O, NOPS };
    operand ops[NOPS] = {IN_OP(q, d.R * d.D), IN_OP(k, d.Tk * d.D), IN_OP(v, d.Tk * d.Dv),
                         OUT_OP(out, d.R * d.Dv)};
    void *S = NULL;
    dt_status st = buffers("dt_cpu_sdpa", ops, NOPS, half, &S, 1, (size_t)(d.R * d.Tk) * cs);
    for (int64_t b = 0; b < d.B && st == DT_OK; b++) {
        dt_local mq = mat(operand_at(&ops[Q], b, half), ct, d.R, d.D);
        dt_local mk = mat(operand_at(&ops[K], b, half), ct, d.Tk, d.D);
        dt_local mv = mat(operand_at(&ops[V], b, half), ct, d.Tk, d.Dv);
        dt_local ms = mat(S, ct, d.R, d.Tk), mo = mat(operand_at(&ops[O], b, half), ct, d.R, d.Dv);
        void *l = lse ? (char *)lse->data + (size_t)(b * d.R) * cs : NULL;
        DT_CHECK_GOTO(dt_cpu_matmul(&mq, &mk, 1, &ms), st, out); /* (R, D) @ (Tk, D)^T */
        if (ct == DT_F64)
            softrows_f64(S, d.R, d.Tq, d.Tk, causal, scale, l);
        else
            softrows_f32(S, d.R, d.Tq, d.Tk, causal, (float)scale, l);
        DT_CHECK_GOTO(dt_cpu_matmul(&ms, &mv, 0, &mo), st, out); /* (R, Tk) @ (Tk, Dv) */
        operand_done(&ops[O], b, half);
    }
out:
    buffers_free(ops, NOPS, &S, 1);
    return st;
}

dt_status ref_gemm_sdpa_backward(const dt_local *g, const dt_local *q, const dt_local *k,
                                 const dt_local *v, const dt_local *lse, int causal, double scale,
                                 dt_local *dq, dt_local *dk, dt_local *dv) {
    const char *fn = "dt_cpu_sdpa_backward";
    dt_sdpa_dims d;
    DT_CHECK(dt_sdpa_check(fn, 0, DT_SDPA_ALL_HEADS, q, k, v, g, lse, &d));
    DT_CHECK(dt_sdpa_grads_check(fn, q, k, v, dq, dk, dv));
    if (d.B == 0) return DT_OK;
    dt_dtype dt = q->dtype, ct = dt_sdpa_lse_dtype(dt);
    int half = dt == DT_BF16 || dt == DT_F16;
    size_t cs = dt_dtype_size(ct);
    enum { G, Q, K, V, DQ, DK, DV, NOPS };
    size_t nq = (size_t)(d.R * d.D), nk = (size_t)(d.Tk * d.D), nv = (size_t)(d.Tk * d.Dv);
    operand ops[NOPS] = {IN_OP(g, d.R * d.Dv), IN_OP(q, nq),   IN_OP(k, nk),  IN_OP(v, nv),
                         OUT_OP(dq, nq),       OUT_OP(dk, nk), OUT_OP(dv, nv)};
    enum { S, DP, T, NBUF };
    void *buf[NBUF] = {0};
    dt_status st = buffers(fn, ops, NOPS, half, buf, NBUF, (size_t)(d.R * d.Tk) * cs);
    for (int64_t b = 0; b < d.B && st == DT_OK; b++) {
        dt_local mg = mat(operand_at(&ops[G], b, half), ct, d.R, d.Dv);
        dt_local mq = mat(operand_at(&ops[Q], b, half), ct, d.R, d.D);
        dt_local mk = mat(operand_at(&ops[K], b, half), ct, d.Tk, d.D);
        dt_local mv = mat(operand_at(&ops[V], b, half), ct, d.Tk, d.Dv);
        dt_local ms = mat(buf[S], ct, d.R, d.Tk), mdp = mat(buf[DP], ct, d.R, d.Tk);
        dt_local mt = mat(buf[T], ct, d.Tk, d.R);
        dt_local mdq = mat(operand_at(&ops[DQ], b, half), ct, d.R, d.D);
        dt_local mdk = mat(operand_at(&ops[DK], b, half), ct, d.Tk, d.D);
        dt_local mdv = mat(operand_at(&ops[DV], b, half), ct, d.Tk, d.Dv);
        const char *l = (const char *)lse->data + (size_t)(b * d.R) * cs;
        DT_CHECK_GOTO(dt_cpu_matmul(&mq, &mk, 1, &ms), st, out);  /* S = q k^T */
        DT_CHECK_GOTO(dt_cpu_matmul(&mg, &mv, 1, &mdp), st, out); /* dP = g v^T */
        if (ct == DT_F64)
            gradrows_f64(buf[S], buf[DP], (const double *)l, d.R, d.Tq, d.Tk, causal, scale);
        else
            gradrows_f32(buf[S], buf[DP], (const float *)l, d.R, d.Tq, d.Tk, causal, (float)scale);
        DT_CHECK_GOTO(dt_cpu_matmul(&mdp, &mk, 0, &mdq), st, out); /* dq = dS k */
        transpose(buf[S], buf[T], d.R, d.Tk, cs);
        DT_CHECK_GOTO(dt_cpu_matmul(&mt, &mg, 0, &mdv), st, out); /* dv = P^T g */
        transpose(buf[DP], buf[T], d.R, d.Tk, cs);
        DT_CHECK_GOTO(dt_cpu_matmul(&mt, &mq, 0, &mdk), st, out); /* dk = dS^T q */
        for (int o = DQ; o < NOPS; o++)
            operand_done(&ops[o], b, half);
    }
out:
    buffers_free(ops, NOPS, buf, NBUF);
    return st;
}
