/* Box exchanges of the local backend: S(i) -> S(j) (exchange_boxes) and P -> S(d > 0)
 * (reduce_scatter_boxes) move boxes of the members' arrays straight between them, in one copy
 * or one reduction pass, in push order where the boxes allow it (each rank reads arrays in the
 * order they lie in memory and writes to its peers with streaming stores), else pulled box by
 * box. Host memory, except exchange_boxes' pull (device copies). */
#include <stdlib.h>
#include <string.h>

#include "comm/local/local_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "core/copy.h"
#include "core/reduce.h"

/* Runs of a box (as dt_box_copy folds them): trailing dims the box covers whole in both arrays
 * make one contiguous run of *run elements; dims before *inner are walked. */
static void fold_runs(const int64_t *ext, const int64_t *a, const int64_t *b, int ndim,
                      int *inner, size_t *run) {
    *inner = ndim;
    *run = 1;
    while (*inner > 0) {
        int d = --*inner;
        *run *= (size_t)ext[d];
        if (ext[d] != a[d] || ext[d] != b[d]) break;
    }
}

static void strides_of(const int64_t *shape, int ndim, int64_t *out) {
    for (int d = ndim - 1; d >= 0; d--) out[d] = d == ndim - 1 ? 1 : out[d + 1] * shape[d + 1];
}

/* Push order, host memory: each rank reads its own array once, in order, and writes each run
 * to the peer that receives it (streaming stores for a large exchange), instead of every rank
 * reading short strided runs out of its peers' arrays. It applies when a rank's non-empty send
 * boxes walk the same outer dims (the same extents and offsets before their runs), as
 * S(i) -> S(j) does. pushable says so for group rank j, from the published slots: every member
 * computes it for every member, so that all push or all pull. */
static int pushable(const lw_group *g, int j, int ndim) {
    const lw_slot *s = &g->slots[j];
    int inner = -1, first = -1;
    for (int k = 0; k < g->n; k++) {
        const dt_box *sb = &s->send_boxes[k];
        if (dt_shape_numel(sb->ext, ndim) == 0) continue;
        int in;
        size_t run;
        fold_runs(sb->ext, s->shape, g->slots[k].recv_shape, ndim, &in, &run);
        if (inner < 0) {
            inner = in;
            first = k;
        } else if (in != inner ||
                   memcmp(s->send_boxes[first].ext, sb->ext, sizeof(int64_t) * (size_t)in) ||
                   memcmp(s->send_boxes[first].off, sb->off, sizeof(int64_t) * (size_t)in)) {
            return 0;
        }
    }
    return 1;
}

/* The push itself (pushable(g, me) holds): walks the shared outer dims once; at each step
 * copies every peer's run, reading this rank's array in order. */
static void push_boxes(const lw_group *g, int me, int ndim, size_t es) {
    const lw_slot *s = &g->slots[me];
    int64_t sstride[DT_MAX_NDIM], outer[DT_MAX_NDIM] = {0};
    strides_of(s->shape, ndim, sstride);
    int inner = -1;
    size_t total = 0, min_run = SIZE_MAX;
    for (int k = 0; k < g->n; k++) {
        size_t numel = dt_shape_numel(s->send_boxes[k].ext, ndim), run;
        if (!numel) continue;
        fold_runs(s->send_boxes[k].ext, s->shape, g->slots[k].recv_shape, ndim, &inner, &run);
        memcpy(outer, s->send_boxes[k].ext, sizeof outer);
        total += numel;
        if (run < min_run) min_run = run;
    }
    if (inner < 0) return; /* nothing to send */
    const int stream = min_run * es >= 256 && total * es >= DT_STREAM_MIN_BYTES;
    int64_t idx[DT_MAX_NDIM] = {0};
    for (int more = 1; more;) {
        for (int k = 0; k < g->n; k++) {
            const dt_box *sb = &s->send_boxes[k], *rb = &g->slots[k].recv_boxes[me];
            if (dt_shape_numel(sb->ext, ndim) == 0) continue;
            int in;
            size_t run;
            int64_t dstride[DT_MAX_NDIM], so = 0, dof = 0;
            fold_runs(sb->ext, s->shape, g->slots[k].recv_shape, ndim, &in, &run);
            strides_of(g->slots[k].recv_shape, ndim, dstride);
            for (int d = 0; d < ndim; d++) {
                int64_t i = d < inner ? idx[d] : 0;
                so += (sb->off[d] + i) * sstride[d];
                dof += (rb->off[d] + i) * dstride[d];
            }
            char *to = (char *)g->slots[k].recv + (size_t)dof * es;
            const char *from = (const char *)s->send + (size_t)so * es;
            if (stream)
                dt_copy_stream_unfenced(to, from, run * es);
            else
                memcpy(to, from, run * es);
        }
        int d = inner - 1;
        while (d >= 0 && ++idx[d] == outer[d]) idx[d--] = 0;
        more = d >= 0;
    }
    if (stream) dt_stream_fence();
}

