/* Checkpoints on the UCX runtime: real processes under dtrun (tests/ranks/ckpt_rank_prog.c) save
 * on a 2x2 mesh and load on 3 ranks; a rank SIGKILLed at each stage of a save leaves the previous
 * checkpoint loadable and the new one reported incomplete, and the next save succeeds.
 * Skipped without UCX. Binary paths come from meson (DT_DTRUN, DT_CKPT_RANK_PROG). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_common.h"
#include "dt_config.h"
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */
#include "helpers.h"

static const char *need_env(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) cr_skip_test("%s is not set (run through meson test)", name);
    return v;
}

/* Runs "dtrun -n <n> ckpt_rank_prog <args>"; its exit status (128 + signal when killed). */
static int dtrun(int n, const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "env UCX_TLS=sm,self DT_TIMEOUT_S=30 %s -n %d --grace 5 %s %s 2>&1",
             need_env("DT_DTRUN"), n, need_env("DT_CKPT_RANK_PROG"), args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t len = fread(out, 1, cap - 1, p);
    out[len] = '\0';
    int ws = pclose(p);
    cr_log_info("%s\n%s", cmd, out);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static char *tmpdir(void) {
    char *d = strdup("/tmp/dtckpt-ucx-XXXXXX");
    cr_assert(d && mkdtemp(d), "mkdtemp");
    return d;
}

static void rmtree(const char *d) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    cr_assert_eq(system(cmd), 0);
}

static char out[1 << 16];

/* Removes d and frees its name (tmpdir's). */
static void rmtree_free(char *d) {
    rmtree(d);
    free(d);
}

/* The checkpoint of step, loaded here on 1 local rank: bit-exact. */
static void expect_loads(const char *root, int step) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/step-%d", root, step);
    ct_run r = ct_fixed(dir, (uint64_t)step);
    r.load = 1, r.mesh_ndim = 1, r.mesh_shape[0] = 1;
    for (int i = 0; i < r.n; i++)
        snprintf(r.specs[i].placements, sizeof r.specs[i].placements, "R");
    t_run(1, ct_body, &r);
}

Test(checkpoint_ucx, save_on_4_load_on_3) {
    if (!DT_HAVE_UCX) cr_skip_test("built without UCX");
    char *root = tmpdir(), args[700];
    snprintf(args, sizeof args, "save %s 1", root);
    cr_assert_eq(dtrun(4, args, out, sizeof out), 0, "%s", out);
    snprintf(args, sizeof args, "load %s 1", root);
    cr_assert_eq(dtrun(3, args, out, sizeof out), 0, "%s", out);
    cr_expect(strstr(out, "[rank 2] [ok] load step 1"), "%s", out);
    rmtree_free(root);
}

/* kill rank, stage: before its file, after it, rank 0 after every file, rank 0 after the
 * rename and before metadata.json. */
static const int kills[][2] = {{1, DT_CHECKPOINT_STAGED},
                               {2, DT_CHECKPOINT_RANK_FILE},
                               {0, DT_CHECKPOINT_RANK_FILE},
                               {0, DT_CHECKPOINT_RENAMED}};

Test(checkpoint_ucx, sigkill_mid_save_keeps_the_previous_checkpoint, .timeout = 240) {
    if (!DT_HAVE_UCX) cr_skip_test("built without UCX");
    char *root = tmpdir(), args[700], dir2[600], latest[700];
    snprintf(args, sizeof args, "save %s 1", root);
    cr_assert_eq(dtrun(4, args, out, sizeof out), 0, "%s", out);
    snprintf(dir2, sizeof dir2, "%s/step-2", root);
    for (size_t k = 0; k < sizeof kills / sizeof kills[0]; k++) {
        snprintf(args, sizeof args, "save %s 2 %d %d", root, kills[k][0], kills[k][1]);
        int code = dtrun(4, args, out, sizeof out);
        cr_assert_eq(code, 137, "kill rank %d at stage %d: dtrun exited %d\n%s", kills[k][0],
                     kills[k][1], code, out);
        T_ERR(dt_checkpoint_check(dir2, 0), DT_ERR_IO, "incomplete");
        cr_assert_eq(dt_checkpoint_latest(root, "step-", latest, sizeof latest), DT_OK, "%s",
                     dt_last_error());
        cr_expect(strstr(latest, "/step-1"), "latest is %s after kill %zu", latest, k);
        cr_assert_eq(dt_checkpoint_check(latest, 1), DT_OK, "%s", dt_last_error());
        expect_loads(root, 1);
    }
    snprintf(args, sizeof args, "save %s 2", root); /* over the debris of the killed saves */
    cr_assert_eq(dtrun(4, args, out, sizeof out), 0, "%s", out);
    cr_assert_eq(dt_checkpoint_check(dir2, 1), DT_OK, "%s", dt_last_error());
    expect_loads(root, 2);
    rmtree_free(root);
}
