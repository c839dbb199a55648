/* A rank program for dtrun's own tests (tests/tools/test_dtrun.c): worlds that fail in an order set
 * on purpose, so dtrun's choice of the root cause can be checked without races. The rank at
 * fault (the last, "the culprit") ends only after every other rank has ended, the worst case
 * of the real race (dtrun seeing a consequence before its cause). Plain POSIX, no dtensor:
 * the records are written by hand, in the format comm/boot/failure.h documents.
 *
 *   dtrun_rank_prog killed-last DIR   the others exit 3 (no record); then the culprit SIGKILLs
 *                                     itself: the root cause is the culprit, status 137
 *   dtrun_rank_prog named-last DIR    the others record that the culprit failed and exit 3;
 *                                     then the culprit exits 4 (no record): root cause, 4
 *   dtrun_rank_prog origin-last DIR   the culprit records a failure of its own; the others
 *                                     then die of SIGABRT; then the culprit exits 5: root 5
 *
 * DIR: an empty directory all ranks share (pid files, and the culprit's go-ahead). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *dir;

static void pause_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Writes text to path whole or not at all (temporary file, then rename). */
static void put_file(const char *path, const char *text) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void record(int failed_rank, int origin, const char *status, const char *message) {
    const char *path = getenv("DT_ERROR_FILE");
    struct timespec ts;
    char text[1024];
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(text, sizeof text,
             "{\"rank\":%s, \"failed_rank\": %d,\"origin\" :%s,\n\"status\":\"%s\",\"message\":"
             "\"%s\",\"monotonic_ns\":%lld,\"extra\":{}}",
             getenv("RANK"), failed_rank, origin ? "true" : "false", status, message,
             (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (!path) {
        fprintf(stderr, "DT_ERROR_FILE is not set\n");
        exit(1);
    }
    put_file(path, text);
}

/* Blocks until the file DIR/name exists. */
static void wait_for(const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    while (access(path, F_OK) != 0)
        pause_ms(1);
}

/* 1 when process pid has ended: gone, or a zombie dtrun has not reaped yet. */
static int ended(long pid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    char *paren = ok ? strrchr(line, ')') : NULL; /* "pid (comm) S ..." */
    return !paren || paren[1] != ' ' || paren[2] == 'Z' || paren[2] == 'X';
}

/* This rank's pid in DIR/pid<R>, so the culprit can wait for it to end. */
static void announce(int rank) {
    char path[4200], text[32];
    snprintf(path, sizeof path, "%s/pid%d", dir, rank);
    snprintf(text, sizeof text, "%ld\n", (long)getpid());
    put_file(path, text);
}

/* Blocks until every rank but this one has ended. */
static void wait_for_the_others(int me, int n) {
    for (int r = 0; r < n; r++) {
        if (r == me) continue;
        char name[32], path[4200];
        snprintf(name, sizeof name, "pid%d", r);
        wait_for(name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "r");
        long pid = 0;
        if (!f || fscanf(f, "%ld", &pid) != 1) exit(1);
        fclose(f);
        while (!ended(pid))
            pause_ms(1);
    }
}

int main(int argc, char **argv) {
    const char *rank_s = getenv("RANK"), *size_s = getenv("WORLD_SIZE");
    if (argc != 3 || !rank_s || !size_s) {
        fprintf(stderr, "usage (under dtrun): dtrun_rank_prog killed-last|named-last|origin-last "
                        "DIR\n");
        return 2;
    }
    const char *mode = argv[1];
    int me = atoi(rank_s), n = atoi(size_s), culprit = n - 1;
    dir = argv[2];
    if (!strcmp(mode, "killed-last")) {
        if (me != culprit) {
            announce(me);
            return 3;
        }
        wait_for_the_others(me, n);
        raise(SIGKILL);
    } else if (!strcmp(mode, "named-last")) {
        if (me != culprit) {
            char msg[64];
            snprintf(msg, sizeof msg, "rank %d went away", culprit);
            record(culprit, 0, "DT_ERR_ABORTED", msg);
            announce(me);
            return 3;
        }
        wait_for_the_others(me, n);
        return 4;
    } else if (!strcmp(mode, "origin-last")) {
        if (me != culprit) {
            wait_for("go");
            announce(me);
            struct rlimit none = {0, 0};
            setrlimit(RLIMIT_CORE, &none); /* no core file for a planned abort */
            raise(SIGABRT);
            return 1;
        }
        record(me, 1, "DT_ERR_ARG", "bad \\\"input\\\"\\n on this rank");
        char path[4200];
        snprintf(path, sizeof path, "%s/go", dir);
        put_file(path, "go\n");
        wait_for_the_others(me, n);
        return 5;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
