/* The control plane: the rendezvous sockets, kept open as a star through rank 0. Ranks report
 * failures (FAIL) and returns (BYE, with per-peer message counts) to rank 0, which relays them
 * (ABORT, EXITED) and sees a process die the moment the kernel closes its socket. When every
 * rank has returned or died, rank 0 says DONE with the world's first failure. Rank 0 also
 * keeps a small store (PUT, GET, VALUE). One thread per process reads the sockets; it never
 * touches a transport, only calls the runtime's hooks. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/boot/boot.h"
#include "comm/boot/wire.h"
#include "comm/stuck.h"
#include "core/check.h"

#define FAILED_EXIT_WAIT_NS 2000000000LL
#define GET_POLL_NS         100000000LL
#define JUDGE_MS            250 /* rank 0 judges the board of stuck ranks this often */

/* A stored value (rank 0), a GET waiting for one (rank 0) or an answer not yet taken. */
typedef struct kv {
    struct kv *next;
    int rank;    /* pending GET: who asked */
    int readers; /* stored value: GETs still to answer */
    size_t klen, vlen;
    char *key, *val;
} kv;

struct dt_boot_ctl {
    dt_boot_hooks hooks;
    int rank;   /* this process's rank */
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
    kv *store;   /* rank 0: values put */
    kv *waiting; /* rank 0: GETs that came before their PUT */
    kv *inbox;   /* answers to this rank's GETs */
    dt_board board; /* rank 0: where ranks wait, for the check across groups (comm/stuck.h) */
};

static void record_failure(dt_boot_ctl *c, int rank, dt_status st, const char *msg) {
    if (c->fail_rank >= 0) return;
    c->fail_rank = rank;
    c->fail_status = st;
    snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
}

static void send_to(dt_boot_ctl *c, int r, uint32_t type, int rank, int st, const void *p,
                    size_t len) {
    if (c->socks[r] >= 0) boot_wire_write(c->socks[r], type, rank, st, p, len);
}

static int world_failed(dt_boot_ctl *c) {
    int rank;
    dt_status st;
    char msg[8];
    return c->hooks.failed(c->hooks.arg, &rank, &st, msg, sizeof msg);
}

/* --- the store's records ----------------------------------------------------------------- */

static void kv_free(kv *e) {
    if (!e) return;
    free(e->key);
    free(e->val);
    free(e);
}

static void kv_free_list(kv *e) {
    while (e) {
        kv *next = e->next;
        kv_free(e);
        e = next;
    }
}

static kv *kv_new(const void *key, size_t klen, const void *val, size_t vlen) {
    kv *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->key = malloc(klen ? klen : 1);
    e->val = malloc(vlen ? vlen : 1);
    if (!e->key || !e->val) {
        kv_free(e);
        return NULL;
    }
    if (klen) memcpy(e->key, key, klen);
    if (vlen) memcpy(e->val, val, vlen);
    e->klen = klen;
    e->vlen = vlen;
    return e;
}

/* Unlinks and returns the first record of *list with this key (and rank, when rank >= 0). */
static kv *kv_take(kv **list, const void *key, size_t klen, int rank) {
    for (kv **pp = list; *pp; pp = &(*pp)->next) {
        kv *e = *pp;
        if (e->klen == klen && !memcmp(e->key, key, klen) && (rank < 0 || e->rank == rank)) {
            *pp = e->next;
            e->next = NULL;
            return e;
        }
    }
    return NULL;
}

/* u32 klen | key | value: the payload of PUT and VALUE. */
static char *kv_pack(const void *key, size_t klen, const void *val, size_t vlen, size_t *len) {
    uint32_t k = (uint32_t)klen;
    char *p = malloc(sizeof k + klen + vlen + 1);
    if (!p) return NULL;
    memcpy(p, &k, sizeof k);
    if (klen) memcpy(p + sizeof k, key, klen);
    if (vlen) memcpy(p + sizeof k + klen, val, vlen);
    *len = sizeof k + klen + vlen;
    return p;
}

