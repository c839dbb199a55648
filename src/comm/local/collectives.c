/* Collectives of the local backend. Each publishes this rank's buffers in its slot, passes the
 * entry barrier, moves its share straight between its own and its peers' buffers, says so in
 * its sequence flag, and waits for the flags of the peers that may still touch its buffers or
 * slot, so nobody returns (and reuses a buffer) while a peer may still read or write it. GPU
 * buffers go through the same steps with device copies and reduction kernels on each rank's
 * compute stream, drained before every flag so that peers only ever read finished data. */
#include <stdlib.h>
#include <string.h>

#include "comm/local/local_impl.h"
#include "core/check.h"
#include "core/copy.h"
#include "core/device.h"
#include "core/reduce.h"

static lw_comm *lw(dt_comm *c) { return (lw_comm *)c; }

/* Every member must pass the same counts; compare ours with each peer's. */
static dt_status check_counts(lw_comm *c, const size_t *counts, const char *what) {
    lw_group *g = c->group;
    for (int j = 0; j < g->n; j++) {
        if (memcmp(g->slots[j].counts, counts, sizeof(size_t) * (size_t)g->n) == 0) continue;
        for (int i = 0; i < g->n; i++)
            if (g->slots[j].counts[i] != counts[i])
                return dt_error(DT_ERR_COMM,
                                "%s: ranks disagree on counts: recvcounts[%d] is %zu on group "
                                "rank %d but %zu on group rank %d",
                                what, i, counts[i], c->base.rank, g->slots[j].counts[i], j);
    }
    return DT_OK;
}

/* The memory table for a collective's buffers: the GPU's when either is device memory (device
 * copies reach host memory too). Drains the rank's stream first: peers read our buffers. */
const dt_mem_ops *lw_mem_of(const void *a, const void *b, dt_status *st) {
    dt_device_kind k = dt_mem_kind_of(a);
    if (k == DT_DEVICE_CPU) k = dt_mem_kind_of(b);
    const dt_mem_ops *mem = dt_mem_ops_of(k);
    *st = mem == &dt_mem_cpu ? DT_OK : mem->sync();
    return mem;
}

/* This rank finished phase: its queued device copies first, then its flag. */
static void publish(lw_comm *c, const dt_mem_ops *mem, dt_status *st, int phase) {
    if (mem != &dt_mem_cpu) {
        dt_status s = mem->sync();
        if (*st == DT_OK) *st = s;
    }
    lw_publish(c, phase);
}

/* The end of a collective in which every member reads or writes every other's buffers. */
static void done_all(lw_comm *c, const dt_mem_ops *mem, dt_status *st) {
    publish(c, mem, st, LW_DONE);
    lw_wait_all(c, LW_DONE);
}

/* The end of a collective that checked every pair after its entry (and then published
 * LW_META): peers for which touches(peer) still read or write this rank's buffers or slot, so
 * it waits until they are done; the others only until they no longer read its slot. */
void lw_done_some(lw_comm *c, const dt_mem_ops *mem, dt_status *st,
                  int (*touches)(const lw_comm *c, int peer, const void *arg), const void *arg) {
    publish(c, mem, st, LW_DONE);
    int every = 1;
    for (int j = 0; j < c->group->n && every; j++)
        every = j == c->base.rank || touches(c, j, arg);
    if (every) { /* one count to wait for: one sleep at most, not one per peer */
        lw_wait_all(c, LW_DONE);
        return;
    }
    for (int j = 0; j < c->group->n; j++)
        lw_wait_for(c, j, touches(c, j, arg) ? LW_DONE : LW_META);
}

static dt_status scratch(lw_comm *c, size_t bytes, void **out) {
    if (bytes > c->scratch_cap) {
        void *p = realloc(c->scratch, bytes);
        if (!p) return dt_error(DT_ERR_NOMEM, "local collective: %zu bytes of scratch", bytes);
        c->scratch = p;
        c->scratch_cap = bytes;
    }
    *out = c->scratch;
    return DT_OK;
}

