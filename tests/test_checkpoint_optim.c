/* Training resumed from a checkpoint on another mesh: AdamW over two parameters on a 2x2 mesh
 * takes 3 steps, saves parameters, optimizer state (dt_optim_state_named) and step counts (the
 * blob), takes 3 more; a run on 3 ranks with other placements loads the checkpoint and takes
 * the same 3 steps. Gradients are given (dt_backward_with), so every update is elementwise
 * and the final parameters must agree bit for bit. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include "ckpt_common.h"
#include "helpers.h"

#define NP 2
static const int64_t shapes[NP][2] = {{9, 6}, {5, 1}};
static const int ndims[NP] = {2, 1};
static const char *const pnames[NP] = {"w", "b"};

typedef struct resume_arg {
    const char *dir;
    int mesh_n, mesh_shape[2];
    const char *pl[NP];
    int resume;          /* 0: steps 1-3, save, steps 4-6; 1: load, steps 4-6 */
    int params_only;     /* resume without the optimizer state (non-strict) */
    float final[NP][64]; /* full parameters after step 6 (rank 0's) */
} resume_arg;

static ct_spec pspec(int k, const char *pl, uint64_t seed) {
    return ct_spec_make(pnames[k], DT_F32, ndims[k], shapes[k], pl, seed, 1);
}

static dt_status make(dt_mesh *mesh, const ct_spec *s, dt_tensor **out) {
    dt_placement pl[2];
    int np;
    R_OK(dt_placements_parse(s->placements, pl, 2, &np));
    size_t bytes;
    void *full = ct_full(s, &bytes);
    dt_status st =
        dt_tensor_distribute(mesh, full, DT_F32, s->ndim, s->shape, np, pl, DT_ALL_RANKS, out);
    free(full);
    return st;
}

static dt_status step(dt_mesh *mesh, dt_optim *o, dt_tensor **p, const resume_arg *a, int t) {
    for (int k = 0; k < NP; k++) {
        dt_tensor *g;
        ct_spec s = pspec(k, a->pl[k], 1000u * (uint64_t)t + (uint64_t)k);
        R_OK(make(mesh, &s, &g));
        R_OK(dt_backward_with(p[k], g));
        dt_tensor_release(g);
    }
    R_OK(dt_optim_step(o));
    return dt_optim_zero_grad(o);
}

static dt_status resume_body(dt_ctx *ctx, void *arg) {
    resume_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, a->mesh_n, a->mesh_shape, NULL, &mesh));
    dt_tensor *p[NP];
    for (int k = 0; k < NP; k++) {
        ct_spec s = pspec(k, a->pl[k], 7 + (uint64_t)k);
        R_OK(make(mesh, &s, &p[k]));
        R_OK(dt_tensor_set_requires_grad(p[k], 1));
    }
    dt_adamw_options ao = {
        .lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
    dt_param_group g = {.params = p, .n = NP};
    dt_optim *o;
    R_OK(dt_optim_adamw_create(&ao, &g, 1, &o));
    /* the names and tensors a checkpoint holds: parameters, then the optimizer's state */
    int ns;
    R_OK(dt_optim_state_count(o, &ns));
    R_CHECK(ns == 2 * NP, "AdamW has %d state tensors", ns);
    char snames[2 * NP][64];
    const char *names[3 * NP];
    dt_tensor *ts[3 * NP];
    for (int k = 0; k < NP; k++)
        names[k] = pnames[k], ts[k] = p[k];
    for (int i = 0; i < ns; i++) {
        R_OK(dt_optim_state_named(o, pnames, i, snames[i], sizeof snames[i], &ts[NP + i]));
        names[NP + i] = snames[i];
    }
    R_CHECK(strcmp(snames[1], "w.exp_avg_sq") == 0, "state 1 is %s", snames[1]);
    if (!a->resume) {
        for (int t = 1; t <= 3; t++)
            R_OK(step(mesh, o, p, a, t));
        int64_t steps[NP];
        for (int k = 0; k < NP; k++)
            R_OK(dt_optim_steps_get(o, k, &steps[k]));
        dt_checkpoint_save_options so = {.blob = steps, .blob_bytes = sizeof steps};
        R_OK(dt_checkpoint_save(ctx, a->dir, names, ts, NP + ns, &so));
    } else {
        dt_checkpoint_load_options lo = {.strict = !a->params_only};
        R_OK(dt_checkpoint_load(a->dir, names, ts, a->params_only ? NP : NP + ns, &lo));
        int64_t steps[NP];
        size_t len;
        R_OK(dt_checkpoint_blob(a->dir, steps, sizeof steps, &len));
        R_CHECK(len == sizeof steps, "blob of %zu bytes", len);
        for (int k = 0; k < NP; k++)
            R_OK(dt_optim_steps_set(o, k, steps[k]));
    }
    for (int t = 4; t <= 6; t++)
        R_OK(step(mesh, o, p, a, t));
    for (int k = 0; k < NP; k++) {
        float full[64] = {0};
        R_OK(dt_tensor_full(p[k], full, sizeof full));
        if (dt_ctx_rank(ctx) == 0) memcpy(a->final[k], full, sizeof full);
    }
    dt_optim_destroy(o);
    for (int k = 0; k < NP; k++)
        dt_tensor_release(p[k]);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(checkpoint_optim, adamw_resumed_on_another_mesh_continues_exactly) {
    char dir[] = "/tmp/dtckpt-optim-XXXXXX", path[64];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/step-3", dir);
    resume_arg ref = {
        .dir = path, .mesh_n = 2, .mesh_shape = {2, 2}, .pl = {"S(0),S(1)", "R,S(0)"}};
    t_run(4, resume_body, &ref);
    resume_arg res = {
        .dir = path, .mesh_n = 1, .mesh_shape = {3}, .pl = {"S(1)", "S(0)"}, .resume = 1};
    t_run(3, resume_body, &res);
    for (int k = 0; k < NP; k++)
        cr_expect(memcmp(ref.final[k], res.final[k], sizeof ref.final[k]) == 0,
                  "parameter %s differs after resuming", pnames[k]);
    /* resumed without the optimizer state, the run differs: the comparison can fail */
    resume_arg fresh = res;
    fresh.params_only = 1;
    t_run(3, resume_body, &fresh);
    cr_expect(memcmp(ref.final[0], fresh.final[0], sizeof ref.final[0]) != 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