static kv *kv_unpack(const char *p, size_t len) {
    uint32_t k;
    if (len < sizeof k) return NULL;
    memcpy(&k, p, sizeof k);
    if (k > len - sizeof k) return NULL;
    return kv_new(p + sizeof k, k, p + sizeof k + k, len - sizeof k - k);
}

/* Rank 0 answers rank r's GET from stored value e (which it forgets after its last reader). */
static void root_answer(dt_boot_ctl *c, kv *e, int r) {
    if (r == 0) {
        kv *a = kv_new(e->key, e->klen, e->val, e->vlen);
        if (a) { /* without memory the GET times out, naming its key */
            a->next = c->inbox;
            c->inbox = a;
        }
    } else {
        size_t len;
        char *p = kv_pack(e->key, e->klen, e->val, e->vlen, &len);
        if (p) send_to(c, r, BOOT_MSG_VALUE, 0, 0, p, len);
        free(p);
    }
    if (--e->readers <= 0) kv_free(kv_take(&c->store, e->key, e->klen, -1));
    pthread_cond_broadcast(&c->cv);
}

/* A value arrives at rank 0 (from rank 0 itself or a PUT): answer those waiting, keep it for
 * the readers still to come. Takes e. */
static void root_put(dt_boot_ctl *c, kv *e) {
    e->next = c->store;
    c->store = e;
    kv *g;
    while (e->readers > 0 && (g = kv_take(&c->waiting, e->key, e->klen, -1))) {
        int r = g->rank;
        kv_free(g);
        int last = e->readers == 1;
        root_answer(c, e, r);
        if (last) return; /* e is gone */
    }
}

static void root_get(dt_boot_ctl *c, int r, const void *key, size_t klen) {
    for (kv *e = c->store; e; e = e->next)
        if (e->klen == klen && !memcmp(e->key, key, klen)) {
            root_answer(c, e, r);
            return;
        }
    kv *g = kv_new(key, klen, NULL, 0);
    if (!g) return; /* the asker times out */
    g->rank = r;
    g->next = c->waiting;
    c->waiting = g;
}

/* --- rank 0 --------------------------------------------------------------------------- */

static void root_check_done(dt_boot_ctl *c) {
    if (c->left > 0 || c->done) return;
    for (int r = 1; r < c->n; r++)
        send_to(c, r, BOOT_MSG_DONE, c->fail_rank, c->fail_status, c->fail_msg,
                strlen(c->fail_msg) + 1);
    c->done = 1;
    pthread_cond_broadcast(&c->cv);
}

/* Rank r failed (or died): first failure wins; everybody else hears of it. */
static void root_fail(dt_boot_ctl *c, int r, dt_status st, const char *msg) {
    if (c->fail_rank >= 0) return;
    record_failure(c, r, st, msg);
    c->hooks.abort(c->hooks.arg, r, st, msg);
    for (int q = 1; q < c->n; q++)
        if (q != r) send_to(c, q, BOOT_MSG_ABORT, r, st, msg, strlen(msg) + 1);
}

/* Rank r returned having sent sent[q] messages to and received recvd[q] from each rank q. */
static void root_bye(dt_boot_ctl *c, int r, const uint64_t *sent, const uint64_t *recvd) {
    if (c->finished[r]) return;
    c->finished[r] = 1;
    c->left--;
    for (int q = 0; q < c->n; q++) {
        if (q == r) continue;
        uint64_t pair[2] = {sent[q], recvd[q]};
        if (q == 0)
            c->hooks.exited(c->hooks.arg, r, pair[0], pair[1]);
        else if (!c->finished[q])
            send_to(c, q, BOOT_MSG_EXITED, r, 0, pair, sizeof pair);
    }
    root_check_done(c);
}

static void root_dead(dt_boot_ctl *c, int r) {
    close(c->socks[r]);
    c->socks[r] = -1;
    if (c->finished[r]) return;
    c->finished[r] = 1;
    c->left--;
    char msg[256];
    snprintf(msg, sizeof msg,
             "its process died (killed, crashed, or exited without returning "
             "from %s)",
             c->hooks.entry);
    root_fail(c, r, DT_ERR_ABORTED, msg);
    root_check_done(c);
}

/* Judges the board: a verdict that holds fails the world in the blamed rank's name, every
 * rank hearing of it (the blamed one too). */
