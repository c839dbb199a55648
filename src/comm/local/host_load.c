/* Whether other processes keep the cores busy (lw_host_shared): the local runtime's ranks that
 * fit on the cores yield while they wait in a collective only while no other process does.
 * A yield returns at once while nothing else wants the core; beside CPU-bound processes,
 * Linux's EEVDF scheduler may hand each yield's core to them for a slice. On the 2-vCPU Xeon
 * VM, two ranks' 1 KiB collectives took 2-3 us yielding on a quiet host, 4-9 us sleeping at
 * once beside two or four spinning processes, and 1.4-5 ms yielding beside them.
 *
 * The estimate: at most every LW_LOAD_WINDOW_NS, one waiting rank reads the machine's busy
 * time (/proc/stat's first line) and this process's CPU time (CLOCK_PROCESS_CPUTIME_ID); the
 * other processes' share over the window decides (lw_host_verdict). /proc/stat counts in ticks
 * of 10 ms, so the window is long enough that rounding stays well under the threshold. Until a
 * window has been measured (a process's first 0.2-0.4 s), and wherever /proc/stat cannot be
 * read, the host counts as quiet: waits yield, as they did before this estimate. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/local/local_impl.h"

enum { LW_LOAD_WINDOW_NS = 200 * 1000 * 1000 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int64_t window_start; /* 0: no reading yet */
static _Atomic int shared;
static int64_t busy0_ns = -1, mine0_ns = -1; /* under mu: the window's first readings */

int lw_parse_stat_busy(const char *text, int64_t *ticks) {
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

int lw_host_verdict(int64_t busy_ns, int64_t mine_ns, int64_t window_ns) {
    return (double)busy_ns - (double)mine_ns >= 0.25 * (double)window_ns;
}

static int64_t ns_of(clockid_t clock) {
    struct timespec t;
    if (clock_gettime(clock, &t) != 0) return -1;
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The machine's busy time in ns, or -1. */
static int64_t machine_busy_ns(void) {
    char buf[256];
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    int64_t ticks;
    long hz = sysconf(_SC_CLK_TCK);
    if (!lw_parse_stat_busy(buf, &ticks) || hz <= 0) return -1;
    return ticks * (1000000000 / hz);
}

int lw_host_shared(void) {
    int64_t now = ns_of(CLOCK_MONOTONIC);
    int64_t start = atomic_load_explicit(&window_start, memory_order_relaxed);
    if ((start && now - start < LW_LOAD_WINDOW_NS) || pthread_mutex_trylock(&mu) != 0)
        return atomic_load_explicit(&shared, memory_order_relaxed);
    start = atomic_load_explicit(&window_start, memory_order_relaxed);
    if (!start || now - start >= LW_LOAD_WINDOW_NS) {
        int64_t busy = machine_busy_ns(), mine = ns_of(CLOCK_PROCESS_CPUTIME_ID);
        if (busy < 0 || mine < 0)
            busy = mine = -1, atomic_store(&shared, 0);
        else if (busy0_ns >= 0)
            atomic_store(&shared, lw_host_verdict(busy - busy0_ns, mine - mine0_ns, now - start));
        busy0_ns = busy, mine0_ns = mine;
        atomic_store_explicit(&window_start, now, memory_order_relaxed);
    }
    pthread_mutex_unlock(&mu);
    return atomic_load_explicit(&shared, memory_order_relaxed);
}