/* Push order for an all_gather of host arrays: this rank copies its own block into every
 * member's output, a 64 KiB piece at a time to all of them, so that it reads the block from
 * memory once (pulling, every rank reads every block: n times the reads). */
#define PUSH_PIECE ((size_t)64 << 10)
static void push_block(const lw_group *g, int me, const char *send, size_t bytes, size_t es) {
    const int stream = bytes >= DT_STREAM_MIN_BYTES;
    for (size_t o = 0; o < bytes; o += PUSH_PIECE) {
        size_t len = bytes - o < PUSH_PIECE ? bytes - o : PUSH_PIECE;
        for (int j = 0; j < g->n; j++) {
            char *dst = (char *)g->slots[j].recv + g->slots[j].displs[me] * es;
            if (dst == send) continue; /* in place */
            if (stream)
                dt_copy_stream_unfenced(dst + o, send + o, len);
            else
                memcpy(dst + o, send + o, len);
        }
    }
    if (stream) dt_stream_fence();
}

static dt_status all_gatherv(dt_comm *base, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, dt_dtype dt) {
    lw_comm *c = lw(base);
    lw_group *g = c->group;
    size_t es = dt_dtype_size(dt);
    dt_status st;
    const dt_mem_ops *mem = lw_mem_of(send, recv, &st);
    DT_CHECK(st);
    g->slots[base->rank] = (lw_slot){.send = send, .counts = counts, .displs = displs,
                                     .recv = recv};
    DT_CHECK(lw_enter(c, "dt_all_gatherv"));
    st = check_counts(c, counts, "dt_all_gatherv");
    if (st == DT_OK && mem == &dt_mem_cpu) {
        push_block(g, base->rank, send, counts[base->rank] * es, es);
        done_all(c, mem, &st);
        return st;
    }
    for (int j = 0; st == DT_OK && j < g->n; j++) {
        char *dst = (char *)recv + displs[j] * es;
        if (counts[j] && dst != g->slots[j].send)
            st = mem->copy(dst, g->slots[j].send, counts[j] * es);
    }
    done_all(c, mem, &st);
    return st;
}

static dt_status reduce_scatterv(dt_comm *base, const void *send, void *recv, const size_t *counts,
                                 const size_t *displs, dt_dtype dt, dt_reduce_op op) {
    lw_comm *c = lw(base);
    lw_group *g = c->group;
    size_t es = dt_dtype_size(dt);
    dt_status st;
    const dt_mem_ops *mem = lw_mem_of(send, recv, &st);
    DT_CHECK(st);
    g->slots[base->rank] = (lw_slot){.send = send, .counts = counts};
    DT_CHECK(lw_enter(c, "dt_reduce_scatterv"));
    st = check_counts(c, counts, "dt_reduce_scatterv");
    const void **srcs = NULL;
    if (st == DT_OK && !(srcs = malloc(sizeof(void *) * (size_t)g->n)))
        st = dt_error(DT_ERR_NOMEM, "dt_reduce_scatterv: out of memory");
    if (st == DT_OK) {
        size_t off = displs[base->rank] * es;
        for (int j = 0; j < g->n; j++) srcs[j] = (const char *)g->slots[j].send + off;
        st = mem->reduce_n(dt, op, recv, srcs, g->n, counts[base->rank]);
    }
    free(srcs);
    done_all(c, mem, &st);
    return st;
}

/* Host arrays, one pass: rank me reduces its chunk [lo, hi) a 64 KiB piece at a time from every
 * member's send into a small buffer, and writes the piece into every member's recv, so no
 * reduced chunk is read back and no barrier parts two phases. In place is safe: only rank me
 * reads or writes its chunk anywhere, and it reads a piece from every member before it writes
 * the piece back. */
