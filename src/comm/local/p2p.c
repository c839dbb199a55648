/* Point-to-point on the local backend: a rendezvous mailbox per (sender, receiver) pair.
 * The sender posts its buffer and waits; the receiver copies straight out of it. A large
 * host message is copied by both threads at once, the sender taking the upper half, so both
 * cores move it; a GPU message is one device copy by the receiver. */
#include <string.h>

#include "comm/boot/boot.h"
#include "comm/local/local_impl.h"
#include "core/check.h"
#include "core/device.h"

#define LW_SPLIT_BYTES (1u << 20)

/* One party's copy is done; the last one completes the message. Call with g->mu held. */
static void part_done(lw_group *g, lw_p2p *box) {
    if (--box->parts_left == 0) {
        box->state = LW_P2P_DONE;
        lw_notify(g);
    }
}

/* The peer (group rank) never came within this rank's timeout. Call with g->mu held. */
static dt_status timed_out(lw_comm *c, const char *what, int peer, const char *never) {
    char who[160] = "";
    size_t len = 0;
    lw_where_append(c->world, c->group->members[peer], who, sizeof who, &len);
    double s = (double)atomic_load(&c->world->timeout_ns[c->base.ctx->rank]) / 1e9;
    return dt_error(DT_ERR_ABORTED,
                    "%s on group %s of %d ranks: timed out after %.1f s: %s never %s (raise "
                    "DT_TIMEOUT_S or dt_local_set_timeout if it is only slow)",
                    what, c->base.label, c->group->n, s, who + 2, never);
}

/* Before the first wait of a send or receive: where this rank waits, and until when. */
static int64_t start_waiting(lw_comm *c, const char *what, int peer, lw_watch *wt) {
    lw_where_set(c, what, 0, peer);
    lw_watch_start(wt, c);
    return lw_deadline(c);
}

dt_status lw_send(dt_comm *base, const void *buf, size_t bytes, int peer) {
    lw_comm *c = (lw_comm *)base;
    lw_group *g = c->group;
    lw_p2p *box = &g->p2p[base->rank * g->n + peer];
    const dt_mem_ops *mem = dt_mem_ops_of(dt_mem_kind_of(buf));
    dt_status st = mem->sync(); /* the receiver reads buf: our queued writes to it first */
    if (st != DT_OK) return st;
    int64_t deadline = -1; /* not waited yet */
    int expired = 0;
    lw_watch wt = {.blamed = -1};
    pthread_mutex_lock(&g->mu);
    *box = (lw_p2p){.buf = buf, .bytes = bytes, .state = LW_P2P_POSTED};
    lw_notify(g);
    for (;;) {
        if (box->state == LW_P2P_DONE) {
            st = box->status;
            break;
        }
        if (box->state == LW_P2P_TAKEN && box->split < bytes && !box->sender_busy) {
            box->sender_busy = 1;
            pthread_mutex_unlock(&g->mu);
            memcpy((char *)box->dst + box->split, (const char *)buf + box->split,
                   bytes - box->split);
            pthread_mutex_lock(&g->mu);
            part_done(g, box);
            continue;
        }
        /* Once the receiver took the buffer it is copying from it: wait whatever happens. */
        const int posted = box->state == LW_P2P_POSTED;
        if (posted && (st = lw_failure(c, "dt_send", peer)) != DT_OK) break;
        if (deadline < 0) deadline = start_waiting(c, "dt_send", peer, &wt);
        if (posted && deadline && dt_boot_now_ns() >= deadline) {
            st = timed_out(c, "dt_send", peer, "received it");
            expired = 1;
            break;
        }
        if (posted && (st = lw_watch_check(&wt, c, "dt_send")) != DT_OK) break;
        lw_wait(g, posted ? lw_watch_deadline(&wt, deadline) : 0);
    }
    box->state = LW_P2P_EMPTY;
    if (deadline >= 0) lw_where_set(c, NULL, 0, -1);
    pthread_mutex_unlock(&g->mu);
    lw_watch_abort(&wt, c, expired, st);
    return st;
}

dt_status lw_recv(dt_comm *base, void *buf, size_t bytes, int peer) {
    lw_comm *c = (lw_comm *)base;
    lw_group *g = c->group;
    lw_p2p *box = &g->p2p[peer * g->n + base->rank];
    dt_status st = DT_OK;
    int64_t deadline = -1; /* not waited yet */
    int expired = 0;
    lw_watch wt = {.blamed = -1};
    pthread_mutex_lock(&g->mu);
    while (box->state != LW_P2P_POSTED) {
        if ((st = lw_failure(c, "dt_recv", peer)) != DT_OK) break;
        if (deadline < 0) deadline = start_waiting(c, "dt_recv", peer, &wt);
        if (deadline && dt_boot_now_ns() >= deadline) {
            st = timed_out(c, "dt_recv", peer, "sent it");
            expired = 1;
            break;
        }
        if ((st = lw_watch_check(&wt, c, "dt_recv")) != DT_OK) break;
        lw_wait(g, lw_watch_deadline(&wt, deadline));
    }
    if (deadline >= 0) lw_where_set(c, NULL, 0, -1);
    if (st != DT_OK) {
        pthread_mutex_unlock(&g->mu);
        lw_watch_abort(&wt, c, expired, st);
        return st;
    }
    if (box->bytes != bytes) {
        st = dt_error(DT_ERR_COMM, "dt_recv: group rank %d sent %zu bytes, group rank %d expects "
                                   "%zu", peer, box->bytes, base->rank, bytes);
        box->status = st;
        box->state = LW_P2P_DONE;
        lw_notify(g);
        pthread_mutex_unlock(&g->mu);
        return st;
    }
    dt_device_kind k = dt_mem_kind_of(buf);
    if (k == DT_DEVICE_CPU) k = dt_mem_kind_of(box->buf);
    const dt_mem_ops *mem = dt_mem_ops_of(k);
    box->dst = buf;
    box->split = bytes >= LW_SPLIT_BYTES && mem == &dt_mem_cpu ? (bytes / 2) & ~(size_t)63 : bytes;
    box->parts_left = box->split < bytes ? 2 : 1;
    box->status = DT_OK;
    box->state = LW_P2P_TAKEN;
    lw_notify(g); /* the sender takes the upper half */
    pthread_mutex_unlock(&g->mu);
    if (box->split && (st = mem->copy(buf, box->buf, box->split)) == DT_OK) st = mem->sync();
    pthread_mutex_lock(&g->mu);
    part_done(g, box);
    /* parts_left, not the state: the sender may already have emptied the box again. */
    while (box->parts_left) lw_wait(g, 0);
    pthread_mutex_unlock(&g->mu);
    return st;
}