/* exchange_boxes: whether peer still touches this rank's arrays or boxes after the checks:
 * pushing, the peers that send it something; pulling, the peers it sends something to. */
typedef struct box_touch {
    int push, ndim;
    const dt_box *send, *recv;
} box_touch;

static int touches_boxes(const lw_comm *c, int peer, const void *arg) {
    (void)c;
    const box_touch *t = arg;
    const dt_box *b = t->push ? &t->recv[peer] : &t->send[peer];
    return dt_shape_numel(b->ext, t->ndim) != 0;
}

/* Host arrays: each rank pushes its boxes into its peers' arrays in the order it reads its own
 * (push_boxes); otherwise, and for device arrays, each copies the boxes its peers send it
 * straight out of their arrays. One copy either way. */
dt_status lw_exchange_boxes(dt_comm *base, int ndim, size_t es, const void *src,
                            const int64_t *src_shape, const dt_box *send, void *dst,
                            const int64_t *dst_shape, const dt_box *recv) {
    lw_comm *c = (lw_comm *)base;
    lw_group *g = c->group;
    int me = base->rank;
    dt_status st;
    const dt_mem_ops *mem = lw_mem_of(src, dst, &st);
    DT_CHECK(st);
    g->slots[me] = (lw_slot){.send = src, .shape = src_shape, .send_boxes = send,
                             .recv_boxes = recv, .recv = dst, .recv_shape = dst_shape};
    DT_CHECK(lw_enter(c, "exchange_boxes"));
    for (int j = 0; j < g->n && st == DT_OK; j++) /* every pair, so all ranks agree */
        for (int k = 0; k < g->n && st == DT_OK; k++)
            if (memcmp(g->slots[j].send_boxes[k].ext, g->slots[k].recv_boxes[j].ext,
                       sizeof(int64_t) * (size_t)ndim))
                st = dt_error(DT_ERR_COMM, "exchange_boxes: the box group rank %d sends to rank "
                                           "%d does not match the box rank %d expects", j, k, k);
    int push = st == DT_OK && mem == &dt_mem_cpu;
    for (int j = 0; push && j < g->n; j++) push = pushable(g, j, ndim);
    const box_touch touch = {.push = push, .ndim = ndim, .send = send, .recv = recv};
    const int ok = st == DT_OK; /* the same on every member */
    lw_publish(c, LW_META);
    if (push) {
        push_boxes(g, me, ndim, es);
        lw_done_some(c, mem, &st, touches_boxes, &touch);
        return st;
    }
    for (int j = 0; j < g->n && st == DT_OK; j++) {
        const lw_slot *s = &g->slots[j];
        if (dt_shape_numel(recv[j].ext, ndim) == 0) continue; /* j may have left already */
        st = mem->box_copy(dst, dst_shape, recv[j].off, s->send, s->shape, s->send_boxes[me].off,
                           recv[j].ext, ndim, es);
    }
    lw_done_some(c, mem, &st, ok ? touches_boxes : lw_reads_nothing, &touch);
    return st;
}


/* P -> S(d > 0) pulled: this rank reduces its box b of every member's array straight out of their
 * memory, run by run (the box's contiguous stretches), into its dense dst. */
