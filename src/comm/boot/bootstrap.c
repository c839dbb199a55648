/* Rendezvous over plain TCP: rank 0 listens on MASTER_ADDR:MASTER_PORT (that address only),
 * every other rank connects (retrying until the startup deadline), sends its blob (a UCX
 * worker address, an NCCL unique id: whatever the runtime needs everyone to know) with the
 * job's token and receives everyone's. Rank 0 lets in only ranks with the token (admit.c).
 * Under torchrun, whose store holds MASTER_PORT, rank 0 listens on a free port instead and
 * the others learn it from that store (torchstore.c). The sockets stay open as the control
 * plane (control.c).
 *
 * Why not a transport's own listener (ucp_listener, NCCL's bootstrap): UCX's needs a
 * sockaddr-capable transport, which UCX_TLS=sm does not have, and NCCL's needs the id first;
 * a plain socket works whatever the transport, can name exactly which ranks are missing, and
 * leaves a connection whose loss the kernel reports the moment a process dies, which is how
 * failures are detected without transport keepalives. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
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

#define RETRY_NS 100000000LL

static void table_free(boot_table *t) {
    for (int r = 0; t->addrs && r < t->size; r++)
        free(t->addrs[r]);
    for (int r = 0; t->socks && r < t->size; r++)
        if (t->socks[r] >= 0) close(t->socks[r]);
    free(t->addrs);
    free(t->lens);
    free(t->socks);
}

static dt_status table_init(boot_table *t, int size) {
    t->size = size;
    t->addrs = calloc((size_t)size, sizeof *t->addrs);
    t->lens = calloc((size_t)size, sizeof *t->lens);
    t->socks = malloc(sizeof *t->socks * (size_t)size);
    if (!t->addrs || !t->lens || !t->socks) {
        table_free(t);
        return dt_error(DT_ERR_NOMEM, "rendezvous: out of memory for %d ranks", size);
    }
    for (int r = 0; r < size; r++)
        t->socks[r] = -1;
    return DT_OK;
}

static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static int resolve(const char *host, int port, struct addrinfo **out) {
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    return getaddrinfo(host, p, &hints, out);
}

static dt_status resolve_master(const dt_boot_env *env, struct addrinfo **out) {
    int e = resolve(env->master_addr, env->master_port, out);
    if (e)
        return dt_error(DT_ERR_COMM, "rendezvous: cannot resolve MASTER_ADDR=%s: %s",
                        env->master_addr, gai_strerror(e));
    return DT_OK;
}

/* Listens on host:port (port 0: any free one; *port_out says which). */
static dt_status listen_on(const char *host, int port, const char *named, int *fd_out,
                           int *port_out) {
    struct addrinfo *ai;
    int e = resolve(host, port, &ai);
    if (e) return dt_error(DT_ERR_COMM, "rendezvous: cannot resolve %s: %s", host, gai_strerror(e));
    int err = 0;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
            struct sockaddr_storage sa;
            socklen_t len = sizeof sa;
            getsockname(fd, (struct sockaddr *)&sa, &len);
            *port_out = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                       : ((struct sockaddr_in *)&sa)->sin_port);
            freeaddrinfo(ai);
            *fd_out = fd;
            return DT_OK;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    return dt_error(DT_ERR_COMM, "rendezvous: rank 0 cannot listen on %s = %s:%d: %s%s", named,
                    host, port, strerror(err),
                    err == EADDRNOTAVAIL ? " (rank 0 must run on the host MASTER_ADDR names)"
                    : err == EADDRINUSE  ? " (another program, or an earlier run, holds the port)"
                                         : "");
}

/* Every rank's blob, sent to every other rank. */
static dt_status send_table(boot_table *t) {
    size_t total = 0;
    for (int r = 0; r < t->size; r++)
        total += sizeof(uint64_t) + t->lens[r];
    char *buf = malloc(total), *q = buf;
    if (!buf) return dt_error(DT_ERR_NOMEM, "rendezvous: out of memory for the address table");
    for (int r = 0; r < t->size; r++) {
        uint64_t len = t->lens[r];
        memcpy(q, &len, sizeof len);
        memcpy(q + sizeof len, t->addrs[r], t->lens[r]);
        q += sizeof len + t->lens[r];
    }
    dt_status st = DT_OK;
    for (int r = 1; r < t->size && st == DT_OK; r++)
        if (boot_wire_write(t->socks[r], BOOT_MSG_TABLE, 0, 0, buf, total) != 0)
            st = dt_error(DT_ERR_COMM, "rendezvous: rank %d closed its connection: %s", r,
                          strerror(errno));
    free(buf);
    return st;
}

