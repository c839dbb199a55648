/* One rank of the checkpoint tests on the UCX runtime (tests/checkpoint/test_checkpoint_ucx.c runs
 * it under dtrun). Usage:
 *   ckpt_rank_prog save <root> <step> [<kill_rank> <stage>]
 *       saves ct_fixed's tensors for step on a 2x2 mesh into <root>/step-<step>; with a kill
 *       rank, that rank SIGKILLs itself when the save reaches stage (dt_checkpoint_stage)
 *   ckpt_rank_prog load <root> <step>
 *       loads them onto a 1-D mesh of every rank with [S(0)] (R for 0-d) and checks each
 *       shard bit-exactly against the data of step
 * Exits 0 on success, 1 otherwise. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "ckpt_common.h"

typedef struct prog {
    const char *mode, *root;
    int step, kill_rank, kill_stage;
} prog;

static void maybe_die(void *arg, dt_checkpoint_stage stage, int rank) {
    const prog *p = arg;
    if (rank == p->kill_rank && (int)stage == p->kill_stage) raise(SIGKILL);
}

static dt_status body(dt_ctx *ctx, void *arg) {
    prog *p = arg;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/step-%d", p->root, p->step);
    ct_run r = ct_fixed(dir, (uint64_t)p->step);
    r.progress = maybe_die, r.progress_arg = p;
    if (strcmp(p->mode, "load") == 0) {
        r.load = 1, r.mesh_ndim = 1, r.mesh_shape[0] = dt_ctx_size(ctx);
        for (int i = 0; i < r.n; i++)
            snprintf(r.specs[i].placements, sizeof r.specs[i].placements, "%s",
                     r.specs[i].ndim ? "S(0)" : "R");
    }
    dt_status st = ct_body(ctx, &r);
    if (st == DT_OK) printf("[ok] %s step %d\n", p->mode, p->step);
    return st;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4) {
        fprintf(stderr, "usage: ckpt_rank_prog save|load <root> <step> [<kill_rank> <stage>]\n");
        return 1;
    }
    prog p = {argv[1], argv[2], atoi(argv[3]), argc > 5 ? atoi(argv[4]) : -1,
              argc > 5 ? atoi(argv[5]) : -1};
    dt_status st = dt_ucx_run(body, &p);
    if (st == DT_OK) return 0;
    fprintf(stderr, "dt_ucx_run: %s: %s\n", dt_status_str(st), dt_last_error());
    return 1;
}
