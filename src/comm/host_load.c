/* Whether other processes keep the host's cores busy (comm/host_load.h). While every rank of a
 * host has a core, a rank waiting in a collective yields before it sleeps: a yield returns at
 * once while nothing else wants the core, cheaper than a sleep's wake-up. Beside CPU-bound
 * processes, Linux's EEVDF scheduler may hand each yield's core to them for a slice: on the
 * 2-vCPU Xeon VM, two local ranks' 1 KiB collectives took 2-3 us yielding on a quiet host,
 * 4-9 us sleeping at once beside two or four spinning processes, and 1.4-5 ms yielding beside
 * them. So the waits yield only while this estimate says the host is not shared.
 *
 * The estimate: at most once a window, one waiting thread reads the machine's busy time
 * (/proc/stat's first line) and the job's CPU time on this host (the local runtime: this
 * process's; UCX: its processes on this host), and calls the host shared when the difference,
 * the other processes' CPU time, reached a quarter of a core over the window. /proc/stat counts
 * in ticks of 10 ms, so windows are long enough that rounding stays well under that. Until a
 * window has been measured, and where the counts cannot be read, the host counts as not shared:
 * waits yield, as they did before this estimate. */
#include "comm/host_load.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void dt_host_load_init(dt_host_load *h, int64_t window_ns, dt_ours_fn ours, void *arg) {
    *h = (dt_host_load)DT_HOST_LOAD_INIT(window_ns, ours, arg);
}

int dt_parse_stat_busy(const char *text, int64_t *ticks) {
    /* "cpu  user nice system idle iowait irq softirq steal ..." */
    if (strncmp(text, "cpu ", 4) != 0) return 0;
    const char *p = text + 4;
    int64_t v[7];
    for (int i = 0; i < 7; i++) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 0) return 0;
        v[i] = x, p = end;
    }
    *ticks = v[0] + v[1] + v[2] + v[5] + v[6];
    return 1;
}

int dt_host_load_verdict(int64_t busy_ns, int64_t ours_ns, int64_t window_ns) {
    return (double)busy_ns - (double)ours_ns >= 0.25 * (double)window_ns;
}

static int64_t ns_of(clockid_t clock) {
    struct timespec t;
    if (clock_gettime(clock, &t) != 0) return -1;
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int64_t dt_process_cpu_ns(void *arg) {
    (void)arg;
    return ns_of(CLOCK_PROCESS_CPUTIME_ID);
}

/* The start of path's contents (at most cap - 1 bytes) in buf, terminated: its length, or -1. */
static ssize_t read_head(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n >= 0) buf[n] = 0;
    return n;
}

static int64_t ticks_ns(int64_t ticks) {
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? ticks * (1000000000 / hz) : -1;
}

int64_t dt_pids_cpu_ns(const int *pids, int n) {
    int64_t ticks = 0;
    for (int i = 0; i < n; i++) {
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", pids[i]);
        if (read_head(path, buf, sizeof buf) <= 0) return -1;
        /* "pid (comm) state ppid ...": utime and stime are fields 14 and 15; comm may hold
         * spaces and parentheses, so count from the last ')' (field 2's end). */
        const char *p = strrchr(buf, ')');
        long long ut, st;
        if (!p ||
            sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &ut, &st) != 2)
            return -1;
        ticks += ut + st;
    }
    return ticks_ns(ticks);
}

/* The machine's busy time in ns, or -1. */
static int64_t machine_busy_ns(void) {
    char buf[256];
    int64_t ticks;
    if (read_head("/proc/stat", buf, sizeof buf) <= 0 || !dt_parse_stat_busy(buf, &ticks))
        return -1;
    return ticks_ns(ticks);
}

int dt_host_load_shared(dt_host_load *h) {
    int64_t now = ns_of(CLOCK_MONOTONIC);
    int64_t start = atomic_load_explicit(&h->start, memory_order_relaxed);
    if ((start && now - start < h->window_ns) || pthread_mutex_trylock(&h->mu) != 0)
        return atomic_load_explicit(&h->shared, memory_order_relaxed);
    start = atomic_load_explicit(&h->start, memory_order_relaxed);
    if (!start || now - start >= h->window_ns) {
        int64_t busy = machine_busy_ns(), ours = h->ours(h->arg);
        if (busy < 0 || ours < 0)
            busy = ours = -1, atomic_store(&h->shared, 0);
        else if (h->busy0 >= 0)
            atomic_store(&h->shared,
                         dt_host_load_verdict(busy - h->busy0, ours - h->ours0, now - start));
        h->busy0 = busy, h->ours0 = ours;
        atomic_store_explicit(&h->start, now, memory_order_relaxed);
    }
    pthread_mutex_unlock(&h->mu);
    return atomic_load_explicit(&h->shared, memory_order_relaxed);
}