int boot_connect(const char *host, int port, int64_t deadline, int *fd_out, int *err_out) {
    int err = 0;
    for (;;) {
        struct addrinfo *ai;
        int e = resolve(host, port, &ai);
        if (e) {
            *err_out = EHOSTUNREACH;
            return -1;
        }
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            int fd =
                socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
            if (fd < 0) {
                err = errno;
                continue;
            }
            int r = connect(fd, a->ai_addr, a->ai_addrlen);
            if (r != 0 && errno == EINPROGRESS) {
                int64_t left = deadline - dt_boot_now_ns();
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                int ms = left > 0 ? (int)(left / 1000000 + 1) : 0;
                if (poll(&pfd, 1, ms > 1000 ? 1000 : ms) == 1) {
                    socklen_t len = sizeof err;
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                    r = err ? -1 : 0;
                } else {
                    err = ETIMEDOUT;
                }
            } else if (r != 0) {
                err = errno;
            }
            if (r == 0) {
                freeaddrinfo(ai);
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
                tune(fd);
                *fd_out = fd;
                return 0;
            }
            close(fd);
        }
        freeaddrinfo(ai);
        if (dt_boot_now_ns() + RETRY_NS > deadline) break;
        struct timespec ts = {0, RETRY_NS};
        nanosleep(&ts, NULL);
    }
    *err_out = err;
    return -1;
}

static dt_status parse_table(boot_table *t, const char *p, size_t len) {
    size_t off = 0;
    for (int r = 0; r < t->size; r++) {
        uint64_t n;
        if (off + sizeof n > len) goto bad;
        memcpy(&n, p + off, sizeof n);
        off += sizeof n;
        if (n > len - off) goto bad;
        if (!(t->addrs[r] = malloc(n ? n : 1)))
            return dt_error(DT_ERR_NOMEM, "rendezvous: out of memory for addresses");
        memcpy(t->addrs[r], p + off, n);
        t->lens[r] = n;
        off += n;
    }
    return DT_OK;
bad:
    return dt_error(DT_ERR_COMM, "rendezvous: malformed address table from rank 0");
}

/* Where rank 0 is to be found, and the token to show it. */
typedef struct meeting {
    char host[256];
    int port;
    const char *named; /* "MASTER_ADDR:MASTER_PORT", or how else the address came */
    uint8_t token[DT_BOOT_TOKEN_BYTES];
    int64_t deadline;
    double secs;
} meeting;

static dt_status peer_meet(const dt_boot_env *env, const meeting *m, const void *addr, size_t len,
                           boot_table *t) {
    int fd = -1, err = 0;
    if (boot_connect(m->host, m->port, m->deadline, &fd, &err) != 0)
        return dt_error(DT_ERR_COMM,
                        "rendezvous: rank %d could not reach rank 0 at %s = %s:%d within %.0f s "
                        "(last error: %s); is rank 0 running, and do MASTER_ADDR/MASTER_PORT name "
                        "its host and port?",
                        env->rank, m->named, m->host, m->port, m->secs, strerror(err));
    t->socks[0] = fd;
    if (boot_wire_write_hello(fd, env->rank, env->size, m->token, addr, len) != 0)
        return dt_error(DT_ERR_COMM, "rendezvous: rank 0 at %s:%d closed the connection: %s",
                        m->host, m->port, strerror(errno));
    boot_wire_hdr h;
    char *p;
    int r = boot_wire_read(fd, &h, &p, m->deadline);
    dt_status st = DT_OK;
    if (r == -2)
        st = dt_error(DT_ERR_COMM,
                      "rendezvous: rank %d reached rank 0 at %s:%d, but the world "
                      "did not assemble within %.0f s (rank 0 waits for ranks that "
                      "have not arrived; DT_STARTUP_TIMEOUT_S)",
                      env->rank, m->host, m->port, m->secs);
    else if (r != 0)
        st = dt_error(DT_ERR_COMM,
                      "rendezvous: rank 0 at %s:%d closed the connection before sending the "
                      "address table: it failed or was killed, or it is not of this job (rank 0 "
                      "drops ranks whose DT_JOB_TOKEN differs from its own)",
                      m->host, m->port);
    else if (h.type == BOOT_MSG_ERR)
        st = dt_error(DT_ERR_COMM, "rendezvous failed at rank 0: %s", p);
    else if (h.type != BOOT_MSG_TABLE)
        st = dt_error(DT_ERR_COMM, "rendezvous: unexpected message %u from rank 0", h.type);
    else
        st = parse_table(t, p, h.len);
    free(p);
    return st;
}

static dt_status root_meet(int lfd, const meeting *m, boot_table *t) {
    boot_door d = {.lfd = lfd, .named = m->named, .deadline = m->deadline, .secs = m->secs};
    snprintf(d.where, sizeof d.where, "%s:%d", m->host, m->port);
    memcpy(d.token, m->token, sizeof d.token);
    DT_CHECK(boot_admit(&d, t));
    return send_table(t);
}

static int is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) return 1;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return 0;
}

/* The meeting at MASTER_ADDR:MASTER_PORT: with the job's token, or on loopback without one
 * (only this host's processes reach it: dtrun sets a token anyway; by hand it may be unset). */
