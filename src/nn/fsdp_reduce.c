/* FSDP's gradient half: a unit's gradients packed per destination rank into one reduce_scatter
 * over the dp group (in flight on the communication thread), and its shards added into the
 * parameters' gradients when it lands. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/saved.h"
#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "comm/request.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/fsdp.h"
#include "dtensor/redistribute.h"
#include "dtensor/runtime.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/fsdp_float8.h"
#include "nn/fsdp_impl.h"
#include "trace/trace_impl.h"

void dt_fsdp_reduce_free(unit *u) {
    mem_of(u)->free(u->rsend), mem_of(u)->free(u->rrecv);
    u->rsend = u->rrecv = NULL;
    for (int p = 0; u->rg && p < u->n; p++)
        dt_tensor_release(u->rg[p]), u->rg[p] = NULL;
}

/* The unit's gradients (all n) packed per destination rank; one reduce_scatter, in flight. A
 * gradient is first put in the gathered parameter's placements with Partial(sum) over dp;
 * where the parameter is Replicate and the gradient Partial(sum) on another dim (HSDP), that
 * Partial stays for the leaf's own sync to reduce on the smaller shard. */
dt_status dt_fsdp_reduce_start(unit *u) {
    dt_fsdp *f = u->f;
    int mnd = f->mesh->ndim, dp = f->opt.dp_dim;
    const dt_mem_ops *mem = mem_of(u);
    dt_status st = DT_OK;
    for (int p = 0; p < u->n && st == DT_OK; p++) {
        dt_tensor *g = u->grad[p], *full = u->full[p];
        dt_placement *pl = u->gpl[p];
        for (int m = 0; m < mnd; m++)
            pl[m] = m == dp ? dt_partial(DT_REDUCE_SUM)
                    : full->placements[m].kind == DT_PLACEMENT_REPLICATE &&
                            g->placements[m].kind == DT_PLACEMENT_PARTIAL &&
                            g->placements[m].op == DT_REDUCE_SUM
                        ? g->placements[m]
                        : full->placements[m];
        /* Usually the gradient is in them already (Partial(sum) over dp from the dp-sharded
         * batch): redistribute would still copy it, to own its result. */
        if (dt_fsdp_placed(g, pl, mnd)) continue;
        dt_tensor *moved;
        st = dt_tensor_redistribute(g, mnd, pl, &moved);
        if (st != DT_OK) break;
        dt_tensor_release(g);
        u->grad[p] = moved;
    }
    if (st != DT_OK) return st;
    bool direct = false; /* reduced straight into the shards' gradients (nn/fsdp_pieces.c) */
    if ((st = dt_fsdp_pieces_reduce_start(u, &direct)) != DT_OK || direct) {
        if (st == DT_OK) f->stats.reduce_scatters++;
        return st;
    }
    u->rsend = mem->alloc(u->slot * u->es * (size_t)f->dp_size);
    u->rrecv = mem->alloc(u->slot * u->es);
    if (!u->rsend || !u->rrecv) st = DT_ERR_NOMEM;
    for (int p = 0; p < u->n && st == DT_OK; p++) {
        dt_tensor *g = u->grad[p];
        for (int r = 0; r < f->dp_size && st == DT_OK; r++) {
            int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM], zero[DT_MAX_NDIM] = {0};
            chunk_of(u, p, r, shape, off);
            /* Only a short chunk's padding is zeroed: the chunks overwrite the rest. */
            size_t numel = dt_shape_numel(shape, g->ndim);
            char *at = (char *)u->rsend + ((size_t)r * u->slot + u->off[p]) * u->es;
            if (numel < u->len[p]) st = mem->zero(at + numel * u->es, (u->len[p] - numel) * u->es);
            if (!numel || st != DT_OK) continue;
            for (int d = 0; d < g->ndim; d++)
                off[d] -= g->local_offset[d];
            st =
                mem->box_copy(at, shape, zero, g->data, g->local_shape, off, shape, g->ndim, u->es);
        }
    }
    const char *caller = dt_comm_caller_swap("fsdp_unit");
    if (st == DT_OK)
        st = dt_reduce_scatter_start(f->comm, u->rsend, u->rrecv, u->slot, u->param[0]->dtype,
                                     DT_REDUCE_SUM, &u->rs);
    dt_comm_caller_swap(caller);
    if (st != DT_OK) {
        dt_fsdp_reduce_free(u);
        return st == DT_ERR_NOMEM ? dt_error(DT_ERR_NOMEM,
                                             "fsdp: out of memory for unit %d's "
                                             "reduce_scatter",
                                             u->index)
                                  : st;
    }
    f->stats.reduce_scatters++;
    return DT_OK;
}

/* Waits for the reduce_scatter and adds each shard into its parameter's gradient. */
dt_status dt_fsdp_reduce_finish(unit *u) {
    dt_request *req = u->rs;
    u->rs = NULL;
    int64_t reduced_by = 0; /* the collective the gradients' readers wait for (trace) */
    dt_status st = dt_request_wait_traced(req, NULL, &reduced_by);
    return dt_fsdp_reduce_add(u, st, reduced_by);
}

dt_status dt_fsdp_reduce_add(unit *u, dt_status st, int64_t reduced_by) {
    dt_fsdp *f = u->f;
    int mnd = f->mesh->ndim, dp = f->opt.dp_dim;
    /* Mesh dims where every gradient of the unit is still Partial (HSDP's replicate dim): one
     * all_reduce of the reduced shards over them, rather than one per parameter in the leaf
     * sync. The slot layout is the same on every rank of that group (same dp coordinate). */
    unsigned mask = dt_fsdp_hsdp_mask(u);
    if (st == DT_OK && mask) {
        dt_comm *comm;
        st = dt_mesh_lane_comm(f->mesh, mask, 1, &comm);
        dt_trace_last_coll_tls = 0;
        if (st == DT_OK)
            st =
                dt_all_reduce(comm, u->rrecv, u->rrecv, u->slot, u->param[0]->dtype, DT_REDUCE_SUM);
        if (dt_trace_last_coll_tls) reduced_by = dt_trace_last_coll_tls;
        if (st == DT_OK) f->stats.all_reduces++;
    }
    for (int p = 0; p < u->n && st == DT_OK; p++) {
        dt_tensor *w = u->param[p], *g;
        dt_placement pl[DT_MESH_MAX_NDIM];
        for (int m = 0; m < mnd; m++)
            pl[m] = m == dp || (mask >> m & 1) ? w->placements[m] : u->gpl[p][m];
        if (u->rg && u->rg[p]) { /* the direct reduce's result */
            g = u->rg[p];
            u->rg[p] = NULL;
        } else if ((st = dt_tensor_alloc(w->mesh, w->device, w->dtype, w->ndim, w->shape, pl,
                                         &g)) != DT_OK)
            break;
        g->trace_src = reduced_by;
        if (bytes_of(g) && u->rrecv)
            st = mem_of(u)->copy(g->data, (char *)u->rrecv + u->off[p] * u->es, bytes_of(g));
        dt_grad_slot *ws = NULL;
        if (st == DT_OK) st = dt_ag_make(w, &ws);
        if (st == DT_OK && ws->grad) {
            dt_tensor *sum;
            st = dt_add(ws->grad, g, &sum);
            dt_tensor_release(g);
            g = st == DT_OK ? sum : NULL;
            if (st == DT_OK) dt_tensor_release(ws->grad);
        }
        if (st == DT_OK)
            ws->grad = g;
        else
            dt_tensor_release(g);
    }
    dt_fsdp_reduce_free(u);
    return st;
}
