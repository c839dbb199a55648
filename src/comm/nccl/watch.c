/* Watching the NCCL backend's work: the world's failure state, the operations queued on the
 * comm stream (oldest first), the waits of the rank's threads and the watchdog thread. Every
 * way an operation can fail to finish (a timeout, a peer that failed, died or returned without
 * joining, an NCCL or CUDA error) ends here as a recorded failure of the world, after which
 * every communicator is aborted, which also stops kernels stuck waiting for a peer. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/flight.h"
#include "comm/nccl/nccl_impl.h"
#include "core/check.h"

#define CHECK_EVERY_NS     1000000LL    /* waits look at the ring and NCCL this often */
#define WATCHDOG_NS        100000000LL  /* the watchdog's period */
#define EXIT_GRACE_NS      5000000000LL /* a returned peer's last data may still be in flight */
#define ABORT_LOCK_NS      1000000000LL /* blocking mode: how long an abort waits for nccl_mu */

static struct timespec realtime_in(int64_t ns) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec += (long)(ns % 1000000000LL);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* --- failure state ------------------------------------------------------------------------ */

void nc_world_abort(nc_world *w, int rank, dt_status st, const char *msg) {
    dt_failure_record(&w->fail, w->rank, rank, st, msg);
    pthread_mutex_lock(&w->wd_mu);
    pthread_cond_signal(&w->wd_cv);
    pthread_mutex_unlock(&w->wd_mu);
}

void nc_fail(nc_world *w, dt_status st, const char *msg) {
    char copy[512]; /* msg may be the thread's last error, which the calls below may reuse */
    snprintf(copy, sizeof copy, "%s", msg);
    nc_world_abort(w, w->rank, st, copy);
    dt_boot_ctl_fail(w->ctl, st, copy);
}

dt_status nc_aborted_error(nc_world *w, const char *what) {
    return dt_failure_error(&w->fail, w->rank, what);
}

static dt_status status_of(ncclResult_t r) {
    switch (r) {
    case ncclSystemError:
        return DT_ERR_SYSTEM;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return DT_ERR_ARG;
    case ncclRemoteError:
        return DT_ERR_ABORTED;
    default:
        return DT_ERR_DEVICE; /* unhandled CUDA error, internal error */
    }
}

dt_status nc_nccl_error(ncclResult_t r, ncclComm_t comm, const char *what, const char *label,
                        int n) {
    const char *last = ncclGetLastError(comm);
    if (!last) last = "";
    return dt_error(status_of(r), "%s on group %s of %d ranks: NCCL: %s%s%s%s", what, label, n,
                    ncclGetErrorString(r), *last ? ": " : "", last,
                    r == ncclRemoteError ? " (a peer failed, or the network to it did)" : "");
}

dt_status nc_settle(nc_world *w, ncclComm_t comm, ncclResult_t r, const char *what,
                    const char *label, int n, int64_t deadline) {
    unsigned idle = 0;
    while (r == ncclInProgress) {
        if (dt_failed(&w->fail)) return nc_aborted_error(w, what);
        if (deadline && dt_boot_now_ns() > deadline)
            return dt_error(DT_ERR_ABORTED,
                            "%s on group %s of %d ranks: NCCL was still connecting or queueing "
                            "it when the timeout passed (a member has not called it, or is "
                            "stuck; DT_TIMEOUT_S, DT_STARTUP_TIMEOUT_S)",
                            what, label, n);
        dt_boot_backoff(++idle);
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess) r = q;
    }
    return r == ncclSuccess ? DT_OK : nc_nccl_error(r, comm, what, label, n);
}

/* --- the operations queued on the communicators' streams ----------------------------------- */