static dt_status plain_meeting(const dt_boot_env *env, meeting *m) {
    int have;
    DT_CHECK(dt_boot_token_read(m->token, &have));
    struct addrinfo *ai;
    DT_CHECK(resolve_master(env, &ai));
    int loopback = 1;
    for (struct addrinfo *a = ai; a; a = a->ai_next)
        loopback &= is_loopback(a->ai_addr);
    freeaddrinfo(ai);
    if (!have && !loopback)
        return dt_error(DT_ERR_ARG,
                        "rendezvous: DT_JOB_TOKEN is not set, and MASTER_ADDR=%s is not a "
                        "loopback address: rank 0 would let in anyone who reaches port %d. Set "
                        "DT_JOB_TOKEN to the same secret for every rank (e.g. export "
                        "DT_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n') "
                        "before launching)",
                        env->master_addr, env->master_port);
    snprintf(m->host, sizeof m->host, "%s", env->master_addr);
    m->port = env->master_port;
    m->named = "MASTER_ADDR:MASTER_PORT";
    return DT_OK;
}

/* Under torchrun: rank 0 listens on a free port of the address it reaches the store from and
 * publishes "port host token" (token "-" when DT_JOB_TOKEN is set, which is never published);
 * the others wait for that. *lfd_out: rank 0's listening socket. */
static dt_status store_meeting(const dt_boot_env *env, meeting *m, int *lfd_out) {
    int have, fd;
    char key[300], val[512], token[DT_BOOT_TOKEN_BYTES + 1] = "-";
    DT_CHECK(dt_boot_token_read(m->token, &have));
    struct addrinfo *ai;
    DT_CHECK(resolve_master(env, &ai)); /* a clear message for a name that does not resolve */
    freeaddrinfo(ai);
    boot_store_key(key, sizeof key);
    DT_CHECK(boot_store_open(env, m->deadline, &fd));
    dt_status st = DT_OK;
    m->named = "the address rank 0 published in torchrun's store";
    if (env->rank == 0) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
            getnameinfo((struct sockaddr *)&sa, len, m->host, sizeof m->host, NULL, 0,
                        NI_NUMERICHOST) != 0)
            st = dt_error(DT_ERR_COMM, "rendezvous: rank 0 cannot tell its own address");
        if (st == DT_OK && !have && (st = dt_boot_token_random(token)) == DT_OK)
            memcpy(m->token, token, strlen(token));
        if (st == DT_OK) st = listen_on(m->host, 0, "a free port", lfd_out, &m->port);
        if (st == DT_OK) {
            snprintf(val, sizeof val, "%d %s %s", m->port, m->host, token);
            st = boot_store_set(fd, key, val);
        }
    } else {
        st = boot_store_get(fd, key, m->deadline, m->secs, val, sizeof val);
        if (st == DT_OK && sscanf(val, "%d %255s %128s", &m->port, m->host, token) != 3)
            st = dt_error(DT_ERR_COMM,
                          "rendezvous: torchrun's store holds \"%s\" under %s, "
                          "not rank 0's address",
                          val, key);
        if (st == DT_OK && !have && strcmp(token, "-") != 0) memcpy(m->token, token, strlen(token));
    }
    close(fd);
    return st;
}

void dt_boot_blobs_free(void **blobs, size_t *lens, int n) {
    for (int r = 0; blobs && r < n; r++)
        free(blobs[r]);
    free(blobs);
    free(lens);
}

dt_status dt_boot_exchange(const dt_boot_env *env, int64_t timeout_ns, const void *addr, size_t len,
                           void ***addrs_out, size_t **lens_out, int **socks_out) {
    meeting m = {.deadline = dt_boot_now_ns() + timeout_ns, .secs = (double)timeout_ns / 1e9};
    int lfd = -1;
    if (boot_store_in_use())
        DT_CHECK(store_meeting(env, &m, &lfd));
    else
        DT_CHECK(plain_meeting(env, &m));
    if (env->rank == 0 && lfd < 0) {
        dt_status st = listen_on(m.host, m.port, m.named, &lfd, &m.port);
        if (st != DT_OK) return st;
    }
    boot_table t;
    dt_status st = table_init(&t, env->size);
    if (st != DT_OK) {
        if (lfd >= 0) close(lfd);
        return st;
    }
    if (env->rank == 0) {
        st = (t.addrs[0] = malloc(len ? len : 1))
                 ? DT_OK
                 : dt_error(DT_ERR_NOMEM, "rendezvous: out of memory");
        if (st == DT_OK) {
            if (len) memcpy(t.addrs[0], addr, len);
            t.lens[0] = len;
            st = root_meet(lfd, &m, &t);
        } else {
            close(lfd);
        }
    } else {
        st = peer_meet(env, &m, addr, len, &t);
    }
    if (st != DT_OK) {
        table_free(&t);
        return st;
    }
    *addrs_out = t.addrs;
    *lens_out = t.lens;
    *socks_out = t.socks;
    return DT_OK;
}
