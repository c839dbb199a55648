/* FSDP's direct moves: where the runtime moves pieces of arrays straight between ranks (the
 * local runtime), a unit's gather copies every dp rank's shard into the gathered parameters'
 * own storage, and its reduce sums every rank's gradient block into the shard's gradient,
 * each in one pass: no flat buffer to pack or unpack. The same bits as the packed path. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/tensor.h"
#include "nn/fsdp_impl.h"

void dt_fsdp_pieces_free(unit *u) {
    dt_fsdp_pieces_gather_free(u);
    free(u->bp);
    for (int p = 0; u->rg && p < u->n; p++)
        dt_tensor_release(u->rg[p]);
    free(u->fshape), free(u->box), free(u->gp), free(u->rp), free(u->gbuf), free(u->rg);
}

void dt_fsdp_pieces_gather_free(unit *u) {
    for (int p = 0; u->gbuf && p < u->n; p++) {
        mem_of(u)->free(u->gbuf[p]);
        u->gbuf[p] = NULL;
    }
}

/* The gathered parameter's local shape on this rank, and each dp rank's shard as a box of it;
 * false when the shards do not tile it (then the unit packs). */
static bool lay_out(unit *u, int p) {
    const dt_fsdp *f = u->f;
    const dt_mesh *mesh = f->mesh;
    const dt_tensor *w = u->param[p];
    dt_placement pl[DT_MESH_MAX_NDIM];
    memcpy(pl, w->placements, sizeof pl);
    pl[f->opt.dp_dim] = dt_replicate();
    int64_t foff[DT_MAX_NDIM];
    if (dt_shard_layout(mesh->ndim, mesh->shape, mesh->coord, w->ndim, w->shape, pl, u->fshape[p],
                        foff) != DT_OK)
        return false;
    size_t cover = 0;
    for (int r = 0; r < f->dp_size; r++) {
        dt_box *b = &u->box[p * f->dp_size + r];
        int64_t off[DT_MAX_NDIM];
        chunk_of(u, p, r, b->ext, off);
        for (int d = 0; d < w->ndim; d++) {
            b->off[d] = off[d] - foff[d];
            if (b->ext[d] && (b->off[d] < 0 || b->off[d] + b->ext[d] > u->fshape[p][d]))
                return false;
            if (!b->ext[d]) b->off[d] = 0;
        }
        cover += dt_shape_numel(b->ext, w->ndim);
    }
    return cover == dt_shape_numel(u->fshape[p], w->ndim);
}

dt_status dt_fsdp_pieces_init(unit *u) {
    const dt_fsdp *f = u->f;
    u->direct = false;
    /* Gathers in a narrower dtype pack (they convert on the way); so does every runtime that
     * cannot reach its peers' arrays. The same on every dp rank. */
    if (f->opt.float8_all_gather || f->opt.bf16_all_gather || !dt_comm_pieces_direct(f->comm) ||
        u->param[0]->device.kind != DT_DEVICE_CPU)
        return DT_OK;
    size_t n = (size_t)u->n;
    u->fshape = calloc(n, sizeof *u->fshape);
    u->box = calloc(n * (size_t)f->dp_size, sizeof *u->box);
    u->gp = calloc(n, sizeof *u->gp);
    u->rp = calloc(n, sizeof *u->rp);
    u->gbuf = calloc(n, sizeof *u->gbuf);
    u->rg = calloc(n, sizeof *u->rg);
    if (!u->fshape || !u->box || !u->gp || !u->rp || !u->gbuf || !u->rg)
        return dt_error(DT_ERR_NOMEM, "dt_fsdp_add_unit: out of memory");
    for (int p = 0; p < u->n; p++)
        if (!lay_out(u, p)) return DT_OK;
    u->direct = true;
    return DT_OK;
}

static dt_comm_piece piece_of(const unit *u, int p, void *full, void *shard) {
    return (dt_comm_piece){.full = full,
                           .shard = shard,
                           .shape = u->fshape[p],
                           .boxes = &u->box[p * u->f->dp_size],
                           .ndim = u->param[p]->ndim};
}