static void root_judge(dt_boot_ctl *c) {
    char msg[sizeof c->board.verdict];
    int blamed = -1;
    if (c->fail_rank >= 0 || !dt_board_judge(&c->board, dt_boot_now_ns(), msg, &blamed)) return;
    record_failure(c, blamed, DT_ERR_COMM, msg); /* fail_msg holds a verdict whole */
    c->hooks.abort(c->hooks.arg, blamed, DT_ERR_COMM, msg);
    for (int q = 1; q < c->n; q++)
        send_to(c, q, BOOT_MSG_ABORT, blamed, DT_ERR_COMM, msg, strlen(msg) + 1);
}

static void root_message(dt_boot_ctl *c, int r) {
    boot_wire_hdr h;
    char *p;
    int k = boot_wire_read(c->socks[r], &h, &p, 0);
    pthread_mutex_lock(&c->mu);
    if (k != 0) {
        root_dead(c, r);
    } else if (h.type == BOOT_MSG_FAIL) {
        root_fail(c, r, (dt_status)h.status, p);
    } else if (h.type == BOOT_MSG_BYE && h.len == 2 * sizeof(uint64_t) * (size_t)c->n) {
        const uint64_t *v = (const uint64_t *)p;
        root_bye(c, r, v, v + c->n);
    } else if (h.type == BOOT_MSG_PUT) {
        kv *e = kv_unpack(p, h.len);
        if (e) {
            e->readers = h.status;
            root_put(c, e);
        }
    } else if (h.type == BOOT_MSG_GET) {
        root_get(c, r, p, h.len);
    } else if (h.type == BOOT_MSG_POS && (h.len == 0 || h.len == sizeof(dt_pos))) {
        dt_board_set(&c->board, r, h.len ? (const dt_pos *)p : NULL);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(p);
}

/* --- other ranks ---------------------------------------------------------------------- */

static void peer_message(dt_boot_ctl *c) {
    boot_wire_hdr h;
    char *p;
    int k = boot_wire_read(c->socks[0], &h, &p, 0);
    pthread_mutex_lock(&c->mu);
    if (k != 0) {
        const char *msg = "the control connection to rank 0 closed: its process died (killed or "
                          "crashed) or the network failed";
        record_failure(c, 0, DT_ERR_ABORTED, msg);
        c->hooks.abort(c->hooks.arg, 0, DT_ERR_ABORTED, msg);
        c->done = 1;
    } else if (h.type == BOOT_MSG_ABORT) {
        record_failure(c, h.rank, (dt_status)h.status, p);
        c->hooks.abort(c->hooks.arg, h.rank, (dt_status)h.status, p);
    } else if (h.type == BOOT_MSG_EXITED && h.len == 2 * sizeof(uint64_t)) {
        const uint64_t *v = (const uint64_t *)p;
        c->hooks.exited(c->hooks.arg, h.rank, v[0], v[1]);
    } else if (h.type == BOOT_MSG_DONE) {
        c->fail_rank = -1;
        if (h.rank >= 0) record_failure(c, h.rank, (dt_status)h.status, p);
        c->done = 1;
    } else if (h.type == BOOT_MSG_VALUE) {
        kv *e = kv_unpack(p, h.len);
        if (e) {
            e->next = c->inbox;
            c->inbox = e;
        }
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(p);
}

static void *ctl_main(void *arg) {
    dt_boot_ctl *c = arg;
    int root = c->rank == 0;
    struct pollfd *fds = malloc(sizeof *fds * (size_t)(c->n + 1));
    int *who = malloc(sizeof *who * (size_t)(c->n + 1));
    if (!fds || !who) { /* cannot watch: treat as losing the control plane */
        pthread_mutex_lock(&c->mu);
        record_failure(c, c->rank, DT_ERR_NOMEM, "control thread: out of memory");
        c->hooks.abort(c->hooks.arg, c->rank, DT_ERR_NOMEM, "control thread: out of memory");
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
        int judging = root && c->board.count > 0;
        pthread_mutex_unlock(&c->mu);
        if (done && !root) break; /* nothing more comes from rank 0 */
        int k = poll(fds, (nfds_t)nf, judging ? JUDGE_MS : -1);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 || fds[0].revents) break;
        if (root) {
            pthread_mutex_lock(&c->mu);
            root_judge(c);
            pthread_mutex_unlock(&c->mu);
        }
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

dt_status dt_boot_ctl_start(int rank, int size, int *socks, const dt_boot_hooks *hooks,
                            dt_boot_ctl **ctl_out) {
    dt_boot_ctl *c = calloc(1, sizeof *c);
    unsigned char *fin = calloc((size_t)size, 1);
    if (!c || !fin || pipe(c->wake) != 0) {
        free(c);
        free(fin);
        for (int r = 0; r < size; r++)
            if (socks[r] >= 0) close(socks[r]);
        free(socks);
        return dt_error(DT_ERR_SYSTEM, "control plane: cannot set up (%s)", strerror(errno));
    }
    c->hooks = *hooks;
    c->rank = rank;
    c->n = size;
    c->socks = socks;
    c->finished = fin;
    c->left = size;
    c->fail_rank = -1;
    if (rank == 0) (void)dt_board_init(&c->board, size); /* out of memory: no board, no check */
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->thread, NULL, ctl_main, c) != 0) {
        dt_boot_ctl_stop(c);
        return dt_error(DT_ERR_SYSTEM, "control plane: pthread_create failed");
    }
    c->started = 1;
    *ctl_out = c;
    return DT_OK;
}

void dt_boot_ctl_fail(dt_boot_ctl *c, dt_status st, const char *msg) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    if (!c->reported) {
        c->reported = 1;
        if (c->rank == 0)
            root_fail(c, 0, st, msg);
        else
            send_to(c, 0, BOOT_MSG_FAIL, c->rank, st, msg, strlen(msg) + 1);
    }
    pthread_mutex_unlock(&c->mu);
}