static void all_reduce_push(const lw_group *g, int me, dt_dtype dt, dt_reduce_op op, size_t lo,
                            size_t hi, void *piece, const void **srcs) {
    (void)me;
    const size_t es = dt_dtype_size(dt), step = PUSH_PIECE / es;
    const int stream = (hi - lo) * es >= DT_STREAM_MIN_BYTES;
    for (size_t o = lo; o < hi; o += step) {
        size_t m = hi - o < step ? hi - o : step;
        for (int j = 0; j < g->n; j++) srcs[j] = (const char *)g->slots[j].send + o * es;
        dt_reduce_n(dt, op, piece, srcs, g->n, m); /* 64 KiB: stays in the cache */
        for (int j = 0; j < g->n; j++) {
            char *dst = (char *)g->slots[j].recv + o * es;
            if (stream)
                dt_copy_stream_unfenced(dst, piece, m * es);
            else
                memcpy(dst, piece, m * es);
        }
    }
    if (stream) dt_stream_fence();
}

/* Device arrays: reduce-scatter into chunks (rank i reduces chunk i, sources in rank order),
 * then every rank copies the other chunks. Both forms are bandwidth-optimal, and all ranks end
 * with the same bits: each element is reduced once, in rank order. */
static dt_status all_reduce(dt_comm *base, const void *send, void *recv, size_t count, dt_dtype dt,
                            dt_reduce_op op) {
    lw_comm *c = lw(base);
    lw_group *g = c->group;
    int n = g->n, me = base->rank;
    size_t es = dt_dtype_size(dt);
    size_t lo = count * (size_t)me / (size_t)n, hi = count * (size_t)(me + 1) / (size_t)n;
    dt_status st;
    const dt_mem_ops *mem = lw_mem_of(send, recv, &st);
    DT_CHECK(st);
    const void **srcs = malloc(sizeof(void *) * (size_t)n);
    if (!srcs) return dt_error(DT_ERR_NOMEM, "dt_all_reduce: out of memory");
    if (mem == &dt_mem_cpu) {
        void *piece = NULL;
        st = scratch(c, PUSH_PIECE, &piece);
        g->slots[me] = (lw_slot){.send = send, .recv = recv};
        if (st == DT_OK) st = lw_enter(c, "dt_all_reduce");
        if (st == DT_OK) {
            all_reduce_push(g, me, dt, op, lo, hi, piece, srcs);
            done_all(c, mem, &st);
        }
        free(srcs);
        return st;
    }
    /* In place, our chunk of send is still being read by peers: reduce into scratch. */
    void *mine = (char *)recv + lo * es, *dev_scratch = NULL;
    if (send == recv && mem == &dt_mem_cpu) st = scratch(c, (hi - lo) * es, &mine);
    else if (send == recv && !(mine = dev_scratch = mem->alloc((hi - lo) * es))) st = DT_ERR_NOMEM;
    if (st == DT_OK) {
        g->slots[me] = (lw_slot){.send = send, .result = mine};
        st = lw_enter(c, "dt_all_reduce");
    }
    if (st != DT_OK) {
        free(srcs);
        mem->free(dev_scratch);
        return st;
    }
    /* lw_enter compared counts, dtypes and ops (the fingerprints). */
    for (int j = 0; j < n; j++)
        srcs[j] = (const char *)g->slots[j].send + lo * es;
    st = mem->reduce_n(dt, op, mine, srcs, n, hi - lo);
    publish(c, mem, &st, LW_HALF); /* every member reads every reduced chunk */
    lw_wait_all(c, LW_HALF);
    for (int j = 0; st == DT_OK && j < n; j++) {
        size_t jlo = count * (size_t)j / (size_t)n, jhi = count * (size_t)(j + 1) / (size_t)n;
        char *dst = (char *)recv + jlo * es;
        if (jhi > jlo && dst != g->slots[j].result)
            st = mem->copy(dst, g->slots[j].result, (jhi - jlo) * es);
    }
    done_all(c, mem, &st);
    free(srcs);
    mem->free(dev_scratch);
    return st;
}

