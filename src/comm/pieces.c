/* Grouped gathers and reduces of many arrays' blocks (dt_comm_all_gather_pieces,
 * dt_comm_reduce_scatter_pieces): argument checks, the backend's direct form where it has one,
 * and the packed form (one all_gatherv or reduce_scatterv) every backend runs otherwise. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "core/device.h"

bool dt_comm_pieces_direct(const dt_comm *c) {
    return c && c->ops->all_gather_pieces && c->ops->reduce_scatter_pieces;
}

/* Every piece fits its array, and the buffers this rank touches are there; *full_total and
 * *mine are the elements of all arrays and of this rank's blocks. */
static dt_status check_pieces(const char *fn, const dt_comm *c, int n, const dt_comm_piece *pieces,
                              size_t *full_total, size_t *mine, bool *host) {
    DT_ARG(c != NULL, "%s: argument comm is NULL", fn);
    DT_ARG(n >= 0 && (n == 0 || pieces), "%s: argument n = %d with pieces %p", fn, n,
           (const void *)pieces);
    *full_total = *mine = 0;
    *host = true;
    for (int i = 0; i < n; i++) {
        const dt_comm_piece *p = &pieces[i];
        DT_ARG(p->ndim >= 0 && p->ndim <= DT_MAX_NDIM, "%s: pieces[%d].ndim = %d is not in [0, %d]",
               fn, i, p->ndim, DT_MAX_NDIM);
        DT_ARG(p->boxes && (p->shape || !p->ndim), "%s: pieces[%d] has no %s", fn, i,
               p->boxes ? "shape" : "boxes");
        for (int k = 0; k < c->size; k++)
            for (int d = 0; d < p->ndim; d++) {
                int64_t o = p->boxes[k].off[d], e = p->boxes[k].ext[d];
                DT_ARG(o >= 0 && e >= 0 && o + e <= p->shape[d],
                       "%s: pieces[%d].boxes[%d] spans [%lld, %lld) of dim %d, of extent %lld", fn,
                       i, k, (long long)o, (long long)(o + e), d, (long long)p->shape[d]);
            }
        size_t numel = dt_shape_numel(p->shape, p->ndim);
        size_t own = dt_shape_numel(p->boxes[c->rank].ext, p->ndim);
        DT_ARG(!numel || p->full, "%s: pieces[%d].full is NULL with %zu elements", fn, i, numel);
        DT_ARG(!own || p->shard, "%s: pieces[%d].shard is NULL with %zu elements", fn, i, own);
        if (numel && dt_mem_kind_of(p->full) != DT_DEVICE_CPU) *host = false;
        if (own && dt_mem_kind_of(p->shard) != DT_DEVICE_CPU) *host = false;
        *full_total += numel;
        *mine += own;
    }
    return DT_OK;
}

/* Elements of group rank k's blocks over all pieces. */
static size_t *block_counts(const dt_comm *c, int n, const dt_comm_piece *pieces) {
    size_t *counts = calloc((size_t)c->size, sizeof *counts);
    for (int k = 0; counts && k < c->size; k++)
        for (int i = 0; i < n; i++)
            counts[k] += dt_shape_numel(pieces[i].boxes[k].ext, pieces[i].ndim);
    return counts;
}

static const dt_mem_ops *mem_of_pieces(int n, const dt_comm_piece *pieces) {
    for (int i = 0; i < n; i++)
        if (pieces[i].full) return dt_mem_ops_of(dt_mem_kind_of(pieces[i].full));
    return &dt_mem_cpu;
}

/* Every rank's blocks, rank by rank and piece by piece, between the arrays and one flat
 * buffer: into the arrays (a gather's unpack) or out of them (a reduce's pack). */
