/* The first failure of a world, its record for the launcher, and polling back-off
 * (failure.h). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "comm/boot/failure.h"
#include "comm/flight.h"
#include "core/check.h"

#define SPIN_BEFORE_YIELD  64
#define YIELD_BEFORE_SLEEP 4096
#define FLIGHT_IN_RECORD   8 /* flight recorder entries in an error record */

void dt_failure_init(dt_failure *f) {
    pthread_mutex_init(&f->mu, NULL);
    atomic_init(&f->set, 0);
    f->rank = -1;
    f->status = DT_OK;
    f->msg[0] = '\0';
    f->flight = NULL;
}

void dt_failure_flight(dt_failure *f, dt_ctx *ctx) {
    pthread_mutex_lock(&f->mu);
    f->flight = ctx;
    pthread_mutex_unlock(&f->mu);
}

void dt_failure_fini(dt_failure *f) { pthread_mutex_destroy(&f->mu); }

/* Set once the process's first failure went to DT_ERROR_FILE: later worlds' are consequences
 * or come after it, and the launcher wants the first. */
static atomic_int record_written;

int dt_failure_record(dt_failure *f, int me, int rank, dt_status st, const char *msg) {
    int first = 0;
    char flight[DT_FLIGHT_JSON_MAX];
    flight[0] = '\0';
    pthread_mutex_lock(&f->mu);
    if (!atomic_load(&f->set)) {
        f->rank = rank;
        f->status = st;
        snprintf(f->msg, sizeof f->msg, "%s", msg);
        atomic_store(&f->set, 1);
        first = 1;
        /* Under the lock: the context cannot go meanwhile (dt_failure_flight). */
        if (f->flight) dt_flight_json(f->flight, FLIGHT_IN_RECORD, flight, sizeof flight);
    }
    pthread_mutex_unlock(&f->mu);
    const char *path = getenv("DT_ERROR_FILE");
    if (first && path && *path && !atomic_exchange(&record_written, 1))
        dt_failure_write_record(path, me, rank, st, msg, flight[0] ? flight : NULL);
    return first;
}

static void json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

int dt_failure_write_record(const char *path, int me, int rank, dt_status st, const char *msg,
                            const char *flight) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp) return -1;
    FILE *out = fopen(tmp, "w");
    if (!out) return -1;
    /* What a rank meets between ranks (a peer's failure, a timeout, a disagreement, a lost
     * connection) may have begun elsewhere; its own errors began here. */
    int origin =
        rank == me && st != DT_ERR_ABORTED && st != DT_ERR_PEER_EXITED && st != DT_ERR_COMM;
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    fprintf(out,
            "{\n  \"rank\": %d,\n  \"failed_rank\": %d,\n  \"origin\": %s,\n  \"status\": ", me,
            rank, origin ? "true" : "false");
    json_string(out, dt_status_str(st));
    fprintf(out, ",\n  \"code\": %d,\n  \"message\": ", (int)st);
    json_string(out, msg);
    fprintf(out, ",\n  \"monotonic_ns\": %lld,\n  \"unix_time\": %lld.%09ld,\n  \"pid\": %ld",
            (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec, (long long)real.tv_sec,
            real.tv_nsec, (long)getpid());
    if (flight) fprintf(out, ",\n  \"flight\": %s", flight);
    fprintf(out, "\n}\n");
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
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
