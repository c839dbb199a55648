/* Whether processes other than this job's keep the host's cores busy, for the runtimes' waits:
 * while every rank of a host has a core, a wait yields before it sleeps only while nothing
 * else wants the cores (comm/host_load.c says why and how it is measured). */
#ifndef DT_COMM_HOST_LOAD_H
#define DT_COMM_HOST_LOAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* The job's CPU time on this host so far, in ns, or -1 when it cannot be read. */
typedef int64_t (*dt_ours_fn)(void *arg);

/* One estimate: a window of window_ns at a time (statically: DT_HOST_LOAD_INIT). */
typedef struct dt_host_load {
    pthread_mutex_t mu;
    _Atomic int64_t start; /* the window's start (monotonic ns); 0: no reading yet */
    _Atomic int shared;
    int64_t busy0, ours0; /* under mu: the window's first readings (-1: none) */
    int64_t window_ns;
    dt_ours_fn ours;
    void *arg;
} dt_host_load;

#define DT_HOST_LOAD_INIT(window, fn, a)                                                           \
    { PTHREAD_MUTEX_INITIALIZER, 0, 0, -1, -1, (window), (fn), (a) }

void dt_host_load_init(dt_host_load *h, int64_t window_ns, dt_ours_fn ours, void *arg);
/* 1 when other processes used at least a quarter of a core over the last window; 0 when not,
 * not yet known (the first call starts the first window) or not readable. Cheap enough for
 * every wait: a clock read, and once a window /proc/stat and the job's CPU time. */
int dt_host_load_shared(dt_host_load *h);

/* The verdict over a window of window_ns: the machine was busy busy_ns, the job ours_ns. */
int dt_host_load_verdict(int64_t busy_ns, int64_t ours_ns, int64_t window_ns);
/* /proc/stat's first line: *ticks = its busy time (user, nice, system, irq, softirq); 0 when it
 * is not such a line. */
int dt_parse_stat_busy(const char *text, int64_t *ticks);
/* dt_ours_fn for a job of one process: its CPU time (arg unused). */
int64_t dt_process_cpu_ns(void *arg);
/* The CPU time of the processes pids[0 .. n) (their /proc/<pid>/stat), or -1 when one cannot be
 * read. */
int64_t dt_pids_cpu_ns(const int *pids, int n);

#endif
