/* dtrun: runs N copies of a program on this host as the ranks of one world, torchrun style.
 *
 *   dtrun -n 4 ./prog args...
 *
 * Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1 unless
 * --addr), MASTER_PORT (a free port unless --port) and DT_ERROR_FILE, a file in a directory of
 * dtrun's own where the dtensor runtimes write the rank's first failure (which rank failed, its
 * status and message, when, and whether it began there: comm/boot/failure.h); every line a rank
 * prints comes out as "[rank R] line" on dtrun's stdout or stderr. When a rank fails (non-zero
 * exit or a signal) the others get --grace seconds to notice and exit by themselves, then
 * SIGTERM, then SIGKILL.
 *
 * Once all have ended, dtrun prints every failure, the root cause first, and exits with the
 * root cause's status (128 + signal number for a signal), 0 when every rank succeeded. The
 * order in which ranks end says little: a rank killed by SIGKILL and a peer that exits the
 * moment it hears of it end microseconds apart, and dtrun may see them in one wake-up. So the
 * root cause is, in this order (dtrun_blame.c):
 *   1. the rank with the earliest record of a failure that began there (its own error, not a
 *      peer's, a timeout or an abort it heard of);
 *   2. else the failed rank that the earliest record of a peer's failure names;
 *   3. else the rank first seen killed by a signal dtrun did not send;
 *   4. else the rank first seen to fail (SIGCHLD wakes dtrun at each end: no polling tick).
 * A plain POSIX program (and Linux's PR_SET_PDEATHSIG): no dtensor or UCX needed. Programs
 * that do not use the dtensor runtimes may write the record themselves. */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtrun.h"

#define LINE_MAX_BYTES  65536
#define TERM_TO_KILL_NS 3000000000LL
#define LINGER_NS       1000000000LL /* output pipes a rank's own children still hold */

typedef struct stream {
    int fd;  /* read end, -1 once closed */
    int out; /* 1 = stdout, 2 = stderr */
    size_t len;
    char buf[LINE_MAX_BYTES];
} stream;

typedef struct rank {
    pid_t pid;     /* 0 once reaped */
    unsigned sent; /* bit s: dtrun sent it signal s */
    stream s[2];
} rank;

static volatile sig_atomic_t got_signal, got_child;