/* all_reduce of host arrays in place, as one array of their total length: all_reduce_push's
 * chunks and pieces, each piece cut where an array ends (every member's arrays end at the same
 * places: the counts matched). */
static dt_status all_reduce_bufs(dt_comm *base, void *const *bufs, const size_t *counts, int n,
                                 dt_dtype dt, dt_reduce_op op) {
    lw_comm *c = lw(base);
    lw_group *g = c->group;
    const int me = base->rank;
    const size_t es = dt_dtype_size(dt), step = PUSH_PIECE / es;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += counts[i];
    const void **srcs = malloc(sizeof(void *) * (size_t)g->n);
    void *piece = NULL;
    dt_status st = srcs ? scratch(c, PUSH_PIECE, &piece)
                        : dt_error(DT_ERR_NOMEM, "dt_all_reduce: out of memory");
    if (st != DT_OK) {
        free(srcs);
        return st;
    }
    g->slots[me] = (lw_slot){.bufs = bufs, .bcounts = counts, .nbufs = n};
    st = lw_enter(c, "dt_all_reduce");
    if (st != DT_OK) {
        free(srcs);
        return st;
    }
    /* The entry compared the totals; the cuts must match too, on every member alike. */
    for (int j = 0; j < g->n && st == DT_OK; j++) {
        const lw_slot *o = &g->slots[j];
        if (o->nbufs != n || memcmp(o->bcounts, counts, sizeof *counts * (size_t)n))
            st = dt_error(DT_ERR_COMM,
                          "dt_all_reduce: ranks cut the arrays differently: group rank %d "
                          "passes %d arrays, rank %d passes %d (or other counts)",
                          me, n, j, o->nbufs);
    }
    const size_t lo = total * (size_t)me / (size_t)g->n,
                 hi = total * (size_t)(me + 1) / (size_t)g->n;
    int k = 0;
    size_t base_k = 0; /* where array k starts in the whole */
    for (size_t o = lo; o < hi && st == DT_OK;) {
        while (o >= base_k + counts[k])
            base_k += counts[k++];
        size_t at = o - base_k, m = counts[k] - at;
        if (m > hi - o) m = hi - o;
        if (m > step) m = step;
        for (int j = 0; j < g->n; j++)
            srcs[j] = (const char *)g->slots[j].bufs[k] + at * es;
        dt_reduce_n(dt, op, piece, srcs, g->n, m); /* 64 KiB: stays in the cache */
        for (int j = 0; j < g->n; j++)
            memcpy((char *)g->slots[j].bufs[k] + at * es, piece, m * es);
        o += m;
    }
    free(srcs);
    done_all(c, &dt_mem_cpu, &st);
    return st;
}

/* all_to_allv: peer reads this rank's send when this rank sends it anything (and the counts
 * matched everywhere). */
static int reads_send(const lw_comm *c, int peer, const void *scounts) {
    (void)c;
    return ((const size_t *)scounts)[peer] != 0;
}

int lw_reads_nothing(const lw_comm *c, int peer, const void *arg) {
    (void)c, (void)peer, (void)arg;
    return 0;
}

