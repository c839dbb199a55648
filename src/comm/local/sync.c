/* Barriers of the local backend: a counter and a generation, a short spin while peers are
 * likely running, then a condition variable. Failure is only looked at under the group lock,
 * where the generation cannot move, so a barrier that completed is never reported failed. */
#include <sched.h>
#include <stdio.h>

#include "comm/local/local_impl.h"
#include "core/check.h"

#define LW_SPIN 64

dt_status lw_failure(lw_comm *c, const char *what, int peer) {
    lw_world *w = c->world;
    lw_group *g = c->group;
    if (atomic_load(&w->aborted))
        return dt_error(DT_ERR_ABORTED, "%s: rank %d failed (%s): %s", what, w->failed_rank,
                        dt_status_str(w->failed_status), w->failed_msg);
    if (g->exited == 0) return DT_OK;
    for (int i = 0; i < g->n; i++) {
        if (peer >= 0 && i != peer) continue;
        if (w->exited[g->members[i]])
            return dt_error(DT_ERR_PEER_EXITED,
                            "%s: rank %d returned before joining it (group of %d ranks, this is "
                            "rank %d)",
                            what, g->members[i], g->n, c->base.ctx->rank);
    }
    return DT_OK;
}

static dt_status barrier(lw_comm *c, const char *what) {
    lw_group *g = c->group;
    if (g->n == 1) return DT_OK;
    uint_least64_t gen = atomic_load(&g->gen);
    if (atomic_fetch_add(&g->arrived, 1) + 1 == g->n) {
        atomic_store(&g->arrived, 0);
        pthread_mutex_lock(&g->mu);
        atomic_fetch_add(&g->gen, 1);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return DT_OK;
    }
    for (int i = 0; i < LW_SPIN; i++) {
        if (atomic_load(&g->gen) != gen) return DT_OK;
        sched_yield();
    }
    dt_status st = DT_OK;
    pthread_mutex_lock(&g->mu);
    while (atomic_load(&g->gen) == gen) {
        if (what && (st = lw_failure(c, what, -1)) != DT_OK) break;
        pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

dt_status lw_enter(lw_comm *c, const char *what) {
    if (atomic_load(&c->world->aborted)) {
        pthread_mutex_lock(&c->group->mu);
        dt_status st = lw_failure(c, what, -1);
        pthread_mutex_unlock(&c->group->mu);
        return st;
    }
    return barrier(c, what);
}

void lw_sync(lw_comm *c) { (void)barrier(c, NULL); }
