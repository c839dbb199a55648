/* The collective matmuls of nn/collective_mm.h: the per-peer schedules, their GEMMs (the CPU
 * kernel, one per batch row so the chunk's rows land in place) and their trace events. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/reduce.h"
#include "nn/collective_mm.h"
#include "nn/tp_exchange.h"
#include "ops/kernels.h"
#include "trace/trace_impl.h"

int64_t dt_cmm_off(const dt_cmm_geom *g, int o) {
    return g->chunk * o < g->T ? g->chunk * o : g->T;
}

int64_t dt_cmm_rows(const dt_cmm_geom *g, int o) {
    int64_t hi = g->chunk * (o + 1) < g->T ? g->chunk * (o + 1) : g->T;
    return hi - dt_cmm_off(g, o);
}

static size_t esize(const dt_cmm_geom *g) {
    return dt_dtype_size(g->dtype);
}

dt_status dt_cmm_gemm(dt_dtype dtype, const void *a, int64_t M, int64_t K, const dt_cmm_weight *w,
                      void *out) {
    if (M == 0 || w->N == 0) return DT_OK;
    if (K == 0) {
        memset(out, 0, (size_t)(M * w->N) * dt_dtype_size(dtype));
        return DT_OK;
    }
    dt_device cpu = {DT_DEVICE_CPU, 0};
    dt_local la = {(void *)a, dtype, 2, {M, K}, cpu};
    dt_local lw = {(void *)w->data, dtype, 2, {w->trans ? w->N : K, w->trans ? K : w->N}, cpu};
    dt_local lo = {out, dtype, 2, {M, w->N}, cpu};
    return dt_cpu_matmul(&la, &lw, w->trans, &lo);
}

static dt_status wait_req(dt_request **r) {
    dt_status st = *r ? dt_request_wait(*r, NULL) : DT_OK;
    *r = NULL;
    return st;
}

static void trace_step(const dt_cmm_geom *g, double t0, const char *what, int s, int o) {
    if (g->ctx->trace)
        dt_trace_record(g->ctx, DT_LANE_COMPUTE, "async_tp_gemm", t0,
                        "%s step %d: the rows of tp rank %d", what, s, o);
}

/* ---- all_gather then matmul ------------------------------------------------------------ */

/* The GEMMs of chunk o (B, rows(o), K) at cur, written into out[i]'s rows of o; cur copied
 * into xg's rows of o. */
static dt_status chunk_mm(const dt_cmm_geom *g, const void *cur, int o, int64_t K, int nw,
                          const dt_cmm_weight *w, void *const *out, void *xg) {
    const size_t es = esize(g);
    const int64_t rows = dt_cmm_rows(g, o), off = dt_cmm_off(g, o);
    for (int64_t b = 0; b < g->B; b++) {
        const char *a = (const char *)cur + (size_t)(b * rows * K) * es;
        for (int i = 0; i < nw; i++)
            DT_CHECK(dt_cmm_gemm(g->dtype, a, rows, K, &w[i],
                                 (char *)out[i] + (size_t)((b * g->T + off) * w[i].N) * es));
        if (xg && rows) /* an empty chunk's data may be NULL */
            memcpy((char *)xg + (size_t)((b * g->T + off) * K) * es, a, (size_t)(rows * K) * es);
    }
    return DT_OK;
}

