/* The collective matmuls of nn/collective_mm.h: the per-peer schedules, their GEMMs (the
 * device's kernel table, one GEMM per batch row so the chunk's rows land in place), buffers,
 * copies and sums (the device's memory table) and their trace events. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/device.h"
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

static const dt_mem_ops *mem_of(const dt_cmm_geom *g) {
    return dt_mem_ops_of(g->device.kind);
}

dt_status dt_cmm_gemm(dt_device dev, dt_dtype dtype, const void *a, int64_t M, int64_t K,
                      const dt_cmm_weight *w, void *out) {
    if (M == 0 || w->N == 0) return DT_OK;
    if (K == 0)
        return dt_mem_ops_of(dev.kind)->zero(out, (size_t)(M * w->N) * dt_dtype_size(dtype));
    dt_local la = {(void *)a, dtype, 2, {M, K}, dev};
    dt_local lw = {(void *)w->data, dtype, 2, {w->trans ? w->N : K, w->trans ? K : w->N}, dev};
    dt_local lo = {out, dtype, 2, {M, w->N}, dev};
    return dt_kernels_of(dev.kind)->matmul(&la, &lw, w->trans, &lo);
}

static dt_status wait_req(dt_request **r) {
    dt_status st = *r ? dt_request_wait(*r, NULL) : DT_OK;
    *r = NULL;
    return st;
}

/* An exchange of buffers the rank's compute stream wrote: that work finishes first. */
static dt_status exchange(const dt_cmm_geom *g, int shift, const void *send, size_t send_count,
                          void *recv, size_t recv_count, dt_request **out) {
    DT_CHECK(mem_of(g)->sync());
    return dt_tp_exchange_start(g->comm, shift, send, send_count, recv, recv_count, g->dtype, out);
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
            DT_CHECK(dt_cmm_gemm(g->device, g->dtype, a, rows, K, &w[i],
                                 (char *)out[i] + (size_t)((b * g->T + off) * w[i].N) * es));
        if (xg && rows) /* an empty chunk's data may be NULL */
            DT_CHECK(mem_of(g)->copy((char *)xg + (size_t)((b * g->T + off) * K) * es, a,
                                     (size_t)(rows * K) * es));
    }
    return DT_OK;
}

dt_status dt_cmm_all_gather_mm(const dt_cmm_geom *g, const void *x, int64_t K, int nw,
                               const dt_cmm_weight *w, void *const *out, void *xg) {
    const size_t es = esize(g), cap = (size_t)(g->B * g->chunk * K) * es + 1;
    const dt_mem_ops *m = mem_of(g);
    char *buf[2] = {m->alloc(cap), m->alloc(cap)};
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
            st = exchange(g, 1, cur, (size_t)(g->B * dt_cmm_rows(g, o) * K), next,
                          (size_t)(g->B * dt_cmm_rows(g, from) * K), &req);
        double t0 = g->ctx->trace ? dt_now_us() : 0;
        if (st == DT_OK) st = chunk_mm(g, cur, o, K, nw, w, out, xg);
        trace_step(g, t0, "all_gather_mm", s, o);
        dt_status ws = wait_req(&req);
        st = st == DT_OK ? ws : st;
        cur = next;
    }
out:
    wait_req(&req);
    m->free(buf[0]), m->free(buf[1]);
    return st;
}

/* ---- matmul then reduce_scatter --------------------------------------------------------- */

/* p += a (n elements) */
static dt_status add_into(const dt_cmm_geom *g, void *p, const void *a, size_t n) {
    const void *srcs[2] = {p, a};
    return mem_of(g)->reduce_n(g->dtype, DT_REDUCE_SUM, p, srcs, 2, n);
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
            DT_CHECK(dt_cmm_gemm(g->device, g->dtype,
                                 (const char *)t[i].x + (size_t)((b * g->T + off) * t[i].K) * es,
                                 rows, t[i].K, &t[i].w, dst + (size_t)(b * rows * N) * es));
        if (i > 0) DT_CHECK(add_into(g, p, scratch, (size_t)(g->B * rows * N)));
    }
    return DT_OK;
}

