/* Point-to-point on the local backend: a rendezvous mailbox per (sender, receiver) pair.
 * The sender posts its buffer and waits; the receiver copies straight out of it. */
#include <string.h>

#include "comm/local/local_impl.h"
#include "core/check.h"

dt_status lw_send(dt_comm *base, const void *buf, size_t bytes, int peer) {
    lw_comm *c = (lw_comm *)base;
    lw_group *g = c->group;
    lw_p2p *box = &g->p2p[base->rank * g->n + peer];
    dt_status st = DT_OK;
    pthread_mutex_lock(&g->mu);
    *box = (lw_p2p){.buf = buf, .bytes = bytes, .state = LW_P2P_POSTED};
    pthread_cond_broadcast(&g->cv);
    for (;;) {
        if (box->state == LW_P2P_DONE) {
            st = box->status;
            break;
        }
        /* Once the receiver took the buffer it is copying from it: wait whatever happens. */
        if (box->state == LW_P2P_POSTED && (st = lw_failure(c, "dt_send", peer)) != DT_OK) break;
        pthread_cond_wait(&g->cv, &g->mu);
    }
    box->state = LW_P2P_EMPTY;
    pthread_mutex_unlock(&g->mu);
    return st;
}

dt_status lw_recv(dt_comm *base, void *buf, size_t bytes, int peer) {
    lw_comm *c = (lw_comm *)base;
    lw_group *g = c->group;
    lw_p2p *box = &g->p2p[peer * g->n + base->rank];
    dt_status st = DT_OK;
    pthread_mutex_lock(&g->mu);
    while (box->state != LW_P2P_POSTED) {
        if ((st = lw_failure(c, "dt_recv", peer)) != DT_OK) {
            pthread_mutex_unlock(&g->mu);
            return st;
        }
        pthread_cond_wait(&g->cv, &g->mu);
    }
    box->state = LW_P2P_TAKEN;
    pthread_mutex_unlock(&g->mu);
    if (box->bytes != bytes)
        st = dt_error(DT_ERR_COMM, "dt_recv: group rank %d sent %zu bytes, group rank %d expects %zu",
                      peer, box->bytes, base->rank, bytes);
    else if (bytes)
        memcpy(buf, box->buf, bytes);
    pthread_mutex_lock(&g->mu);
    box->status = st;
    box->state = LW_P2P_DONE;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return st;
}
