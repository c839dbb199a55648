/* Rendezvous over plain TCP: rank 0 listens on MASTER_ADDR:MASTER_PORT (that address only),
 * every other rank connects (retrying until the startup deadline), sends its blob (a UCX
 * worker address, an NCCL unique id: whatever the runtime needs everyone to know) and receives
 * everyone's. The sockets stay open as the control plane (control.c).
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

#include "comm/boot/boot.h"
#include "comm/boot/wire.h"
#include "core/check.h"

#define RETRY_NS 100000000LL

typedef struct table {
    int size;
    void **addrs;
    size_t *lens;
    int *socks;
} table;

static void table_free(table *t) {
    for (int r = 0; t->addrs && r < t->size; r++)
        free(t->addrs[r]);
    for (int r = 0; t->socks && r < t->size; r++)
        if (t->socks[r] >= 0) close(t->socks[r]);
    free(t->addrs);
    free(t->lens);
    free(t->socks);
}

static dt_status table_init(table *t, int size) {
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

static dt_status resolve(const dt_boot_env *env, struct addrinfo **out) {
    char port[16];
    snprintf(port, sizeof port, "%d", env->master_port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    int e = getaddrinfo(env->master_addr, port, &hints, out);
    if (e)
        return dt_error(DT_ERR_COMM, "rendezvous: cannot resolve MASTER_ADDR=%s: %s",
                        env->master_addr, gai_strerror(e));
    return DT_OK;
}

static dt_status listen_on(const dt_boot_env *env, int *fd_out) {
    struct addrinfo *ai;
    DT_CHECK(resolve(env, &ai));
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
            freeaddrinfo(ai);
            *fd_out = fd;
            return DT_OK;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    return dt_error(DT_ERR_COMM,
                    "rendezvous: rank 0 cannot listen on MASTER_ADDR:MASTER_PORT = "
                    "%s:%d: %s%s",
                    env->master_addr, env->master_port, strerror(err),
                    err == EADDRNOTAVAIL ? " (rank 0 must run on the host MASTER_ADDR names)"
                    : err == EADDRINUSE  ? " (another program, or an earlier run, holds the port)"
                                         : "");
}

/* Sends msg as an ERR to every connected rank, so they fail with rank 0's reason. */
static void broadcast_err(table *t, const char *msg) {
    for (int r = 1; r < t->size; r++)
        if (t->socks[r] >= 0)
            boot_wire_write(t->socks[r], BOOT_MSG_ERR, 0, 0, msg, strlen(msg) + 1);
}

static dt_status missing_error(const dt_boot_env *env, table *t, int got, double secs) {
    char list[256] = "";
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
    dt_status st = dt_error(DT_ERR_COMM,
                            "rendezvous at %s:%d timed out after %.0f s: %d of %d "
                            "ranks arrived; missing: %s (DT_STARTUP_TIMEOUT_S)",
                            env->master_addr, env->master_port, secs, got, t->size, list);
    broadcast_err(t, dt_last_error());
    return st;
}

/* A HELLO from a newly accepted connection: a rank arrives (*got grows), a stranger or a dead
 * connection is dropped (DT_OK), a conflicting world is fatal (sent to every connected rank). */
static dt_status take_hello(const dt_boot_env *env, table *t, int fd, int64_t deadline, int *got) {
    boot_wire_hdr h;
    char *p;
    int r = boot_wire_read(fd, &h, &p, deadline);
    if (r || h.type != BOOT_MSG_HELLO) { /* a stranger, or a rank that died: not fatal */
        free(p);
        close(fd);
        return DT_OK;
    }
    dt_status st = DT_OK;
    if (h.status != t->size)
        st = dt_error(DT_ERR_COMM,
                      "rendezvous: rank %d says the world has %d ranks, rank 0 says "
                      "%d (WORLD_SIZE differs between processes)",
                      h.rank, h.status, t->size);
    else if (h.rank <= 0 || h.rank >= t->size || t->socks[h.rank] >= 0)
        st = dt_error(DT_ERR_COMM,
                      "rendezvous at %s:%d: two processes claim rank %d (RANK must "
                      "differ between processes)",
                      env->master_addr, env->master_port, h.rank);
    if (st != DT_OK) {
        boot_wire_write(fd, BOOT_MSG_ERR, 0, 0, dt_last_error(), strlen(dt_last_error()) + 1);
        broadcast_err(t, dt_last_error());
        free(p);
        close(fd);
        return st;
    }
    t->socks[h.rank] = fd;
    t->addrs[h.rank] = p;
    t->lens[h.rank] = h.len;
    (*got)++;
    return DT_OK;
}

