/* Collectives over a group's shared-memory arena (shm.h), with the local runtime's direct
 * algorithms, a chunk-sized piece per member and round:
 *   all_gatherv      each member writes the next piece of its block, every peer copies it out
 *   reduce_scatterv  each member writes the next piece of every peer's block, each reduces its
 *                    own block's piece from the n members in group-rank order (dt_reduce_n:
 *                    the local runtime's bits)
 *   all_reduce       reduce_scatter into the local runtime's chunks, then all_gather of them
 *   all_to_allv      each member writes the next piece of what it sends every peer
 *   broadcast        the root writes, the others copy out; barrier: one empty round
 * and, for redistribute, the two box forms, which pack a box's next piece straight into the
 * chunk and unpack it straight out (one copy each way, no packed buffer):
 *   exchange_boxes        all_to_allv of boxes (S(i) -> S(j))
 *   gather_boxes          all_gatherv into boxes (S(j > 0) -> R)
 *   reduce_scatter_boxes  reduce_scatterv of boxes (P -> S(j > 0))
 * A piece for each peer is a 1/n part of a chunk, 64-byte aligned. The first round's headers
 * carry fingerprints and counts, compared by every member against group rank 0's. */
#include <stdlib.h>
#include <string.h>

#include "comm/ucx/shm.h"
#include "core/box.h"
#include "core/check.h"
#include "core/copy.h"
#include "core/reduce.h"

enum { K_GATHER = 1, K_REDUCE, K_ALL_TO_ALL, K_BROADCAST, K_BARRIER };
enum { CNT_NONE, CNT_SAME, CNT_PAIRS };

static size_t min_sz(size_t a, size_t b) {
    return a < b ? a : b;
}

/* Bytes of a piece for one peer: a 1/n part of a chunk, a multiple of 64 (and of es). */
static size_t part_bytes(int n) {
    return (SHM_CHUNK / (size_t)n) & ~(size_t)63;
}

/* Copies a piece out to the user's buffer: streaming stores for large messages (fenced once
 * at the end by the caller). */
static void copy_out(void *dst, const void *src, size_t bytes, int stream) {
    if (stream)
        dt_copy_stream_unfenced(dst, src, bytes);
    else
        memcpy(dst, src, bytes);
}

/* One side of an exchange over the arena: dense blocks (counts and displs, in elements) of a
 * buffer, or the boxes of an array (boxes[j] holds the elements for member j, counts[j] of
 * them, in the box's row-major order). */
typedef struct shm_side {
    char *base;
    const size_t *counts, *displs;
    const dt_box *boxes; /* NULL: dense blocks */
    const int64_t *shape;
    int ndim;
} shm_side;

/* Elements [e0, e0 + len) of member j's block of a side into to (pack) ... */
static void side_put(const shm_side *sd, int j, size_t e0, size_t len, size_t es, void *to) {
    if (sd->boxes)
        dt_box_pack_range(to, sd->base, sd->shape, sd->boxes[j].off, sd->boxes[j].ext, sd->ndim,
                          es, e0, len);
    else
        memcpy(to, sd->base + (sd->displs[j] + e0) * es, len * es);
}

/* ... and out of from into member j's block (streaming stores for large messages, fenced once
 * at the end by the caller). */
static void side_take(const shm_side *sd, int j, size_t e0, size_t len, size_t es,
                      const void *from, int stream) {
    if (sd->boxes)
        dt_box_unpack_range(sd->base, sd->shape, sd->boxes[j].off, sd->boxes[j].ext, sd->ndim, es,
                            e0, len, from, stream);
    else
        copy_out(sd->base + (sd->displs[j] + e0) * es, from, len * es, stream);
}

/* Round e0 of a chunk split in n parts (reduce_scatter, all_to_all): this rank's elements
 * [e0, e0 + part) of every peer's block go into that peer's part; its own block stays put
 * unless self (boxes to reduce: its own part is then read from the chunk too). */
static void put_parts(ux_shm *s, shm_hdr *h, const shm_side *in, size_t e0, size_t es,
                      int self) {
    size_t qe = part_bytes(s->n) / es;
    for (int r = 0; r < s->n; r++) {
        if ((r == s->me && !self) || e0 >= in->counts[r]) continue;
        side_put(in, r, e0, min_sz(qe, in->counts[r] - e0), es,
                 shm_data(s, h) + (size_t)r * qe * es);
    }
}

