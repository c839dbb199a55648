/* Operations of the UCX backend: posting tagged messages, progressing the worker until they
 * complete, and turning every way they can fail (timeout, lost connection, a peer that failed
 * or returned, mismatched sizes) into a status naming the rank at fault. Never blocks without
 * a deadline check; never reports success for an operation with a failed message. */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/flight.h"
#include "comm/stuck.h"
#include "comm/ucx/ucx_impl.h"
#include "core/alloc.h"
#include "core/check.h"

#define CLEANUP_NS        200000000LL /* how long a failed operation waits for cancellations */
#define IDLE_BEFORE_SLEEP 4096        /* empty progress calls before sleeping on the event fd */
#define SLEEP_NS          1000000L    /* a sleep's timeout: failures, deadlines seen this soon */

int64_t ux_now_ns(void) {
    return dt_boot_now_ns();
}

static int world_rank(const ux_op *op, int peer) {
    return op->c->base.members[peer];
}

/* The world's recorded failure as this operation's error. */
void ux_fail_aborted(ux_op *op) {
    op->st = dt_failure_error(&op->w->fail, op->w->rank, op->what);
    op->remote = 1;
}

dt_status ux_op_begin(ux_op *op, ux_comm *c, const char *what, int p2p) {
    memset(op, 0, offsetof(ux_op, inline_reqs));
    op->c = c;
    op->w = c->w;
    op->what = what;
    op->reqs = op->inline_reqs;
    op->cap = UX_OP_INLINE;
    if (!p2p) op->seq = c->g->seq++;
    op->p2p = p2p;
    int64_t t = atomic_load(&c->w->timeout_ns), now = ux_now_ns(), every = c->w->ctx.check_ns;
    op->deadline = t > 0 ? now + t : 0;
    op->post_at = every && c->w->ctl ? now + every : 0;
    if (dt_failed(&c->w->fail)) ux_fail_aborted(op);
    return op->st;
}

static ux_req *push(ux_op *op) {
    if (op->nreq == op->cap) {
        int cap = op->cap * 2;
        ux_req *r = malloc(sizeof *r * (size_t)cap);
        if (!r) {
            op->st = dt_error(DT_ERR_NOMEM, "%s: out of memory for %d requests", op->what, cap);
            return NULL;
        }
        memcpy(r, op->reqs, sizeof *r * (size_t)op->nreq);
        if (op->reqs != op->inline_reqs) free(op->reqs);
        op->reqs = r;
        op->cap = cap;
    }
    ux_req *r = &op->reqs[op->nreq++];
    memset(r, 0, sizeof *r);
    return r;
}

/* A message failed in UCX. When the cause is a peer that died, the control plane says so
 * within moments: prefer its message, which names the rank that failed first. */
static void fail_transport(ux_op *op, int peer, ucs_status_t us, const char *dir) {
    ux_world *w = op->w;
    int64_t until = ux_now_ns() + CLEANUP_NS;
    struct timespec ms = {0, 1000000};
    while (!dt_failed(&w->fail) && ux_now_ns() < until)
        nanosleep(&ms, NULL);
    if (dt_failed(&w->fail)) {
        ux_fail_aborted(op);
        return;
    }
    op->st = dt_error(DT_ERR_ABORTED,
                      "%s: lost the connection %s group rank %d (world rank %d): "
                      "UCX: %s",
                      op->what, dir, peer, world_rank(op, peer), ucs_status_string(us));
}

static const char zero_byte;

void ux_post_send(ux_op *op, int peer, int phase, const void *buf, size_t bytes, int sync) {
    if (op->st) return;
    ux_req *r = push(op);
    if (!r) return;
    ux_world *w = op->w;
    int wr = world_rank(op, peer);
    uint64_t tag = UX_TAG(op->c->g->gid, op->seq, phase, op->c->base.rank);
    ucp_request_param_t prm = {.op_attr_mask = 0};
    if (!bytes) buf = &zero_byte;
    ucs_status_ptr_t p = sync ? ucp_tag_send_sync_nbx(w->eps[wr], buf, bytes, tag, &prm)
                              : ucp_tag_send_nbx(w->eps[wr], buf, bytes, tag, &prm);
    r->peer = peer;
    if (UCS_PTR_IS_ERR(p)) {
        r->done = 1;
        fail_transport(op, peer, UCS_PTR_STATUS(p), "to");
        return;
    }
    atomic_fetch_add(&w->sent[wr], 1);
    r->ucp = p;
    r->done = p == NULL;
}

