/* What the UCX benchmarks share: finding dtrun and this binary, the list of environments the
 * UCX side runs under (DT_BENCH_UCX_ENVS), UCX jobs held between rounds, and ucx_perftest.
 *
 * A job is one dtrun run of this binary (--rank ...) that stays up for the whole benchmark
 * and runs one round each time the driver says so: every rank blocks in read() on a FIFO
 * (no polling, so an idle job takes no CPU from the one being measured) until the driver
 * writes one byte per rank; rank 0 prints its figures, then "D" after the round's last
 * barrier. So UCX rounds interleave with the local runtime's and ucx_perftest's in one run
 * without starting processes per round. Header-only, as bench_util.h. */
#ifndef DT_BENCH_UCX_UTIL_H
#define DT_BENCH_UCX_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr, memmem */
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dtensor.h>

#define BENCH_MAX_ENVS 6

/* ---- the driver's side ------------------------------------------------------------------- */

static inline int bench_self(char *out, size_t cap) {
    ssize_t k = readlink("/proc/self/exe", out, cap - 1);
    if (k <= 0) return 0;
    out[k] = '\0';
    return 1;
}

/* dtrun: $DT_DTRUN, else next to this binary's folder (build/bench/../dtrun). */
static inline int bench_find_dtrun(char *out, size_t cap) {
    const char *env = getenv("DT_DTRUN");
    if (env && *env) return snprintf(out, cap, "%s", env) < (int)cap;
    char self[1024];
    if (!bench_self(self, sizeof self)) return 0;
    char *slash = strrchr(self, '/');
    if (!slash) return 0;
    *slash = '\0';
    snprintf(out, cap, "%s/../dtrun", self);
    return access(out, X_OK) == 0;
}

/* 1 when the library this binary runs with holds name as a string of its own, NUL after it
 * (getenv's argument), not merely inside a longer one such as this file's default list
 * "...DT_UCX_SHM=0" (the library may be linked into this binary): how a DT_ variable of an
 * environment entry is found to be one this build reads. */
static inline int bench_lib_mentions(const char *name) {
    Dl_info info;
    if (!dladdr((void *)dt_ucx_run, &info) || !info.dli_fname) return 0;
    char path[1024];
    if (strchr(info.dli_fname, '/'))
        snprintf(path, sizeof path, "%s", info.dli_fname);
    else if (!bench_self(path, sizeof path))
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = (size_t)1 << 20, keep = strlen(name) + 1, have = 0; /* with its NUL */
    char *buf = malloc(cap);
    int found = 0;
    while (buf && !found) { /* in chunks, keeping a name's length of overlap */
        size_t k = fread(buf + have, 1, cap - have, f);
        if (!k) break;
        have += k;
        found = memmem(buf, have, name, keep) != NULL;
        if (have > keep) {
            memmove(buf, buf + have - keep, keep);
            have = keep;
        }
    }
    free(buf);
    fclose(f);
    return found;
}

/* The environments the UCX side runs under: DT_BENCH_UCX_ENVS, entries separated by ';',
 * each "-" (nothing set) or space-separated VAR=VALUE assignments; default "-;DT_UCX_SHM=0".
 * An entry setting a DT_ variable this build does not read is dropped (with a note on
 * stderr): the default runs DT_UCX_SHM=0 only once the shared-memory path exists. */
static inline int bench_ucx_envs(char out[][128], int max) {
    const char *spec = getenv("DT_BENCH_UCX_ENVS");
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec && *spec ? spec : "-;DT_UCX_SHM=0");
    int n = 0;
    for (char *save = NULL, *e = strtok_r(buf, ";", &save); e && n < max;
         e = strtok_r(NULL, ";", &save)) {
        while (*e == ' ')
            e++;
        if (!*e) continue;
        int known = 1;
        char names[128];
        snprintf(names, sizeof names, "%s", e);
        for (char *s2 = NULL, *a = strtok_r(names, " ", &s2); a; a = strtok_r(NULL, " ", &s2)) {
            char *eq = strchr(a, '=');
            if (!eq || strncmp(a, "DT_", 3)) continue;
            *eq = '\0';
            if (!bench_lib_mentions(a)) {
                fprintf(stderr, "bench: %s is not read by this build: environment \"%s\" skipped\n",
                        a, e);
                known = 0;
            }
        }
        if (known) snprintf(out[n++], 128, "%s", e);
    }
    return n;
}

typedef struct bench_job {
    FILE *out;  /* dtrun's stdout and stderr */
    int ctl;    /* the FIFO, write end */
    int ranks;  /* bytes per round */
    int failed; /* the job ended or printed no "D" */
    char dir[64], fifo[96];
} bench_job;

/* Starts `env ENV DT_BENCH_FIFO=... dtrun -n ranks SELF --rank ARGS`; 0 on failure. */
static inline int bench_job_start(bench_job *j, const char *env, int ranks, const char *args) {
    char dtrun[1100], self[1024], cmd[4096];
    memset(j, 0, sizeof *j);
    j->ctl = -1;
    j->ranks = ranks;
    if (!bench_find_dtrun(dtrun, sizeof dtrun) || !bench_self(self, sizeof self)) {
        fprintf(stderr, "bench: dtrun not found next to this binary; set DT_DTRUN\n");
        return 0;
    }
    snprintf(j->dir, sizeof j->dir, "/tmp/dt-bench-XXXXXX");
    if (!mkdtemp(j->dir)) return 0;
    snprintf(j->fifo, sizeof j->fifo, "%s/ctl", j->dir);
    if (mkfifo(j->fifo, 0600) != 0) return 0;
    /* read-write, so that opening it does not wait for a reader; not inherited by the job */
    j->ctl = open(j->fifo, O_RDWR | O_CLOEXEC);
    if (j->ctl < 0) return 0;
    snprintf(cmd, sizeof cmd, "env %s DT_BENCH_FIFO=%s %s -n %d %s --rank %s 2>&1",
             strcmp(env, "-") ? env : "", j->fifo, dtrun, ranks, self, args);
    j->out = popen(cmd, "r");
    return j->out != NULL;
}

