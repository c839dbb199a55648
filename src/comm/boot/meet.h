/* What the pieces of the rendezvous share: the table being filled (bootstrap.c), rank 0's
 * door (admit.c), plain connects, and the client of torchrun's store (torchstore.c).
 * Internal to src/comm/boot. */
#ifndef DT_COMM_BOOT_MEET_H
#define DT_COMM_BOOT_MEET_H

#include <stddef.h>
#include <stdint.h>

#include "comm/boot/boot.h"

/* Every rank's blob and, at rank 0, every rank's socket (-1: not arrived). */
typedef struct boot_table {
    int size;
    void **addrs;
    size_t *lens;
    int *socks;
} boot_table;

/* Where rank 0 listens and whom it lets in. */
typedef struct boot_door {
    int lfd;           /* listening socket; boot_admit closes it */
    char where[300];   /* "host:port", for messages */
    const char *named; /* how the address was given, for messages: "MASTER_ADDR:MASTER_PORT" */
    uint8_t token[DT_BOOT_TOKEN_BYTES];
    int64_t deadline; /* CLOCK_MONOTONIC ns */
    double secs;      /* the startup timeout, for messages */
} boot_door;

/* Serves every connection to the door at once, each with its own deadline and size limit,
 * until ranks 1..size-1 have each sent a HELLO with the door's token (filling t). Anything
 * else is a stranger: logged to stderr and dropped, never fatal. A rank with the token that
 * disagrees on the world (size, or a rank claimed twice) is fatal, sent to every connected
 * rank. Closes the listening socket; on failure the caller frees t. */
dt_status boot_admit(boot_door *d, boot_table *t);

/* Connects to host:port, retrying every 100 ms until deadline while nothing listens. On
 * failure returns -1 and leaves the last errno in *err. Blocking socket, TCP_NODELAY. */
int boot_connect(const char *host, int port, int64_t deadline, int *fd_out, int *err);

/* --- torchrun's store (torchstore.c) ------------------------------------------------------ */

/* 1 when torchrun's agent store holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True). */
int boot_store_in_use(void);
/* The key of this process's next rendezvous: "dtensor/<run id>/<restart count>/<n>", n
 * counting rendezvous in this process (the same on every rank: each one is collective). */
void boot_store_key(char *out, size_t cap);
/* Opens a connection to the store at MASTER_ADDR:MASTER_PORT (and says hello to it). */
dt_status boot_store_open(const dt_boot_env *env, int64_t deadline, int *fd_out);
dt_status boot_store_set(int fd, const char *key, const char *val);
/* Waits until key exists (DT_ERR_COMM past deadline), then copies its value, NUL-terminated,
 * into val (DT_ERR_SIZE when it holds cap bytes or more). */
dt_status boot_store_get(int fd, const char *key, int64_t deadline, double secs, char *val,
                         size_t cap);

#endif
