/* The control plane: the rendezvous sockets, kept open as a star through rank 0. Ranks report
 * failures (FAIL) and returns (BYE, with per-peer message counts) to rank 0, which relays them
 * (ABORT, EXITED) and sees a process die the moment the kernel closes its socket. When every
 * rank has returned or died, rank 0 says DONE with the world's first failure. One thread per
 * process reads the sockets; it never touches UCX, only the world's failure state. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/ucx/ucx_impl.h"
#include "comm/ucx/wire.h"
#include "core/check.h"

#define FAILED_EXIT_WAIT_NS 2000000000LL

struct ux_ctl {
    ux_world *w;
    int n;      /* world size */
    int *socks; /* rank 0: one per rank (-1 when closed); others: socks[0] = rank 0 */
    int wake[2];
    pthread_t thread;
    int started;
    pthread_mutex_t mu; /* everything below, and every write to a socket */
    pthread_cond_t cv;
    unsigned char *finished; /* rank 0: returned or died */
    int left;                /* rank 0: ranks not finished yet */
    int done;                /* the world is finished (or rank 0 is lost) */
    int reported;            /* this rank sent its FAIL */
    int fail_rank;           /* first failure of the world; -1 none */
    dt_status fail_status;
    char fail_msg[512];
};

static void record_failure(ux_ctl *c, int rank, dt_status st, const char *msg) {
    if (c->fail_rank >= 0) return;
    c->fail_rank = rank;
    c->fail_status = st;
    snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
}

static void send_to(ux_ctl *c, int r, uint32_t type, int rank, int st, const void *p, size_t len) {
    if (c->socks[r] >= 0) ux_wire_write(c->socks[r], type, rank, st, p, len);
}

/* --- rank 0 --------------------------------------------------------------------------- */

static void root_check_done(ux_ctl *c) {
    if (c->left > 0 || c->done) return;
    for (int r = 1; r < c->n; r++)
        send_to(c, r, UX_MSG_DONE, c->fail_rank, c->fail_status, c->fail_msg,
                strlen(c->fail_msg) + 1);
    c->done = 1;
    pthread_cond_broadcast(&c->cv);
}

/* Rank r failed (or died): first failure wins; everybody else hears of it. */
static void root_fail(ux_ctl *c, int r, dt_status st, const char *msg) {
    if (c->fail_rank >= 0) return;
    record_failure(c, r, st, msg);
    ux_world_abort(c->w, r, st, msg);
    for (int q = 1; q < c->n; q++)
        if (q != r) send_to(c, q, UX_MSG_ABORT, r, st, msg, strlen(msg) + 1);
}

/* Rank r returned having sent sent[q] messages to and received recvd[q] from each rank q. */
static void root_bye(ux_ctl *c, int r, const uint64_t *sent, const uint64_t *recvd) {
    if (c->finished[r]) return;
    c->finished[r] = 1;
    c->left--;
    for (int q = 0; q < c->n; q++) {
        if (q == r) continue;
        uint64_t pair[2] = {sent[q], recvd[q]};
        if (q == 0)
            ux_world_exited(c->w, r, pair[0], pair[1]);
        else if (!c->finished[q])
            send_to(c, q, UX_MSG_EXITED, r, 0, pair, sizeof pair);
    }
    root_check_done(c);
}

static void root_dead(ux_ctl *c, int r) {
    close(c->socks[r]);
    c->socks[r] = -1;
    if (c->finished[r]) return;
    c->finished[r] = 1;
    c->left--;
    char msg[256];
    snprintf(msg, sizeof msg,
             "its process died (killed, crashed, or exited without returning "
             "from dt_ucx_run)");
    root_fail(c, r, DT_ERR_ABORTED, msg);
    root_check_done(c);
}