/* A receive finished: count it and check it carried exactly what was expected. */
static void recv_done(ux_op *op, ux_req *r, ucs_status_t us) {
    int wr = world_rank(op, r->peer);
    r->done = 1;
    if (us == UCS_ERR_MESSAGE_TRUNCATED) {
        op->st = dt_error(DT_ERR_COMM,
                          "%s: group rank %d (world rank %d) sent more than the %zu "
                          "bytes this rank (group rank %d) expects: ranks disagree on "
                          "counts",
                          op->what, r->peer, wr, r->expect, op->c->base.rank);
        return;
    }
    if (us != UCS_OK) {
        if (us != UCS_ERR_CANCELED) fail_transport(op, r->peer, us, "from");
        return;
    }
    atomic_fetch_add(&op->w->recvd[wr], 1);
    if (r->info.length != r->expect)
        op->st = dt_error(DT_ERR_COMM,
                          "%s: group rank %d (world rank %d) sent %zu bytes, this rank "
                          "(group rank %d) expects %zu: ranks disagree on counts",
                          op->what, r->peer, wr, r->info.length, op->c->base.rank, r->expect);
}

void ux_post_recv(ux_op *op, int peer, int phase, void *buf, size_t bytes) {
    static char sink;
    if (op->st) return;
    ux_req *r = push(op);
    if (!r) return;
    uint64_t tag = UX_TAG(op->c->g->gid, op->seq, phase, peer);
    /* Always a request: UCX 1.13 does not fill recv_info on immediate completion, and the
     * length is what catches ranks that disagree on counts. */
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL};
    r->peer = peer;
    r->is_recv = 1;
    r->expect = bytes;
    /* A zero-byte receive still needs a buffer: a wrong sender's bytes then truncate. */
    ucs_status_ptr_t p =
        ucp_tag_recv_nbx(op->w->worker, bytes ? buf : &sink, bytes, tag, UINT64_MAX, &prm);
    if (UCS_PTR_IS_ERR(p)) {
        r->done = 1;
        fail_transport(op, peer, UCS_PTR_STATUS(p), "from");
        return;
    }
    r->ucp = p;
    if (!p) recv_done(op, r, UCS_OK);
}

/* Looks at one pending request; 1 when it is done (op->st set if it failed). */
static int req_poll(ux_op *op, ux_req *r) {
    ucs_status_t us =
        r->is_recv ? ucp_tag_recv_request_test(r->ucp, &r->info) : ucp_request_check_status(r->ucp);
    if (us == UCS_INPROGRESS) return 0;
    ucp_request_free(r->ucp);
    r->ucp = NULL;
    if (r->is_recv) {
        recv_done(op, r, us);
    } else {
        r->done = 1;
        if (us != UCS_OK && us != UCS_ERR_CANCELED) fail_transport(op, r->peer, us, "to");
    }
    return 1;
}

/* After the failure state changed: has the world failed, or has a peer we wait for returned
 * without sending (or receiving) what this operation needs? Message counts decide: a rank that
 * returned sent and received a known number of messages, so anything beyond is not coming. */
static int check_failures(ux_op *op) {
    ux_world *w = op->w;
    if (dt_failed(&w->fail)) {
        ux_fail_aborted(op);
        return 1;
    }
    for (int i = 0; i < op->nreq && !op->st; i++) {
        ux_req *r = &op->reqs[i];
        if (r->done) continue;
        int wr = world_rank(op, r->peer);
        pthread_mutex_lock(&w->mu);
        int gone = w->exited[wr] && (r->is_recv ? atomic_load(&w->recvd[wr]) >= w->exit_sent[wr]
                                                : w->exit_recvd[wr] < atomic_load(&w->sent[wr]));
        op->recheck |= w->exited[wr] && !gone; /* its last messages may still be in flight */
        pthread_mutex_unlock(&w->mu);
        /* The other thread may have completed it meanwhile. */
        if (gone && !req_poll(op, r)) {
            op->st = dt_error(DT_ERR_PEER_EXITED,
                              "%s: rank %d returned before joining it (group of "
                              "%d ranks, this is rank %d)",
                              op->what, wr, op->c->base.size, w->rank);
        }
    }
    return op->st != DT_OK;
}

static void fail_timeout(ux_op *op) {
    ux_req *r = NULL;
    for (int i = 0; i < op->nreq && !r; i++)
        if (!op->reqs[i].done) r = &op->reqs[i];
    double s = (double)atomic_load(&op->w->timeout_ns) / 1e9;
    op->st = dt_error(DT_ERR_ABORTED,
                      "%s: timed out after %.1f s waiting for group rank %d (world "
                      "rank %d) to %s (raise DT_TIMEOUT_S or dt_ucx_set_timeout "
                      "if it is only slow)",
                      op->what, s, r->peer, world_rank(op, r->peer),
                      r->is_recv ? "send its part" : "take this rank's part");
}

/* Nothing to progress. With more ranks on this host than cores, sleep on the worker's event fd
 * at once, until UCX has something or another thread signals it (the control thread, on a
 * failure), at most SLEEP_NS: a spinning rank would keep a peer off its core. While every rank
 * has a core and no other process keeps the cores busy (ux_may_yield), the boot back-off
 * (spin, then yield) first, and the event fd only after a long idle spell (a late peer, not a
 * transfer). Measured against each other here (UCP, 16 MiB,
 * medians of 7 interleaved runs, idle): sleeping at once took 0.93-0.98x the time on 4
 * processes (0.83-0.87x at 1 MiB), and 1.02-1.13x on 2. Returns 1 when it slept. */