static void on_signal(int sig) {
    if (sig == SIGCHLD)
        got_child = 1;
    else
        got_signal = sig;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void usage(FILE *f) {
    fprintf(f, "usage: dtrun -n N [--port P] [--addr A] [--grace S] [--] program [args...]\n"
               "  -n, --nproc N   number of ranks (processes) to start\n"
               "  --port P        MASTER_PORT for the rendezvous (default: a free port)\n"
               "  --addr A        MASTER_ADDR (default 127.0.0.1)\n"
               "  --grace S       after a rank fails, seconds the others get to exit by\n"
               "                  themselves before SIGTERM (default 2)\n"
               "Each rank's first failure goes to the JSON file DT_ERROR_FILE names (the dtensor\n"
               "runtimes write it). Once all ranks ended, dtrun prints every failure, the root\n"
               "cause first: the earliest failure that began at its rank by these records, else\n"
               "the rank the records name, else a rank killed by a signal dtrun did not send,\n"
               "else the rank seen to fail first.\n"
               "Exit status: the root cause's (128 + signal for a signal), else 0.\n");
}

/* Writes all of buf; output errors (a closed pipe) are ignored. */
static void write_all(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t k = write(fd, buf, len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        buf += k;
        len -= (size_t)k;
    }
}

/* One whole line with its prefix in a single write, so ranks' lines never interleave. */
static void emit(int r, stream *s, const char *line, size_t len) {
    char prefix[32];
    int p = snprintf(prefix, sizeof prefix, "[rank %d] ", r);
    char *out = malloc((size_t)p + len + 1);
    if (!out) return;
    memcpy(out, prefix, (size_t)p);
    memcpy(out + p, line, len);
    out[(size_t)p + len] = '\n';
    write_all(s->out, out, (size_t)p + len + 1);
    free(out);
}

static void drain(int r, stream *s) {
    ssize_t k = read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (k <= 0) {
        if (s->len) emit(r, s, s->buf, s->len);
        s->len = 0;
        close(s->fd);
        s->fd = -1;
        return;
    }
    s->len += (size_t)k;
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] != '\n') continue;
        emit(r, s, s->buf + start, i - start);
        start = i + 1;
    }
    if (start == 0 && s->len == sizeof s->buf) { /* an overlong line: pass it on in pieces */
        emit(r, s, s->buf, s->len);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void set_int(const char *name, int v) {
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

/* DT_JOB_TOKEN, the secret rank 0 asks of every rank at the rendezvous, inherited by every
 * rank: a fresh random one per run, unless the caller set one (to add a rank by hand). */
static int set_job_token(void) {
    const char *t = getenv("DT_JOB_TOKEN");
    if (t && *t) return 0;
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return -1;
    char hex[2 * sizeof b + 1];
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    return setenv("DT_JOB_TOKEN", hex, 1);
}

/* The directory of the ranks' error records; "" when none could be made. */
static char record_dir[4096];

static void record_path(char *buf, size_t cap, int r) {
    snprintf(buf, cap, "%s/rank%d.json", record_dir, r);
}

static void make_record_dir(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(record_dir, sizeof record_dir, "%s/dtrun-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(record_dir)) {
        fprintf(stderr,
                "dtrun: cannot make a directory for error records (%s): %s; the root "
                "cause will be a guess from the order ranks end in\n",
                record_dir, strerror(errno));
        record_dir[0] = '\0';
    }
}

/* Removes the records and any temporary file a rank left half written. */
static void remove_record_dir(void) {
    if (!record_dir[0]) return;
    DIR *d = opendir(record_dir);
    struct dirent *e;
    char path[4400];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", record_dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(record_dir);
    record_dir[0] = '\0';
}

/* In the child: the rank's environment and output pipes, then the program. */
static void start_child(int r, int n, const char *addr, int port, int out[2], int err[2],
                        pid_t parent, const sigset_t *mask, char **argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the launcher */
    if (getppid() != parent) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    set_int("RANK", r);
    set_int("WORLD_SIZE", n);
    set_int("LOCAL_RANK", r);
    set_int("LOCAL_WORLD_SIZE", n);
    set_int("GROUP_RANK", 0);
    setenv("MASTER_ADDR", addr, 1);
    set_int("MASTER_PORT", port);
    char path[4200];
    record_path(path, sizeof path, r);
    if (record_dir[0])
        setenv("DT_ERROR_FILE", path, 1);
    else
        unsetenv("DT_ERROR_FILE");
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(out[1]);
    close(err[0]);
    close(err[1]);
    execvp(argv[0], argv);
    fprintf(stderr, "dtrun: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static void signal_all(rank *ranks, int n, int sig) {
    for (int r = 0; r < n; r++)
        if (ranks[r].pid > 0) {
            ranks[r].sent |= 1u << sig;
            kill(ranks[r].pid, sig);
        }
}

/* Reaps every rank that ended; returns the first failure among them (-1 none). */
static int reap(rank *ranks, dtrun_end *ends, int n, int *alive) {
    int ws, first = -1;
    pid_t pid;
    while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
        int64_t t = now_ns();
        for (int r = 0; r < n; r++) {
            if (ranks[r].pid != pid) continue;
            ranks[r].pid = 0;
            (*alive)--;
            dtrun_end *e = &ends[r];
            e->seen_ns = t;
            e->code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
            if (WIFSIGNALED(ws)) {
                e->signal = WTERMSIG(ws);
                e->code = 128 + e->signal;
                e->signal_ours = e->signal < 32 && (ranks[r].sent >> e->signal & 1);
            }
            if (e->code != 0 && first < 0) first = r;
        }
    }
    return first;
}

int main(int argc, char **argv) {
    int n = 0, port = 0, i = 1;
    double grace = 2.0;
    const char *addr = "127.0.0.1";
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) break;
        if (!strcmp(a, "-n") || !strcmp(a, "--nproc"))
            n = atoi(argv[++i]);
        else if (!strcmp(a, "--port"))
            port = atoi(argv[++i]);
        else if (!strcmp(a, "--addr"))
            addr = argv[++i];
        else if (!strcmp(a, "--grace"))
            grace = atof(argv[++i]);
        else
            break;
    }
    if (i >= argc || n < 1 || n > 65535 || port < 0 || port > 65535 || !(grace >= 0) ||
        grace > 1e6) {
        usage(stderr);
        return 2;
    }
    if (!port && (port = free_port()) < 0) {
        fprintf(stderr, "dtrun: cannot find a free port: %s\n", strerror(errno));
        return 1;
    }
    if (set_job_token() != 0) {
        fprintf(stderr, "dtrun: cannot make a job token: %s\n", strerror(errno));
        return 1;
    }
    /* The signals dtrun waits for stay blocked except inside ppoll, so none slips in between
     * a check and the wait. */
    sigset_t waited, unblocked;
    sigemptyset(&waited);
    sigaddset(&waited, SIGCHLD);
    sigaddset(&waited, SIGINT);
    sigaddset(&waited, SIGTERM);
    sigaddset(&waited, SIGHUP);
    sigprocmask(SIG_BLOCK, &waited, &unblocked);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rank *ranks = calloc((size_t)n, sizeof *ranks);
    dtrun_end *ends = calloc((size_t)n, sizeof *ends);
    struct pollfd *fds = malloc(sizeof *fds * 2 * (size_t)n);
    int *who = malloc(sizeof *who * 2 * (size_t)n);
    if (!ranks || !ends || !fds || !who) {
        fprintf(stderr, "dtrun: out of memory\n");
        return 1;
    }
    make_record_dir();
    pid_t self = getpid();
    int alive = 0, open_streams = 0;
    for (int r = 0; r < n; r++) {
        int out[2], err[2];
        pid_t pid = -1;
        if (pipe(out) == 0 && pipe(err) == 0) pid = fork();
        if (pid == 0) start_child(r, n, addr, port, out, err, self, &unblocked, argv + i);
        if (pid < 0) {
            fprintf(stderr, "dtrun: cannot start rank %d: %s\n", r, strerror(errno));
            signal_all(ranks, n, SIGKILL);
            remove_record_dir();
            return 1;
        }
        close(out[1]);
        close(err[1]);
        ranks[r].pid = pid;
        ranks[r].s[0] = (stream){.fd = out[0], .out = 1};
        ranks[r].s[1] = (stream){.fd = err[0], .out = 2};
        alive++;
        open_streams += 2;
    }

    int64_t term_at = -1, kill_at = -1, reaped_all_at = -1;
    int failed = -1, interrupted = 0, forwarded = 0;
    while (alive > 0 || open_streams > 0) {
        int nf = 0;
        for (int r = 0; r < n; r++)
            for (int k = 0; k < 2; k++)
                if (ranks[r].s[k].fd >= 0) {
                    fds[nf] = (struct pollfd){.fd = ranks[r].s[k].fd, .events = POLLIN};
                    who[nf++] = 2 * r + k;
                }
        int64_t t = now_ns(), until = INT64_MAX;
        if (term_at >= 0) until = term_at;
        if (kill_at >= 0 && kill_at < until) until = kill_at;
        if (reaped_all_at >= 0 && reaped_all_at + LINGER_NS < until)
            until = reaped_all_at + LINGER_NS;
        int64_t wait = until == INT64_MAX ? -1 : until > t ? until - t : 0;
        struct timespec ts = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
        int k =
            got_child || got_signal ? 0 : ppoll(fds, (nfds_t)nf, wait < 0 ? NULL : &ts, &unblocked);
        /* Reaped before the output is drained, so each end is stamped when it happened. */
        int first = -1;
        if (got_child) {
            got_child = 0;
            first = reap(ranks, ends, n, &alive);
        }
        for (int j = 0; k > 0 && j < nf; j++) {
            if (!fds[j].revents) continue;
            stream *s = &ranks[who[j] / 2].s[who[j] % 2];
            drain(who[j] / 2, s);
            if (s->fd < 0) open_streams--;
        }
        t = now_ns();
        if (first >= 0 && failed < 0 && !interrupted) {
            char what[256];
            failed = first;
            dtrun_describe_end(what, sizeof what, first, &ends[first]);
            fprintf(stderr, "dtrun: %s\n", what);
            if (alive > 0) {
                fprintf(stderr, "dtrun: stopping the other ranks (after %.1f s of grace)\n", grace);
                term_at = t + (int64_t)(grace * 1e9);
            }
        }
        if (got_signal) { /* forwarded once; a second one kills */
            int sig = got_signal;
            got_signal = 0;
            if (failed < 0 && !interrupted) interrupted = sig;
            signal_all(ranks, n, forwarded++ ? SIGKILL : sig == SIGINT ? SIGINT : SIGTERM);
            term_at = -1;
            kill_at = t + TERM_TO_KILL_NS;
        }
        if (term_at >= 0 && t >= term_at && alive > 0) {
            signal_all(ranks, n, SIGTERM);
            term_at = -1;
            kill_at = t + TERM_TO_KILL_NS;
        }
        if (kill_at >= 0 && t >= kill_at && alive > 0) {
            signal_all(ranks, n, SIGKILL);
            kill_at = -1;
        }
        if (alive == 0 && reaped_all_at < 0) reaped_all_at = t;
        if (alive == 0 && t - reaped_all_at >= LINGER_NS) break;
    }

    int code = interrupted ? 128 + interrupted : 0;
    if (!interrupted) {
        char path[4200];
        for (int r = 0; r < n && record_dir[0]; r++) {
            record_path(path, sizeof path, r);
            dtrun_record_read(path, &ends[r].rec);
        }
        dtrun_why why;
        int root = dtrun_root_cause(ends, n, &why);
        dtrun_report(stderr, ends, n, root, why);
        if (root >= 0) code = ends[root].code;
    }
    remove_record_dir();
    free(fds);
    free(who);
    free(ends);
    free(ranks);
    return code;
}
