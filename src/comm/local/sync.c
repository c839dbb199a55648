/* Barriers of the local backend: a counter and a generation under the group lock, a short
 * spin while peers are likely running, then a condition variable. Whether a barrier
 * completes or fails is decided under the lock: a rank that gives up (the world aborted, or
 * a member returned) takes its arrival back, so a barrier never completes without everyone. */
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
    /* Name the member that left first: later ones may only be leaving because of it. */
    int first = -1, first_seq = 0;
    for (int i = 0; i < g->n; i++) {
        if (peer >= 0 && i != peer) continue;
        int seq = atomic_load(&w->exited[g->members[i]]);
        if (seq && (first < 0 || seq < first_seq)) first = g->members[i], first_seq = seq;
    }
    if (first < 0) return DT_OK;
    return dt_error(DT_ERR_PEER_EXITED,
                    "%s: rank %d returned before joining it (group of %d ranks, this is rank %d)",
                    what, first, g->n, c->base.ctx->rank);
}

/* what == NULL: a barrier inside a collective every member has entered; it cannot fail. */
static dt_status barrier(lw_comm *c, const char *what) {
    lw_group *g = c->group;
    dt_status st = DT_OK;
    pthread_mutex_lock(&g->mu);
    if (what && (st = lw_failure(c, what, -1)) != DT_OK) {
        pthread_mutex_unlock(&g->mu);
        return st;
    }
    uint_least64_t gen = atomic_load(&g->gen);
    if (++g->arrived == g->n) {
        g->arrived = 0;
        atomic_store(&g->gen, gen + 1);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        return DT_OK;
    }
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < LW_SPIN; i++) {
        if (atomic_load(&g->gen) != gen) return DT_OK;
        sched_yield();
    }
    pthread_mutex_lock(&g->mu);
    while (atomic_load(&g->gen) == gen) {
        if (what && (st = lw_failure(c, what, -1)) != DT_OK) {
            g->arrived--; /* withdraw: this barrier will not complete */
            break;
        }
        pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

dt_status lw_enter(lw_comm *c, const char *what) { return barrier(c, what); }

void lw_sync(lw_comm *c) { (void)barrier(c, NULL); }
