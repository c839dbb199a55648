/* How a one-process-per-rank runtime (UCX, NCCL) starts and stays in touch: the world as the
 * launcher's environment describes it (env.c), a TCP meeting through rank 0 that swaps one
 * opaque blob per rank (bootstrap.c), and the sockets it leaves open, kept as a control plane
 * that carries failures, returns and small key-value lookups (control.c).
 * Plain POSIX: no transport library is included or needed here, so every build compiles it. */
#ifndef DT_COMM_BOOT_BOOT_H
#define DT_COMM_BOOT_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/ucx.h" /* dt_ucx_env and dt_ucx_env_read: the public face of env.c */

typedef dt_ucx_env dt_boot_env;

/* Largest world the environment may name (UCX tags carry group ranks in 16 bits). */
#define DT_BOOT_MAX_RANKS 65535
/* Host name + boot id: ranks with equal ids share a host. */
#define DT_BOOT_HOST_ID 128
/* The job's secret (DT_JOB_TOKEN) as it travels in a HELLO: at most this many bytes. */
#define DT_BOOT_TOKEN_BYTES 128

/* --- environment (env.c) --------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds: every deadline of the runtimes is on this clock. */
int64_t dt_boot_now_ns(void);
/* A number of seconds >= 0 from env var name, dflt when unset or empty. */
dt_status dt_boot_env_seconds(const char *name, double dflt, double *out);
/* DT_TIMEOUT_S in nanoseconds (0 = wait forever): how long every runtime (local, UCX, NCCL)
 * lets one collective or send/recv wait for its peers. Default DT_BOOT_TIMEOUT_S. */
#define DT_BOOT_TIMEOUT_S 300.0
dt_status dt_boot_env_timeout_ns(int64_t *ns_out);
/* Seconds in the environment variable name (default dflt) in nanoseconds, below 1e9 s; zero
 * says what 0 means, for the message. */
dt_status dt_boot_env_ns(const char *name, double dflt, const char *zero, int64_t *ns_out);
/* A 0/1 switch from env var name: unset when unset or empty, DT_ERR_ARG for anything else. */
dt_status dt_boot_env_flag(const char *name, int unset, int *out);
/* A byte count from env var name, dflt when unset or empty. */
dt_status dt_boot_env_bytes(const char *name, size_t dflt, size_t *out);
/* This host's id (zero-padded; never fails). */
void dt_boot_host_id(char out[DT_BOOT_HOST_ID]);
/* DT_JOB_TOKEN, zero-padded into out; *set_out = 0 (and out all zero) when it is unset or
 * empty. DT_ERR_ARG when it is longer than DT_BOOT_TOKEN_BYTES. */
dt_status dt_boot_token_read(uint8_t out[DT_BOOT_TOKEN_BYTES], int *set_out);
/* A fresh random token: 32 hex digits and a NUL. */
dt_status dt_boot_token_random(char out[33]);
/* 1 when a and b are equal; takes the same time whatever they hold. */
int dt_boot_token_equal(const uint8_t a[DT_BOOT_TOKEN_BYTES], const uint8_t b[DT_BOOT_TOKEN_BYTES]);

/* --- rendezvous (bootstrap.c) ------------------------------------------------------------ */

/* Meets every rank at MASTER_ADDR:MASTER_PORT within timeout_ns: publishes this rank's blob
 * (len bytes, any content) and returns everyone's (blobs[r], lens[r]; free with
 * dt_boot_blobs_free) plus the sockets for dt_boot_ctl_start (root: one per rank, socks[0]
 * unused; others: socks[0] is rank 0). Collective over the world; blocks. Needs size > 1.
 * Rank 0 admits only HELLOs carrying the job's DT_JOB_TOKEN and drops (and logs to stderr)
 * every other connection; without a token the rendezvous must be on a loopback address.
 * Under torchrun, whose own store holds MASTER_PORT, rank 0 listens on a port of its own and
 * publishes it (with a token when DT_JOB_TOKEN is unset) through that store (torchstore.c). */
