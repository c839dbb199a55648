/* dtrun's choice of a failed world's root cause: the rules as a table (tools/dtrun_blame.c,
 * compiled in), the error record the runtimes write (comm/boot/failure.c) read back by dtrun's
 * parser, and whole worlds under dtrun (tests/ranks/dtrun_rank_prog.c) where the rank at fault ends
 * last, on purpose: the race that made dtrun report a survivor's status, made certain. Binary
 * paths come from meson (DT_DTRUN, DT_DTRUN_RANK_PROG). Runs in every build. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/boot/boot.h"
#include "comm/boot/failure.h"
#include "dtrun.h"
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */
#include "helpers.h"

#define OUT_CAP (1 << 16)

/* --- the rules ------------------------------------------------------------------------------ */

static dtrun_end exited(int code, int64_t seen_ns) {
    return (dtrun_end){.code = code, .seen_ns = seen_ns};
}

static dtrun_end killed(int sig, int ours, int64_t seen_ns) {
    return (dtrun_end){.code = 128 + sig, .signal = sig, .signal_ours = ours, .seen_ns = seen_ns};
}

static dtrun_end with_record(dtrun_end e, int failed_rank, int origin, int64_t at_ns) {
    e.rec =
        (dtrun_record){.present = 1, .failed_rank = failed_rank, .origin = origin, .at_ns = at_ns};
    return e;
}

typedef struct blame_case {
    const char *name;
    int n;
    dtrun_end ends[4];
    int root;
    dtrun_why why;
} blame_case;

Test(dtrun_blame, rules) {
    const blame_case cases[] = {
        {"all succeeded", 3, {exited(0, 1), exited(0, 2), exited(0, 3)}, -1, DTRUN_NO_FAILURE},
        {"one failure", 3, {exited(0, 1), exited(5, 2), exited(0, 3)}, 1, DTRUN_FIRST},
        /* The flaky CI run: the killed rank reaped after the survivors it brought down. */
        {"killed rank seen last, survivors' records name it",
         3,
         {with_record(exited(3, 10), 2, 0, 5), with_record(exited(3, 10), 2, 0, 6),
          killed(9, 0, 11)},
         2,
         DTRUN_NAMED},
        {"killed rank seen last, no records",
         3,
         {exited(3, 10), exited(3, 10), killed(9, 0, 11)},
         2,
         DTRUN_SIGNAL},
        {"same wake-up, no records: the signal wins over the lower rank",
         3,
         {exited(3, 10), exited(3, 10), killed(9, 0, 10)},
         2,
         DTRUN_SIGNAL},
        {"an own failure beats a signal that followed it",
         3,
         {killed(6, 0, 1), killed(6, 0, 1), with_record(exited(5, 9), 2, 1, 0)},
         2,
         DTRUN_ORIGIN},
        {"the earliest own failure of two",
         3,
         {with_record(exited(1, 1), 0, 1, 30), with_record(exited(1, 2), 1, 1, 20), exited(3, 3)},
         1,
         DTRUN_ORIGIN},
        {"an own failure of a rank that exited 0 blames nobody",
         2,
         {with_record(exited(0, 1), 0, 1, 1), exited(3, 2)},
         1,
         DTRUN_FIRST},
        {"a timeout is not an own failure: the rank it names",
         3,
         {with_record(exited(3, 5), 0, 0, 4), with_record(exited(3, 6), 0, 0, 3), killed(15, 1, 9)},
         0,
         DTRUN_NAMED},
        {"a named rank that succeeded is skipped",
         3,
         {with_record(exited(3, 5), 1, 0, 4), exited(0, 1), with_record(exited(3, 4), 2, 0, 5)},
         2,
         DTRUN_FIRST},
        {"dtrun's own SIGTERM is no root cause",
         3,
         {killed(15, 1, 1), exited(7, 8), killed(15, 1, 2)},
         1,
         DTRUN_FIRST},
        {"seen together: the earlier record, then the lower rank",
         4,
         {exited(3, 5), with_record(exited(3, 5), 1, 0, 9), with_record(exited(3, 5), 2, 0, 8),
          exited(0, 1)},
         2,
         DTRUN_FIRST},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const blame_case *c = &cases[i];
        dtrun_why why = DTRUN_NO_FAILURE;
        int root = dtrun_root_cause(c->ends, c->n, &why);
        cr_expect(root == c->root && why == c->why, "%s: root %d (rule %d), expected %d (rule %d)",
                  c->name, root, why, c->root, c->why);
    }
}

/* --- the record ----------------------------------------------------------------------------- */

