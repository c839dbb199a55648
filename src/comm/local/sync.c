/* Entry barriers of the local backend: a counter and a generation under the group lock, a
 * short spin while peers are likely running (none when the ranks outnumber the cores or
 * other processes keep them busy: lw_spin), then a sleep on the group's futex word
 * (lw_group_sleep). Whether a barrier completes or fails is decided under the lock: a rank that
 * gives up (the world aborted, a member returned, or its timeout passed) takes its arrival back,
 * so a barrier never completes without everyone. An entry barrier also compares the members'
 * fingerprints as they arrive: a few integers under a lock already held, so the check is always
 * on. */
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "comm/boot/boot.h"
#include "comm/flight.h"
#include "comm/local/local_impl.h"
#include "core/check.h"
#include "core/fiber.h"

/* "dt_all_reduce #12" for the collective in progress, "dt_recv" for point to point. */
static void call_name(const lw_comm *c, const char *what, int p2p, char *buf, size_t cap) {
    if (p2p)
        snprintf(buf, cap, "%s", what);
    else
        snprintf(buf, cap, "%s #%lld", what, (long long)c->base.fp.seq);
}

dt_status lw_failure(lw_comm *c, const char *what, int peer) {
    lw_world *w = c->world;
    lw_group *g = c->group;
    if (!atomic_load(&w->aborted) && g->exited == 0) return DT_OK;
    char name[64];
    call_name(c, what, peer >= 0, name, sizeof name);
    if (atomic_load(&w->aborted))
        return dt_error(DT_ERR_ABORTED, "%s: rank %d failed (%s): %s", name, w->failed_rank,
                        dt_status_str(w->failed_status), w->failed_msg);
    /* Name the member that left first: later ones may only be leaving because of it. */
    int first = -1, first_seq = 0;
    for (int i = 0; i < g->n; i++) {
        if (peer >= 0 && i != peer) continue;
        int seq = atomic_load(&w->exited[g->members[i]]);
        if (seq && (first < 0 || seq < first_seq)) first = i, first_seq = seq;
    }
    if (first < 0) return DT_OK;
    const int who = g->members[first];
    if (peer >= 0)
        return dt_error(DT_ERR_PEER_EXITED,
                        "%s: rank %d returned before joining it (group of %d ranks, this is "
                        "rank %d)",
                        name, who, g->n, c->base.ctx->rank);
    /* Ranks that make different collective calls (a rank-dependent branch, or ranks passing
     * different placements to a collective call) end here: say how far the rank got. */
    char last[112] = "having made no collective call on this group";
    if (g->fps[first].seq) {
        int k = snprintf(last, sizeof last, "after ");
        dt_coll_fp_str(&g->fps[first], last + k, sizeof last - (size_t)k);
    }
    return dt_error(DT_ERR_PEER_EXITED,
                    "%s: rank %d returned before joining it, %s (group %s of %d ranks, this is "
                    "rank %d): every member must make the same collective calls in the same order "
                    "(same branches, same placements)",
                    name, who, last, c->base.label, g->n, c->base.ctx->rank);
}

int64_t lw_deadline(const lw_comm *c) {
    int64_t t = atomic_load(&c->world->timeout_ns[c->base.ctx->rank]);
    return t > 0 ? dt_boot_now_ns() + t : 0;
}

void lw_wait(lw_group *g, int64_t deadline_ns) {
    const uint32_t seen = atomic_load(&g->changed); /* under mu: a later change moves it */
    pthread_mutex_unlock(&g->mu);
    dt_wait_word(&g->changed, seen, deadline_ns);
    pthread_mutex_lock(&g->mu);
}

void lw_notify(lw_group *g) {
    atomic_fetch_add(&g->changed, 1);
    dt_wake_word(&g->changed);
}

void lw_where_set(lw_comm *c, const char *what, int64_t seq, int peer) {
    lw_world *w = c->world;
    lw_where *at = &w->where[c->base.ctx->rank];
    int64_t now = what ? dt_boot_now_ns() : 0;
    const char *caller = what ? dt_comm_caller() : NULL;
    pthread_mutex_lock(&at->mu);
    at->comm = what ? c : NULL;
    at->what = what;
    at->seq = seq;
    at->since_ns = now;
    at->peer = peer;
    at->caller = caller;
    pthread_mutex_unlock(&at->mu);
}

void lw_where_append(lw_world *w, int r, char *buf, size_t cap, size_t *len) {
    if (*len >= cap) return;
    lw_where *at = &w->where[r];
    pthread_mutex_lock(&at->mu);
    int k;
    if (atomic_load(&w->exited[r]))
        k = snprintf(buf + *len, cap - *len, ", rank %d (returned)", r);
    else if (!at->comm)
        k = snprintf(buf + *len, cap - *len, ", rank %d (not blocked in a collective or send/recv)",
                     r);
    else if (at->seq)
        k = snprintf(buf + *len, cap - *len, ", rank %d (in %s #%lld on group %s)", r, at->what,
                     (long long)at->seq, at->comm->base.label);
    else
        k = snprintf(buf + *len, cap - *len, ", rank %d (in %s on group %s)", r, at->what,
                     at->comm->base.label);
    pthread_mutex_unlock(&at->mu);
    if (k > 0) *len += (size_t)k;
}

/* The timeout of an entry barrier: which members never arrived, and where they are. Call with
 * g->mu held; gen is the barrier's generation. */
