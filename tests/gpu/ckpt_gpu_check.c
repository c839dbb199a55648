/* Checkpoints of tensors on GPUs (make test-gpu-sim runs it on cudasim, make gpu-check on a
 * GPU): saved from device memory (staged to the host, synchronously and asynchronously) and
 * loaded into device memory (uploaded), across meshes and between CPU and GPU ranks, checked
 * bit-exactly as in tests/checkpoint/test_checkpoint.c. Prints "[ok] <case>" per case and ends with
 * "N passed, N failed"; exits 0 when all pass, 1 otherwise, 77 when there is no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "ckpt_common.h"

static int failures, passes;

static void run(const char *what, int n, ct_run *r) {
    dt_status st = dt_local_run(n, ct_body, r, NULL);
    printf("[%s] %s%s%s\n", st == DT_OK ? "ok" : "FAILED", what, st == DT_OK ? "" : ": ",
           st == DT_OK ? "" : dt_last_error());
    failures += st != DT_OK;
    passes += st == DT_OK;
}

static ct_run onto(ct_run r, int n, int cuda) {
    r.load = 1, r.async = 0, r.cuda = cuda, r.mesh_ndim = 1, r.mesh_shape[0] = n;
    for (int i = 0; i < r.n; i++)
        snprintf(r.specs[i].placements, sizeof r.specs[i].placements, "%s",
                 r.specs[i].ndim ? "S(0)" : "R");
    return r;
}

int main(void) {
    if (dt_cuda_device_count() < 1) {
        printf("no GPU: skipped\n");
        return 77;
    }
    char root[] = "/tmp/dtckpt-gpu-XXXXXX", a[64], b[64];
    if (!mkdtemp(root)) return perror("mkdtemp"), 1;
    snprintf(a, sizeof a, "%s/gpu", root);
    snprintf(b, sizeof b, "%s/gpu-async", root);
    ct_run g = ct_fixed(a, 3);
    g.cuda = 1;
    run("save from GPU ranks, 2x2", 4, &g);
    ct_run l = onto(g, 3, 1);
    run("load onto 3 GPU ranks", 3, &l);
    l = onto(g, 2, 0);
    run("load onto 2 CPU ranks", 2, &l);
    l = g;
    l.load = 1;
    run("load onto the same GPU mesh", 4, &l);
    ct_run ga = ct_fixed(b, 4);
    ga.cuda = 1, ga.async = 1;
    run("async save from GPU ranks", 4, &ga);
    l = onto(ga, 1, 1);
    run("load onto 1 GPU rank", 1, &l);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) failures++;
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