/* Runs one round: writes the bytes, then hands each line rank 0 prints (without the
 * "[rank 0] " prefix) to line() until "D". 0 when the job failed (lines naming an error are
 * copied to stderr). */
static inline int bench_job_round(bench_job *j, void (*line)(const char *, void *), void *arg) {
    if (j->failed) return 0;
    char go[256];
    memset(go, 'r', sizeof go);
    if (write(j->ctl, go, (size_t)j->ranks) != (ssize_t)j->ranks) return !(j->failed = 1);
    char buf[1024];
    while (fgets(buf, sizeof buf, j->out)) {
        if (!strncmp(buf, "[rank 0] D", 10)) return 1;
        if (!strncmp(buf, "[rank 0] ", 9))
            line(buf + 9, arg);
        else if (strstr(buf, "rror") || strstr(buf, "fail"))
            fputs(buf, stderr);
    }
    return !(j->failed = 1);
}

/* Tells the ranks to return ('q'), waits for the job; 1 when it exited 0. */
static inline int bench_job_end(bench_job *j) {
    int ok = 0;
    if (j->ctl >= 0) {
        char q[256];
        memset(q, 'q', sizeof q);
        if (write(j->ctl, q, (size_t)j->ranks) < 0) j->failed = 1;
    }
    if (j->out) {
        char buf[1024];
        while (fgets(buf, sizeof buf, j->out))
            if (strstr(buf, "rror") || strstr(buf, "fail")) fputs(buf, stderr);
        int rc = pclose(j->out);
        ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 0 && !j->failed;
    }
    if (j->ctl >= 0) close(j->ctl);
    if (j->fifo[0]) unlink(j->fifo);
    if (j->dir[0]) rmdir(j->dir);
    return ok;
}

/* 1 while a TCP socket listens on port (/proc/net/tcp and tcp6: state 0A). */
static inline int bench_listening(int port) {
    const char *files[2] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) continue;
        char line[512];
        while (fgets(line, sizeof line, f)) {
            unsigned p, st;
            char *colon = strchr(line, ':');
            if (colon) colon = strchr(colon + 1, ':'); /* local address's port */
            if (colon && sscanf(colon + 1, "%x %*s %x", &p, &st) == 2 && (int)p == port &&
                st == 0x0A) {
                fclose(f);
                return 1;
            }
        }
        fclose(f);
    }
    return 0;
}

/* ucx_perftest tag_bw between two processes of this host, size-byte messages (64 MiB in all,
 * 20 to 2000 of them, a tenth more as warm-up), in GB/s
 * (1e9 B/s); < 0 when it could not run. The client starts once the server listens. */
static inline double bench_perftest(const char *tls, size_t size) {
    static int port;
    if (!port) port = 20000 + (int)(getpid() % 20000);
    port = port >= 40000 ? 20000 : port + 1;
    long iters = (long)(((size_t)64 << 20) / size); /* 64 MiB, 20 to 2000 messages */
    iters = iters < 20 ? 20 : iters > 2000 ? 2000 : iters;
    char cmd[768];
    snprintf(cmd, sizeof cmd, "UCX_TLS=%s exec ucx_perftest -p %d >/dev/null 2>&1", tls, port);
    pid_t server = fork();
    if (server < 0) return -1;
    if (server == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 2000 && !bench_listening(port); i++) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    snprintf(cmd, sizeof cmd,
             "UCX_TLS=%s timeout 60 ucx_perftest 127.0.0.1 -p %d -t tag_bw -s %zu -n %ld -w %ld "
             "-f -v 2>/dev/null | tail -1",
             tls, port, size, iters, iters / 10 + 1);
    FILE *p = popen(cmd, "r");
    char line[512] = "";
    if (p) {
        if (!fgets(line, sizeof line, p)) line[0] = '\0';
        pclose(p);
    }
    int status, gone = 0;
    for (int i = 0; i < 200 && !(gone = waitpid(server, &status, WNOHANG) == server); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    if (!gone) { /* the client failed: the server still waits for it */
        kill(server, SIGTERM);
        waitpid(server, &status, 0);
    }
    /* iterations,lat50,avg_lat,overall_lat,avg_bw,overall_bw (MB/s),... */
    double f[6];
    if (sscanf(line, "%lf,%lf,%lf,%lf,%lf,%lf", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5]) != 6)
        return -1;
    return f[5] * 1048576.0 / 1e9; /* UCX's MB is 2^20 bytes */
}

/* ---- a rank's side ----------------------------------------------------------------------- */

/* Blocks until the driver says: 1 = run a round, 0 = return (or no driver). */
static inline int bench_rank_wait(int *fd) {
    if (*fd < 0) {
        const char *path = getenv("DT_BENCH_FIFO");
        if (!path || (*fd = open(path, O_RDONLY)) < 0) return 0;
    }
    char c;
    return read(*fd, &c, 1) == 1 && c == 'r';
}

#endif
