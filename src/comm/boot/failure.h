/* The first failure a one-process-per-rank world has seen (which rank, its status and why),
 * as the UCX and NCCL runtimes keep it and report it to every operation that cannot complete
 * any more; and the back-off both use while they poll. Knows nothing of either transport. */
#ifndef DT_COMM_BOOT_FAILURE_H
#define DT_COMM_BOOT_FAILURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "dtensor/status.h"

typedef struct dt_failure {
    pthread_mutex_t mu;
    atomic_int set; /* read without the lock by polling loops */
    int rank;
    dt_status status;
    char msg[512];
} dt_failure;

void dt_failure_init(dt_failure *f);
void dt_failure_fini(dt_failure *f);

/* Keeps the first failure only; 1 when this call recorded it. */
int dt_failure_record(dt_failure *f, int rank, dt_status st, const char *msg);
/* 1 and the failure (msg up to cap bytes) when one was recorded, else 0. */
int dt_failure_get(dt_failure *f, int *rank, dt_status *st, char *msg, size_t cap);
/* DT_ERR_ABORTED for operation what, naming the failed rank (me: "this rank ... earlier"). */
dt_status dt_failure_error(dt_failure *f, int me, const char *what);

static inline int dt_failed(dt_failure *f) { return atomic_load(&f->set); }

/* Waiting politely: spins first, then yields, then sleeps 20 us per call, by idle rounds. */
void dt_boot_backoff(unsigned idle);

#endif