static void fp_of(const shm_hdr *h, dt_coll_fp *fp) {
    *fp = (dt_coll_fp){.seq = h->fp[0],
                       .kind = h->fp[1],
                       .count = h->fp[2],
                       .dtype = h->fp[3],
                       .op = h->fp[4],
                       .root = h->fp[5]};
}

/* After posting a collective's first round: every member's fingerprint and counts against
 * group rank 0's (so that every member names the same pair), and for all_to_allv what each
 * peer sends this rank against counts (this rank's receive counts). */
static dt_status check_first(shm_op *so, int mode, const size_t *counts) {
    ux_op *op = so->op;
    ux_comm *c = op->c;
    int n = c->base.size, me = c->base.rank;
    shm_hdr *h0;
    if (shm_peer(so, 0, &h0)) return op->st;
    dt_coll_fp f0, fm;
    fp_of(h0, &f0);
    for (int m = 1; m < n; m++) {
        shm_hdr *hm;
        if (shm_peer(so, m, &hm)) return op->st;
        fp_of(hm, &fm);
        if (!dt_coll_fp_equal(&f0, &fm))
            return op->st = dt_coll_fp_mismatch(&c->base, op->what, c->base.members[0], &f0,
                                                c->base.members[m], &fm);
        if (hm->kind != h0->kind)
            return op->st = dt_error(DT_ERR_COMM,
                                     "%s: group ranks 0 and %d run different collectives "
                                     "over shared memory (%u, %u)",
                                     op->what, m, h0->kind, hm->kind);
        for (int i = 0; mode == CNT_SAME && i < n; i++)
            if (hm->counts[i] != h0->counts[i])
                return op->st = dt_error(DT_ERR_COMM,
                                         "%s: ranks disagree on counts: recvcounts[%d] is %llu "
                                         "on group rank 0 but %llu on group rank %d",
                                         op->what, i, (unsigned long long)h0->counts[i],
                                         (unsigned long long)hm->counts[i], m);
    }
    for (int m = 0; mode == CNT_PAIRS && m < n; m++) {
        shm_hdr *hm;
        if (m == me || shm_peer(so, m, &hm)) continue;
        if (hm->counts[me] != counts[m])
            return op->st = dt_error(DT_ERR_COMM,
                                     "%s: group rank %d (world rank %d) sends %llu elements to "
                                     "group rank %d, which expects %zu: ranks disagree on counts",
                                     op->what, m, c->base.members[m],
                                     (unsigned long long)hm->counts[me], me, counts[m]);
    }
    return op->st;
}

/* Each member writes the next piece of its block (send, counts[me] elements); every peer takes
 * it out into its side out. */
static dt_status gather_rounds(ux_op *op, ux_shm *s, const void *send, const shm_side *out,
                               size_t es, int check) {
    int n = s->n, me = s->me;
    const size_t *counts = out->counts;
    size_t mine = counts[me] * es, total = 0;
    for (int j = 0; j < n; j++)
        total += counts[j] * es;
    const int stream = total >= DT_STREAM_MIN_BYTES;
    shm_op so;
    shm_start(&so, op, s);
    for (size_t off = 0;; off += SHM_CHUNK) {
        shm_hdr *h;
        if (shm_begin(&so, &h)) break;
        size_t len = off < mine ? min_sz(SHM_CHUNK, mine - off) : 0;
        memcpy(shm_data(s, h), (const char *)send + off, len);
        shm_post(&so, h, K_GATHER, off + len < mine, counts);
        if (off == 0 && check && check_first(&so, CNT_SAME, NULL)) break;
        for (int k = 1; k < n; k++) {
            int m = (me + k) % n;
            size_t bm = counts[m] * es;
            shm_hdr *hm;
            if (off >= bm) continue;
            if (shm_peer(&so, m, &hm)) break;
            side_take(out, m, off / es, min_sz(SHM_CHUNK, bm - off) / es, es, shm_data(s, hm),
                      stream);
        }
        if (!shm_end(&so)) break;
    }
    if (stream) dt_stream_fence();
    return op->st;
}

dt_status ux_shm_all_gatherv(ux_op *op, ux_shm *s, const void *send, void *recv,
                             const size_t *counts, const size_t *displs, size_t es, int check) {
    const shm_side out = {.base = recv, .counts = counts, .displs = displs};
    return gather_rounds(op, s, send, &out, es, check);
}

/* The reduce_scatter half: rank me's block reduced into out. With boxes (in->boxes), this
 * rank's own box goes through its chunk too, as every box is strided in its array. */
