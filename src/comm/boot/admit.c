/* Rank 0's door: every connection is served at once, with its own deadline and a size limit,
 * and only a HELLO carrying the job's token gets in. The token is read and compared before
 * rank 0 allocates anything for the connection or sends anything back, so a stranger (a port
 * scanner, a rank of another job, a forged HELLO) costs one slot for a few seconds and a line
 * on stderr: it can neither stall the rendezvous, nor join the world, nor fail it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm/boot/meet.h"
#include "comm/boot/wire.h"
#include "core/check.h"

/* A rank sends its HELLO right after connecting; anything slower is dropped. */
#define HELLO_NS    5000000000LL
#define MAX_PENDING 128 /* connections being read at once; the oldest gives way */
#define LOGGED      8   /* dropped connections named on stderr; the rest are counted */

typedef struct pending {
    int fd;
    int64_t deadline;
    size_t have; /* bytes of the HELLO received */
    boot_wire_hello h;
    char *blob; /* allocated once the token matched */
    size_t blob_have;
    char peer[INET6_ADDRSTRLEN + 8];
} pending;

typedef struct door_state {
    boot_door *d;
    boot_table *t;
    pending *p;
    int n;       /* pending connections */
    int dropped; /* strangers so far */
} door_state;

static void peer_name(int fd, char *out, size_t cap) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0) {
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
            port = ntohs(a->sin_port);
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
            port = ntohs(a->sin6_port);
        }
    }
    snprintf(out, cap, "%s:%d", host, port);
}

/* Forgets pending connection i (the last one takes its slot). */
static void forget(door_state *s, int i) {
    free(s->p[i].blob);
    s->p[i] = s->p[--s->n];
}

static void drop(door_state *s, int i, const char *why) {
    s->dropped++;
    if (s->dropped <= LOGGED)
        fprintf(stderr, "dtensor: rendezvous at %s: dropped a connection from %s: %s\n",
                s->d->where, s->p[i].peer, why);
    else if (s->dropped == LOGGED + 1)
        fprintf(stderr, "dtensor: rendezvous at %s: more connections dropped (not logged)\n",
                s->d->where);
    close(s->p[i].fd);
    forget(s, i);
}

/* Sends msg as an ERR to every connected rank, so they fail with rank 0's reason. */
static void broadcast_err(boot_table *t, const char *msg) {
    for (int r = 1; r < t->size; r++)
        if (t->socks[r] >= 0)
            boot_wire_write(t->socks[r], BOOT_MSG_ERR, 0, 0, msg, strlen(msg) + 1);
}

static dt_status missing_error(door_state *s, int got) {
    boot_table *t = s->t;
    char list[256] = "", strangers[200] = "";
    size_t off = 0;
    int shown = 0;
    for (int r = 1; r < t->size && off < sizeof list - 16; r++) {
        if (t->socks[r] >= 0) continue;
        if (shown++ == 16) {
            off += (size_t)snprintf(list + off, sizeof list - off, ", ...");
            break;
        }
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%d", shown > 1 ? ", " : "", r);
    }
    if (s->dropped)
        snprintf(strangers, sizeof strangers,
                 "; %d connection(s) were dropped as not ranks of this job (logged above; "
                 "a rank with another DT_JOB_TOKEN is dropped too)",
                 s->dropped);
    dt_status st = dt_error(DT_ERR_COMM,
                            "rendezvous at %s timed out after %.0f s: %d of %d ranks arrived; "
                            "missing: %s (DT_STARTUP_TIMEOUT_S)%s",
                            s->d->where, s->d->secs, got, t->size, list, strangers);
    broadcast_err(t, dt_last_error());
    return st;
}

/* A rank of this job (it has the token) that disagrees on the world: fatal, as it would be
 * for the ranks themselves. */
static dt_status conflict(door_state *s, int i) {
    const boot_wire_hdr *h = &s->p[i].h.hdr;
    dt_status st;
    if (h->status != s->t->size)
        st = dt_error(DT_ERR_COMM,
                      "rendezvous: rank %d says the world has %d ranks, rank 0 says "
                      "%d (WORLD_SIZE differs between processes)",
                      h->rank, h->status, s->t->size);
    else
        st = dt_error(DT_ERR_COMM,
                      "rendezvous at %s: two processes claim rank %d (RANK must "
                      "differ between processes)",
                      s->d->where, h->rank);
    boot_wire_write(s->p[i].fd, BOOT_MSG_ERR, 0, 0, dt_last_error(), strlen(dt_last_error()) + 1);
    broadcast_err(s->t, dt_last_error());
    close(s->p[i].fd);
    forget(s, i);
    return st;
}

/* Reads what connection i has sent. Returns 1 when its HELLO is complete, 0 when more is to
 * come; *why is set when it must be dropped (reason: room for a message), *fatal when the
 * world cannot form. */