Test(dtrun_blame, record_parse) {
    dtrun_record r;
    cr_assert_eq(dtrun_record_parse(" {\"rank\": 1, \"failed_rank\":3 ,\"origin\": true,\n"
                                    "\"status\":\"DT_ERR_ARG\", \"nested\": \"x\\\"}\", "
                                    "\"message\": \"a \\\"b\\\"\\n\\u0041\\u00e9 \\\\ c\","
                                    "\"monotonic_ns\": 1234567890123, \"pid\": 7}",
                                    &r),
                 0);
    cr_expect(r.present && r.failed_rank == 3 && r.origin && r.at_ns == 1234567890123LL);
    cr_expect_str_eq(r.status, "DT_ERR_ARG");
    cr_expect_str_eq(r.message, "a \"b\"\nA? \\ c");
    /* Not records: no failed_rank, broken JSON, a truncated string. */
    cr_expect_eq(dtrun_record_parse("{\"origin\": true}", &r), -1);
    cr_expect(!r.present);
    cr_expect_eq(dtrun_record_parse("", &r), -1);
    cr_expect_eq(dtrun_record_parse("{\"failed_rank\": 1", &r), -1);
    cr_expect_eq(dtrun_record_parse("{\"failed_rank\": 1, \"message\": \"abc}", &r), -1);
    cr_expect_eq(dtrun_record_parse("[1, 2]", &r), -1);
}

/* A record's flight recorder: the last DTRUN_FLIGHT entries kept, in order; the report prints
 * each rank's last three on its line. */
Test(dtrun_blame, record_flight) {
    char text[2048];
    int len = snprintf(text, sizeof text, "{\"failed_rank\": 0, \"flight\": [");
    for (int i = 0; i < DTRUN_FLIGHT + 2; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "%s\"barrier #%d on world\"",
                        i ? ", " : "", i + 1);
    snprintf(text + len, sizeof text - (size_t)len, "], \"status\": \"DT_ERR_COMM\"}");
    dtrun_end e[2] = {{.code = 3}, {.code = 3}};
    cr_assert_eq(dtrun_record_parse(text, &e[0].rec), 0, "%s", text);
    cr_assert_eq(e[0].rec.nflight, DTRUN_FLIGHT);
    cr_expect_str_eq(e[0].rec.flight[0], "barrier #3 on world");
    cr_expect_str_eq(e[0].rec.flight[DTRUN_FLIGHT - 1], "barrier #10 on world");
    cr_expect_str_eq(e[0].rec.status, "DT_ERR_COMM");
    cr_expect_eq(dtrun_record_parse("{\"failed_rank\": 0, \"flight\": [\"a\" \"b\"]}", &e[1].rec), -1);
    cr_assert_eq(dtrun_record_parse("{\"failed_rank\": 0, \"flight\": []}", &e[1].rec), 0);
    char *buf = NULL;
    size_t cap = 0;
    FILE *out = open_memstream(&buf, &cap);
    dtrun_report(out, e, 2, 0, DTRUN_NAMED);
    fclose(out);
    cr_expect(strstr(buf, "dtrun:   rank 0 | barrier #8 on world | barrier #9 on world | barrier "
                          "#10 on world\n"),
              "%s", buf);
    cr_expect(!strstr(buf, "dtrun:   rank 1"), "%s", buf);
    free(buf);
}

static char *temp_dir(void) {
    char *d = strdup("/tmp/test_dtrun-XXXXXX");
    cr_assert(d && mkdtemp(d));
    return d;
}

/* What the runtimes write, as dtrun reads it; only the process's first failure. */
Test(dtrun_blame, runtime_writes_first_failure_once) {
    char *dir = temp_dir(), path[256];
    snprintf(path, sizeof path, "%s/rank1.json", dir);
    setenv("DT_ERROR_FILE", path, 1);
    dt_failure f, g;
    dt_failure_init(&f);
    dt_failure_init(&g);
    int64_t before = dt_boot_now_ns();
    cr_assert_eq(dt_failure_record(&f, 1, 1, DT_ERR_SHAPE, "bad \"shape\"\n(2, 3)"), 1);
    cr_expect_eq(dt_failure_record(&f, 1, 0, DT_ERR_ABORTED, "later"), 0);
    cr_expect_eq(dt_failure_record(&g, 1, 0, DT_ERR_ABORTED, "another world"), 1);
    dtrun_record r;
    cr_assert_eq(dtrun_record_read(path, &r), 0, "%s", path);
    cr_expect(r.failed_rank == 1 && r.origin, "failed_rank %d origin %d", r.failed_rank, r.origin);
    cr_expect_str_eq(r.status, "DT_ERR_SHAPE");
    cr_expect_str_eq(r.message, "bad \"shape\"\n(2, 3)");
    cr_expect(r.at_ns >= before && r.at_ns <= dt_boot_now_ns());
    /* A peer's failure heard of, and this rank's own aborts and timeouts, did not begin here. */
    cr_assert_eq(dt_failure_write_record(path, 1, 2, DT_ERR_SHAPE, "x", NULL), 0);
    cr_assert_eq(dtrun_record_read(path, &r), 0);
    cr_expect(r.failed_rank == 2 && !r.origin);
    cr_assert_eq(dt_failure_write_record(path, 1, 1, DT_ERR_ABORTED, "timed out", NULL), 0);
    cr_assert_eq(dtrun_record_read(path, &r), 0);
    cr_expect(r.failed_rank == 1 && !r.origin);
    cr_assert_eq(dt_failure_write_record(path, 1, 1, DT_ERR_PEER_EXITED, "rank 0 returned", NULL), 0);
    cr_assert_eq(dtrun_record_read(path, &r), 0);
    cr_expect(!r.origin);
    cr_assert_eq(dt_failure_write_record(path, 1, 1, DT_ERR_COMM, "could not reach rank 0", NULL), 0);
    cr_assert_eq(dtrun_record_read(path, &r), 0);
    cr_expect(!r.origin);
    cr_assert_eq(dt_failure_write_record(path, 1, 1, DT_ERR_NOMEM, "out of memory", NULL), 0);
    cr_assert_eq(dtrun_record_read(path, &r), 0);
    cr_expect(r.origin);
    cr_expect_eq(dt_failure_write_record("/nonexistent/dir/rank0.json", 0, 0, DT_ERR_ARG, "x", NULL), -1);
    dt_failure_fini(&f);
    dt_failure_fini(&g);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* --- whole worlds ----------------------------------------------------------------------------- */

typedef struct world_result {
    int code;
    char out[OUT_CAP];
} world_result;

static const char *need_env(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) cr_skip_test("%s is not set (run through meson test)", name);
    return v;
}