static dt_status flat_boxes(const dt_comm *c, const dt_mem_ops *mem, int n,
                            const dt_comm_piece *pieces, char *flat, size_t es, bool into_arrays) {
    dt_status st = DT_OK;
    size_t at = 0;
    for (int k = 0; k < c->size && st == DT_OK; k++)
        for (int i = 0; i < n && st == DT_OK; i++) {
            const dt_comm_piece *p = &pieces[i];
            const int64_t *ext = p->boxes[k].ext, *off = p->boxes[k].off;
            size_t numel = dt_shape_numel(ext, p->ndim);
            if (numel && into_arrays)
                st = mem->box_copy(p->full, p->shape, off, flat + at, ext, NULL, ext, p->ndim, es);
            else if (numel)
                st = mem->box_copy(flat + at, ext, NULL, p->full, p->shape, off, ext, p->ndim, es);
            at += numel * es;
        }
    return st;
}

/* The packed gather: this rank's shards one after another, one all_gatherv, and every rank's
 * run of blocks copied into its boxes. */
static dt_status gather_packed(dt_comm *c, int n, const dt_comm_piece *pieces, dt_dtype dt) {
    const dt_mem_ops *mem = mem_of_pieces(n, pieces);
    size_t es = dt_dtype_size(dt), total = 0, *counts = block_counts(c, n, pieces);
    for (int k = 0; counts && k < c->size; k++)
        total += counts[k];
    char *send = counts ? mem->alloc(counts[c->rank] * es + 1) : NULL;
    char *recv = send ? mem->alloc(total * es + 1) : NULL;
    dt_status st = recv ? DT_OK : dt_error(DT_ERR_NOMEM, "all_gather_pieces: out of memory");
    size_t at = 0;
    for (int i = 0; i < n && st == DT_OK; i++) {
        size_t b = dt_shape_numel(pieces[i].boxes[c->rank].ext, pieces[i].ndim) * es;
        if (b) st = mem->copy(send + at, pieces[i].shard, b);
        at += b;
    }
    if (st == DT_OK) st = dt_all_gatherv(c, send, recv, counts, NULL, dt);
    if (st == DT_OK) st = flat_boxes(c, mem, n, pieces, recv, es, true);
    mem->free(send), mem->free(recv);
    free(counts);
    return st;
}

/* The packed reduce: every rank's blocks cut out of the arrays in rank order, one
 * reduce_scatterv, and this rank's reduced blocks copied into the shards. */
static dt_status reduce_packed(dt_comm *c, int n, const dt_comm_piece *pieces, dt_dtype dt,
                               dt_reduce_op op) {
    const dt_mem_ops *mem = mem_of_pieces(n, pieces);
    size_t es = dt_dtype_size(dt), total = 0, *counts = block_counts(c, n, pieces);
    for (int k = 0; counts && k < c->size; k++)
        total += counts[k];
    char *send = counts ? mem->alloc(total * es + 1) : NULL;
    char *recv = send ? mem->alloc(counts[c->rank] * es + 1) : NULL;
    dt_status st = recv ? DT_OK : dt_error(DT_ERR_NOMEM, "reduce_scatter_pieces: out of memory");
    if (st == DT_OK) st = flat_boxes(c, mem, n, pieces, send, es, false);
    if (st == DT_OK) st = dt_reduce_scatterv(c, send, recv, counts, dt, op);
    size_t at = 0;
    for (int i = 0; i < n && st == DT_OK; i++) {
        size_t b = dt_shape_numel(pieces[i].boxes[c->rank].ext, pieces[i].ndim) * es;
        if (b) st = mem->copy(pieces[i].shard, recv + at, b);
        at += b;
    }
    mem->free(send), mem->free(recv);
    free(counts);
    return st;
}

static dt_status call_gather(dt_comm *c, const dt_call *a) {
    return dt_comm_all_gather_pieces(c, (int)a->count, a->send, a->dtype, a->root);
}

static dt_status call_reduce(dt_comm *c, const dt_call *a) {
    return dt_comm_reduce_scatter_pieces(c, (int)a->count, a->send, a->dtype, a->op, a->root);
}

