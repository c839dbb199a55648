/* Who may join a world (src/comm/boot/admit.c): rank 0 and rank 1 run as processes
 * (tests/ranks/ucx_rank_prog.c, mode "ops"), and this test attacks rank 0's port in between: a
 * forged HELLO claiming rank 1 with a garbage UCX address, a forged world size, hundreds of
 * idle sockets and a half-sent header, an oversized HELLO, bytes of another protocol, a rank
 * with another job's token. Each must be logged by rank 0 and dropped while the real world
 * forms. Also: the token rules (DT_JOB_TOKEN off loopback, dtrun's fresh token per run), and
 * a program under torchrun, whose store holds MASTER_PORT (skipped when torchrun is not found:
 * DT_TORCHRUN or PATH). Needs UCX (skipped without). Paths from meson: DT_UCX_RANK_PROG,
 * DT_DTRUN. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/boot/wire.h"
#include "dt_config.h"
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */
#include "helpers.h"

#define TOKEN "token-of-this-job-4f1c"

static const char *need_env(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) cr_skip_test("%s is not set (run through meson test)", name);
    return v;
}

static void skip_without_ucx(void) {
    if (!DT_HAVE_UCX) cr_skip_test("built without UCX");
}

/* The environment every rank of the test world inherits (RANK is set per process). */
static void world_env(int port, const char *token, const char *startup_s) {
    char b[16];
    snprintf(b, sizeof b, "%d", port);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", b, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("UCX_TLS", "sm", 1);
    setenv("DT_STARTUP_TIMEOUT_S", startup_s, 1);
    if (token)
        setenv("DT_JOB_TOKEN", token, 1);
    else
        unsetenv("DT_JOB_TOKEN");
}

typedef struct proc {
    pid_t pid;
    char log[64];
} proc;

/* Starts ucx_rank_prog ops as rank `rank`, its output into a file. */
static proc spawn_rank(int rank) {
    const char *prog = need_env("DT_UCX_RANK_PROG");
    proc p;
    snprintf(p.log, sizeof p.log, "/tmp/dt_rendezvous_XXXXXX");
    int fd = mkstemp(p.log);
    cr_assert(fd >= 0);
    char b[16];
    snprintf(b, sizeof b, "%d", rank);
    setenv("RANK", b, 1);
    p.pid = fork();
    cr_assert(p.pid >= 0);
    if (p.pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execl(prog, prog, "ops", (char *)NULL);
        _exit(127);
    }
    close(fd);
    return p;
}

/* Waits up to secs for p (then kills it); its exit status (128 + signal) and output. */
static int finish(proc *p, double secs, char **out) {
    double t0 = t_now_s();
    int ws = 0;
    while (waitpid(p->pid, &ws, WNOHANG) == 0) {
        if (t_now_s() - t0 > secs) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &ws, 0);
            break;
        }
        t_sleep_ms(10);
    }
    FILE *f = fopen(p->log, "r");
    *out = calloc(1, 1 << 16);
    if (f) {
        size_t n = fread(*out, 1, (1 << 16) - 1, f);
        (*out)[n] = '\0';
        fclose(f);
    }
    unlink(p->log);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* Connects to rank 0's port, waiting (up to 20 s) until it listens. */
static int reach(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    for (int i = 0; i < 2000; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        t_sleep_ms(10);
    }
    cr_assert_fail("rank 0 never listened on port %d", port);
    return -1;
}

