/* The first failure a one-process-per-rank world has seen (which rank, its status and why),
 * as the UCX and NCCL runtimes keep it and report it to every operation that cannot complete
 * any more; the record of it a launcher reads (DT_ERROR_FILE); and the back-off both use while
 * they poll. Knows nothing of either transport. */
#ifndef DT_COMM_BOOT_FAILURE_H
#define DT_COMM_BOOT_FAILURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "dtensor/status.h"

typedef struct dt_ctx dt_ctx;

typedef struct dt_failure {
    pthread_mutex_t mu;
    atomic_int set; /* read without the lock by polling loops */
    int rank;
    dt_status status;
    char msg[512];
    dt_ctx *flight; /* whose flight recorder goes into the error record (NULL: none) */
} dt_failure;

void dt_failure_init(dt_failure *f);
/* Whose flight recorder the error record gets from now on (NULL before that context goes). */
void dt_failure_flight(dt_failure *f, dt_ctx *ctx);
void dt_failure_fini(dt_failure *f);

/* Keeps the first failure only (rank failed with st because msg, as this process, rank me, knows
 * it); 1 when this call recorded it. The first failure recorded in the process is also written
 * to the file DT_ERROR_FILE names, when set (dtrun sets it; see dt_failure_write_record), with
 * the last entries of f->flight's flight recorder. */
int dt_failure_record(dt_failure *f, int me, int rank, dt_status st, const char *msg);
/* 1 and the failure (msg up to cap bytes) when one was recorded, else 0. */
int dt_failure_get(dt_failure *f, int *rank, dt_status *st, char *msg, size_t cap);
/* DT_ERR_ABORTED for operation what, naming the failed rank (me: "this rank ... earlier"). */
dt_status dt_failure_error(dt_failure *f, int me, const char *what);

/* The error record, as JSON written to a temporary file then renamed onto path (so a reader
 * sees all of it or nothing), with these members in this order (flight: a JSON array of
 * strings, or NULL):
 *   "rank"          me: the rank that writes it
 *   "failed_rank"   rank: the rank the failure belongs to (me, or a peer this rank heard of)
 *   "origin"        true when the failure began at this rank: rank == me and st is not one
 *                   met between ranks, which may have begun at a peer (DT_ERR_ABORTED, which
 *                   timeouts also return, DT_ERR_PEER_EXITED, DT_ERR_COMM: a disagreement or a
 *                   lost connection)
 *   "status", "code"  dt_status_str(st) and st
 *   "message"       msg
 *   "monotonic_ns"  CLOCK_MONOTONIC when written (comparable between processes of one host)
 *   "unix_time"     CLOCK_REALTIME when written, in seconds
 *   "pid"           this process
 *   "flight"        the rank's last collectives, oldest first (comm/flight.h), when given
 * 0 when written, -1 when the file could not be. dt_failure_record calls it once per process. */
int dt_failure_write_record(const char *path, int me, int rank, dt_status st, const char *msg,
                            const char *flight);

static inline int dt_failed(dt_failure *f) { return atomic_load(&f->set); }

/* Waiting politely: spins first, then yields, then sleeps 20 us per call, by idle rounds. */
void dt_boot_backoff(unsigned idle);

#endif