static size_t gathered_bytes(const unit *u) {
    size_t b = 0;
    for (int p = 0; p < u->n; p++)
        b += dt_shape_numel(u->fshape[p], u->param[p]->ndim) * u->es;
    return b;
}

int dt_fsdp_batch_end(const dt_fsdp *f, int k) {
    if (!f->u[k]->direct || f->opt.coalesce_bytes <= 0) return k + 1;
    int64_t total = (int64_t)gathered_bytes(f->u[k]);
    int end = k + 1;
    for (; f->opt.coalesce_bytes > 0 && end < f->n; end++) {
        const unit *v = f->u[end];
        bool held = v->full[0] && !dt_tensor_storage_dropped(v->full[0]);
        total += v->direct ? (int64_t)gathered_bytes(v) : 0;
        if (!v->direct || held || v->gather || v->ahead || v->ngrad ||
            total > f->opt.coalesce_bytes)
            break;
    }
    return end;
}

/* Fresh storage for each of u's gathered parameters, and u's pieces at pieces. */
static dt_status fill_pieces(unit *u, dt_comm_piece *pieces) {
    const dt_mem_ops *mem = mem_of(u);
    for (int p = 0; p < u->n; p++) {
        size_t bytes = dt_shape_numel(u->fshape[p], u->param[p]->ndim) * u->es;
        u->gbuf[p] = bytes ? mem->alloc(bytes) : NULL;
        if (bytes && !u->gbuf[p])
            return dt_error(DT_ERR_NOMEM, "fsdp: out of memory for unit %d's gather", u->index);
        pieces[p] = piece_of(u, p, u->gbuf[p], u->param[p]->data);
    }
    return DT_OK;
}

dt_status dt_fsdp_pieces_gather_start(unit *u, int end) {
    dt_fsdp *f = u->f;
    int total = 0;
    for (int j = u->index; j < end; j++)
        total += f->u[j]->n;
    dt_comm_piece *pieces = u->gp;
    if (end > u->index + 1) {
        dt_comm_piece *bp = realloc(u->bp, sizeof *bp * (size_t)total);
        if (!bp)
            return dt_error(DT_ERR_NOMEM, "fsdp: out of memory for unit %d's gather", u->index);
        pieces = u->bp = bp;
    }
    dt_status st = DT_OK;
    for (int j = u->index, at = 0; j < end && st == DT_OK; at += f->u[j++]->n)
        st = fill_pieces(f->u[j], pieces + at);
    const char *caller = dt_comm_caller_swap("fsdp_unit"); /* the unit's own, not an op's */
    if (st == DT_OK)
        st = dt_comm_all_gather_pieces_start(f->comm, total, pieces, u->param[0]->dtype, 0,
                                             &u->gather);
    dt_comm_caller_swap(caller);
    if (st != DT_OK) {
        for (int j = u->index; j < end; j++)
            dt_fsdp_pieces_gather_free(f->u[j]);
        return st;
    }
    u->batch_end = end;
    for (int j = u->index + 1; j < end; j++) {
        unit *v = f->u[j];
        v->ahead = AHEAD_FLYING, v->leader = u->index;
        f->stats.forward_gathers++, f->stats.prefetches++;
    }
    return DT_OK;
}