static void reduce_pull(const lw_group *g, int ndim, const int64_t *shape,
                        const dt_box *b, void *dst, dt_dtype dt, dt_reduce_op op,
                        const void **srcs) {
    const int n = g->n;
    const size_t es = dt_dtype_size(dt), total = dt_shape_numel(b->ext, ndim);
    if (!total) return;
    int64_t stride[DT_MAX_NDIM];
    strides_of(shape, ndim, stride);
    int inner;
    size_t run;
    fold_runs(b->ext, shape, b->ext, ndim, &inner, &run);
    const int stream = run * es >= 256 && total * es >= DT_STREAM_MIN_BYTES;
    /* Short runs: the next run of every source is prefetched (as dt_box_copy does). */
    const int ahead = stream && run * es <= 4096;
    int64_t idx[DT_MAX_NDIM] = {0};
    int64_t o = 0;
    for (int d = 0; d < ndim; d++) o += b->off[d] * stride[d];
    for (char *out = dst;; out += run * es) {
        int d = inner - 1;
        while (d >= 0 && ++idx[d] == b->ext[d]) idx[d--] = 0;
        int64_t next = 0;
        for (int k = 0; k < ndim; k++) next += (b->off[k] + (k < inner ? idx[k] : 0)) * stride[k];
        for (int j = 0; ahead && d >= 0 && j < n; j++)
            dt_prefetch((const char *)g->slots[j].send + (size_t)next * es, run * es);
        for (int j = 0; j < n; j++) srcs[j] = (const char *)g->slots[j].send + (size_t)o * es;
        if (stream)
            dt_reduce_n_streamed(dt, op, out, srcs, n, run);
        else
            dt_reduce_n(dt, op, out, srcs, n, run);
        if (d < 0) break;
        o = next;
    }
    if (stream) dt_stream_fence();
}

/* Whether the members reduce in push order, the same answer on every member (from the
 * published slots): arrays of one shape whose non-empty boxes (each member's own, boxes[k]
 * on member k) walk the same outer dims, the dims before their runs (the same extents and
 * offsets there, as P -> S(d > 0) boxes do), with at least one outer step per member, and no
 * member asking to pull. *lead: a non-empty box; *inner: the outer dims; *steps: their count. */
static int reduce_pushable(const lw_group *g, int ndim, const dt_box **lead, int *inner,
                           size_t *steps) {
    const int64_t *shape = g->slots[0].shape;
    *lead = NULL;
    for (int k = 0; k < g->n; k++) {
        const lw_slot *s = &g->slots[k];
        if (s->pull || memcmp(s->shape, shape, sizeof(int64_t) * (size_t)ndim)) return 0;
        const dt_box *b = &s->send_boxes[k];
        if (dt_shape_numel(b->ext, ndim) == 0) continue;
        int in;
        size_t run;
        fold_runs(b->ext, shape, b->ext, ndim, &in, &run);
        if (!*lead) {
            *lead = b;
            *inner = in;
        } else if (in != *inner ||
                   memcmp((*lead)->ext, b->ext, sizeof(int64_t) * (size_t)in) ||
                   memcmp((*lead)->off, b->off, sizeof(int64_t) * (size_t)in)) {
            return 0;
        }
    }
    if (!*lead) return 0;
    *steps = dt_shape_numel((*lead)->ext, *inner);
    return *steps >= (size_t)g->n;
}

/* P -> S(d > 0) in push order (reduce_pushable holds): rank me takes outer steps [lo, hi),
 * about 1/n of them, and at each step reduces the run of every box k there from all members'
 * arrays into member k's dst (where the step's run lies in k's dense box: step x run), so it
 * reads every source in order, the members' whole rows at a time, instead of one box's short
 * strided runs out of every row. Each element is still reduced once, from sources 0..n-1:
 * the bits of the pull. runs, offs: scratch of n entries. */
