/* The local backend: ranks are threads of one process and a group's members exchange
 * pointers to their buffers, then each copies (or reduces) what it needs straight out of its
 * peers' memory. No root relays data, and every rank moves its own share, so the copies of
 * one collective run on all cores at once. */
#ifndef DT_COMM_LOCAL_IMPL_H
#define DT_COMM_LOCAL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "comm/comm_impl.h"
#include "comm/stuck.h"
#include "core/device.h"

/* What one rank publishes for the collective in progress. */
typedef struct lw_slot {
    const void *send;
    const size_t *counts; /* all_gatherv/reduce_scatterv: recvcounts; all_to_allv: sendcounts */
    const size_t *displs; /* all_to_allv: sdispls */
    const size_t *rcounts; /* all_to_allv: recvcounts */
    const int64_t *shape;  /* exchange_boxes: the source array's shape and the boxes */
    const dt_box *send_boxes, *recv_boxes;
    const void *result;   /* all_reduce: where this rank's reduced chunk is */
    void *recv;           /* exchange_boxes: the destination array peers push into, and its shape */
    const int64_t *recv_shape;
    int pull; /* reduce_scatter_boxes: this member asks for the per-box pull (lw_comm) */
    void *const *bufs;     /* all_reduce_bufs: the arrays, their counts and how many */
    const size_t *bcounts;
    int nbufs;
    const dt_comm_piece *pieces; /* all_gather_pieces, reduce_scatter_pieces: how many */
    int npieces;
} lw_slot;

enum { LW_P2P_EMPTY = 0, LW_P2P_POSTED, LW_P2P_TAKEN, LW_P2P_DONE };

typedef struct lw_p2p {
    const void *buf;
    size_t bytes;
    int state;
    dt_status status;
    void *dst;       /* the receiver's buffer, once taken */
    size_t split;    /* large messages: the sender copies [split, bytes) itself */
    int parts_left;  /* copies still running (receiver's, sender's) */
    int sender_busy; /* the sender has started its part */
} lw_p2p;

/* Two members whose fingerprints differed at an entry barrier (group ranks; a = -1: none). */
typedef struct lw_mismatch {
    int a, b;
    dt_coll_fp fa, fb;
} lw_mismatch;

/* A member's progress through the collective in progress (comm/local/flags.c), a cache line of
 * its own: epoch * LW_PHASES + the last phase it finished. */
typedef struct lw_flag {
    _Alignas(64) _Atomic uint32_t seq;
    _Atomic uint32_t waiters; /* threads asleep on seq's futex */
} lw_flag;

/* Phases a member publishes after the entry barrier: LW_META, it no longer reads the peers'
 * slots (collectives that check every pair); LW_HALF, the first of two data phases is done;
 * LW_DONE, it neither reads nor writes any peer's buffers any more. */
enum { LW_META = 1, LW_HALF = 2, LW_DONE = 3, LW_PHASES = 4 };

/* How many members published a phase, over all epochs (comm/local/flags.c), so that a wait for
 * every member sleeps once and only the last to publish wakes it (waiting on each member's flag
 * in turn may sleep and wake once per member). base: the count when the epoch's entry barrier
 * completed (set by its last arrival: every publication of the epoch before is in by then, and
 * none of this epoch can be); the phase is everyone's when the count is base + n. */
typedef struct lw_count {
    _Alignas(64) _Atomic uint32_t n; /* futex word */
    _Atomic uint32_t sleepers;
    uint32_t base;
} lw_count;

typedef struct lw_group {
    struct lw_group *next; /* registry */
    uint64_t key[2];
    int n;
    int *members;
    int handles; /* live communicators on this group (registry lock) */
    int exited;  /* members that have returned (changed under registry lock and mu) */
    pthread_mutex_t mu;
    /* send/recv's condition: bumped under mu by every change their waiters look for
     * (lw_notify), and waited on with mu released (lw_wait). */
    _Atomic uint32_t changed;
    /* Entry-barrier waiters sleep on this futex word, not on changed: the barrier's last arrival
     * and every failure (lw_group_wake) bump it and wake them, and a woken waiter returns
     * without retaking mu (after a wake on changed every waiter retakes it in turn). */
    _Alignas(64) _Atomic uint32_t wake;
    _Atomic uint32_t sleepers;
    lw_count counts[LW_PHASES]; /* [phase] */
    _Alignas(64) int arrived;   /* under mu */
    atomic_uint_least64_t gen;
    /* Under mu: per member, gen + 1 of the last barrier it arrived at (a member that gave up
     * on it came all the same: a timeout does not name it as missing), and the fingerprint of
     * the last collective it entered; for the entry barrier in progress, the group rank of its
     * first arrival and of the first that differs from it (-1: none). */
    uint64_t *arrived_at;
    dt_coll_fp *fps;
    int first, odd;
    /* The last completed entry barrier's outcome: its members read it after gen moved on,
     * and none can complete the next barrier before all of them have. */
    lw_mismatch verdict;
    lw_slot *slots; /* n */
    lw_flag *flags; /* n */
    lw_p2p *p2p;    /* n*n, [src*n + dst] */
} lw_group;