void dt_boot_ctl_finish(dt_boot_ctl *c, const uint64_t *counts, int *rank_out, dt_status *st_out,
                        char *msg, size_t cap) {
    int n = c->n;
    *rank_out = -1;
    *st_out = DT_OK;
    pthread_mutex_lock(&c->mu);
    if (!counts) {
        /* Without counts the others cannot tell what is still coming: fail instead, and count
         * as finished (rank 0) or let the closed socket say so (others). */
        const char *m = "out of memory at exit";
        if (c->rank == 0) {
            root_fail(c, 0, DT_ERR_NOMEM, m);
            c->finished[0] = 1;
            c->left--;
            root_check_done(c);
        } else {
            send_to(c, 0, BOOT_MSG_FAIL, c->rank, DT_ERR_NOMEM, m, strlen(m) + 1);
            record_failure(c, c->rank, DT_ERR_NOMEM, m);
            c->done = 1;
        }
    } else if (c->rank == 0) {
        root_bye(c, 0, counts, counts + n);
    } else {
        send_to(c, 0, BOOT_MSG_BYE, c->rank, 0, counts, sizeof *counts * 2 * (size_t)n);
    }
    /* A healthy world waits for its slowest rank (deaths are reported by the sockets). A
     * failed one waits only briefly: a rank may hang in its own code, never to return. */
    int64_t until = 0;
    while (!c->done) {
        if (!world_failed(c)) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        int64_t now = dt_boot_now_ns();
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
        int rank;
        dt_status st;
        char m[512];
        if (c->hooks.failed(c->hooks.arg, &rank, &st, m, sizeof m)) record_failure(c, rank, st, m);
    }
    *rank_out = c->fail_rank;
    *st_out = c->fail_rank >= 0 ? c->fail_status : DT_OK;
    if (c->fail_rank >= 0) snprintf(msg, cap, "%s", c->fail_msg);
    pthread_mutex_unlock(&c->mu);
}

void dt_boot_ctl_stop(dt_boot_ctl *c) {
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
    kv_free_list(c->store);
    kv_free_list(c->waiting);
    kv_free_list(c->inbox);
    free(c->socks);
    free(c->finished);
    dt_board_fini(&c->board);
    free(c);
}