dt_status nc_track(nc_world *w, nc_comm *c, const char *what, int peer) {
    dt_cuda_rank *cr = w->ctx.dev.cuda;
    pthread_mutex_lock(&w->ops_mu);
    if (w->count == w->nevents) { /* full: the oldest finishes first, so it merges into the next */
        int64_t t0 = w->ring[w->head].t0;
        w->head = (w->head + 1) % w->nevents;
        w->count--;
        if (w->count && w->ring[w->head].t0 > t0) w->ring[w->head].t0 = t0;
    }
    nc_pending *p = &w->ring[(w->head + w->count) % w->nevents];
    cudaError_t e = cudaEventRecord(p->ev, c->g->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(cr->compute, p->ev, 0);
    if (e == cudaSuccess) {
        p->t0 = dt_boot_now_ns();
        p->what = what;
        memcpy(p->label, c->base.label, sizeof p->label);
        p->label[sizeof p->label - 1] = '\0';
        p->g = c->g;
        p->peer = peer;
        p->id = ++w->queued;
        dt_pos_fill(&p->pos, &c->base, what, peer, dt_comm_caller());
        memcpy(c->g->label, p->label, sizeof c->g->label);
        w->count++;
    }
    pthread_mutex_unlock(&w->ops_mu);
    return dt_cuda_status(e, what);
}

/* A member of p's group (or p's peer) that returned from fn long enough ago that whatever it
 * sent before has arrived: it will not join p. -1 when none. ops_mu held. */
static int exited_peer(nc_world *w, const nc_pending *p, int64_t now) {
    int who = -1;
    pthread_mutex_lock(&w->mu);
    if (p->peer >= 0) {
        if (w->exited_at[p->peer] && now - w->exited_at[p->peer] > EXIT_GRACE_NS) who = p->peer;
    } else {
        for (int i = 0; i < p->g->n && who < 0; i++) {
            int r = p->g->members[i];
            if (r != w->rank && w->exited_at[r] && now - w->exited_at[r] > EXIT_GRACE_NS) who = r;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return who;
}

/* NCCL's asynchronous errors on any communicator (skipped while a call holds nccl_mu). */
static dt_status async_errors(nc_world *w, char *msg, size_t cap) {
    if (pthread_mutex_trylock(&w->nccl_mu) != 0) return DT_OK;
    dt_status st = DT_OK;
    for (nc_group *g = w->groups; g && st == DT_OK; g = g->next) {
        if (!g->comm) continue;
        ncclResult_t r = ncclSuccess, q = ncclCommGetAsyncError(g->comm, &r);
        if (q != ncclSuccess) r = q;
        if (r == ncclSuccess || r == ncclInProgress) continue;
        st = nc_nccl_error(r, g->comm, "an operation (asynchronous error)", g->label, g->n);
        snprintf(msg, cap, "%s", dt_last_error());
    }
    pthread_mutex_unlock(&w->nccl_mu);
    return st;
}

/* The oldest unfinished operation goes to rank 0's board of stuck ranks once it has waited the
 * check interval, and off it when it finished (comm/stuck.h). ops_mu held. */
static void board(nc_world *w, int64_t now) {
    const nc_pending *p = w->count > 0 ? &w->ring[w->head] : NULL;
    int64_t every = w->ctx.check_ns;
    uint64_t want = p && p->g && every && now - p->t0 >= every ? p->id : 0;
    if (want == w->posted_id) return;
    dt_boot_ctl_post(w->ctl, want ? &p->pos : NULL);
    w->posted_id = want;
}

dt_status nc_check(nc_world *w) {
    if (dt_failed(&w->fail)) return DT_OK; /* already failed: nothing new to find */
    char msg[512] = "";
    dt_status st = DT_OK;
    int64_t now = dt_boot_now_ns(), t = atomic_load(&w->timeout_ns);
    pthread_mutex_lock(&w->ops_mu);
    while (w->count > 0) {
        nc_pending *p = &w->ring[w->head];
        cudaError_t e = p->g ? cudaEventQuery(p->ev) : cudaSuccess;
        if (e == cudaErrorNotReady) break;
        if (e != cudaSuccess) {
            st = DT_ERR_DEVICE;
            snprintf(msg, sizeof msg, "%s on group %s of %d ranks: CUDA: %s: %s", p->what, p->label,
                     p->g->n, cudaGetErrorName(e), cudaGetErrorString(e));
            break;
        }
        w->head = (w->head + 1) % w->nevents;
        w->count--;
    }
    if (st == DT_OK && w->count > 0) {
        const nc_pending *p = &w->ring[w->head];
        int who;
        if (t > 0 && now - p->t0 > t) {
            st = DT_ERR_ABORTED;
            snprintf(msg, sizeof msg,
                     "%s on group %s of %d ranks: timed out after %.1f s (a member has not "
                     "called it, or is stuck; raise DT_TIMEOUT_S or dt_nccl_set_timeout if it is "
                     "only slow)",
                     p->what, p->label, p->g->n, (double)t / 1e9);
        } else if ((who = exited_peer(w, p, now)) >= 0) {
            st = DT_ERR_PEER_EXITED;
            snprintf(msg, sizeof msg,
                     "%s: rank %d returned before joining it (group %s of %d ranks, this is "
                     "rank %d)",
                     p->what, who, p->label, p->g->n, w->rank);
        }
    }
    board(w, now);
    pthread_mutex_unlock(&w->ops_mu);
    if (st == DT_OK) st = async_errors(w, msg, sizeof msg);
    if (st == DT_OK) return DT_OK;
    nc_fail(w, st, msg);
    return dt_error(st, "%s", msg);
}

dt_status nc_wait_event(nc_world *w, cudaEvent_t ev, const char *what) {
    unsigned idle = 0;
    int64_t next_check = 0;
    for (;;) {
        if (dt_failed(&w->fail)) return nc_aborted_error(w, what);
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) /* an abort completes stuck operations with garbage: look again */
            return dt_failed(&w->fail) ? nc_aborted_error(w, what) : DT_OK;
        if (e != cudaErrorNotReady) {
            dt_status st = dt_cuda_status(e, what);
            nc_fail(w, st, dt_last_error());
            return st;
        }
        int64_t now = dt_boot_now_ns();
        if (now >= next_check) {
            next_check = now + CHECK_EVERY_NS;
            DT_CHECK(nc_check(w));
        }
        dt_boot_backoff(++idle);
    }
}

dt_status nc_drain(nc_world *w, cudaStream_t extra, const char *what) {
    if (dt_failed(&w->fail)) return nc_aborted_error(w, what);
    /* An event behind what each stream holds now, recorded under nccl_mu (the list is stable
     * and nothing is being queued), waited for without it. */
    pthread_mutex_lock(&w->nccl_mu);
    int n = extra != NULL;
    for (nc_group *g = w->groups; g; g = g->next) n += g->comm != NULL;
    cudaEvent_t *evs = calloc((size_t)n + 1, sizeof *evs);
    dt_status st = evs ? DT_OK : dt_error(DT_ERR_NOMEM, "%s: out of memory", what);
    int k = 0;
    for (nc_group *g = w->groups; g && st == DT_OK; g = g->next) {
        if (!g->comm) continue;
        st = dt_cuda_status(cudaEventCreateWithFlags(&evs[k], cudaEventDisableTiming), what);
        if (st == DT_OK && (st = dt_cuda_status(cudaEventRecord(evs[k], g->stream), what)) != DT_OK)
            cudaEventDestroy(evs[k]);
        k += st == DT_OK;
    }
    if (st == DT_OK && extra) {
        st = dt_cuda_status(cudaEventCreateWithFlags(&evs[k], cudaEventDisableTiming), what);
        if (st == DT_OK && (st = dt_cuda_status(cudaEventRecord(evs[k], extra), what)) != DT_OK)
            cudaEventDestroy(evs[k]);
        k += st == DT_OK;
    }
    pthread_mutex_unlock(&w->nccl_mu);
    for (int i = 0; i < k; i++) {
        if (st == DT_OK) st = nc_wait_event(w, evs[i], what);
        cudaEventDestroy(evs[i]);
    }
    free(evs);
    return st;
}

void nc_forget(nc_world *w, nc_group *g) {
    pthread_mutex_lock(&w->ops_mu);
    for (int i = 0; i < w->count; i++) {
        nc_pending *p = &w->ring[(w->head + i) % w->nevents];
        if (p->g == g) p->g = NULL;
    }
    pthread_mutex_unlock(&w->ops_mu);
}

/* --- aborting and the watchdog -------------------------------------------------------------- */

void nc_abort_comms(nc_world *w, ncclComm_t extra) {
    if (atomic_exchange(&w->comms_aborted, 1)) {
        /* The others are aborted, or being aborted by a thread that may hold nccl_mu while
         * their aborts wait for extra's kernels: abort it without the lock. */
        if (extra) ncclCommAbort(extra);
        return;
    }
    /* Non-blocking communicators never keep nccl_mu long: a caller settling sees the failure and
     * lets go. A blocking one may be stuck inside NCCL holding it: abort under it anyway (NCCL's
     * abort is what releases such a call). */
    int locked = 1;
    if (w->blocking) {
        struct timespec ts = realtime_in(ABORT_LOCK_NS);
        locked = pthread_mutex_timedlock(&w->nccl_mu, &ts) == 0;
    } else {
        pthread_mutex_lock(&w->nccl_mu);
    }
    /* All in one group: NCCL (2.22 on) then raises every communicator's abort flag before it
     * reclaims any. One by one, the abort of a communicator whose kernels wait (through the
     * compute stream's events) behind another communicator's stuck kernel would hang before
     * that other one is aborted. */
    ncclGroupStart();
    if (extra) ncclCommAbort(extra);
    for (nc_group *g = w->groups; g; g = g->next)
        if (g->comm) {
            ncclCommAbort(g->comm);
            g->comm = NULL;
        }
    ncclGroupEnd();
    pthread_mutex_lock(&w->ops_mu);
    w->count = 0; /* an aborted operation's event may never complete as the data would */
    pthread_mutex_unlock(&w->ops_mu);
    if (locked) pthread_mutex_unlock(&w->nccl_mu);
}

static void *watchdog_main(void *arg) {
    nc_world *w = arg;
    cudaSetDevice(w->device); /* or CUDA would make a context on GPU 0 for this thread */
    pthread_mutex_lock(&w->wd_mu);
    while (!w->wd_stop) {
        struct timespec ts = realtime_in(WATCHDOG_NS);
        pthread_cond_timedwait(&w->wd_cv, &w->wd_mu, &ts);
        if (w->wd_stop) break;
        pthread_mutex_unlock(&w->wd_mu);
        if (!dt_failed(&w->fail)) nc_check(w);
        if (dt_failed(&w->fail)) nc_abort_comms(w, NULL);
        pthread_mutex_lock(&w->wd_mu);
    }
    pthread_mutex_unlock(&w->wd_mu);
    return NULL;
}

dt_status nc_watchdog_start(nc_world *w) {
    if (pthread_create(&w->watchdog, NULL, watchdog_main, w) != 0)
        return dt_error(DT_ERR_SYSTEM, "dt_nccl_run: cannot start the watchdog thread");
    w->watchdog_started = 1;
    return DT_OK;
}

void nc_watchdog_stop(nc_world *w) {
    if (!w->watchdog_started) return;
    pthread_mutex_lock(&w->wd_mu);
    w->wd_stop = 1;
    pthread_cond_signal(&w->wd_cv);
    pthread_mutex_unlock(&w->wd_mu);
    pthread_join(w->watchdog, NULL);
    w->watchdog_started = 0;
}