static void send_all(int fd, const void *p, size_t len) {
    cr_assert_eq(send(fd, p, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* 1 once rank 0 has closed fd (within 10 s): the stranger was dropped. */
static int dropped(int fd) {
    char b[64];
    for (double t0 = t_now_s(); t_now_s() - t0 < 10;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) == 1) {
            ssize_t k = recv(fd, b, sizeof b, 0);
            if (k <= 0) return 1;
        }
    }
    return 0;
}

static boot_wire_hello forged(int rank, int size, const char *token, uint64_t len) {
    boot_wire_hello h = {.hdr = {.magic = BOOT_WIRE_MAGIC,
                                 .type = BOOT_MSG_HELLO,
                                 .rank = rank,
                                 .status = size,
                                 .len = len}};
    if (token) memcpy(h.token, token, strlen(token));
    return h;
}

/* One stranger's message: sent, then rank 0 must drop it before the real rank 1 starts. */
typedef struct attack {
    const char *name;
    boot_wire_hello hello;
    int with_hello;
    const char *raw; /* sent instead of a HELLO when set */
    size_t blob;     /* garbage bytes after the HELLO */
    const char *logged;
} attack;

/* Rank 0 starts; the attack is made and dropped; rank 1 starts; both must finish the world,
 * and rank 0 must have logged the attack. */
static void world_despite(const attack *a) {
    skip_without_ucx();
    int port = t_closed_port();
    world_env(port, TOKEN, "30");
    proc r0 = spawn_rank(0);
    int fd = reach(port);
    if (a->with_hello) send_all(fd, &a->hello, sizeof a->hello);
    if (a->raw) send_all(fd, a->raw, strlen(a->raw));
    char junk[512];
    memset(junk, 0xA5, sizeof junk);
    if (a->blob) send_all(fd, junk, a->blob < sizeof junk ? a->blob : sizeof junk);
    int was_dropped = dropped(fd);
    close(fd);
    proc r1 = spawn_rank(1);
    char *out0, *out1;
    int c1 = finish(&r1, 60, &out1), c0 = finish(&r0, 60, &out0);
    cr_log_info("%s\nrank 0 (exit %d):\n%s\nrank 1 (exit %d):\n%s", a->name, c0, out0, c1, out1);
    cr_expect(was_dropped, "%s: rank 0 did not close the stranger's connection", a->name);
    cr_expect_eq(c0, 0, "%s: rank 0 exited with %d:\n%s", a->name, c0, out0);
    cr_expect_eq(c1, 0, "%s: rank 1 exited with %d:\n%s", a->name, c1, out1);
    cr_expect(strstr(out0, "[ok] ops on 2 ranks") && strstr(out1, "[ok] ops on 2 ranks"));
    cr_expect(strstr(out0, "dtensor: rendezvous at 127.0.0.1:") && strstr(out0, a->logged),
              "%s: rank 0 did not log \"%s\":\n%s", a->name, a->logged, out0);
    free(out0);
    free(out1);
}

/* Was: rank 0 took it as rank 1 and aborted inside UCX on the garbage address. */
Test(rendezvous_guard, forged_rank_with_garbage_address, .timeout = 120) {
    attack a = {"forged rank 1", forged(1, 2, NULL, 300), 1, NULL, 300, "wrong DT_JOB_TOKEN"};
    world_despite(&a);
}

Test(rendezvous_guard, forged_rank_with_a_guessed_token, .timeout = 120) {
    attack a = {"guessed token",     forged(1, 2, "token-of-this-job-4f1d", 64), 1, NULL, 64,
                "wrong DT_JOB_TOKEN"};
    world_despite(&a);
}

/* Was: "rank 1 says the world has 99 ranks" failed the whole job. */
Test(rendezvous_guard, forged_world_size, .timeout = 120) {
    attack a = {"forged world size", forged(1, 99, NULL, 16), 1, NULL, 16, "wrong DT_JOB_TOKEN"};
    world_despite(&a);
}

/* A length that rank 0 would once have tried to allocate, from a stranger and from a holder
 * of the token: neither is allocated. */
Test(rendezvous_guard, oversized_hello, .timeout = 120) {
    attack a = {"oversized, no token", forged(1, 2, NULL, 1ull << 40), 1, NULL, 0,
                "wrong DT_JOB_TOKEN"};
    world_despite(&a);
    attack b = {"oversized, with the token",
                forged(1, 2, TOKEN, 1ull << 40),
                1,
                NULL,
                0,
                "announces 1099511627776 bytes, over the limit"};
    world_despite(&b);
}

Test(rendezvous_guard, another_protocol, .timeout = 120) {
    attack a = {"http",
                {{0}},
                0,
                "GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: a-port-scanner/1.0\r\n"
                "Accept: */*\r\nAccept-Language: en\r\nConnection: keep-alive\r\n"
                "Cache-Control: no-cache\r\nPragma: no-cache\r\n\r\n",
                0,
                "not a dtensor rendezvous HELLO"};
    world_despite(&a);
    boot_wire_hello old = forged(1, 2, NULL, 0);
    old.hdr.magic = 0x44540002u; /* the previous protocol: a dtensor of another build */
    attack b = {"old dtensor", old, 1, NULL, 0, "another protocol version"};
    world_despite(&b);
}

/* Was: one connection at a time, 2 s each, so ~31 idle sockets outlasted the startup
 * timeout. Now 200 idle sockets (more than rank 0 reads at once) and a half-sent header stay
 * open the whole time, rank 1 comes last, and the world forms at once. */
Test(rendezvous_guard, idle_sockets, .timeout = 120) {
    skip_without_ucx();
    int port = t_closed_port();
    world_env(port, TOKEN, "20");
    proc r0 = spawn_rank(0);
    enum { IDLE = 200 };
    int fds[IDLE + 1];
    fds[0] = reach(port);
    boot_wire_hello half = forged(1, 2, NULL, 0);
    send_all(fds[0], &half, 10);
    for (int i = 1; i <= IDLE; i++)
        fds[i] = reach(port);
    double t0 = t_now_s();
    proc r1 = spawn_rank(1);
    char *out0, *out1;
    int c1 = finish(&r1, 60, &out1);
    double secs = t_now_s() - t0;
    int c0 = finish(&r0, 60, &out0);
    for (int i = 0; i <= IDLE; i++)
        close(fds[i]);
    cr_log_info("rank 0 (exit %d):\n%s\nrank 1 (exit %d, %.2f s):\n%s", c0, out0, c1, secs, out1);
    cr_expect_eq(c0, 0, "rank 0 exited with %d:\n%s", c0, out0);
    cr_expect_eq(c1, 0, "rank 1 exited with %d:\n%s", c1, out1);
    cr_expect_lt(secs, 15.0, "rank 1 took %.1f s", secs);
    cr_expect(strstr(out0, "too many connections at once"), "%s", out0);
    free(out0);
    free(out1);
}

/* A real rank with another job's token: dropped at rank 0, which times out naming what it
 * dropped; the rank itself hears why it may have been turned away. */
Test(rendezvous_guard, rank_of_another_job, .timeout = 120) {
    skip_without_ucx();
    int port = t_closed_port();
    world_env(port, TOKEN, "2");
    proc r0 = spawn_rank(0);
    close(reach(port));
    setenv("DT_JOB_TOKEN", "another-job", 1);
    proc r1 = spawn_rank(1);
    char *out0, *out1;
    int c1 = finish(&r1, 60, &out1), c0 = finish(&r0, 60, &out0);
    cr_log_info("rank 0 (exit %d):\n%s\nrank 1 (exit %d):\n%s", c0, out0, c1, out1);
    cr_expect_eq(c0, 1, "%s", out0);
    cr_expect(strstr(out0, "wrong DT_JOB_TOKEN"), "%s", out0);
    cr_expect(strstr(out0, "1 of 2 ranks arrived; missing: 1"), "%s", out0);
    cr_expect(strstr(out0, "connection(s) were dropped as not ranks of this job"), "%s", out0);
    cr_expect_eq(c1, 1, "%s", out1);
    cr_expect(strstr(out1, "rank 0 drops ranks whose DT_JOB_TOKEN differs"), "%s", out1);
    free(out0);
    free(out1);
}

/* Launched by hand without a token: a world on loopback still forms. */
Test(rendezvous_guard, no_token_on_loopback, .timeout = 120) {
    skip_without_ucx();
    int port = t_closed_port();
    world_env(port, NULL, "30");
    proc r0 = spawn_rank(0), r1 = spawn_rank(1);
    char *out0, *out1;
    int c1 = finish(&r1, 60, &out1), c0 = finish(&r0, 60, &out0);
    cr_expect(c0 == 0 && c1 == 0, "exits %d %d:\n%s\n%s", c0, c1, out0, out1);
    free(out0);
    free(out1);
}

static dt_status never(dt_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return dt_error_set(DT_ERR_ARG, "the SPMD body should not have run");
}

/* Without a token, a rendezvous that other hosts could reach is refused on every rank before
 * anything listens or connects (0.0.0.0: every interface). A token too long is refused too. */
Test(rendezvous_guard, token_rules) {
    skip_without_ucx();
    world_env(t_closed_port(), NULL, "1");
    setenv("MASTER_ADDR", "0.0.0.0", 1);
    for (int rank = 0; rank < 2; rank++) {
        setenv("RANK", rank ? "1" : "0", 1);
        T_ERR(dt_ucx_run(never, NULL), DT_ERR_ARG, "DT_JOB_TOKEN is not set");
        cr_expect(strstr(dt_last_error(), "MASTER_ADDR=0.0.0.0 is not a loopback address"), "%s",
                  dt_last_error());
    }
    char longer[DT_BOOT_TOKEN_BYTES + 2];
    memset(longer, 'k', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    setenv("DT_JOB_TOKEN", longer, 1);
    T_ERR(dt_ucx_run(never, NULL), DT_ERR_ARG, "DT_JOB_TOKEN is 129 bytes long");
}

/* dtrun gives each run a fresh token, the same for all its ranks; a token set by the caller
 * is kept. */
Test(rendezvous_guard, dtrun_token) {
    char cmd[512], a[2][4][64] = {{{0}}};
    for (int run = 0; run < 2; run++) {
        snprintf(cmd, sizeof cmd,
                 "env -u DT_JOB_TOKEN %s -n 2 sh -c 'echo \"$RANK $DT_JOB_TOKEN\"'",
                 need_env("DT_DTRUN"));
        FILE *p = popen(cmd, "r");
        cr_assert(p);
        char line[256];
        while (fgets(line, sizeof line, p)) {
            int r;
            char tok[64];
            if (sscanf(line, "[rank %*d] %d %63s", &r, tok) == 2 && r >= 0 && r < 2)
                snprintf(a[run][r], sizeof a[run][r], "%s", tok);
        }
        cr_assert_eq(pclose(p), 0);
        cr_expect_eq(strlen(a[run][0]), 32, "token \"%s\"", a[run][0]);
        cr_expect_str_eq(a[run][0], a[run][1]);
    }
    cr_expect_str_neq(a[0][0], a[1][0], "two runs got the same token");
    snprintf(cmd, sizeof cmd, "env DT_JOB_TOKEN=mine %s -n 1 sh -c 'echo \"[$DT_JOB_TOKEN]\"'",
             need_env("DT_DTRUN"));
    FILE *p = popen(cmd, "r");
    char line[256] = "";
    cr_assert(p && fgets(line, sizeof line, p));
    pclose(p);
    cr_expect(strstr(line, "[mine]"), "%s", line);
}

/* --- torchrun ------------------------------------------------------------------------------ */

/* torchrun from DT_TORCHRUN or PATH; NULL when there is none. */
static const char *find_torchrun(char *buf, size_t cap) {
    const char *t = getenv("DT_TORCHRUN");
    if (t && *t) return access(t, X_OK) == 0 ? t : NULL;
    const char *path = getenv("PATH");
    while (path && *path) {
        size_t n = strcspn(path, ":");
        snprintf(buf, cap, "%.*s/torchrun", (int)n, path);
        if (n && access(buf, X_OK) == 0) return buf;
        path += n + (path[n] == ':');
    }
    return NULL;
}

/* The README's line: torchrun's own store holds MASTER_PORT, so rank 0 listens elsewhere and
 * the ranks meet through that store. Was: "rank 0 cannot listen on MASTER_ADDR:MASTER_PORT:
 * Address already in use". */
Test(rendezvous_torchrun, readme_line, .timeout = 300) {
    skip_without_ucx();
    char buf[4096], cmd[8192];
    const char *torchrun = find_torchrun(buf, sizeof buf);
    if (!torchrun) cr_skip_test("torchrun not found (set DT_TORCHRUN or put it on PATH)");
    snprintf(cmd, sizeof cmd,
             "env -u DT_JOB_TOKEN -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT UCX_TLS=sm "
             "%s --nproc-per-node 4 --master-port %d --no-python %s ops 2>&1",
             torchrun, t_closed_port(), need_env("DT_UCX_RANK_PROG"));
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char *out = calloc(1, 1 << 20);
    size_t len = 0, k;
    while ((k = fread(out + len, 1, (1 << 20) - 1 - len, p)) > 0)
        len += k;
    int ws = pclose(p);
    cr_log_info("%s\n%s", cmd, out);
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "torchrun exited with %d:\n%s", ws, out);
    int oks = 0;
    for (const char *s = out; (s = strstr(s, "[ok] ops on 4 ranks")); s++)
        oks++;
    cr_expect_eq(oks, 4, "%d ranks said ok:\n%s", oks, out);
    free(out);
}
