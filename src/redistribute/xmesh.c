/* A tensor moved between two meshes of one world (dt_tensor_redistribute_to, which autograd
 * records around this pure move). Runs the plan
 * xplan.c makes: the same-mesh plan before (Partial reduced on the source mesh), the boxes
 * sent point to point on the world communicator in the plan's order, the same-mesh plan after
 * (Partial made on the target mesh). The plan's order is one total order that every rank walks,
 * taking part in the transfers that name it: a blocking rendezvous send cannot deadlock, since
 * the first unfinished transfer always has both its ranks waiting on it. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/agree.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "redistribute/redistribute_impl.h"
#include "redistribute/xplan_impl.h"

static const char FN[] = "dt_tensor_redistribute_to";

/* A same-mesh move (pure: the caller's autograd records the cross-mesh node itself). */
static dt_status move_quiet(dt_tensor *t, const dt_placement *pl, dt_tensor **out) {
    return dt_redistribute_run(t, pl, out);
}

/* Meshes equal by value: the same-mesh plan, then the block copied onto dst's mesh object
 * (this rank's block is the same on both: the same mesh rank, shape and placements). */
static dt_status move_equal(dt_tensor *t, dt_mesh *dst_mesh, const dt_placement *dst,
                            dt_tensor **out) {
    dt_tensor *moved, *y;
    DT_CHECK(move_quiet(t, dst, &moved));
    dt_status st = dt_tensor_alloc(dst_mesh, moved->device, moved->dtype, moved->ndim,
                                   moved->shape, moved->placements, &y);
    if (st == DT_OK && y->local_numel)
        st = dt_tensor_mem(y)->copy(y->data, moved->data, y->local_numel * dt_dtype_size(y->dtype));
    dt_tensor_release(moved);
    if (st != DT_OK) {
        dt_tensor_release(y);
        return st;
    }
    *out = y;
    return DT_OK;
}

/* x: this rank's block under the plan's mid_src (nothing when outside the source mesh); y:
 * under mid_dst on the target mesh. Runs the transfers that name this rank. */
static dt_status run_transfers(const dt_xplan *p, dt_tensor *x, dt_tensor *y) {
    dt_ctx *ctx = y->mesh->ctx;
    const int me = ctx->rank;
    const dt_mem_ops *mem = dt_tensor_mem(y);
    const size_t es = dt_dtype_size(p->dtype);
    size_t most = 0;
    for (int i = 0; i < p->ntransfers; i++) {
        const dt_transfer *t = &p->transfers[i];
        if (t->from != t->to && (t->from == me || t->to == me) && t->bytes > most) most = t->bytes;
    }
    dt_comm *world;
    DT_CHECK(dt_ctx_world_comm(ctx, &world));
    void *buf = most ? mem->alloc(most) : NULL;
    if (most && !buf) return dt_error(DT_ERR_NOMEM, "%s: out of memory for a %zu-byte box", FN, most);
    dt_status st = DT_OK;
    for (int i = 0; i < p->ntransfers && st == DT_OK; i++) {
        const dt_transfer *t = &p->transfers[i];
        if (t->from != me && t->to != me) continue;
        int64_t xo[DT_MAX_NDIM], yo[DT_MAX_NDIM]; /* the box within x's and y's blocks */
        for (int d = 0; d < p->ndim; d++) {
            xo[d] = t->off[d] - x->local_offset[d];
            yo[d] = t->off[d] - y->local_offset[d];
        }
        size_t count = t->bytes / es;
        if (t->from == me && t->to == me) {
            st = mem->box_copy(y->data, y->local_shape, yo, x->data, x->local_shape, xo, t->ext,
                               p->ndim, es);
        } else if (t->from == me) {
            st = mem->box_copy(buf, t->ext, NULL, x->data, x->local_shape, xo, t->ext, p->ndim, es);
            if (st == DT_OK) st = dt_send(world, buf, count, p->dtype, t->to);
        } else {
            st = dt_recv(world, buf, count, p->dtype, t->from);
            if (st == DT_OK)
                st = mem->box_copy(y->data, y->local_shape, yo, buf, t->ext, NULL, t->ext, p->ndim,
                                   es);
        }
    }
    mem->free(buf);
    return st;
}

