/* Hierarchical all_reduce for UCX communicators whose members span hosts: the members of each
 * host reduce among themselves, one leader per host (its lowest group rank) all_reduces the
 * host sums with the other leaders, and each leader broadcasts the result to its host. Built
 * only on sub-communicators and their collectives (through their ops), so whatever transport
 * serves a one-host group serves the intra-host steps. Knows nothing of transports.
 *
 * Why only all_reduce: it is the collective whose every byte crosses hosts twice in a flat
 * ring (2(n-1)/n of the vector on the links between hosts, and 2(n-1) steps each paying the
 * network's latency); here only the leaders' ring crosses hosts, 2(H-1) steps for H hosts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ucx/hier.h"
#include "comm/ucx/ucx_impl.h"
#include "core/check.h"
#include "core/reduce.h"

/* Key kinds of the sub-communicators, apart from DT_KEY_* (comm_impl.h). */
#define UX_KEY_HIER_LOCAL   0x48
#define UX_KEY_HIER_LEADERS 0x49

enum { HIER_UNKNOWN = 0, HIER_FLAT, HIER_ON };

struct ux_hier {
    int state;
    dt_comm *local;   /* this rank's host's members in group-rank order: the leader is rank 0 */
    dt_comm *leaders; /* the lowest group rank of every host; NULL on the other members */
};

/* The sub-communicators' keys: every member derives the same from the parent's group. */
static void sub_key(const ux_comm *c, int kind, uint64_t key[2]) {
    key[0] = ((uint64_t)kind << 56) | c->g->gid;
    key[1] = c->g->key[0] * 0x9e3779b97f4a7c15ull ^ c->g->key[1];
}

/* Decides once per communicator; makes the sub-communicators when the answer is yes. */
static dt_status hier_setup(ux_comm *c, ux_hier *h) {
    ux_world *w = c->w;
    int n = c->base.size, me = c->base.rank, *m = c->base.members;
    h->state = HIER_FLAT;
    if (!w->hier || n < 3) return DT_OK;
    int hosts = 0, crowded = 0, nlocal = 0, nlead = 0;
    int *local = malloc(sizeof(int) * 2 * (size_t)n), *lead = local + n;
    if (!local) return dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", n);
    for (int i = 0; i < n; i++) {
        int hi = w->host[m[i]], first = 1;
        for (int j = 0; j < i && first; j++)
            first = w->host[m[j]] != hi;
        if (first) {
            hosts++;
            lead[nlead++] = m[i];
        } else {
            crowded = 1;
        }
        if (hi == w->host[m[me]]) local[nlocal++] = m[i];
    }
    dt_status st = DT_OK;
    if (hosts > 1 && crowded) {
        uint64_t key[2];
        sub_key(c, UX_KEY_HIER_LOCAL, key);
        st = ux_comm_create(c->base.ctx, key, local, nlocal, &h->local);
        if (st == DT_OK && local[0] == m[me]) {
            sub_key(c, UX_KEY_HIER_LEADERS, key);
            st = ux_comm_create(c->base.ctx, key, lead, nlead, &h->leaders);
        }
        if (st == DT_OK) {
            h->state = HIER_ON;
        } else if (h->local) {
            ux_comm_destroy(h->local);
            h->local = NULL;
        }
    }
    free(local);
    return st;
}

int ux_hier_use(ux_comm *c, dt_status *st_out) {
    *st_out = DT_OK;
    if (!c->hier) {
        c->hier = calloc(1, sizeof *c->hier);
        if (!c->hier) {
            *st_out =
                dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", c->base.size);
            return 1;
        }
    }
    if (c->hier->state == HIER_UNKNOWN) {
        *st_out = hier_setup(c, c->hier);
        if (*st_out != DT_OK) {
            /* The peers took the other path or wait in it: fail the world, as a failed
             * collective does (a later call decides again and fails on the failed world). */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", dt_last_error());
            ux_ctl_fail(c->w, *st_out, msg);
            dt_error(*st_out, "%s", msg);
            c->hier->state = HIER_UNKNOWN;
            return 1;
        }
    }
    return c->hier->state == HIER_ON;
}

/* avg travels as a sum and is divided once by the group's size at the end, as dt_reduce_n
 * divides (an average of host averages would weigh hosts, not ranks). */
dt_status ux_hier_all_reduce(ux_comm *c, const void *send, void *recv, size_t count, dt_dtype dt,
                             dt_reduce_op op) {
    ux_hier *h = c->hier;
    dt_reduce_op fold = op == DT_REDUCE_AVG ? DT_REDUCE_SUM : op;
    dt_comm *l = h->local;
    DT_CHECK(l->ops->all_reduce(l, send, recv, count, dt, fold));
    if (h->leaders) DT_CHECK(h->leaders->ops->all_reduce(h->leaders, recv, recv, count, dt, fold));
    if (l->size > 1) DT_CHECK(l->ops->broadcast(l, recv, count * dt_dtype_size(dt), 0));
    if (op == DT_REDUCE_AVG) dt_scale(dt, recv, count, 1, c->base.size);
    atomic_fetch_add(&c->w->hier_runs, 1);
    return DT_OK;
}

void ux_hier_free(ux_comm *c) {
    if (!c->hier) return;
    if (c->hier->local) ux_comm_destroy(c->hier->local);
    if (c->hier->leaders) ux_comm_destroy(c->hier->leaders);
    free(c->hier);
    c->hier = NULL;
}

long dt_ucx_hier_runs(const dt_comm *c) {
    if (!c || !c->ctx || strcmp(c->ctx->backend->name, "ucx")) return -1;
    ux_world *w = c->ctx->backend_state;
    return atomic_load(&w->hier_runs);
}