/* Ring: at step s this member computes its part of block b = me - s - 1, adds the partial
 * sum of b that arrived from the previous member, and passes it on; at the last step b = me
 * and the sum is whole. */
static dt_status rs_ring(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, void *y) {
    const dt_cmm_weight *w = &t[0].w;
    const size_t es = esize(g), cap = (size_t)(g->B * g->chunk * w->N) * es + 1;
    const dt_mem_ops *m = mem_of(g);
    char *p[2] = {m->alloc(cap), m->alloc(cap)}, *acc = m->alloc(cap), *scratch = m->alloc(cap);
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
        if (st == DT_OK && s > 0) st = add_into(g, cur, acc, count);
        if (st == DT_OK && s < g->n - 1) {
            int nb = (b - 1 + g->n) % g->n; /* what the previous member sends now */
            st = exchange(g, 1, cur, count, acc, (size_t)(g->B * dt_cmm_rows(g, nb) * w->N), &req);
        }
    }
out:
    wait_req(&req);
    m->free(p[0]), m->free(p[1]), m->free(acc), m->free(scratch);
    return st;
}

/* Ordered: at step s (1 <= s < n) the block of member me + s goes there and member me - s's
 * part of this member's block arrives; the next block is computed meanwhile. The parts are
 * summed in member order at the end. */
static dt_status rs_ordered(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, void *y) {
    const dt_cmm_weight *w = &t[0].w;
    const size_t es = esize(g), cap = (size_t)(g->B * g->chunk * w->N) * es + 1;
    const size_t mine = (size_t)(g->B * dt_cmm_rows(g, g->me) * w->N);
    const dt_mem_ops *m = mem_of(g);
    char *p[2] = {m->alloc(cap), m->alloc(cap)}, *parts = m->alloc(mine * es * (size_t)g->n + 1);
    char *scratch = m->alloc(cap);
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
            st = exchange(g, s, cur, (size_t)(g->B * dt_cmm_rows(g, b) * w->N),
                          (void *)srcs[(g->me - s + g->n) % g->n], mine, &req);
    }
    if (st == DT_OK) st = m->reduce_n(g->dtype, DT_REDUCE_SUM, y, srcs, g->n, mine);
out:
    wait_req(&req);
    m->free(p[0]), m->free(p[1]), m->free(parts), m->free(scratch), free(srcs);
    return st;
}

dt_status dt_cmm_mm_reduce_scatter(const dt_cmm_geom *g, int nt, const dt_cmm_term *t, int ordered,
                                   void *y) {
    return ordered ? rs_ordered(g, nt, t, y) : rs_ring(g, nt, t, y);
}

dt_status dt_cmm_gemm_tn(dt_device dev, dt_dtype dtype, const void *a, int64_t R, int64_t N,
                         const void *b, int64_t M, void *out) {
    const size_t es = dt_dtype_size(dtype);
    const dt_mem_ops *m = dt_mem_ops_of(dev.kind);
    if (R == 0) return m->zero(out, (size_t)(N * M) * es); /* no rows: a zero gradient */
    char *at = m->alloc((size_t)(N * R) * es + 1);
    if (!at)
        return dt_error(DT_ERR_NOMEM, "async tp: out of memory for a (%lld, %lld) transpose",
                        (long long)N, (long long)R);
    static const int swap[2] = {1, 0};
    dt_local la = {(void *)a, dtype, 2, {R, N}, dev}, lt = {at, dtype, 2, {N, R}, dev};
    dt_status st = dt_kernels_of(dev.kind)->permute(&la, swap, &lt); /* (R, N) -> (N, R) */
    dt_cmm_weight w = {b, M, 0};
    if (st == DT_OK) st = dt_cmm_gemm(dev, dtype, at, N, R, &w, out);
    m->free(at);
    return st;
}
