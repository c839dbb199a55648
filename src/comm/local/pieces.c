/* Grouped gathers and reduces of the local backend (comm/pieces.c's direct form): ranks are
 * threads of one process, so each rank copies its shard straight into every member's arrays,
 * and reduces its block of every member's arrays straight into its shard: one copy, or one
 * reduction pass, per element, and no packed buffer. Host memory. */
#include <stdlib.h>
#include <string.h>

#include "comm/local/local_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "core/reduce.h"

/* Every member passed the same pieces (count, dims, shapes and boxes): checked over every
 * pair against this rank's, so that when any two differ every member sees it and fails. */
static dt_status check_alike(const lw_comm *c, int n, const dt_comm_piece *mine, const char *what) {
    const lw_group *g = c->group;
    for (int j = 0; j < g->n; j++) {
        const lw_slot *o = &g->slots[j];
        if (o->npieces != n)
            return dt_error(DT_ERR_COMM, "%s: group rank %d passes %d pieces, rank %d passes %d",
                            what, c->base.rank, n, j, o->npieces);
        for (int i = 0; i < n; i++) {
            const dt_comm_piece *a = &mine[i], *b = &o->pieces[i];
            size_t dims = sizeof(int64_t) * (size_t)a->ndim;
            int same = a->ndim == b->ndim && !memcmp(a->shape, b->shape, dims);
            for (int k = 0; same && k < g->n; k++)
                same = !memcmp(a->boxes[k].off, b->boxes[k].off, dims) &&
                       !memcmp(a->boxes[k].ext, b->boxes[k].ext, dims);
            if (!same)
                return dt_error(DT_ERR_COMM,
                                "%s: pieces[%d] differs in shape or boxes between group rank %d "
                                "and rank %d",
                                what, i, c->base.rank, j);
        }
    }
    return DT_OK;
}

/* Publishes the pieces and passes the entry barrier with them checked alike. */
static dt_status enter(lw_comm *c, int n, const dt_comm_piece *pieces, const char *what) {
    c->group->slots[c->base.rank] = (lw_slot){.pieces = pieces, .npieces = n};
    DT_CHECK(lw_enter(c, what));
    dt_status st = check_alike(c, n, pieces, what);
    if (st != DT_OK) { /* every member failed alike: leave together */
        lw_publish(c, LW_DONE);
        lw_wait_all(c, LW_DONE);
    }
    return st;
}

dt_status lw_all_gather_pieces(dt_comm *base, int n, const dt_comm_piece *pieces, dt_dtype dt) {
    lw_comm *c = (lw_comm *)base;
    const lw_group *g = c->group;
    const int me = base->rank;
    const size_t es = dt_dtype_size(dt);
    DT_CHECK(enter(c, n, pieces, "dt_all_gather_pieces"));
    /* Push order: a shard is read once (then from the cache) for all members. */
    for (int i = 0; i < n; i++) {
        const dt_comm_piece *p = &pieces[i];
        const int64_t *ext = p->boxes[me].ext;
        if (!dt_shape_numel(ext, p->ndim)) continue;
        for (int j = 0; j < g->n; j++)
            dt_box_copy(g->slots[j].pieces[i].full, p->shape, p->boxes[me].off, p->shard, ext, NULL,
                        ext, p->ndim, es);
    }
    lw_publish(c, LW_DONE); /* no peer may reuse an array before every member has written it */
    lw_wait_all(c, LW_DONE);
    return DT_OK;
}

/* Contiguous runs of box b in an array of shape: the trailing dims the box covers whole make
 * one run of *run elements; the dims before *inner are walked. */
static void runs_of(const dt_box *b, const int64_t *shape, int ndim, int *inner, size_t *run) {
    *inner = ndim;
    *run = 1;
    while (*inner > 0) {
        int d = --*inner;
        *run *= (size_t)b->ext[d];
        if (b->off[d] != 0 || b->ext[d] != shape[d]) break;
    }
}

dt_status lw_reduce_scatter_pieces(dt_comm *base, int n, const dt_comm_piece *pieces, dt_dtype dt,
                                   dt_reduce_op op) {
    lw_comm *c = (lw_comm *)base;
    const lw_group *g = c->group;
    const int me = base->rank;
    const size_t es = dt_dtype_size(dt);
    const void **srcs = malloc(sizeof(void *) * (size_t)g->n);
    if (!srcs) return dt_error(DT_ERR_NOMEM, "dt_reduce_scatter_pieces: out of memory");
    dt_status st = enter(c, n, pieces, "dt_reduce_scatter_pieces");
    for (int i = 0; i < n && st == DT_OK; i++) {
        const dt_comm_piece *p = &pieces[i];
        const dt_box *b = &p->boxes[me];
        if (!dt_shape_numel(b->ext, p->ndim)) continue;
        int inner;
        size_t run;
        runs_of(b, p->shape, p->ndim, &inner, &run);
        int64_t stride[DT_MAX_NDIM], idx[DT_MAX_NDIM] = {0};
        for (int d = p->ndim - 1; d >= 0; d--)
            stride[d] = d == p->ndim - 1 ? 1 : stride[d + 1] * p->shape[d + 1];
        char *dst = p->shard;
        for (int more = 1; more; dst += run * es) {
            int64_t at = 0; /* the run's first element in the arrays */
            for (int d = 0; d < p->ndim; d++)
                at += (b->off[d] + (d < inner ? idx[d] : 0)) * stride[d];
            for (int j = 0; j < g->n; j++)
                srcs[j] = (const char *)g->slots[j].pieces[i].full + (size_t)at * es;
            dt_reduce_n(dt, op, dst, srcs, g->n, run); /* member order: dt_reduce_scatter's bits */
            more = 0;
            for (int d = inner - 1; d >= 0 && !more; d--) {
                if (++idx[d] < b->ext[d])
                    more = 1;
                else
                    idx[d] = 0;
            }
        }
    }
    free(srcs);
    if (st == DT_OK) {          /* enter's failure has already left together */
        lw_publish(c, LW_DONE); /* peers read this rank's arrays until they are done */
        lw_wait_all(c, LW_DONE);
    }
    return st;
}
