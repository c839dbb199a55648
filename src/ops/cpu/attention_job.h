/* One CPU attention call's plan and operands (ops/cpu/attention.c), shared with its AVX-512
 * path (attention_avx512.c): where a block's rows lie, the work items' state, the rounding
 * store of result rows. CPU kernels only. */
#ifndef DT_OPS_CPU_ATTENTION_JOB_H
#define DT_OPS_CPU_ATTENTION_JOB_H

#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "ops/kernel_args.h"
#include "ops/kernels.h"

/* Where a block's rows lie (dt_sdpa_row_in): q, out, lse, g and dq have Hq heads of Tq rows,
 * k, v, dk and dv Hkv heads of Tk, of which the call reads [kv0, kv0 + kvn). */
typedef struct sdpa_rows {
    int64_t H, T;
    int seq_first;
    int64_t h0, n; /* rows are numbered over heads [h0, h0 + n) of the H (dt_sdpa_row_in) */
} sdpa_rows;

/* One call's plan and operands, shared read-only by its work items (outputs disjoint). */
typedef struct sdpa_job {
    dt_sdpa_dims d;
    sdpa_rows rq, rk;
    const dt_local *q, *k, *v, *g, *lse; /* g: the backward's grad_out */
    dt_local *out, *dq, *dk, *dv;
    int causal;
    double scale;
    int64_t nqt, nkt;  /* query tiles per head, key tiles per kv head */
    double *dsum;      /* backward: sum_j P dP per query row (q's rows) */
    size_t work_bytes; /* per chunk of items: the tiles of the widest item */
    int failed;        /* a chunk found no memory (atomic) */
} sdpa_job;

static inline size_t row_at(const sdpa_rows *m, int64_t row, int64_t cols) {
    return (size_t)(dt_sdpa_row_in(row, m->n, m->h0, m->H, m->T, m->seq_first) * cols);
}

/* n rows of src (rows of `cols`, contiguous) into rows [row0, row0 + n) of t (placed as m
 * says), rounded once. */
static inline void store_f32(dt_local *t, const sdpa_rows *m, int64_t row0, int64_t n, int64_t cols,
                             const float *src) {
    for (int64_t r = 0; r < n; r++) {
        size_t at = row_at(m, row0 + r, cols);
        const float *s = src + r * cols;
        if (t->dtype == DT_F32) {
            memcpy((float *)t->data + at, s, (size_t)cols * sizeof(float));
            continue;
        }
        uint16_t *h = (uint16_t *)t->data + at;
        for (int64_t i = 0; i < cols; i++)
            h[i] = t->dtype == DT_BF16 ? dt_f32_to_bf16(s[i]) : dt_f32_to_f16(s[i]);
    }
}

/* The AVX-512F path (f32 compute: f32, bf16, f16 storage), where the compiler builds it. Items
 * are kv batch-heads (it < d.B: k^T made once for the group's query heads); w: *_bytes(J)
 * bytes, any alignment, contents ignored. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DT_ATTN_AVX512 1
size_t dt_attn512_fwd_bytes(const sdpa_job *J);
size_t dt_attn512_bwd_bytes(const sdpa_job *J);
void dt_attn512_fwd_item(const sdpa_job *J, void *w, int64_t it);
void dt_attn512_bwd_item(const sdpa_job *J, void *w, int64_t it);
#else
#define DT_ATTN_AVX512 0
#endif

#endif