static void root_message(ux_ctl *c, int r) {
    ux_wire_hdr h;
    char *p;
    int k = ux_wire_read(c->socks[r], &h, &p, 0);
    pthread_mutex_lock(&c->mu);
    if (k != 0) {
        root_dead(c, r);
    } else if (h.type == UX_MSG_FAIL) {
        root_fail(c, r, (dt_status)h.status, p);
    } else if (h.type == UX_MSG_BYE && h.len == 2 * sizeof(uint64_t) * (size_t)c->n) {
        const uint64_t *v = (const uint64_t *)p;
        root_bye(c, r, v, v + c->n);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(p);
}

/* --- other ranks ---------------------------------------------------------------------- */

static void peer_message(ux_ctl *c) {
    ux_wire_hdr h;
    char *p;
    int k = ux_wire_read(c->socks[0], &h, &p, 0);
    pthread_mutex_lock(&c->mu);
    if (k != 0) {
        const char *msg = "the control connection to rank 0 closed: its process died (killed or "
                          "crashed) or the network failed";
        record_failure(c, 0, DT_ERR_ABORTED, msg);
        ux_world_abort(c->w, 0, DT_ERR_ABORTED, msg);
        c->done = 1;
    } else if (h.type == UX_MSG_ABORT) {
        record_failure(c, h.rank, (dt_status)h.status, p);
        ux_world_abort(c->w, h.rank, (dt_status)h.status, p);
    } else if (h.type == UX_MSG_EXITED && h.len == 2 * sizeof(uint64_t)) {
        const uint64_t *v = (const uint64_t *)p;
        ux_world_exited(c->w, h.rank, v[0], v[1]);
    } else if (h.type == UX_MSG_DONE) {
        c->fail_rank = -1;
        if (h.rank >= 0) record_failure(c, h.rank, (dt_status)h.status, p);
        c->done = 1;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(p);
}

static void *ctl_main(void *arg) {
    ux_ctl *c = arg;
    int root = c->w->rank == 0;
    struct pollfd *fds = malloc(sizeof *fds * (size_t)(c->n + 1));
    int *who = malloc(sizeof *who * (size_t)(c->n + 1));
    if (!fds || !who) { /* cannot watch: treat as losing the control plane */
        pthread_mutex_lock(&c->mu);
        record_failure(c, c->w->rank, DT_ERR_NOMEM, "control thread: out of memory");
        ux_world_abort(c->w, c->w->rank, DT_ERR_NOMEM, "control thread: out of memory");
        c->done = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        free(fds);
        free(who);
        return NULL;
    }
    for (;;) {
        int nf = 0;
        fds[nf] = (struct pollfd){.fd = c->wake[0], .events = POLLIN};
        who[nf++] = -1;
        pthread_mutex_lock(&c->mu);
        int done = c->done;
        for (int r = 0; r < (root ? c->n : 1); r++) {
            if (c->socks[r] < 0) continue;
            fds[nf] = (struct pollfd){.fd = c->socks[r], .events = POLLIN};
            who[nf++] = r;
        }
        pthread_mutex_unlock(&c->mu);
        if (done && !root) break; /* nothing more comes from rank 0 */
        int k = poll(fds, (nfds_t)nf, -1);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 || fds[0].revents) break;
        for (int i = 1; i < nf; i++) {
            if (!fds[i].revents) continue;
            if (root)
                root_message(c, who[i]);
            else
                peer_message(c);
        }
    }
    free(fds);
    free(who);
    return NULL;
}

dt_status ux_ctl_start(ux_world *w, int *socks) {
    ux_ctl *c = calloc(1, sizeof *c);
    unsigned char *fin = calloc((size_t)w->size, 1);
    if (!c || !fin || pipe(c->wake) != 0) {
        free(c);
        free(fin);
        for (int r = 0; r < w->size; r++)
            if (socks[r] >= 0) close(socks[r]);
        free(socks);
        return dt_error(DT_ERR_SYSTEM, "control plane: cannot set up (%s)", strerror(errno));
    }
    c->w = w;
    c->n = w->size;
    c->socks = socks;
    c->finished = fin;
    c->left = w->size;
    c->fail_rank = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    w->ctl = c;
    if (pthread_create(&c->thread, NULL, ctl_main, c) != 0) {
        ux_ctl_stop(w);
        return dt_error(DT_ERR_SYSTEM, "control plane: pthread_create failed");
    }
    c->started = 1;
    return DT_OK;
}

void ux_ctl_fail(ux_world *w, dt_status st, const char *msg) {
    ux_world_abort(w, w->rank, st, msg);
    ux_ctl *c = w->ctl;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    if (!c->reported) {
        c->reported = 1;
        if (w->rank == 0)
            root_fail(c, 0, st, msg);
        else
            send_to(c, 0, UX_MSG_FAIL, w->rank, st, msg, strlen(msg) + 1);
    }
    pthread_mutex_unlock(&c->mu);
}

void ux_ctl_finish(ux_world *w, int *rank_out, dt_status *st_out, char *msg, size_t cap) {
    ux_ctl *c = w->ctl;
    *rank_out = -1;
    *st_out = DT_OK;
    if (!c) {
        pthread_mutex_lock(&w->mu);
        if (atomic_load(&w->aborted)) {
            *rank_out = w->abort_rank;
            *st_out = w->abort_status;
            snprintf(msg, cap, "%s", w->abort_msg);
        }
        pthread_mutex_unlock(&w->mu);
        return;
    }
    int n = w->size;
    uint64_t *v = malloc(sizeof *v * 2 * (size_t)n);
    for (int q = 0; v && q < n; q++) {
        v[q] = atomic_load(&w->sent[q]);
        v[n + q] = atomic_load(&w->recvd[q]);
    }
    pthread_mutex_lock(&c->mu);
    if (!v) {
        /* Without counts the others cannot tell what is still coming: fail instead, and count
         * as finished (rank 0) or let the closed socket say so (others). */
        const char *m = "out of memory at exit";
        if (w->rank == 0) {
            root_fail(c, 0, DT_ERR_NOMEM, m);
            c->finished[0] = 1;
            c->left--;
            root_check_done(c);
        } else {
            send_to(c, 0, UX_MSG_FAIL, w->rank, DT_ERR_NOMEM, m, strlen(m) + 1);
            record_failure(c, w->rank, DT_ERR_NOMEM, m);
            c->done = 1;
        }
    } else if (w->rank == 0) {
        root_bye(c, 0, v, v + n);
    } else {
        send_to(c, 0, UX_MSG_BYE, w->rank, 0, v, sizeof *v * 2 * (size_t)n);
    }
    /* A healthy world waits for its slowest rank (deaths are reported by the sockets). A
     * failed one waits only briefly: a rank may hang in its own code, never to return. */
    int64_t until = 0;
    while (!c->done) {
        if (!atomic_load(&w->aborted)) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        int64_t now = ux_now_ns();
        if (!until) until = now + FAILED_EXIT_WAIT_NS;
        if (now >= until) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    if (!c->done) { /* report the failure this rank knows of */
        pthread_mutex_lock(&w->mu);
        record_failure(c, w->abort_rank, w->abort_status, w->abort_msg);
        pthread_mutex_unlock(&w->mu);
    }
    *rank_out = c->fail_rank;
    *st_out = c->fail_rank >= 0 ? c->fail_status : DT_OK;
    if (c->fail_rank >= 0) snprintf(msg, cap, "%s", c->fail_msg);
    pthread_mutex_unlock(&c->mu);
    free(v);
}

void ux_ctl_stop(ux_world *w) {
    ux_ctl *c = w->ctl;
    if (!c) return;
    if (c->started) {
        ssize_t k = write(c->wake[1], "x", 1);
        (void)k;
        pthread_join(c->thread, NULL);
    }
    for (int r = 0; r < c->n; r++)
        if (c->socks[r] >= 0) close(c->socks[r]);
    close(c->wake[0]);
    close(c->wake[1]);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->socks);
    free(c->finished);
    free(c);
    w->ctl = NULL;
}