static dt_status timed_out(lw_comm *c, const char *what, uint_least64_t gen) {
    lw_group *g = c->group;
    char missing[320];
    size_t len = 0;
    int listed = 0, more = 0;
    missing[0] = '\0';
    for (int i = 0; i < g->n; i++) {
        if (g->arrived_at[i] == gen + 1) continue;
        if (listed++ < 4)
            lw_where_append(c->world, g->members[i], missing, sizeof missing, &len);
        else
            more++;
    }
    double s = (double)atomic_load(&c->world->timeout_ns[c->base.ctx->rank]) / 1e9;
    char name[64];
    call_name(c, what, 0, name, sizeof name);
    return dt_error(DT_ERR_ABORTED,
                    "%s on group %s of %d ranks: timed out after %.1f s waiting for%s%s (a rank "
                    "skipped this collective or is stuck; raise DT_TIMEOUT_S or "
                    "dt_local_set_timeout if it is only slow)",
                    name, c->base.label, g->n, s, missing[0] ? missing + 1 : " ?",
                    more ? ", ..." : "");
}

/* An entry arrival: its fingerprint against the first arrival's. Call with g->mu held. */
static void compare_fp(lw_group *g, int me, const dt_coll_fp *fp) {
    g->fps[me] = *fp;
    if (g->arrived == 0) {
        g->first = me;
        g->odd = -1;
    } else if (g->odd < 0 && !dt_coll_fp_equal(fp, &g->fps[g->first])) {
        g->odd = me;
    }
}

/* The outcome of an entry barrier all members reached. A mismatch names group rank 0 and the
 * first member that differs from it, whatever the order of arrival, and copies their
 * fingerprints: members may enter their next collective before all have read it. Call with
 * g->mu held. */
static void settle(lw_group *g) {
    g->verdict.a = -1;
    if (g->odd < 0) return;
    int b = 1;
    while (b < g->n && dt_coll_fp_equal(&g->fps[0], &g->fps[b]))
        b++;
    g->verdict = (lw_mismatch){.a = 0, .b = b, .fa = g->fps[0], .fb = g->fps[b]};
}

/* After an entry barrier completed: every member fails alike when any two differed. */
static dt_status mismatch(lw_comm *c, const char *what) {
    const lw_mismatch *v = &c->group->verdict;
    char name[64];
    call_name(c, what, 0, name, sizeof name);
    return dt_coll_fp_mismatch(&c->base, name, c->group->members[v->a], &v->fa,
                               c->group->members[v->b], &v->fb);
}

static inline dt_status verdict(lw_comm *c, const char *what) {
    return c->group->verdict.a < 0 ? DT_OK : mismatch(c, what);
}

/* The world aborted or a member returned: the unlikely case, looked at inline. */
static inline dt_status failure(lw_comm *c, const char *what) {
    if (!atomic_load(&c->world->aborted) && c->group->exited == 0) return DT_OK;
    return lw_failure(c, what, -1);
}

/* The entry barrier of a collective (or dt_barrier); past it, the members' sequence flags
 * (flags.c) order the collective's phases. */
static dt_status barrier(lw_comm *c, const char *what) {
    lw_group *g = c->group;
    const int me = c->base.rank;
    dt_status st = DT_OK;
    pthread_mutex_lock(&g->mu);
    if ((st = failure(c, what)) != DT_OK) {
        pthread_mutex_unlock(&g->mu);
        return st;
    }
    uint_least64_t gen = atomic_load(&g->gen);
    compare_fp(g, me, &c->base.fp);
    g->arrived_at[me] = gen + 1;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        settle(g);
        lw_counts_rebase(g);
        atomic_store(&g->gen, gen + 1);
        pthread_mutex_unlock(&g->mu);
        lw_group_wake(g);
        c->epoch = (uint32_t)(gen + 1);
        return verdict(c, what);
    }
    pthread_mutex_unlock(&g->mu);
    for (int i = 0, n = lw_spin(c->world); i < n; i++) {
        if (atomic_load(&g->gen) != gen) {
            c->epoch = (uint32_t)(gen + 1);
            return verdict(c, what);
        }
        sched_yield();
    }
    /* Going to sleep: say where, for a peer's timeout message (the spin above costs the fast
     * path nothing; a rank the scheduler keeps spinning longer than a peer's timeout is
     * reported as not blocked). */
    lw_where_set(c, what, c->base.fp.seq, -1);
    int64_t deadline = lw_deadline(c);
    int expired = 0;
    lw_watch wt;
    lw_watch_start(&wt, c);
    int passed = 0;
    pthread_mutex_lock(&g->mu);
    while (atomic_load(&g->gen) == gen) {
        if ((st = failure(c, what)) != DT_OK) break;
        if (deadline && dt_boot_now_ns() >= deadline) {
            st = timed_out(c, what, gen);
            expired = 1;
            break;
        }
        if ((st = lw_watch_check(&wt, c, what)) != DT_OK) break;
        /* Read under the lock while the barrier is incomplete and nothing failed: the last
         * arrival, or a failure, changes the word after this. */
        uint32_t seen = atomic_load(&g->wake);
        pthread_mutex_unlock(&g->mu);
        lw_group_sleep(g, seen, lw_watch_deadline(&wt, deadline));
        /* Passed: leave without the lock, which every woken waiter would otherwise take in
         * turn (sleeping on it while another holds it). */
        if ((passed = atomic_load(&g->gen) != gen)) break;
        pthread_mutex_lock(&g->mu);
    }
    if (!passed) {
        /* Withdraw: this barrier will not complete. arrived_at keeps saying this rank came,
         * for a peer that times out in it too before this rank's abort reaches it. */
        if (st != DT_OK) g->arrived--;
        pthread_mutex_unlock(&g->mu);
    }
    lw_where_set(c, NULL, 0, -1);
    lw_watch_abort(&wt, c, expired, st);
    if (st != DT_OK) return st;
    c->epoch = (uint32_t)(gen + 1);
    return verdict(c, what);
}

dt_status lw_enter(lw_comm *c, const char *what) {
    return barrier(c, what);
}
