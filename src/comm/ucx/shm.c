/* The shared-memory arena of a UCX group on one host (see shm.h): its set-up by a handshake
 * over UCP, and the round protocol with its waits. The arena is POSIX shared memory that group
 * rank 0 creates (and reserves: tmpfs would otherwise fail on first touch, with SIGBUS), the
 * others map, and rank 0 unlinks once every member has mapped it, so nothing stays behind in
 * /dev/shm whatever happens to the ranks later. Any member that cannot map it makes the whole
 * group keep to UCP, without an error. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/ucx/shm.h"
#include "core/check.h"
#include "core/device.h"
#include "core/spin.h"

#define SPINS         200      /* polls of a flag before yielding or sleeping on it */
#define YIELD_NS      50000L   /* then, while the host's ranks fit on its cores, yields this long */
#define SLEEP_NS      2000000L /* a sleep's timeout: failures and deadlines are seen this soon */
#define MAX_SHM_RANKS 64       /* larger groups keep to UCP (the arena grows with n) */

enum { SHM_UNTRIED = 0, SHM_READY = 1, SHM_OFF = -1 };

/* The futex word of a flag: the low 32 bits of its round number. */
static uint32_t *word(shm_flag *f) {
    return (uint32_t *)&f->v + (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
}

static void flag_store(shm_flag *f, uint64_t v) {
    atomic_store_explicit(&f->v, v, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst); /* against a waiter's sleepers, then v */
    if (atomic_load_explicit(&f->sleepers, memory_order_relaxed))
        syscall(SYS_futex, word(f), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* --- failures, as progress.c words them ------------------------------------------------- */

/* Whether member m has returned from its SPMD function. */
static int peer_gone(ux_op *op, int m) {
    ux_world *w = op->w;
    pthread_mutex_lock(&w->mu);
    int gone = w->exited[op->c->base.members[m]];
    pthread_mutex_unlock(&w->mu);
    return gone;
}

static void fail_gone(ux_op *op, int m) {
    op->st = dt_error(DT_ERR_PEER_EXITED,
                      "%s: rank %d returned before joining it (group of %d ranks, this is "
                      "rank %d)",
                      op->what, op->c->base.members[m], op->c->base.size, op->w->rank);
}

static void fail_timeout(ux_op *op, int m, int posting) {
    double s = (double)atomic_load(&op->w->timeout_ns) / 1e9;
    op->st = dt_error(DT_ERR_ABORTED,
                      "%s: timed out after %.1f s waiting for group rank %d (world rank %d) to "
                      "%s (raise DT_TIMEOUT_S or dt_ucx_set_timeout if it is only slow)",
                      op->what, s, m, op->c->base.members[m],
                      posting ? "send its part" : "take this rank's part");
}

/* Waits until member m's flag f reaches want (posting: m's posted flag, else its done flag):
 * a short spin, then, while every rank of this host has a core and no other process keeps the
 * cores busy (ux_may_yield), yields for up to YIELD_NS, then sleeps on the flag; fails when
 * the world fails, m returned, or the deadline passes. A peer copying a chunk takes tens of
 * microseconds, and a futex wake-up about as long again: sleeping after the spin alone made
 * 2-process collectives of 16 MiB wait out a wake-up on most rounds (median 6.3 ms, min 3.6 ms). */
static dt_status wait_flag(ux_op *op, shm_flag *f, uint64_t want, int m, int posting) {
    for (int i = 0; i < SPINS; i++) {
        if (atomic_load_explicit(&f->v, memory_order_acquire) >= want) return DT_OK;
        dt_cpu_relax();
    }
    ux_world *w = op->w;
    unsigned seen = atomic_load(&w->events) - 1u;
    const int64_t yield_until = ux_may_yield(w) ? ux_now_ns() + YIELD_NS : 0;
    while (!op->st) {
        unsigned ev = atomic_load(&w->events);
        if (ev != seen) {
            seen = ev;
            if (dt_failed(&w->fail)) {
                ux_fail_aborted(op);
                break;
            }
            /* A returned peer posted every round it ran before it returned: whether it has
             * returned is read first, then the flag once more, so a last post just before
             * returning is never taken for a missing one. */
            int gone = peer_gone(op, m);
            if (atomic_load_explicit(&f->v, memory_order_acquire) >= want) break;
            if (gone) {
                fail_gone(op, m);
                break;
            }
        }
        int64_t now = ux_now_ns();
        if (op->deadline && now > op->deadline) {
            fail_timeout(op, m, posting);
            break;
        }
        ux_op_watch(op, now);
        if (now < yield_until) {
            sched_yield();
            if (atomic_load_explicit(&f->v, memory_order_acquire) >= want) break;
            continue;
        }
        atomic_fetch_add(&f->sleepers, 1);
        uint64_t v = atomic_load(&f->v);
        if (v < want) {
            struct timespec ts = {0, SLEEP_NS};
            syscall(SYS_futex, word(f), FUTEX_WAIT, (uint32_t)v, &ts, NULL, 0);
        }
        atomic_fetch_sub(&f->sleepers, 1);
        if (atomic_load_explicit(&f->v, memory_order_acquire) >= want) break;
    }
    return op->st;
}

/* --- rounds ------------------------------------------------------------------------------ */

void shm_start(shm_op *so, ux_op *op, ux_shm *s) {
    *so = (shm_op){.op = op, .s = s, .first = s->round + 1};
}

dt_status shm_begin(shm_op *so, shm_hdr **out) {
    ux_shm *s = so->s;
    uint64_t k = ++s->round;
    for (int r = 0; r < s->n && k > SHM_CHUNKS; r++)
        if (r != s->me && wait_flag(so->op, &s->ctl[r].done, k - SHM_CHUNKS, r, 0))
            return so->op->st;
    *out = shm_chunk(s, s->me, k);
    return DT_OK;
}

void shm_post(shm_op *so, shm_hdr *h, int kind, int more, const size_t *counts) {
    ux_shm *s = so->s;
    const dt_coll_fp *fp = &so->op->c->base.fp;
    int64_t f[6] = {fp->seq, fp->kind, fp->count, fp->dtype, fp->op, fp->root};
    memcpy(h->fp, f, sizeof f);
    h->round = s->round;
    h->more = (uint32_t)more;
    h->kind = (uint32_t)kind;
    for (int j = 0; j < s->n && s->round == so->first; j++)
        h->counts[j] = counts ? counts[j] : 0;
    flag_store(&s->ctl[s->me].posted, s->round);
}

dt_status shm_peer(shm_op *so, int m, shm_hdr **out) {
    ux_shm *s = so->s;
    if (wait_flag(so->op, &s->ctl[m].posted, s->round, m, 1)) return so->op->st;
    *out = shm_chunk(s, m, s->round);
    return DT_OK;
}

int shm_end(shm_op *so) {
    ux_shm *s = so->s;
    int more = 0;
    for (int m = 0; m < s->n && !so->op->st; m++) {
        shm_hdr *h;
        if (shm_peer(so, m, &h) == DT_OK) more |= h->more != 0;
    }
    if (so->op->st) return 0;
    flag_store(&s->ctl[s->me].done, s->round);
    return more;
}

/* --- set-up ----------------------------------------------------------------------------- */

typedef struct offer {
    int32_t ok;
    uint32_t bytes;
    char name[56];
} offer;

static size_t arena_bytes(int n, size_t *hdr_out) {
    size_t hdr = (sizeof(shm_hdr) + sizeof(uint64_t) * (size_t)n + 63) & ~(size_t)63;
    *hdr_out = hdr;
    return sizeof(shm_ctl) * (size_t)n + (size_t)n * SHM_CHUNKS * (hdr + SHM_CHUNK);
}

static ux_shm *arena_map(int fd, int n, int me) {
    size_t hdr, bytes = arena_bytes(n, &hdr);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ux_shm *s = p == MAP_FAILED ? NULL : calloc(1, sizeof *s);
    if (!s) {
        if (p != MAP_FAILED) munmap(p, bytes);
        return NULL;
    }
    *s = (ux_shm){.base = p,
                  .bytes = bytes,
                  .n = n,
                  .me = me,
                  .hdr_bytes = hdr,
                  .chunk_bytes = hdr + SHM_CHUNK};
    s->ctl = (shm_ctl *)s->base;
    s->slots = s->base + sizeof(shm_ctl) * (size_t)n;
    return s;
}

void ux_shm_free(ux_shm *s) {
    if (!s) return;
    munmap(s->base, s->bytes);
    free(s);
}

/* Group rank 0: creates, reserves and maps the arena; o->ok = 0 when it cannot. */
static ux_shm *arena_create(ux_op *op, offer *o) {
    static _Atomic unsigned serial;
    ux_group *g = op->c->g;
    size_t hdr, bytes = arena_bytes(g->n, &hdr);
    snprintf(o->name, sizeof o->name, "/dtensor-%ld-%07x-%u", (long)getpid(), g->gid,
             atomic_fetch_add(&serial, 1));
    o->bytes = (uint32_t)(bytes >> 12);
    int fd = shm_open(o->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return NULL;
    ux_shm *s = NULL;
    if (ftruncate(fd, (off_t)bytes) == 0 && posix_fallocate(fd, 0, (off_t)bytes) == 0)
        s = arena_map(fd, g->n, 0);
    close(fd);
    if (!s) shm_unlink(o->name);
    o->ok = s != NULL;
    return s;
}

static ux_shm *arena_open(ux_op *op, const offer *o) {
    int fd = shm_open(o->name, O_RDWR, 0);
    if (fd < 0) return NULL;
    struct stat st;
    size_t hdr, bytes = arena_bytes(op->c->g->n, &hdr);
    ux_shm *s = NULL;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == bytes && (bytes >> 12) == o->bytes)
        s = arena_map(fd, op->c->g->n, op->c->base.rank);
    close(fd);
    return s;
}

/* The handshake, as its own operation (its own sequence number, so its messages never meet
 * the collective's): offer, answers, verdict. */
static dt_status handshake(ux_op *coll, ux_shm **out) {
    ux_comm *c = coll->c;
    int n = c->base.size, me = c->base.rank;
    ux_op op;
    DT_CHECK(ux_op_begin(&op, c, coll->what, 0));
    offer o = {0};
    int32_t *ans = calloc((size_t)n, sizeof *ans), verdict = 0;
    ux_shm *s = NULL;
    if (!ans) op.st = dt_error(DT_ERR_NOMEM, "%s: out of memory", op.what);
    if (me == 0) {
        if (!op.st && c->w->shm_on) s = arena_create(&op, &o);
        for (int j = 1; j < n; j++)
            ux_post_send(&op, j, UX_PH_GATHER, &o, sizeof o, 0);
        for (int j = 1; j < n; j++)
            ux_post_recv(&op, j, UX_PH_REDUCE, &ans[j], sizeof ans[j]);
        ux_op_wait(&op);
        if (o.ok) shm_unlink(o.name);
        verdict = o.ok && !op.st;
        for (int j = 1; j < n; j++)
            verdict &= ans[j];
        for (int j = 1; j < n; j++)
            ux_post_send(&op, j, UX_PH_ALL, &verdict, sizeof verdict, 0);
    } else {
        ux_post_recv(&op, 0, UX_PH_GATHER, &o, sizeof o);
        if (ux_op_wait(&op) == DT_OK && o.ok && c->w->shm_on) {
            o.name[sizeof o.name - 1] = '\0';
            s = arena_open(&op, &o);
        }
        int32_t mine = s != NULL;
        ux_post_send(&op, 0, UX_PH_REDUCE, &mine, sizeof mine, 0);
        ux_post_recv(&op, 0, UX_PH_ALL, &verdict, sizeof verdict);
    }
    ux_op_wait(&op);
    free(ans);
    dt_status st = ux_op_end(&op);
    if (st != DT_OK || !verdict) {
        ux_shm_free(s);
        s = NULL;
    }
    *out = s;
    return st;
}

/* All members on this rank's host? */
static int one_host(const ux_comm *c) {
    const ux_world *w = c->w;
    for (int j = 0; j < c->base.size; j++)
        if (w->host[c->base.members[j]] != w->host[w->rank]) return 0;
    return 1;
}

ux_shm *ux_shm_get(ux_op *op) {
    ux_comm *c = op->c;
    ux_group *g = c->g;
    if (g->shm_state == SHM_UNTRIED) {
        g->shm_state = SHM_OFF;
        if (c->base.size > 1 && c->base.size <= MAX_SHM_RANKS && one_host(c)) {
            ux_shm *s = NULL;
            if ((op->st = handshake(op, &s)) != DT_OK) {
                op->remote = 1; /* handshake's own ux_op_end reported it */
                return NULL;
            }
            g->shm = s;
            g->shm_state = s ? SHM_READY : SHM_OFF;
        }
    }
    return g->shm_state == SHM_READY ? g->shm : NULL;
}

int ux_shm_host(const void *a, const void *b) {
    return dt_mem_kind_of(a) == DT_DEVICE_CPU && dt_mem_kind_of(b) == DT_DEVICE_CPU;
}

void ux_shm_count(ux_op *op) {
    dt_ctx *ctx = op->c->base.ctx;
    pthread_mutex_lock(&ctx->stats_mu);
    ctx->stats.shm_calls++;
    pthread_mutex_unlock(&ctx->stats_mu);
}