static dt_status reduce_rounds(ux_op *op, ux_shm *s, const shm_side *in, void *out, dt_dtype dt,
                               dt_reduce_op kind, int check) {
    int n = s->n, me = s->me;
    const size_t *counts = in->counts;
    const int self = in->boxes != NULL;
    size_t es = dt_dtype_size(dt), q = part_bytes(n), qe = q / es, most = 0;
    for (int j = 0; j < n; j++)
        if ((j != me || self) && counts[j] > most) most = counts[j];
    const int stream = counts[me] * es >= DT_STREAM_MIN_BYTES;
    const void **srcs = malloc(sizeof *srcs * (size_t)n);
    if (!srcs) return op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op->what);
    shm_op so;
    shm_start(&so, op, s);
    for (size_t e0 = 0;; e0 += qe) {
        shm_hdr *h;
        if (shm_begin(&so, &h)) break;
        put_parts(s, h, in, e0, es, self);
        shm_post(&so, h, K_REDUCE, e0 + qe < most, counts);
        if (e0 == 0 && check && check_first(&so, CNT_SAME, NULL)) break;
        if (e0 < counts[me]) {
            for (int m = 0; m < n && !op->st; m++) {
                shm_hdr *hm;
                if (m == me && !self)
                    srcs[m] = in->base + (in->displs[me] + e0) * es;
                else if (shm_peer(&so, m, &hm) == DT_OK)
                    srcs[m] = shm_data(s, hm) + (size_t)me * q;
            }
            if (op->st) break;
            size_t len = min_sz(qe, counts[me] - e0);
            if (stream)
                dt_reduce_n_streamed(dt, kind, (char *)out + e0 * es, srcs, n, len);
            else
                dt_reduce_n(dt, kind, (char *)out + e0 * es, srcs, n, len);
        }
        if (!shm_end(&so)) break;
    }
    if (stream) dt_stream_fence();
    free(srcs);
    return op->st;
}

dt_status ux_shm_reduce_scatterv(ux_op *op, ux_shm *s, const void *send, void *recv,
                                 const size_t *counts, const size_t *displs, dt_dtype dt,
                                 dt_reduce_op kind) {
    const shm_side in = {.base = (char *)send, .counts = counts, .displs = displs};
    return reduce_rounds(op, s, &in, recv, dt, kind, 1);
}

/* Element counts of n boxes (malloc'd; NULL when out of memory, op->st set). */
static size_t *box_counts(ux_op *op, const dt_box *boxes, int n, int ndim) {
    size_t *counts = malloc(sizeof *counts * (size_t)n);
    if (!counts) op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op->what);
    for (int j = 0; counts && j < n; j++)
        counts[j] = dt_shape_numel(boxes[j].ext, ndim);
    return counts;
}

dt_status ux_shm_reduce_scatter_boxes(ux_op *op, ux_shm *s, int ndim, const void *src,
                                      const int64_t *shape, const dt_box *boxes, void *dst,
                                      dt_dtype dt, dt_reduce_op kind) {
    size_t *counts = box_counts(op, boxes, s->n, ndim);
    if (!counts) return op->st;
    const shm_side in = {
        .base = (char *)src, .counts = counts, .boxes = boxes, .shape = shape, .ndim = ndim};
    reduce_rounds(op, s, &in, dst, dt, kind, 1);
    free(counts);
    return op->st;
}

dt_status ux_shm_all_reduce(ux_op *op, ux_shm *s, const void *send, void *recv, size_t count,
                            dt_dtype dt, dt_reduce_op kind) {
    int n = s->n, me = s->me;
    size_t es = dt_dtype_size(dt);
    size_t *counts = malloc(sizeof *counts * 2 * (size_t)n), *displs = counts + n;
    if (!counts) return op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op->what);
    for (int j = 0; j < n; j++) { /* the local runtime's chunks */
        displs[j] = count * (size_t)j / (size_t)n;
        counts[j] = count * (size_t)(j + 1) / (size_t)n - displs[j];
    }
    char *mine = (char *)recv + displs[me] * es;
    const shm_side in = {.base = (char *)send, .counts = counts, .displs = displs};
    if (reduce_rounds(op, s, &in, mine, dt, kind, 1) == DT_OK)
        ux_shm_all_gatherv(op, s, mine, recv, counts, displs, es, 0);
    free(counts);
    return op->st;
}