dt_status dt_boot_exchange(const dt_boot_env *env, int64_t timeout_ns, const void *blob, size_t len,
                           void ***blobs_out, size_t **lens_out, int **socks_out);
void dt_boot_blobs_free(void **blobs, size_t *lens, int n);

/* --- control plane (control.c) ----------------------------------------------------------- */

typedef struct dt_boot_ctl dt_boot_ctl;

/* How the control plane tells the runtime what it hears. The callbacks run on the control
 * thread (or inside dt_boot_ctl_fail / _finish) with the plane's lock held: they must be
 * quick and must not call back into the plane. */
typedef struct dt_boot_hooks {
    const char *entry; /* the runtime's entry point, for messages: "dt_ucx_run" */
    void *arg;
    /* Rank `rank` failed (st, msg) or its process died: the world's first failure as far as
     * the plane knows; the runtime keeps the first one it hears of. */
    void (*abort)(void *arg, int rank, dt_status st, const char *msg);
    /* Rank `rank` returned from its SPMD function, having sent sent_to_me messages to this
     * rank and received recvd_from_me from it (the counts it passed to dt_boot_ctl_finish). */
    void (*exited)(void *arg, int rank, uint64_t sent_to_me, uint64_t recvd_from_me);
    /* 1 when this rank knows of a failure of the world (then fills rank, st and msg). */
    int (*failed)(void *arg, int *rank, dt_status *st, char *msg, size_t cap);
} dt_boot_hooks;

/* Takes over the sockets of dt_boot_exchange (closed and freed on failure too) and starts
 * the control thread. */
dt_status dt_boot_ctl_start(int rank, int size, int *socks, const dt_boot_hooks *hooks,
                            dt_boot_ctl **ctl_out);
/* This rank failed (first report only): every other rank hears of it through hooks.abort.
 * The caller records the failure in its own state first. */
void dt_boot_ctl_fail(dt_boot_ctl *c, dt_status st, const char *msg);
/* This rank returned: tells the others (with counts[q] messages sent to and counts[size + q]
 * received from each rank q; NULL when they could not be gathered, which counts as a
 * failure), then waits until every rank has returned or died (only briefly once the world
 * has failed). The first failure of the world comes back; *rank_out = -1 when none. */
void dt_boot_ctl_finish(dt_boot_ctl *c, const uint64_t *counts, int *rank_out, dt_status *st_out,
                        char *msg, size_t cap);
/* Stops the thread and closes the sockets. NULL is fine. */
void dt_boot_ctl_stop(dt_boot_ctl *c);

/* Where this rank waits, for rank 0's board of ranks stuck across groups (comm/stuck.h): a
 * position once a wait passed the check interval, NULL when that wait ended. Rank 0 judges
 * the board as positions come and twice a second while any is on it; a verdict that holds
 * fails the world in the name of the rank it blames, with DT_ERR_COMM. */
struct dt_pos;
void dt_boot_ctl_post(dt_boot_ctl *c, const struct dt_pos *pos);

/* A small store at rank 0, for what a subset of ranks must agree on after the rendezvous
 * (NCCL's unique id of a sub-communicator). put publishes val under key for `readers` gets,
 * after which rank 0 forgets it; get blocks until some rank has put key, then copies its value
 * (*len_out = its length; DT_ERR_SIZE when it exceeds cap). get fails with DT_ERR_ABORTED
 * when the world fails meanwhile (hooks.failed) and DT_ERR_COMM when deadline_ns passes
 * (0 = none) or rank 0 is lost. Keys and values: at most DT_BOOT_KV_MAX bytes each. */
#define DT_BOOT_KV_MAX 1024
dt_status dt_boot_ctl_put(dt_boot_ctl *c, const void *key, size_t klen, const void *val,
                          size_t vlen, int readers);
dt_status dt_boot_ctl_get(dt_boot_ctl *c, const void *key, size_t klen, void *val, size_t cap,
                          size_t *len_out, int64_t deadline_ns);

#endif