static dt_status all_to_allv(dt_comm *base, const void *send, const size_t *scounts,
                             const size_t *sdispls, void *recv, const size_t *rcounts,
                             const size_t *rdispls, dt_dtype dt) {
    lw_comm *c = lw(base);
    lw_group *g = c->group;
    int me = base->rank;
    size_t es = dt_dtype_size(dt);
    dt_status st;
    const dt_mem_ops *mem = lw_mem_of(send, recv, &st);
    DT_CHECK(st);
    g->slots[me] = (lw_slot){.send = send, .counts = scounts, .displs = sdispls, .rcounts = rcounts};
    DT_CHECK(lw_enter(c, "dt_all_to_allv"));
    /* Every pair, not only ours, so that all ranks agree on failing. */
    for (int j = 0; j < g->n && st == DT_OK; j++)
        for (int k = 0; k < g->n && st == DT_OK; k++)
            if (g->slots[j].counts[k] != g->slots[k].rcounts[j])
                st = dt_error(DT_ERR_COMM, "dt_all_to_allv: group rank %d sends %zu elements to "
                                           "rank %d, which expects recvcounts[%d] = %zu",
                              j, g->slots[j].counts[k], k, j, g->slots[k].rcounts[j]);
    const int ok = st == DT_OK; /* the same on every member */
    lw_publish(c, LW_META);
    for (int j = 0; j < g->n && st == DT_OK; j++) {
        if (rcounts[j] == 0) continue;
        st = mem->copy((char *)recv + rdispls[j] * es,
                       (const char *)g->slots[j].send + g->slots[j].displs[me] * es,
                       rcounts[j] * es);
    }
    lw_done_some(c, mem, &st, ok ? reads_send : lw_reads_nothing, scounts);
    return st;
}

static dt_status broadcast(dt_comm *base, void *buf, size_t bytes, int root) {
    lw_comm *c = lw(base);
    lw_group *g = c->group;
    dt_status st;
    const dt_mem_ops *mem = lw_mem_of(buf, NULL, &st);
    DT_CHECK(st);
    g->slots[base->rank] = (lw_slot){.send = buf};
    DT_CHECK(lw_enter(c, "dt_broadcast")); /* which compared counts, dtypes and roots */
    /* Two host ranks: the root would sit idle, so it copies the upper half of a large message
     * (a GPU's copy engine gains nothing from it). */
    int split = g->n == 2 && bytes >= (1u << 20) && mem == &dt_mem_cpu;
    size_t half = split ? (bytes / 2) & ~(size_t)63 : bytes;
    if (st == DT_OK && base->rank != root && half) st = mem->copy(buf, g->slots[root].send, half);
    if (st == DT_OK && base->rank == root && half < bytes)
        st = mem->copy((char *)g->slots[1 - root].send + half, (const char *)buf + half,
                       bytes - half);
    /* Every other member reads the root's buffer; a member other than the root waits only for
     * a root that writes into its own. */
    publish(c, mem, &st, LW_DONE);
    if (base->rank == root)
        lw_wait_all(c, LW_DONE);
    else if (half < bytes)
        lw_wait_for(c, root, LW_DONE);
    return st;
}

static dt_status barrier_op(dt_comm *base) { return lw_enter(lw(base), "dt_barrier"); }

dt_status lw_send(dt_comm *base, const void *buf, size_t bytes, int peer);
dt_status lw_recv(dt_comm *base, void *buf, size_t bytes, int peer);
void lw_comm_destroy(dt_comm *base);
dt_status lw_exchange_boxes(dt_comm *base, int ndim, size_t es, const void *src,
                            const int64_t *src_shape, const dt_box *send, void *dst,
                            const int64_t *dst_shape, const dt_box *recv);
dt_status lw_reduce_scatter_boxes(dt_comm *base, int ndim, const void *src, const int64_t *shape,
                                  const dt_box *boxes, void *dst, dt_dtype dt, dt_reduce_op op);

const dt_comm_ops lw_comm_ops = {
    .name = "local",
    .all_reduce = all_reduce,
    .all_reduce_bufs = all_reduce_bufs,
    .all_gatherv = all_gatherv,
    .reduce_scatterv = reduce_scatterv,
    .all_to_allv = all_to_allv,
    .broadcast = broadcast,
    .send = lw_send,
    .recv = lw_recv,
    .barrier = barrier_op,
    .exchange_boxes = lw_exchange_boxes,
    .reduce_scatter_boxes = lw_reduce_scatter_boxes,
    .all_gather_pieces = lw_all_gather_pieces,
    .reduce_scatter_pieces = lw_reduce_scatter_pieces,
    .direct = true,
    .destroy = lw_comm_destroy,
};