/* Each member writes the next part of what it sends every peer; each takes its parts out. */
static dt_status a2a_rounds(ux_op *op, ux_shm *s, const shm_side *in, const shm_side *out,
                            size_t es) {
    int n = s->n, me = s->me;
    size_t q = part_bytes(n), qe = q / es, most = 0, total = 0;
    for (int j = 0; j < n; j++) {
        if (j != me && in->counts[j] > most) most = in->counts[j];
        total += out->counts[j] * es;
    }
    const int stream = total >= DT_STREAM_MIN_BYTES;
    shm_op so;
    shm_start(&so, op, s);
    for (size_t e0 = 0;; e0 += qe) {
        shm_hdr *h;
        if (shm_begin(&so, &h)) break;
        put_parts(s, h, in, e0, es, 0);
        shm_post(&so, h, K_ALL_TO_ALL, e0 + qe < most, in->counts);
        if (e0 == 0 && check_first(&so, CNT_PAIRS, out->counts)) break;
        for (int k = 1; k < n; k++) {
            int m = (me - k + n) % n;
            shm_hdr *hm;
            if (e0 >= out->counts[m]) continue;
            if (shm_peer(&so, m, &hm)) break;
            side_take(out, m, e0, min_sz(qe, out->counts[m] - e0), es,
                      shm_data(s, hm) + (size_t)me * q, stream);
        }
        if (!shm_end(&so)) break;
    }
    if (stream) dt_stream_fence();
    return op->st;
}

dt_status ux_shm_all_to_allv(ux_op *op, ux_shm *s, const void *send, const size_t *scounts,
                             const size_t *sdispls, void *recv, const size_t *rcounts,
                             const size_t *rdispls, size_t es) {
    const shm_side in = {.base = (char *)send, .counts = scounts, .displs = sdispls};
    const shm_side out = {.base = recv, .counts = rcounts, .displs = rdispls};
    return a2a_rounds(op, s, &in, &out, es);
}

dt_status ux_shm_exchange_boxes(ux_op *op, ux_shm *s, int ndim, size_t es, const void *src,
                                const int64_t *src_shape, const dt_box *send, void *dst,
                                const int64_t *dst_shape, const dt_box *recv) {
    size_t *sc = box_counts(op, send, s->n, ndim);
    size_t *rc = sc ? box_counts(op, recv, s->n, ndim) : NULL;
    if (rc) {
        const shm_side in = {
            .base = (char *)src, .counts = sc, .boxes = send, .shape = src_shape, .ndim = ndim};
        const shm_side out = {
            .base = dst, .counts = rc, .boxes = recv, .shape = dst_shape, .ndim = ndim};
        a2a_rounds(op, s, &in, &out, es);
    }
    free(rc);
    free(sc);
    return op->st;
}

dt_status ux_shm_gather_boxes(ux_op *op, ux_shm *s, int ndim, size_t es, const void *src,
                              void *dst, const int64_t *dst_shape, const dt_box *recv) {
    size_t *counts = box_counts(op, recv, s->n, ndim);
    if (counts) {
        const shm_side out = {
            .base = dst, .counts = counts, .boxes = recv, .shape = dst_shape, .ndim = ndim};
        gather_rounds(op, s, src, &out, es, 1);
    }
    free(counts);
    return op->st;
}

dt_status ux_shm_broadcast(ux_op *op, ux_shm *s, void *buf, size_t bytes, int root) {
    int me = s->me;
    const int stream = bytes >= DT_STREAM_MIN_BYTES;
    shm_op so;
    shm_start(&so, op, s);
    for (size_t off = 0;; off += SHM_CHUNK) {
        shm_hdr *h, *hr;
        if (shm_begin(&so, &h)) break;
        size_t len = off < bytes ? min_sz(SHM_CHUNK, bytes - off) : 0;
        if (me == root) memcpy(shm_data(s, h), (char *)buf + off, len);
        shm_post(&so, h, K_BROADCAST, me == root && off + len < bytes, NULL);
        if (off == 0 && check_first(&so, CNT_NONE, NULL)) break;
        if (me != root && len) {
            if (shm_peer(&so, root, &hr)) break;
            copy_out((char *)buf + off, shm_data(s, hr), len, stream);
        }
        if (!shm_end(&so)) break;
    }
    if (stream) dt_stream_fence();
    return op->st;
}

dt_status ux_shm_barrier(ux_op *op, ux_shm *s) {
    shm_op so;
    shm_hdr *h;
    shm_start(&so, op, s);
    if (shm_begin(&so, &h) == DT_OK) {
        shm_post(&so, h, K_BARRIER, 0, NULL);
        if (check_first(&so, CNT_NONE, NULL) == DT_OK) shm_end(&so);
    }
    return op->st;
}