/* Where a rank is blocked, for a peer's timeout message. Each rank has its own lock, so that
 * ranks entering a collective together do not contend for it; a leaf: nothing else is locked
 * while it is held. */
typedef struct lw_where {
    pthread_mutex_t mu;
    const struct lw_comm *comm; /* NULL: not blocked in a collective or send/recv */
    const char *what;
    int64_t seq;      /* 0 for send/recv */
    int64_t since_ns; /* when it began to wait there */
    int peer;         /* send/recv: the other end's group rank; -1 in a collective */
    const char *caller; /* the op that issued the call (comm/flight.h) */
} lw_where;

/* A wait's check for ranks stuck across groups (comm/stuck.h): when to look next (0: never),
 * the verdict seen at the last look, to confirm, and the rank it blames once confirmed. */
typedef struct lw_watch {
    int64_t next;
    int blamed;
    char first[512];
} lw_watch;

/* How many times a rank that reached an entry barrier first yields before it sleeps on the
 * group's wake word (and a wait on a peer's sequence flag or a phase count before it sleeps on
 * its futex): while every rank has a core, a peer is likely to arrive within a few yields and
 * waking from a sleep costs more; with more ranks than cores a yielding rank only takes turns
 * from the ranks that still work (8 ranks on 2 cores: 1 MiB collectives 4-6x slower), so the
 * world's spin is then 0 and waiters sleep at once (polling first does not pay either: 4 ranks
 * on 2 cores, 64 KiB all_gathers took 36-41 us after 100 polls, 21-27 us without). A few
 * yields first made 1 KiB collectives 5-16 us instead of 60-140 on the 2-vCPU VM while nothing
 * else ran, but 3.0-4.1 ms instead of 7-131 us beside two CPU-bound processes: on Linux's
 * EEVDF scheduler a yield gives up the rest of the slice to them (docs/bench-fsdp.md). Ranks
 * that fit on the cores meet the same beside busy processes, so they yield only while no other
 * process keeps the cores busy (lw_spin). */
#define LW_SPIN 64

/* 1 when processes other than this one used at least a quarter of a core over the last 0.2 s
 * (comm/host_load.h; the process's estimate, world.c). */
int lw_host_shared(void);

typedef struct lw_world {
    int size;
    int spin; /* LW_SPIN when the ranks fit on the usable cores, else 0 */
    pthread_mutex_t mu; /* registry, exits and failure */
    lw_group *groups;
    atomic_int aborted;
    int failed_rank;
    dt_status failed_status;
    char failed_msg[512];
    atomic_int *exited; /* per world rank: 0, or the order in which it returned (1, 2, ...) */
    int nexited;
    _Atomic int64_t *timeout_ns; /* per world rank (DT_TIMEOUT_S, dt_local_set_timeout); 0: none */
    lw_where *where;             /* per world rank */
} lw_world;

typedef struct lw_comm {
    dt_comm base;
    lw_world *world;
    lw_group *group;
    void *scratch;
    size_t scratch_cap;
    uint32_t epoch; /* the generation the last entry barrier this rank passed completed */
    /* reduce_scatter_boxes pulls each box even where push order applies (tests compare the
     * two; the members pull when any of them asks), and how many of its calls pushed. */
    int reduce_pull;
    unsigned reduce_pushes;
} lw_comm;

/* Entry barrier of a collective: fails with a clear error when the world aborted, a member
 * returned or the rank's timeout passed (which aborts the world), instead of waiting forever,
 * and with DT_ERR_COMM on every member when their fingerprints (c->base.fp) differ. */
dt_status lw_enter(lw_comm *c, const char *what);
/* Inside a collective every member has entered (after lw_enter): this rank finished phase
 * (its stores, streaming ones fenced, are visible to a peer that sees it), and waits until
 * peer (group rank; this rank: returns at once) or every member finished phase. Nobody can be
 * missing any more, so the waits cannot fail. */
