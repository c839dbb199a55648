/* dtrun: runs N copies of a program on this host as the ranks of one world, torchrun style.
 *
 *   dtrun -n 4 ./prog args...
 *
 * Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1 unless
 * --addr) and MASTER_PORT (a free port unless --port); every line it prints comes out as
 * "[rank R] line" on dtrun's stdout or stderr. When a rank fails (non-zero exit or a signal)
 * the others get --grace seconds to notice and exit by themselves, then SIGTERM, then SIGKILL;
 * dtrun exits with the first failing rank's status (128 + signal number for a signal), 0 when
 * every rank succeeded. A plain POSIX program: no dtensor or UCX needed. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 65536
#define TERM_TO_KILL_S 3.0

typedef struct stream {
    int fd;  /* read end, -1 once closed */
    int out; /* 1 = stdout, 2 = stderr */
    size_t len;
    char buf[LINE_MAX_BYTES];
} stream;

typedef struct rank {
    pid_t pid; /* 0 once reaped */
    stream s[2];
} rank;

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) {
    got_signal = sig;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: dtrun -n N [--port P] [--addr A] [--grace S] [--] program [args...]\n"
               "  -n, --nproc N   number of ranks (processes) to start\n"
               "  --port P        MASTER_PORT for the rendezvous (default: a free port)\n"
               "  --addr A        MASTER_ADDR (default 127.0.0.1)\n"
               "  --grace S       after a rank fails, seconds the others get to exit by\n"
               "                  themselves before SIGTERM (default 2)\n"
               "Exit status: the first failing rank's (128 + signal for a signal), else 0.\n");
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

/* In the child: the rank's environment and output pipes, then the program. */
static void start_child(int r, int n, const char *addr, int port, int out[2], int err[2],
                        pid_t parent, char **argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the launcher */
    if (getppid() != parent) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    set_int("RANK", r);
    set_int("WORLD_SIZE", n);
    set_int("LOCAL_RANK", r);
    set_int("LOCAL_WORLD_SIZE", n);
    set_int("GROUP_RANK", 0);
    setenv("MASTER_ADDR", addr, 1);
    set_int("MASTER_PORT", port);
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

static int status_code(int ws) {
    if (WIFEXITED(ws)) return WEXITSTATUS(ws);
    if (WIFSIGNALED(ws)) return 128 + WTERMSIG(ws);
    return 1;
}

static void signal_all(rank *ranks, int n, int sig) {
    for (int r = 0; r < n; r++)
        if (ranks[r].pid > 0) kill(ranks[r].pid, sig);
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
    if (i >= argc || n < 1 || n > 65535 || port < 0 || port > 65535 || !(grace >= 0)) {
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
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rank *ranks = calloc((size_t)n, sizeof *ranks);
    if (!ranks) {
        fprintf(stderr, "dtrun: out of memory\n");
        return 1;
    }
    pid_t self = getpid();
    int alive = 0, open_streams = 0, failed_rank = -1, code = 0;
    for (int r = 0; r < n; r++) {
        int out[2], err[2];
        if (pipe(out) != 0 || pipe(err) != 0) {
            fprintf(stderr, "dtrun: pipe: %s\n", strerror(errno));
            signal_all(ranks, n, SIGKILL);
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) start_child(r, n, addr, port, out, err, self, argv + i);
        close(out[1]);
        close(err[1]);
        if (pid < 0) {
            fprintf(stderr, "dtrun: fork: %s\n", strerror(errno));
            signal_all(ranks, n, SIGKILL);
            return 1;
        }
        ranks[r].pid = pid;
        ranks[r].s[0] = (stream){.fd = out[0], .out = 1};
        ranks[r].s[1] = (stream){.fd = err[0], .out = 2};
        alive++;
        open_streams += 2;
    }

    struct pollfd *fds = malloc(sizeof *fds * 2 * (size_t)n);
    int *who = malloc(sizeof *who * 2 * (size_t)n);
    double term_at = -1, kill_at = -1, reaped_all_at = -1;
    while (alive > 0 || open_streams > 0) {
        int nf = 0;
        for (int r = 0; fds && who && r < n; r++)
            for (int k = 0; k < 2; k++)
                if (ranks[r].s[k].fd >= 0) {
                    fds[nf] = (struct pollfd){.fd = ranks[r].s[k].fd, .events = POLLIN};
                    who[nf++] = 2 * r + k;
                }
        int k = poll(fds, (nfds_t)nf, 100);
        for (int j = 0; k > 0 && j < nf; j++) {
            if (!fds[j].revents) continue;
            stream *s = &ranks[who[j] / 2].s[who[j] % 2];
            drain(who[j] / 2, s);
            if (s->fd < 0) open_streams--;
        }
        int ws;
        pid_t pid;
        while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) {
            for (int r = 0; r < n; r++) {
                if (ranks[r].pid != pid) continue;
                ranks[r].pid = 0;
                alive--;
                int c = status_code(ws);
                if (c != 0 && failed_rank < 0) {
                    failed_rank = r;
                    code = c;
                    if (WIFSIGNALED(ws))
                        fprintf(stderr, "dtrun: rank %d was killed by signal %d (%s)\n", r,
                                WTERMSIG(ws), strsignal(WTERMSIG(ws)));
                    else
                        fprintf(stderr, "dtrun: rank %d exited with status %d\n", r, c);
                    if (alive > 0) {
                        fprintf(stderr, "dtrun: stopping the other ranks (after %.1f s of grace)\n",
                                grace);
                        term_at = now_s() + grace;
                    }
                }
            }
        }
        double t = now_s();
        if (got_signal && failed_rank < 0) {
            failed_rank = n;
            code = 128 + got_signal;
            signal_all(ranks, n, got_signal == SIGINT ? SIGINT : SIGTERM);
            kill_at = t + TERM_TO_KILL_S;
        }
        if (term_at >= 0 && t >= term_at && alive > 0) {
            signal_all(ranks, n, SIGTERM);
            term_at = -1;
            kill_at = t + TERM_TO_KILL_S;
        }
        if (kill_at >= 0 && t >= kill_at && alive > 0) {
            signal_all(ranks, n, SIGKILL);
            kill_at = -1;
        }
        /* Output pipes a rank's own children still hold do not keep dtrun waiting long. */
        if (alive == 0 && reaped_all_at < 0) reaped_all_at = t;
        if (alive == 0 && t - reaped_all_at > 1.0) break;
    }
    free(fds);
    free(who);
    free(ranks);
    return code;
}