/* One reduce_scatter for every deferred unit's pieces, in unit order (the same on every rank). */
dt_status dt_fsdp_reduce_deferred(dt_fsdp *f) {
    int total = 0;
    for (int k = 0; k < f->n; k++)
        total += f->u[k]->rs_deferred ? f->u[k]->n : 0;
    if (!total) return DT_OK;
    dt_comm_piece *pieces = malloc(sizeof *pieces * (size_t)total);
    dt_status st = pieces ? DT_OK : dt_error(DT_ERR_NOMEM, "fsdp: out of memory for a reduce");
    dt_dtype dtype = DT_F32;
    for (int k = 0, at = 0; k < f->n && st == DT_OK; k++) {
        unit *u = f->u[k];
        if (!u->rs_deferred) continue;
        memcpy(pieces + at, u->rp, sizeof *pieces * (size_t)u->n);
        at += u->n;
        dtype = u->param[0]->dtype;
    }
    const char *caller = dt_comm_caller_swap("fsdp_unit");
    dt_trace_last_coll_tls = 0;
    if (st == DT_OK)
        st = dt_comm_reduce_scatter_pieces(f->comm, total, pieces, dtype, DT_REDUCE_SUM, 0);
    int64_t by = dt_trace_last_coll_tls;
    dt_comm_caller_swap(caller);
    free(pieces);
    f->deferred_bytes = 0;
    for (int k = 0; k < f->n; k++) {
        unit *u = f->u[k];
        if (!u->rs_deferred) continue;
        u->rs_deferred = false;
        dt_status s2 = dt_fsdp_reduce_add(u, st, by);
        if (st == DT_OK) st = s2;
    }
    return st;
}

dt_status dt_fsdp_pieces_reduce_start(unit *u, bool *done) {
    *done = false;
    if (!u->direct || dt_fsdp_hsdp_mask(u)) return DT_OK; /* HSDP reduces the packed shards */
    for (int p = 0; p < u->n; p++) {
        const dt_tensor *g = u->grad[p];
        if (g->dtype != u->param[p]->dtype ||
            memcmp(g->local_shape, u->fshape[p], sizeof(int64_t) * (size_t)g->ndim))
            return DT_OK;
    }
    dt_fsdp *f = u->f;
    int mnd = f->mesh->ndim, dp = f->opt.dp_dim, me = f->comm->rank;
    dt_status st = DT_OK;
    for (int p = 0; p < u->n && st == DT_OK; p++) {
        dt_tensor *w = u->param[p];
        dt_placement pl[DT_MESH_MAX_NDIM]; /* as dt_fsdp_reduce_finish's, with no HSDP dims */
        for (int m = 0; m < mnd; m++)
            pl[m] = m == dp ? w->placements[m] : u->gpl[p][m];
        st = dt_tensor_alloc(w->mesh, w->device, w->dtype, w->ndim, w->shape, pl, &u->rg[p]);
        if (st == DT_OK &&
            u->rg[p]->local_numel != dt_shape_numel(u->box[p * f->dp_size + me].ext, w->ndim))
            st = dt_error(DT_ERR_SHAPE,
                          "fsdp: unit %d's parameter %d: the shard's gradient "
                          "holds %zu elements, its box another count",
                          u->index, p, u->rg[p]->local_numel);
        if (st == DT_OK) u->rp[p] = piece_of(u, p, u->grad[p]->data, u->rg[p]->data);
    }
    /* Deferred while the deferred gradients stay within coalesce_bytes: one reduce_scatter
     * at the end of backward for all of them. Every unit of a dtype alike (one call). */
    int64_t bytes = (int64_t)gathered_bytes(u);
    if (st == DT_OK && f->opt.coalesce_bytes > 0 &&
        f->deferred_bytes + bytes <= f->opt.coalesce_bytes &&
        u->param[0]->dtype == f->u[0]->param[0]->dtype) {
        f->deferred_bytes += bytes;
        u->rs_deferred = true;
        *done = true;
        return DT_OK;
    }
    const char *caller = dt_comm_caller_swap("fsdp_unit");
    if (st == DT_OK)
        st = dt_comm_reduce_scatter_pieces_start(f->comm, u->n, u->rp, u->param[0]->dtype,
                                                 DT_REDUCE_SUM, 0, &u->rs);
    dt_comm_caller_swap(caller);
    if (st != DT_OK) {
        for (int p = 0; p < u->n; p++)
            dt_tensor_release(u->rg[p]), u->rg[p] = NULL;
        return st;
    }
    *done = true;
    return DT_OK;
}