static dt_status send_table(table *t) {
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

static dt_status root_meet(const dt_boot_env *env, int64_t deadline, double secs, table *t) {
    int lfd = -1;
    DT_CHECK(listen_on(env, &lfd));
    int got = 1;
    dt_status st = DT_OK;
    while (got < t->size && st == DT_OK) {
        int64_t left = deadline - dt_boot_now_ns();
        if (left <= 0) {
            st = missing_error(env, t, got, secs);
            break;
        }
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)(left / 1000000 + 1));
        if (r <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        tune(fd);
        /* A rank sends its HELLO right after connecting; a silent stranger gets 2 s. */
        int64_t hello_by = dt_boot_now_ns() + 2000000000LL;
        st = take_hello(env, t, fd, hello_by < deadline ? hello_by : deadline, &got);
    }
    close(lfd);
    if (st == DT_OK) st = send_table(t);
    return st;
}

/* Connects to rank 0, retrying while it is not listening yet. */
static dt_status connect_root(const dt_boot_env *env, int64_t deadline, double secs, int *fd_out) {
    int err = 0;
    for (;;) {
        struct addrinfo *ai;
        DT_CHECK(resolve(env, &ai));
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
                return DT_OK;
            }
            close(fd);
        }
        freeaddrinfo(ai);
        if (dt_boot_now_ns() + RETRY_NS > deadline) break;
        struct timespec ts = {0, RETRY_NS};
        nanosleep(&ts, NULL);
    }
    return dt_error(DT_ERR_COMM,
                    "rendezvous: rank %d could not reach rank 0 at MASTER_ADDR:"
                    "MASTER_PORT = %s:%d within %.0f s (last error: %s); is rank 0 "
                    "running, and do MASTER_ADDR/MASTER_PORT name its host and port?",
                    env->rank, env->master_addr, env->master_port, secs, strerror(err));
}

static dt_status parse_table(table *t, const char *p, size_t len) {
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

static dt_status peer_meet(const dt_boot_env *env, int64_t deadline, double secs, const void *addr,
                           size_t len, table *t) {
    int fd = -1;
    DT_CHECK(connect_root(env, deadline, secs, &fd));
    t->socks[0] = fd;
    if (boot_wire_write(fd, BOOT_MSG_HELLO, env->rank, env->size, addr, len) != 0)
        return dt_error(DT_ERR_COMM, "rendezvous: rank 0 at %s:%d closed the connection: %s",
                        env->master_addr, env->master_port, strerror(errno));
    boot_wire_hdr h;
    char *p;
    int r = boot_wire_read(fd, &h, &p, deadline);
    dt_status st = DT_OK;
    if (r == -2)
        st = dt_error(DT_ERR_COMM,
                      "rendezvous: rank %d reached rank 0 at %s:%d, but the world "
                      "did not assemble within %.0f s (rank 0 waits for ranks that "
                      "have not arrived; DT_STARTUP_TIMEOUT_S)",
                      env->rank, env->master_addr, env->master_port, secs);
    else if (r != 0)
        st = dt_error(DT_ERR_COMM,
                      "rendezvous: rank 0 at %s:%d closed the connection before "
                      "sending the address table (it failed or was killed)",
                      env->master_addr, env->master_port);
    else if (h.type == BOOT_MSG_ERR)
        st = dt_error(DT_ERR_COMM, "rendezvous failed at rank 0: %s", p);
    else if (h.type != BOOT_MSG_TABLE)
        st = dt_error(DT_ERR_COMM, "rendezvous: unexpected message %u from rank 0", h.type);
    else
        st = parse_table(t, p, h.len);
    free(p);
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
    table t;
    DT_CHECK(table_init(&t, env->size));
    int64_t deadline = dt_boot_now_ns() + timeout_ns;
    double secs = (double)timeout_ns / 1e9;
    dt_status st;
    if (env->rank == 0) {
        st = (t.addrs[0] = malloc(len ? len : 1))
                 ? DT_OK
                 : dt_error(DT_ERR_NOMEM, "rendezvous: out of memory");
        if (st == DT_OK) {
            if (len) memcpy(t.addrs[0], addr, len);
            t.lens[0] = len;
            st = root_meet(env, deadline, secs, &t);
        }
    } else {
        st = peer_meet(env, deadline, secs, addr, len, &t);
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