dt_status dt_cmm_all_gather_mm(const dt_cmm_geom *g, const void *x, int64_t K, int nw,
                               const dt_cmm_weight *w, void *const *out, void *xg) {
    const size_t es = esize(g), cap = (size_t)(g->B * g->chunk * K) * es + 1;
    char *buf[2] = {malloc(cap), malloc(cap)};
    dt_status st = DT_OK;
    dt_request *req = NULL;
    if (!buf[0] || !buf[1]) {
        st = dt_error(DT_ERR_NOMEM, "all_gather_mm: out of memory for chunks of %zu bytes", cap);
        goto out;
    }
    const void *cur = x;
    /* Step s holds the chunk of member o = me - s; the next one travels meanwhile. */
    for (int s = 0; s < g->n && st == DT_OK; s++) {
        int o = (g->me - s + g->n) % g->n, from = (o - 1 + g->n) % g->n;
        char *next = buf[s % 2];
        if (s < g->n - 1)
            st = dt_tp_exchange_start(g->comm, 1, cur, (size_t)(g->B * dt_cmm_rows(g, o) * K), next,
                                      (size_t)(g->B * dt_cmm_rows(g, from) * K), g->dtype, &req);
        double t0 = g->ctx->trace ? dt_now_us() : 0;
        if (st == DT_OK) st = chunk_mm(g, cur, o, K, nw, w, out, xg);
        trace_step(g, t0, "all_gather_mm", s, o);
        dt_status ws = wait_req(&req);
        st = st == DT_OK ? ws : st;
        cur = next;
    }
out:
    wait_req(&req);
    free(buf[0]), free(buf[1]);
    return st;
}

/* ---- matmul then reduce_scatter --------------------------------------------------------- */

static void add_into(const dt_cmm_geom *g, void *p, const void *a, size_t n) {
    if (g->dtype == DT_F64)
        for (size_t i = 0; i < n; i++)
            ((double *)p)[i] += ((const double *)a)[i];
    else
        for (size_t i = 0; i < n; i++)
            ((float *)p)[i] += ((const float *)a)[i];
}

/* p (B, rows(o), N) = the sum over terms of the rows of member o of x (B, T, K) @ w; scratch
 * holds a block when there are several terms. */
static dt_status block_mm(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, int o, void *p,
                          void *scratch) {
    const size_t es = esize(g);
    const int64_t rows = dt_cmm_rows(g, o), off = dt_cmm_off(g, o), N = t[0].w.N;
    for (int i = 0; i < nt; i++) {
        char *dst = i == 0 ? p : scratch;
        for (int64_t b = 0; b < g->B; b++)
            DT_CHECK(dt_cmm_gemm(g->dtype,
                                 (const char *)t[i].x + (size_t)((b * g->T + off) * t[i].K) * es,
                                 rows, t[i].K, &t[i].w, dst + (size_t)(b * rows * N) * es));
        if (i > 0) add_into(g, p, scratch, (size_t)(g->B * rows * N));
    }
    return DT_OK;
}

/* Ring: at step s this member computes its part of block b = me - s - 1, adds the partial
 * sum of b that arrived from the previous member, and passes it on; at the last step b = me
 * and the sum is whole. */
static dt_status rs_ring(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, void *y) {
    const dt_cmm_weight *w = &t[0].w;
    const size_t es = esize(g), cap = (size_t)(g->B * g->chunk * w->N) * es + 1;
    char *p[2] = {malloc(cap), malloc(cap)}, *acc = malloc(cap), *scratch = malloc(cap);
    dt_status st = DT_OK;
    dt_request *req = NULL;
    if (!p[0] || !p[1] || !acc || !scratch) {
        st =
            dt_error(DT_ERR_NOMEM, "mm_reduce_scatter: out of memory for blocks of %zu bytes", cap);
        goto out;
    }
    for (int s = 0; s < g->n && st == DT_OK; s++) {
        int b = (g->me - s - 1 + 2 * g->n) % g->n;
        size_t count = (size_t)(g->B * dt_cmm_rows(g, b) * w->N);
        char *cur = s == g->n - 1 ? y : p[s % 2];
        double t0 = g->ctx->trace ? dt_now_us() : 0;
        st = block_mm(g, nt, t, b, cur, scratch);
        trace_step(g, t0, "mm_reduce_scatter", s, b);
        dt_status ws = wait_req(&req); /* the partial sum of b so far */
        st = st == DT_OK ? ws : st;
        if (st == DT_OK && s > 0) add_into(g, cur, acc, count);
        if (st == DT_OK && s < g->n - 1) {
            int nb = (b - 1 + g->n) % g->n; /* what the previous member sends now */
            st = dt_tp_exchange_start(g->comm, 1, cur, count, acc,
                                      (size_t)(g->B * dt_cmm_rows(g, nb) * w->N), g->dtype, &req);
        }
    }
out:
    wait_req(&req);
    free(p[0]), free(p[1]), free(acc), free(scratch);
    return st;
}