/* dtrun -n 3 --grace 30 dtrun_rank_prog <mode> <fresh dir>, with dtrun's records in a
 * TMPDIR of its own, which must be left empty. */
static void run_world(const char *mode, world_result *res) {
    char *shared = temp_dir(), *tmp = temp_dir(), cmd[1024];
    snprintf(cmd, sizeof cmd, "TMPDIR=%s %s -n 3 --grace 30 %s %s %s 2>&1", tmp,
             need_env("DT_DTRUN"), need_env("DT_DTRUN_RANK_PROG"), mode, shared);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t len = fread(res->out, 1, OUT_CAP - 1, p);
    res->out[len] = '\0';
    int ws = pclose(p);
    res->code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    cr_log_info("%s\n(exit %d)\n%s", cmd, res->code, res->out);
    cr_expect_eq(rmdir(tmp), 0, "dtrun left its records behind in %s", tmp);
    char clean[1200];
    snprintf(clean, sizeof clean, "rm -rf %s", shared);
    cr_expect_eq(system(clean), 0);
    free(shared);
    free(tmp);
}

/* The root cause line comes first and names want; each survivor is listed after it. */
static void expect_root_first(const world_result *r, const char *want) {
    const char *root = strstr(r->out, "dtrun: root cause: ");
    cr_assert(root, "no root cause in:\n%s", r->out);
    cr_expect(!strncmp(root + strlen("dtrun: root cause: "), want, strlen(want)),
              "root cause is not \"%s\":\n%s", want, r->out);
    for (int k = 0; k < 2; k++) {
        char also[64];
        snprintf(also, sizeof also, "dtrun: also failed: rank %d ", k);
        const char *at = strstr(r->out, also);
        cr_expect(at && at > root, "\"%s\" missing or before the root cause:\n%s", also, r->out);
    }
}

Test(dtrun_world, killed_rank_ending_last_is_the_root_cause, .timeout = 60) {
    world_result *r = malloc(sizeof *r);
    run_world("killed-last", r);
    cr_expect_eq(r->code, 137, "dtrun exited %d, expected rank 2's SIGKILL:\n%s", r->code, r->out);
    expect_root_first(r, "rank 2 was killed by signal 9");
    free(r);
}

Test(dtrun_world, rank_the_records_name_is_the_root_cause, .timeout = 60) {
    world_result *r = malloc(sizeof *r);
    run_world("named-last", r);
    cr_expect_eq(r->code, 4, "dtrun exited %d:\n%s", r->code, r->out);
    expect_root_first(r, "rank 2 exited with status 4 [the other ranks' error records name it]");
    cr_expect(strstr(r->out, "also failed: rank 0 exited with status 3: rank 2 failed "
                             "(DT_ERR_ABORTED): rank 2 went away\n"),
              "%s", r->out);
    free(r);
}

Test(dtrun_world, own_failure_beats_the_signals_it_caused, .timeout = 60) {
    world_result *r = malloc(sizeof *r);
    run_world("origin-last", r);
    cr_expect_eq(r->code, 5, "dtrun exited %d:\n%s", r->code, r->out);
    expect_root_first(r, "rank 2 exited with status 5: DT_ERR_ARG: bad \"input\"  on this rank [");
    cr_expect(strstr(r->out, "also failed: rank 1 was killed by signal 6"), "%s", r->out);
    free(r);
}