static int advance(door_state *s, int i, const char **why, char reason[160], dt_status *fatal) {
    pending *p = &s->p[i];
    for (;;) {
        int head = p->have < sizeof p->h;
        char *dst = head ? (char *)&p->h + p->have : p->blob + p->blob_have;
        size_t want = head ? sizeof p->h - p->have : p->h.hdr.len - p->blob_have;
        if (want == 0) return 1;
        ssize_t k = recv(p->fd, dst, want, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) {
            *why = k == 0 ? "closed before sending a whole HELLO" : strerror(errno);
            return 0;
        }
        if (!head) {
            p->blob_have += (size_t)k;
            continue;
        }
        p->have += (size_t)k;
        if (p->have < sizeof p->h) continue;
        /* The fixed part is in: everything is checked before a byte is allocated. */
        const boot_wire_hdr *h = &p->h.hdr;
        if ((h->magic & 0xffff0000u) == (BOOT_WIRE_MAGIC & 0xffff0000u) &&
            h->magic != BOOT_WIRE_MAGIC) {
            *why = "a dtensor rank of another protocol version (mixed dtensor builds?)";
            return 0;
        }
        if (h->magic != BOOT_WIRE_MAGIC || h->type != BOOT_MSG_HELLO) {
            *why = "not a dtensor rendezvous HELLO";
            return 0;
        }
        if (!dt_boot_token_equal(p->h.token, s->d->token)) {
            *why = "wrong DT_JOB_TOKEN (not a rank of this job)";
            return 0;
        }
        if (h->len > BOOT_WIRE_MAX_BLOB) {
            snprintf(reason, 160, "its HELLO announces %llu bytes, over the limit of %u",
                     (unsigned long long)h->len, BOOT_WIRE_MAX_BLOB);
            *why = reason;
            return 0;
        }
        if (h->status != s->t->size || h->rank <= 0 || h->rank >= s->t->size ||
            s->t->socks[h->rank] >= 0) {
            *fatal = conflict(s, i);
            return 0;
        }
        if (!(p->blob = malloc(h->len ? h->len : 1))) {
            *fatal =
                dt_error(DT_ERR_NOMEM, "rendezvous: out of memory for rank %d's address", h->rank);
            return 0;
        }
    }
}

/* Rank i's HELLO is complete: its socket and blob join the table. */
static void admit_rank(door_state *s, int i) {
    pending *p = &s->p[i];
    int r = p->h.hdr.rank, one = 1;
    fcntl(p->fd, F_SETFL, fcntl(p->fd, F_GETFL) & ~O_NONBLOCK); /* the control plane blocks */
    setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    s->t->socks[r] = p->fd;
    s->t->addrs[r] = p->blob;
    s->t->lens[r] = p->h.hdr.len;
    p->blob = NULL;
    forget(s, i);
}

static int oldest(door_state *s) {
    int o = 0;
    for (int i = 1; i < s->n; i++)
        if (s->p[i].deadline < s->p[o].deadline) o = i;
    return o;
}

/* Takes every connection waiting on the listening socket. */
static void accept_all(door_state *s) {
    for (int tries = 0; tries < 4 * MAX_PENDING; tries++) {
        int fd = accept4(s->d->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) {
                if (s->n > 0) {
                    drop(s, oldest(s), "out of file descriptors: the oldest connection gives way");
                    continue;
                }
                struct timespec ts = {0, 10000000}; /* nothing to free: do not spin */
                nanosleep(&ts, NULL);
            }
            return; /* EAGAIN: none left */
        }
        if (s->n == MAX_PENDING)
            drop(s, oldest(s), "too many connections at once: the oldest gives way");
        pending *p = &s->p[s->n++];
        *p = (pending){.fd = fd, .deadline = dt_boot_now_ns() + HELLO_NS};
        peer_name(fd, p->peer, sizeof p->peer);
    }
}

dt_status boot_admit(boot_door *d, boot_table *t) {
    door_state s = {.d = d, .t = t, .p = calloc(MAX_PENDING, sizeof(pending))};
    struct pollfd *fds = calloc(MAX_PENDING + 1, sizeof *fds);
    dt_status st = DT_OK;
    if (!s.p || !fds) st = dt_error(DT_ERR_NOMEM, "rendezvous: out of memory");
    fcntl(d->lfd, F_SETFL, fcntl(d->lfd, F_GETFL) | O_NONBLOCK);
    int got = 1;
    while (st == DT_OK && got < t->size) {
        int64_t now = dt_boot_now_ns();
        if (now >= d->deadline) {
            st = missing_error(&s, got);
            break;
        }
        for (int i = s.n - 1; i >= 0; i--)
            if (s.p[i].deadline <= now) drop(&s, i, "no whole HELLO within 5 s");
        int64_t wake = d->deadline;
        fds[0] = (struct pollfd){.fd = d->lfd, .events = POLLIN};
        for (int i = 0; i < s.n; i++) {
            fds[1 + i] = (struct pollfd){.fd = s.p[i].fd, .events = POLLIN};
            if (s.p[i].deadline < wake) wake = s.p[i].deadline;
        }
        int64_t ms = (wake - now) / 1000000 + 1;
        int k = poll(fds, (nfds_t)(1 + s.n), ms < 1000 ? (int)ms : 1000);
        if (k < 0 && errno != EINTR) {
            st = dt_error(DT_ERR_COMM, "rendezvous at %s: poll failed: %s", d->where,
                          strerror(errno));
            break;
        }
        /* From the last: forget() moves the last pending connection into the freed slot. */
        for (int i = s.n - 1; k > 0 && i >= 0 && st == DT_OK; i--) {
            if (!fds[1 + i].revents) continue;
            const char *why = NULL;
            char reason[160];
            if (advance(&s, i, &why, reason, &st)) {
                admit_rank(&s, i);
                got++;
            } else if (why) {
                drop(&s, i, why);
            }
        }
        if (st == DT_OK && k > 0 && (fds[0].revents & POLLIN)) accept_all(&s);
    }
    while (s.n > 0) { /* strangers still connected when the world is complete (or failed) */
        close(s.p[s.n - 1].fd);
        forget(&s, s.n - 1);
    }
    close(d->lfd);
    d->lfd = -1;
    free(s.p);
    free(fds);
    return st;
}