static void reduce_push(const lw_group *g, int me, int ndim, const dt_box *lead, int inner,
                        size_t steps, dt_dtype dt, dt_reduce_op op, const void **srcs,
                        size_t *runs, int64_t *offs) {
    const int n = g->n;
    const size_t es = dt_dtype_size(dt);
    const size_t lo = steps * (size_t)me / (size_t)n, hi = steps * (size_t)(me + 1) / (size_t)n;
    const int64_t *shape = g->slots[0].shape;
    int64_t stride[DT_MAX_NDIM];
    strides_of(shape, ndim, stride);
    size_t per_step = 0, min_run = SIZE_MAX;
    for (int k = 0; k < n; k++) { /* each box's run, and where it starts within a step */
        const dt_box *b = &g->slots[k].send_boxes[k];
        runs[k] = dt_shape_numel(b->ext, ndim) ? dt_shape_numel(b->ext + inner, ndim - inner) : 0;
        offs[k] = 0;
        for (int d = inner; d < ndim; d++) offs[k] += b->off[d] * stride[d];
        per_step += runs[k];
        if (runs[k] && runs[k] < min_run) min_run = runs[k];
    }
    const int stream = min_run * es >= 256 && (hi - lo) * per_step * es >= DT_STREAM_MIN_BYTES;
    int64_t idx[DT_MAX_NDIM] = {0}; /* step lo, row-major over the outer dims */
    for (size_t r = lo, d = (size_t)inner; d-- > 0; r /= (size_t)lead->ext[d])
        idx[d] = (int64_t)(r % (size_t)lead->ext[d]);
    for (size_t p = lo; p < hi; p++) {
        int64_t base = 0;
        for (int d = 0; d < inner; d++) base += (lead->off[d] + idx[d]) * stride[d];
        for (int k = 0; k < n; k++) {
            if (!runs[k]) continue;
            const size_t o = (size_t)(base + offs[k]) * es;
            for (int j = 0; j < n; j++) srcs[j] = (const char *)g->slots[j].send + o;
            char *out = (char *)g->slots[k].recv + p * runs[k] * es;
            if (stream)
                dt_reduce_n_streamed(dt, op, out, srcs, n, runs[k]);
            else
                dt_reduce_n(dt, op, out, srcs, n, runs[k]);
        }
        for (int d = inner - 1; d >= 0 && ++idx[d] == lead->ext[d]; d--) idx[d] = 0;
    }
    if (stream) dt_stream_fence();
}

/* P -> S(d > 0) in one pass, no packed copy: pushed where reduce_pushable holds, else each
 * rank pulls its own box. Either way every member reads every member's array, so each returns
 * only once all are done. Host memory (dt_comm_reduce_scatter_boxes packs device arrays). */
dt_status lw_reduce_scatter_boxes(dt_comm *base, int ndim, const void *src, const int64_t *shape,
                                  const dt_box *boxes, void *dst, dt_dtype dt, dt_reduce_op op) {
    lw_comm *c = (lw_comm *)base;
    lw_group *g = c->group;
    const int n = g->n, me = base->rank;
    const void **srcs = malloc(sizeof(void *) * (size_t)n);
    size_t *runs = malloc(sizeof(size_t) * (size_t)n);
    int64_t *offs = malloc(sizeof(int64_t) * (size_t)n);
    dt_status st = DT_OK;
    if (!srcs || !runs || !offs)
        st = dt_error(DT_ERR_NOMEM, "dt_reduce_scatter_boxes: out of memory");
    g->slots[me] = (lw_slot){.send = src, .shape = shape, .send_boxes = boxes, .recv = dst,
                             .pull = c->reduce_pull};
    if (st == DT_OK) st = lw_enter(c, "dt_reduce_scatter_boxes");
    if (st == DT_OK) {
        const dt_box *lead;
        int inner;
        size_t steps;
        if (reduce_pushable(g, ndim, &lead, &inner, &steps)) {
            reduce_push(g, me, ndim, lead, inner, steps, dt, op, srcs, runs, offs);
            c->reduce_pushes++;
        } else {
            reduce_pull(g, ndim, shape, &boxes[me], dst, dt, op, srcs);
        }
        lw_publish(c, LW_DONE);
        lw_wait_all(c, LW_DONE); /* peers may still read our array (and write our dst) */
    }
    free(offs);
    free(runs);
    free(srcs);
    return st;
}