void lw_publish(lw_comm *c, int phase);
void lw_wait_for(lw_comm *c, int peer, int phase);
void lw_wait_all(lw_comm *c, int phase);
/* The entry barrier just completed (call under g->mu, before its generation moves on): the
 * phase counts' bases for the new epoch. */
void lw_counts_rebase(lw_group *g);
/* Wakes every entry-barrier waiter of g (after the barrier completed or a failure that it must
 * see: set the state first). Any locks may be held. */
void lw_group_wake(lw_group *g);
/* An entry-barrier waiter sleeps until g->wake differs from seen (read under g->mu while the
 * barrier was still incomplete and no failure was seen), deadline_ns passes (0: none), or a
 * spurious wake-up; the caller re-checks. Call without g->mu held. */
void lw_group_sleep(lw_group *g, uint32_t seen, int64_t deadline_ns);
/* The error for a member (peer = group rank, or -1 for any) that can no longer arrive;
 * DT_OK when none. Call with group->mu held. */
dt_status lw_failure(lw_comm *c, const char *what, int peer);

/* The absolute deadline of a wait starting now (0: none), a wait on the group's condition
 * (send/recv) until then, and the wake of its waiters; call with group->mu held. lw_wait
 * releases mu while it waits, and may return early: the caller checks again. */
int64_t lw_deadline(const lw_comm *c);
void lw_wait(lw_group *g, int64_t deadline_ns);
void lw_notify(lw_group *g);
void lw_watch_start(lw_watch *wt, const lw_comm *c);
/* The earlier of deadline (0: none) and the next look. */
int64_t lw_watch_deadline(const lw_watch *wt, int64_t deadline);
/* Looks when it is time: DT_ERR_COMM (wt->blamed set) when ranks are stuck for good; the
 * caller then aborts the world in wt->blamed's name with the verdict, wt->first (lw_watch_abort).
 * Any locks but a where record's may be held. */
dt_status lw_watch_check(lw_watch *wt, lw_comm *c, const char *what);
/* After a wait ended in st with no group lock held: aborts the world when it timed out
 * (expired: in this rank's name) or lw_watch_check found ranks stuck (in the blamed one's). */
void lw_watch_abort(const lw_watch *wt, lw_comm *c, int expired, dt_status st);

/* Records (what != NULL) or clears where this rank is blocked (peer: a send's or receive's
 * other end, group rank; -1 in a collective). */
void lw_where_set(lw_comm *c, const char *what, int64_t seq, int peer);
/* ", rank R (in dt_barrier #3 on group tp)" for world rank r, appended at buf + *len. */
void lw_where_append(lw_world *w, int r, char *buf, size_t cap, size_t *len);
/* The world failed (rank, st, msg) unless it already had: every waiter wakes and fails. Call
 * with no group lock held. */
void lw_abort(lw_world *w, int rank, dt_status st, const char *msg);

/* Shared by the collectives (comm/local/collectives.c) and the box exchanges
 * (comm/local/boxes.c). The memory table for a collective's buffers: the GPU's when either is
 * device memory; drains the rank's stream first (peers read our buffers). */
const dt_mem_ops *lw_mem_of(const void *a, const void *b, dt_status *st);
/* The end of a collective that checked every pair after its entry (and then published
 * LW_META): waits until the peers for which touches(peer) holds are done, and the others
 * until they no longer read this rank's slot. */
void lw_done_some(lw_comm *c, const dt_mem_ops *mem, dt_status *st,
                  int (*touches)(const lw_comm *c, int peer, const void *arg), const void *arg);
int lw_reads_nothing(const lw_comm *c, int peer, const void *arg);

/* Grouped gathers and reduces of host arrays (comm/local/pieces.c). */
dt_status lw_all_gather_pieces(dt_comm *base, int n, const dt_comm_piece *pieces, dt_dtype dt);
dt_status lw_reduce_scatter_pieces(dt_comm *base, int n, const dt_comm_piece *pieces,
                                   dt_dtype dt, dt_reduce_op op);

/* How many times a wait may yield now: lw_world.spin, or 0 while other processes keep the
 * cores busy. */
static inline int lw_spin(const lw_world *w) {
    return w->spin && !lw_host_shared() ? w->spin : 0;
}

extern const dt_comm_ops lw_comm_ops;

#endif