void dt_boot_ctl_post(dt_boot_ctl *c, const dt_pos *pos) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    if (c->rank == 0)
        dt_board_set(&c->board, 0, pos);
    else
        send_to(c, 0, BOOT_MSG_POS, c->rank, 0, pos, pos ? sizeof *pos : 0);
    pthread_mutex_unlock(&c->mu);
    /* Rank 0's control thread may sleep in poll with nothing on the board: it judges once a
     * peer's message or its next round arrives; a board holding only rank 0 waits for one. */
}

/* --- the store --------------------------------------------------------------------------- */

dt_status dt_boot_ctl_put(dt_boot_ctl *c, const void *key, size_t klen, const void *val,
                          size_t vlen, int readers) {
    DT_ARG(klen <= DT_BOOT_KV_MAX && vlen <= DT_BOOT_KV_MAX,
           "control plane: a key of %zu and a value of %zu bytes exceed %d", klen, vlen,
           DT_BOOT_KV_MAX);
    if (readers <= 0) return DT_OK;
    dt_status st = DT_OK;
    pthread_mutex_lock(&c->mu);
    if (c->rank == 0) {
        kv *e = kv_new(key, klen, val, vlen);
        if (e) {
            e->readers = readers;
            root_put(c, e);
        } else {
            st = dt_error(DT_ERR_NOMEM, "control plane: out of memory for a stored value");
        }
    } else {
        size_t len;
        char *p = kv_pack(key, klen, val, vlen, &len);
        if (!p)
            st = dt_error(DT_ERR_NOMEM, "control plane: out of memory for a stored value");
        else if (c->socks[0] < 0 ||
                 boot_wire_write(c->socks[0], BOOT_MSG_PUT, c->rank, readers, p, len) != 0)
            st = dt_error(DT_ERR_COMM, "control plane: cannot reach rank 0 to store a value");
        free(p);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

dt_status dt_boot_ctl_get(dt_boot_ctl *c, const void *key, size_t klen, void *val, size_t cap,
                          size_t *len_out, int64_t deadline_ns) {
    DT_ARG(klen <= DT_BOOT_KV_MAX, "control plane: a key of %zu bytes exceeds %d", klen,
           DT_BOOT_KV_MAX);
    dt_status st = DT_OK;
    pthread_mutex_lock(&c->mu);
    if (c->rank == 0)
        root_get(c, 0, key, klen);
    else if (c->socks[0] < 0 ||
             boot_wire_write(c->socks[0], BOOT_MSG_GET, c->rank, 0, key, klen) != 0)
        st = dt_error(DT_ERR_COMM, "control plane: cannot reach rank 0 to look up a value");
    kv *e = NULL;
    while (st == DT_OK && !(e = kv_take(&c->inbox, key, klen, -1))) {
        int frank;
        dt_status fst;
        char fmsg[512];
        if (c->hooks.failed(c->hooks.arg, &frank, &fst, fmsg, sizeof fmsg)) {
            st = dt_error(DT_ERR_ABORTED, "rank %d failed (%s): %s", frank, dt_status_str(fst),
                          fmsg);
            break;
        }
        if (c->done && c->rank != 0) {
            st = dt_error(DT_ERR_COMM, "control plane: rank 0 is gone");
            break;
        }
        int64_t now = dt_boot_now_ns();
        if (deadline_ns && now >= deadline_ns) {
            st = dt_error(DT_ERR_COMM, "control plane: no rank published the awaited value in "
                                       "time (the ranks that should have did not get there)");
            break;
        }
        int64_t step = GET_POLL_NS;
        if (deadline_ns && deadline_ns - now < step) step = deadline_ns - now;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)step;
        while (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    if (st != DT_OK && c->rank == 0) kv_free(kv_take(&c->waiting, key, klen, 0));
    pthread_mutex_unlock(&c->mu);
    if (st != DT_OK) return st;
    if (e->vlen > cap) {
        size_t have = e->vlen;
        kv_free(e);
        return dt_error(DT_ERR_SIZE,
                        "control plane: a stored value of %zu bytes exceeds the %zu "
                        "expected",
                        have, cap);
    }
    if (e->vlen) memcpy(val, e->val, e->vlen);
    *len_out = e->vlen;
    kv_free(e);
    return DT_OK;
}
