/* A client of torchrun's key-value store, just enough for one rendezvous: rank 0 sets a key,
 * the others wait for it and get it. torchrun's agent keeps this store (PyTorch's TCPStore) on
 * MASTER_PORT and its own workers find each other through it, so a dtensor program under
 * torchrun cannot listen there; rank 0 listens on a port of its own and says which here.
 * The wire format is the store's: a one-byte query type, then integers in host byte order and
 * strings as a u64 length and the bytes. A connection first says VALIDATE with the store's
 * magic number; SET has no answer; WAIT answers one byte once every key it names exists;
 * GET answers the value as a string. Nothing of PyTorch is linked or needed. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/boot/meet.h"
#include "comm/boot/wire.h"
#include "core/check.h"

#define STORE_MAGIC        0x3C85F7CEu
#define STORE_VALIDATE     0
#define STORE_SET          1
#define STORE_GET          3
#define STORE_WAIT         6
#define STORE_STOP_WAITING 0

int boot_store_in_use(void) {
    const char *s = getenv("TORCHELASTIC_USE_AGENT_STORE");
    return s && (!strcasecmp(s, "true") || !strcmp(s, "1"));
}

void boot_store_key(char *out, size_t cap) {
    static atomic_int count;
    const char *run = getenv("TORCHELASTIC_RUN_ID"),
               *restart = getenv("TORCHELASTIC_RESTART_COUNT");
    snprintf(out, cap, "dtensor/%s/%s/%d", run ? run : "", restart ? restart : "0",
             atomic_fetch_add(&count, 1));
}

/* A query in one buffer: type, then pieces appended. */
typedef struct query {
    char buf[1024];
    size_t len;
} query;

static void put_bytes(query *q, const void *p, size_t n) {
    if (q->len + n > sizeof q->buf) { /* keys and values are short; never happens */
        q->len = sizeof q->buf + 1;
        return;
    }
    memcpy(q->buf + q->len, p, n);
    q->len += n;
}

static void put_string(query *q, const char *s) {
    uint64_t n = strlen(s);
    put_bytes(q, &n, sizeof n);
    put_bytes(q, s, n);
}

static dt_status send_query(int fd, const query *q, const char *what) {
    size_t off = 0;
    if (q->len > sizeof q->buf)
        return dt_error(DT_ERR_SIZE, "rendezvous: torchrun store %s: key or value too long", what);
    while (off < q->len) {
        ssize_t k = send(fd, q->buf + off, q->len - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return dt_error(DT_ERR_COMM,
                            "rendezvous: torchrun's store closed the connection "
                            "(%s): %s",
                            what, strerror(errno));
        off += (size_t)k;
    }
    return DT_OK;
}

static dt_status recv_exact(int fd, void *p, size_t n, int64_t deadline, double secs,
                            const char *key) {
    int r = boot_wire_read_full(fd, p, n, deadline);
    if (r == -2)
        return dt_error(DT_ERR_COMM,
                        "rendezvous: rank 0 did not publish its address in torchrun's store "
                        "(key %s) within %.0f s (DT_STARTUP_TIMEOUT_S): is rank 0 running?",
                        key, secs);
    if (r)
        return dt_error(DT_ERR_COMM,
                        "rendezvous: torchrun's store closed the connection while rank waited "
                        "for key %s (%s)",
                        key, errno ? strerror(errno) : "end of stream");
    return DT_OK;
}

dt_status boot_store_open(const dt_boot_env *env, int64_t deadline, int *fd_out) {
    int fd, err = 0;
    if (boot_connect(env->master_addr, env->master_port, deadline, &fd, &err) != 0)
        return dt_error(DT_ERR_COMM,
                        "rendezvous: rank %d cannot reach torchrun's store at MASTER_ADDR:"
                        "MASTER_PORT = %s:%d: %s",
                        env->rank, env->master_addr, env->master_port, strerror(err));
    query q = {.len = 0};
    uint8_t type = STORE_VALIDATE;
    uint32_t magic = STORE_MAGIC;
    put_bytes(&q, &type, 1);
    put_bytes(&q, &magic, sizeof magic);
    dt_status st = send_query(fd, &q, "validate");
    if (st != DT_OK) {
        close(fd);
        return st;
    }
    *fd_out = fd;
    return DT_OK;
}

dt_status boot_store_set(int fd, const char *key, const char *val) {
    query q = {.len = 0};
    uint8_t type = STORE_SET;
    put_bytes(&q, &type, 1);
    put_string(&q, key);
    put_string(&q, val);
    return send_query(fd, &q, "set");
}

dt_status boot_store_get(int fd, const char *key, int64_t deadline, double secs, char *val,
                         size_t cap) {
    query q = {.len = 0};
    uint8_t type = STORE_WAIT;
    uint64_t nkeys = 1;
    put_bytes(&q, &type, 1);
    put_bytes(&q, &nkeys, sizeof nkeys);
    put_string(&q, key);
    DT_CHECK(send_query(fd, &q, "wait"));
    uint8_t answer;
    DT_CHECK(recv_exact(fd, &answer, 1, deadline, secs, key));
    if (answer != STORE_STOP_WAITING)
        return dt_error(DT_ERR_COMM, "rendezvous: torchrun's store answered %u to a wait for %s",
                        answer, key);
    q.len = 0;
    type = STORE_GET;
    put_bytes(&q, &type, 1);
    put_string(&q, key);
    DT_CHECK(send_query(fd, &q, "get"));
    uint64_t n;
    DT_CHECK(recv_exact(fd, &n, sizeof n, deadline, secs, key));
    if (n >= cap)
        return dt_error(DT_ERR_SIZE,
                        "rendezvous: torchrun's store holds %llu bytes under %s; "
                        "rank 0 publishes fewer than %zu",
                        (unsigned long long)n, key, cap);
    DT_CHECK(recv_exact(fd, val, (size_t)n, deadline, secs, key));
    val[n] = '\0';
    return DT_OK;
}
