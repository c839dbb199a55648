/* Training resumed from a checkpoint on another mesh. AdamW over two parameters on a 2x2 mesh
 * takes 3 steps, saves parameters, optimizer state (dt_optim_state_named) and step counts (the
 * blob), takes 3 more; a run on 3 ranks with other placements loads the checkpoint and takes
 * the same 3 steps. Gradients are given (dt_backward_with), so every update is elementwise
 * and the final parameters must agree bit for bit. Then examples/tiny_llama.c: its loss curve
 * resumed on 3, 1 and 2 ranks continues the uninterrupted 2x2 run's. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include <math.h>

#include "../../examples/tiny_llama.h"
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
        R_OK(dt_tensor_full_tensor(p[k], full, sizeof full));
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

/* --- the tiny Llama of examples/tiny_llama.c --------------------------------------------- */

enum { STEPS = 16, SAVE_AT = 8, MAXP = 16 };
static const tl_config tl_cfg = {.vocab = 11, .seq = 6, .batch = 2, .dim = 8, .layers = 1,
                                 .heads = 2, .kv_heads = 2, .hidden = 12};

typedef struct train_arg {
    const char *mesh, *dir;
    int dp_dim, tp_dim;
    int resume; /* 0: steps 0..STEPS-1, saving after SAVE_AT; 1: load, steps SAVE_AT.. */
    float loss[STEPS];
} train_arg;

static dt_status train_body(dt_ctx *ctx, void *arg) {
    train_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, a->mesh, &mesh));
    tl_model m;
    tl_layout l = {.dp_dim = a->dp_dim, .tp_dim = a->tp_dim};
    /* a resumed run starts from other weights: everything it has comes from the checkpoint */
    R_OK(tl_model_init(&m, mesh, &tl_cfg, &l, a->resume ? 999 : 1234));
    dt_adamw_options ao = {
        .lr = 0.02, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *o;
    R_OK(dt_optim_adamw_create_params(&ao, m.params, &o));
    int np, ns;
    const char *pnames[MAXP];
    dt_tensor *pts[MAXP];
    R_OK(dt_params_arrays(m.params, pnames, pts, MAXP, &np));
    R_OK(dt_optim_state_count(o, &ns));
    char snames[2 * MAXP][96];
    const char *names[3 * MAXP];
    dt_tensor *ts[3 * MAXP];
    for (int k = 0; k < np; k++) names[k] = pnames[k], ts[k] = pts[k];
    for (int i = 0; i < ns; i++) {
        R_OK(dt_optim_state_named(o, pnames, i, snames[i], sizeof snames[i], &ts[np + i]));
        names[np + i] = snames[i];
    }
    int first = 0;
    if (a->resume) {
        R_OK(dt_checkpoint_load(a->dir, names, ts, np + ns, NULL));
        int64_t blob[1 + MAXP] = {0}; /* the data position, then the step counts */
        size_t len;
        R_OK(dt_checkpoint_blob(a->dir, blob, sizeof blob, &len));
        R_CHECK(len == sizeof(int64_t) * (size_t)(1 + np), "blob of %zu bytes", len);
        first = (int)blob[0];
        for (int k = 0; k < np; k++)
            R_OK(dt_optim_steps_set(o, k, blob[1 + k]));
    }
    for (int s = first; s < STEPS; s++) {
        if (!a->resume && s == SAVE_AT) {
            int64_t blob[1 + MAXP] = {s};
            for (int k = 0; k < np; k++)
                R_OK(dt_optim_steps_get(o, k, &blob[1 + k]));
            dt_checkpoint_save_options so = {.blob = blob,
                                             .blob_bytes = sizeof(int64_t) * (size_t)(1 + np)};
            R_OK(dt_checkpoint_save(ctx, a->dir, names, ts, np + ns, &so));
        }
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_OK(dt_tensor_full_tensor(loss, &a->loss[s], sizeof a->loss[s]));
        R_OK(dt_backward(loss));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
        R_OK(dt_optim_step(o));
        R_OK(dt_optim_zero_grad(o));
    }
    R_OK(dt_optim_destroy(o));
    tl_model_free(&m);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* Saved on 2x2 (dp x tp) after 8 steps; resumed on 3 tp ranks and on one rank, the loss curve
 * continues as the uninterrupted run's, within test_train's cross-layout tolerance (1e-5
 * relative: tensor parallelism sums in another order). */
Test(checkpoint_optim, tiny_llama_resumed_on_other_meshes_continues_the_loss_curve) {
    char dir[] = "/tmp/dtckpt-train-XXXXXX", path[64];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/step-8", dir);
    train_arg ref = {.mesh = "2x2", .dir = path, .dp_dim = 0, .tp_dim = 1};
    t_run(4, train_body, &ref);
    static const struct {
        const char *mesh;
        int n, dp, tp;
    } onto[] = {{"3", 3, -1, 0}, {"1", 1, -1, -1}, {"2", 2, 0, -1}};
    for (size_t i = 0; i < sizeof onto / sizeof onto[0]; i++) {
        train_arg r = {.mesh = onto[i].mesh,
                       .dir = path,
                       .dp_dim = onto[i].dp,
                       .tp_dim = onto[i].tp,
                       .resume = 1};
        t_run(onto[i].n, train_body, &r);
        for (int s = SAVE_AT; s < STEPS; s++)
            cr_expect(fabsf(r.loss[s] - ref.loss[s]) <= 1e-5f * fabsf(ref.loss[s]),
                      "resumed on %s, step %d: loss %.8g, uninterrupted %.8g", onto[i].mesh, s,
                      r.loss[s], ref.loss[s]);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