/* Ordered: at step s (1 <= s < n) the block of member me + s goes there and member me - s's
 * part of this member's block arrives; the next block is computed meanwhile. The parts are
 * summed in member order at the end. */
static dt_status rs_ordered(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, void *y) {
    const dt_cmm_weight *w = &t[0].w;
    const size_t es = esize(g), cap = (size_t)(g->B * g->chunk * w->N) * es + 1;
    const size_t mine = (size_t)(g->B * dt_cmm_rows(g, g->me) * w->N);
    char *p[2] = {malloc(cap), malloc(cap)}, *parts = malloc(mine * es * (size_t)g->n + 1);
    char *scratch = malloc(cap);
    const void **srcs = malloc(sizeof(void *) * (size_t)g->n);
    dt_status st = DT_OK;
    dt_request *req = NULL;
    if (!p[0] || !p[1] || !parts || !srcs || !scratch) {
        st = dt_error(DT_ERR_NOMEM, "mm_reduce_scatter: out of memory for %d blocks of %zu bytes",
                      g->n, mine * es);
        goto out;
    }
    for (int o = 0; o < g->n; o++)
        srcs[o] = parts + (size_t)o * mine * es;
    for (int s = 1; s <= g->n && st == DT_OK; s++) {
        /* computes the block for member me + s (s == n: this member's own) */
        int b = (g->me + s) % g->n;
        char *cur = s == g->n ? (char *)srcs[g->me] : p[s % 2];
        double t0 = g->ctx->trace ? dt_now_us() : 0;
        st = block_mm(g, nt, t, b, cur, scratch);
        trace_step(g, t0, "mm_reduce_scatter", s - 1, b);
        dt_status ws = wait_req(&req);
        st = st == DT_OK ? ws : st;
        if (st == DT_OK && s < g->n)
            st =
                dt_tp_exchange_start(g->comm, s, cur, (size_t)(g->B * dt_cmm_rows(g, b) * w->N),
                                     (void *)srcs[(g->me - s + g->n) % g->n], mine, g->dtype, &req);
    }
    if (st == DT_OK) dt_reduce_n(g->dtype, DT_REDUCE_SUM, y, srcs, g->n, mine);
out:
    wait_req(&req);
    free(p[0]), free(p[1]), free(parts), free(srcs), free(scratch);
    return st;
}

dt_status dt_cmm_mm_reduce_scatter(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, int ordered,
                                   void *y) {
    return ordered ? rs_ordered(g, nt, t, y) : rs_ring(g, nt, t, y);
}

dt_status dt_cmm_gemm_tn(dt_dtype dtype, const void *a, int64_t R, int64_t N, const void *b,
                         int64_t M, void *out) {
    const size_t es = dt_dtype_size(dtype);
    if (R == 0) { /* no rows: a zero gradient */
        memset(out, 0, (size_t)(N * M) * es);
        return DT_OK;
    }
    char *at = malloc((size_t)(N * R) * es + 1);
    if (!at)
        return dt_error(DT_ERR_NOMEM, "async tp: out of memory for a (%lld, %lld) transpose",
                        (long long)N, (long long)R);
    for (int64_t r = 0; r < R; r++) /* (R, N) -> (N, R) */
        for (int64_t n = 0; n < N; n++)
            if (dtype == DT_F64)
                ((double *)at)[n * R + r] = ((const double *)a)[r * N + n];
            else
                ((float *)at)[n * R + r] = ((const float *)a)[r * N + n];
    dt_cmm_weight w = {b, M, 0};
    dt_status st = dt_cmm_gemm(dtype, at, N, R, &w, out);
    free(at);
    return st;
}