dt_status dt_comm_all_gather_pieces(dt_comm *c, int n, const dt_comm_piece *pieces, dt_dtype dtype,
                                    int flags) {
    size_t total, mine;
    bool host;
    DT_CHECK(check_pieces(__func__, c, n, pieces, &total, &mine, &host));
    DT_ARG((unsigned)dtype < DT_DTYPE_COUNT, "%s: argument dtype has unknown value %d", __func__,
           (int)dtype);
    dt_call a = {.send = pieces, .count = (size_t)n, .dtype = dtype, .root = flags};
    dt_status st;
    if (dt_comm_in_order(c, call_gather, &a, &st)) return st;
    /* The same choice on every member: the backend, the flag and the memory kind (one kind per
     * group) are alike. */
    if (!dt_comm_pieces_direct(c) || !host || (flags & DT_PIECES_PACKED))
        return gather_packed(c, n, pieces, dtype);
    DT_CHECK(dt_comm_issue(c, DT_COLL_ALL_GATHER, (int64_t)total, dtype, -1, -1));
    double t0 = c->issued_us;
    st = c->ops->all_gather_pieces(c, n, pieces, dtype);
    size_t es = dt_dtype_size(dtype);
    if (st == DT_OK) dt_comm_count(c, DT_COLL_ALL_GATHER, mine * es, total * es, t0);
    return st;
}

dt_status dt_comm_reduce_scatter_pieces(dt_comm *c, int n, const dt_comm_piece *pieces,
                                        dt_dtype dtype, dt_reduce_op op, int flags) {
    size_t total, mine;
    bool host;
    DT_CHECK(check_pieces(__func__, c, n, pieces, &total, &mine, &host));
    DT_ARG((unsigned)dtype < DT_DTYPE_COUNT && dtype != DT_F8E4M3 && dtype != DT_F8E5M2,
           "%s: argument dtype has value %d, not a dtype that reduces", __func__, (int)dtype);
    DT_ARG((unsigned)op < DT_REDUCE_COUNT && op != DT_REDUCE_NORM,
           "%s: argument op has value %d, not a reduction a collective takes", __func__, (int)op);
    dt_call a = {.send = pieces, .count = (size_t)n, .dtype = dtype, .op = op, .root = flags};
    dt_status st;
    if (dt_comm_in_order(c, call_reduce, &a, &st)) return st;
    if (!dt_comm_pieces_direct(c) || !host || (flags & DT_PIECES_PACKED))
        return reduce_packed(c, n, pieces, dtype, op);
    DT_CHECK(dt_comm_issue(c, DT_COLL_REDUCE_SCATTER, (int64_t)total, dtype, op, -1));
    double t0 = c->issued_us;
    st = c->ops->reduce_scatter_pieces(c, n, pieces, dtype, op);
    size_t es = dt_dtype_size(dtype);
    if (st == DT_OK) dt_comm_count(c, DT_COLL_REDUCE_SCATTER, total * es, mine * es, t0);
    return st;
}

dt_status dt_comm_all_gather_pieces_start(dt_comm *c, int n, const dt_comm_piece *pieces,
                                          dt_dtype dtype, int flags, dt_request **out) {
    DT_ARG(out != NULL, "%s: argument out is NULL", __func__);
    size_t total, mine;
    bool host;
    DT_CHECK(check_pieces(__func__, c, n, pieces, &total, &mine, &host));
    dt_call a = {.send = pieces, .count = (size_t)n, .dtype = dtype, .root = flags};
    return dt_comm_submit(c, call_gather, &a, out);
}

dt_status dt_comm_reduce_scatter_pieces_start(dt_comm *c, int n, const dt_comm_piece *pieces,
                                              dt_dtype dtype, dt_reduce_op op, int flags,
                                              dt_request **out) {
    DT_ARG(out != NULL, "%s: argument out is NULL", __func__);
    size_t total, mine;
    bool host;
    DT_CHECK(check_pieces(__func__, c, n, pieces, &total, &mine, &host));
    dt_call a = {.send = pieces, .count = (size_t)n, .dtype = dtype, .op = op, .root = flags};
    return dt_comm_submit(c, call_reduce, &a, out);
}