static int idle_wait(ux_world *w, unsigned idle) {
    if (w->efd < 0 || (idle < IDLE_BEFORE_SLEEP && ux_may_yield(w))) {
        dt_boot_backoff(idle);
        return 0;
    }
    if (ucp_worker_arm(w->worker) != UCS_OK) { /* BUSY: events pending */
        dt_boot_backoff(idle);
        return 0;
    }
    struct pollfd p = {.fd = w->efd, .events = POLLIN};
    struct timespec ts = {0, SLEEP_NS};
    ppoll(&p, 1, &ts, NULL);
    return 1;
}

dt_status ux_op_wait(ux_op *op) {
    ux_world *w = op->w;
    unsigned seen = atomic_load(&w->events) - 1u; /* look once at the start */
    unsigned idle = 0, iter = 0;
    int first = 0;
    op->recheck = 0;
    while (!op->st) {
        for (int i = first; i < op->nreq && !op->st; i++)
            if (!op->reqs[i].done) req_poll(op, &op->reqs[i]);
        while (first < op->nreq && op->reqs[first].done)
            first++;
        if (op->st || first == op->nreq) break;
        unsigned ev = atomic_load(&w->events);
        if (ev != seen || (op->recheck && (iter & 1023) == 0)) {
            seen = ev;
            op->recheck = 0;
            if (check_failures(op)) break;
        }
        int slept = 0;
        if (ucp_worker_progress(w->worker))
            idle = 0;
        else
            slept = idle_wait(w, ++idle);
        if ((++iter & 255) == 0 || slept) {
            int64_t now = ux_now_ns();
            if (op->deadline && now > op->deadline) fail_timeout(op);
            ux_op_watch(op, now);
        }
    }
    if (!op->st) op->nreq = 0;
    return op->st;
}

/* Cancels what a failed operation left pending and gives UCX a moment to finish it; a buffer
 * UCX may still write is never freed (the communicator's scratch is handed to the world). */
static void cleanup(ux_op *op) {
    ux_world *w = op->w;
    int pending = 0;
    for (int i = 0; i < op->nreq; i++) {
        ux_req *r = &op->reqs[i];
        if (r->ucp && r->is_recv) ucp_request_cancel(w->worker, r->ucp);
    }
    int64_t until = ux_now_ns() + CLEANUP_NS;
    do {
        pending = 0;
        ucp_worker_progress(w->worker);
        for (int i = 0; i < op->nreq; i++) {
            ux_req *r = &op->reqs[i];
            if (!r->ucp) continue;
            if (ucp_request_check_status(r->ucp) == UCS_INPROGRESS) {
                pending++;
                continue;
            }
            ucp_request_free(r->ucp);
            r->ucp = NULL;
        }
    } while (pending && ux_now_ns() < until);
    if (!pending) return;
    for (int i = 0; i < op->nreq; i++)
        if (op->reqs[i].ucp) ucp_request_free(op->reqs[i].ucp); /* released when it completes */
    ux_comm *c = op->c;
    if (c->scratch) {
        pthread_mutex_lock(&w->groups_mu);
        void **o = realloc(w->orphans, sizeof *o * (size_t)(w->norphans + 1));
        if (o) {
            w->orphans = o;
            w->orphans[w->norphans++] = c->scratch;
        } /* else: leak it rather than free memory UCX may write */
        pthread_mutex_unlock(&w->groups_mu);
        c->scratch = NULL;
        c->scratch_cap = 0;
    }
}

void ux_op_watch(ux_op *op, int64_t now) {
    if (!op->post_at || op->posted || now < op->post_at) return;
    dt_pos p;
    int peer = op->p2p && op->nreq ? world_rank(op, op->reqs[0].peer) : -1;
    dt_pos_fill(&p, &op->c->base, op->what, peer, dt_comm_caller());
    dt_boot_ctl_post(op->w->ctl, &p);
    op->posted = 1;
}

dt_status ux_op_end(ux_op *op) {
    if (op->posted) dt_boot_ctl_post(op->w->ctl, NULL);
    if (op->st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        cleanup(op);
        if (!op->remote) ux_ctl_fail(op->w, op->st, msg);
        dt_error(op->st, "%s", msg);
    }
    if (op->reqs != op->inline_reqs) free(op->reqs);
    return op->st;
}

dt_status ux_scratch(ux_op *op, size_t bytes, void **out) {
    ux_comm *c = op->c;
    if (op->st) return op->st;
    if (bytes > c->scratch_cap || !c->scratch) {
        void *p = dt_host_alloc(bytes);
        if (!p) return op->st = dt_error(DT_ERR_NOMEM, "%s: %zu bytes of scratch", op->what, bytes);
        dt_host_free(c->scratch);
        c->scratch = p;
        c->scratch_cap = bytes;
    }
    *out = c->scratch;
    return DT_OK;
}
