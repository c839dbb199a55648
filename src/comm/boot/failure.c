/* The first failure of a world, and polling back-off (failure.h). */
#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "comm/boot/failure.h"
#include "core/check.h"

#define SPIN_BEFORE_YIELD  64
#define YIELD_BEFORE_SLEEP 4096

void dt_failure_init(dt_failure *f) {
    pthread_mutex_init(&f->mu, NULL);
    atomic_init(&f->set, 0);
    f->rank = -1;
    f->status = DT_OK;
    f->msg[0] = '\0';
}

void dt_failure_fini(dt_failure *f) { pthread_mutex_destroy(&f->mu); }

int dt_failure_record(dt_failure *f, int rank, dt_status st, const char *msg) {
    int first = 0;
    pthread_mutex_lock(&f->mu);
    if (!atomic_load(&f->set)) {
        f->rank = rank;
        f->status = st;
        snprintf(f->msg, sizeof f->msg, "%s", msg);
        atomic_store(&f->set, 1);
        first = 1;
    }
    pthread_mutex_unlock(&f->mu);
    return first;
}

int dt_failure_get(dt_failure *f, int *rank, dt_status *st, char *msg, size_t cap) {
    if (!atomic_load(&f->set)) return 0;
    pthread_mutex_lock(&f->mu);
    *rank = f->rank;
    *st = f->status;
    snprintf(msg, cap, "%s", f->msg);
    pthread_mutex_unlock(&f->mu);
    return 1;
}

dt_status dt_failure_error(dt_failure *f, int me, const char *what) {
    int rank = -1;
    dt_status st = DT_OK;
    char msg[512] = "";
    dt_failure_get(f, &rank, &st, msg, sizeof msg);
    if (rank == me)
        return dt_error(DT_ERR_ABORTED, "%s: this rank (%d) failed earlier (%s): %s", what, rank,
                        dt_status_str(st), msg);
    return dt_error(DT_ERR_ABORTED, "%s: rank %d failed (%s): %s", what, rank, dt_status_str(st),
                    msg);
}

void dt_boot_backoff(unsigned idle) {
    if (idle < SPIN_BEFORE_YIELD) return;
    if (idle < YIELD_BEFORE_SLEEP) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}