static dt_status move_across(dt_tensor *t, dt_mesh *dst_mesh, const dt_placement *dst,
                             dt_tensor **out) {
    dt_mesh *sm = t->mesh;
    dt_mesh_desc S = {.ndim = sm->ndim, .ranks = sm->ranks};
    dt_mesh_desc D = {.ndim = dst_mesh->ndim, .ranks = dst_mesh->ranks};
    memcpy(S.shape, sm->shape, sizeof(int) * (size_t)sm->ndim);
    memcpy(D.shape, dst_mesh->shape, sizeof(int) * (size_t)dst_mesh->ndim);
    dt_xplan *p;
    DT_CHECK(dt_xplan_build(&S, &D, t->ndim, t->shape, t->dtype, t->placements, dst, NULL, &p));
    dt_tensor *x = t, *y = NULL, *z = NULL;
    dt_status st = DT_OK;
    /* Partial dims reduced on the source mesh (its ranks only; elsewhere x holds nothing). */
    if (p->before && sm->rank >= 0) st = move_quiet(t, p->mid_src, &x);
    if (st == DT_OK)
        st = dt_tensor_alloc(dst_mesh, t->device, t->dtype, t->ndim, t->shape, p->mid_dst, &y);
    if (st == DT_OK) st = run_transfers(p, x, y);
    if (st == DT_OK && p->after) st = move_quiet(y, dst, &z);
    if (x != t) dt_tensor_release(x);
    dt_xplan_destroy(p);
    if (z) dt_tensor_release(y), y = z;
    if (st != DT_OK) {
        dt_tensor_release(y);
        return st;
    }
    *out = y;
    return DT_OK;
}

static int has_rank(const dt_mesh *m, int r) {
    for (int i = 0; i < m->nranks; i++)
        if (m->ranks[i] == r) return 1;
    return 0;
}

/* Always on (no debug mode): the ranks of both meshes compare the move's arguments
 * (dtensor/agree.h) before any data moves. Each plans the transfers from its own arguments,
 * so a target mesh or placements that depend on the rank would leave one rank returning DT_OK
 * and another waiting on a transfer that never comes; compared, every rank of the union fails
 * with the same message. The source mesh's ranks compare among themselves (one all_gather of
 * a hash and of the target ranks each names); the target ranks outside it hear from its first
 * rank. A rank in neither mesh takes no part, as in the move. */
static dt_status agree_move(dt_tensor *t, dt_mesh *dst_mesh, int ndst, const dt_placement *dst) {
    dt_mesh *sm = t->mesh;
    int me = sm->ctx->rank, n = 0, in_dst = 0;
    int *others = malloc(sizeof(int) * (size_t)dst_mesh->nranks);
    dt_agree *a = malloc(sizeof *a);
    dt_status st = others && a ? DT_OK : dt_error(DT_ERR_NOMEM, "%s: out of memory", FN);
    for (int i = 0; st == DT_OK && i < dst_mesh->nranks; i++) {
        int r = dst_mesh->ranks[i];
        in_dst |= r == me;
        if (!has_rank(sm, r)) others[n++] = r;
    }
    /* Ascending, as dt_agree_across wants them (a mesh's ranks are distinct). */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && others[j - 1] > others[j]; j--) {
            int x = others[j];
            others[j] = others[j - 1], others[j - 1] = x;
        }
    if (st == DT_OK && (sm->rank >= 0 || in_dst)) {
        dt_agree_init(a, FN);
        dt_agree_tensor(a, "tensor", t);
        dt_agree_mesh(a, "target", dst_mesh);
        dt_agree_placements(a, "target", dst, ndst); /* as given: checked after */
        st = dt_agree_across(sm, others, n, a, NULL);
    }
    free(others);
    free(a);
    return st;
}

dt_status dt_redistribute_to_run(dt_tensor *tensor, dt_mesh *dst_mesh, int ndst,
                                 const dt_placement *dst, dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(dt_tensor_check(FN, "tensor", tensor));
    DT_ARG(dst_mesh != NULL, "%s: argument dst_mesh is NULL", FN);
    DT_ARG(dst != NULL || ndst == 0, "%s: argument dst is NULL", FN);
    dt_mesh *sm = tensor->mesh;
    DT_ARG(dst_mesh->ctx == sm->ctx, "%s: dst_mesh was made on another rank context than the "
                                     "tensor's mesh (meshes of one world only)", FN);
    /* Compared before they are checked: a target invalid on some ranks only fails all. */
    DT_CHECK(agree_move(tensor, dst_mesh, ndst, dst));
    dt_placement norm[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_spec_check(FN, dst_mesh, tensor->dtype, tensor->ndim, tensor->shape, ndst, dst,
                           norm));
    dt_ctx *ctx = sm->ctx;
    double t0 = ctx->trace ? dt_now_us() : 0;
    dt_tensor *y;
    dt_status st = dt_mesh_equal(sm, dst_mesh) ? move_equal(tensor, dst_mesh, norm, &y)
                                               : move_across(tensor, dst_mesh, norm, &y);
    if (st != DT_OK) return st;
    if (ctx->trace) {
        char a[128], b[128];
        dt_placements_format(tensor->placements, sm->ndim, a, sizeof a);
        dt_placements_format(norm, dst_mesh->ndim, b, sizeof b);
        dt_trace_record(ctx, DT_LANE_OPS, "redistribute_to", t0, "%d ranks %s -> %d ranks %s",
                        sm->nranks, a, dst_mesh->nranks, b);
    }
    *out = y;
    return DT_OK;
}
