/* dt_train_state's bad input and mismatches: every one a clear error naming what is at fault,
 * the same on every rank, and a failed load changes nothing of the state (parameters,
 * optimizer step counts and learning rate, step, data position, schedule, generator). Also the
 * record a save writes, read back as text, and load_latest on a root with nothing in it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include "../../examples/tiny_llama.h"
#include "helpers.h"

static const tl_config cfg = {.vocab = 16,
                              .seq = 6,
                              .batch = 4,
                              .dim = 8,
                              .layers = 1,
                              .heads = 2,
                              .kv_heads = 2,
                              .hidden = 12};
static const dt_adamw_options adamw = {
    .lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
static const tl_layout dp = {.dp_dim = 0, .tp_dim = -1};

/* A model with an optimizer that took one step, and what a failed load must leave alone. */
typedef struct fixture {
    tl_model m;
    dt_optim *o;
    dt_lr_schedule sched;
    dt_generator gen;
    dt_train_state st;
    float w0[16 * 8]; /* tok_embeddings.weight before */
} fixture;

static dt_status fixture_make(fixture *f, dt_mesh *mesh, const tl_config *c, uint64_t seed) {
    memset(f, 0, sizeof *f);
    R_OK(tl_model_init(&f->m, mesh, c, &dp, seed));
    R_OK(dt_optim_adamw_create_params(&adamw, f->m.params, &f->o));
    dt_tensor *tok, *tgt, *loss;
    R_OK(tl_batch(&f->m, NULL, 0, 0, &tok, &tgt));
    R_OK(tl_loss(&f->m, tok, tgt, &loss));
    R_OK(dt_backward(loss));
    dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    R_OK(dt_optim_step(f->o));
    R_OK(dt_optim_zero_grad(f->o));
    f->sched = (dt_lr_schedule){.lr = 0.03, .lr_min = 0.2, .warmup_steps = 2, .decay_steps = 9};
    f->gen = (dt_generator){.seed = 11, .offset = 40};
    f->st = (dt_train_state){.params = f->m.params,
                             .optim = f->o,
                             .schedule = &f->sched,
                             .gen = &f->gen,
                             .step = 3,
                             .data_pos = 9};
    return DT_OK;
}

static void fixture_free(fixture *f) {
    dt_optim_destroy(f->o);
    tl_model_free(&f->m);
}

/* Moves the state on from what fixture_make saves (step 3, data_pos 9, generator offset 40,
 * schedule lr 0.03, one optimizer step at lr 0.01) and remembers the first parameter's values
 * (when it has cfg's shape): what unchanged() expects. */
static dt_status snap(fixture *f) {
    f->st.step = 5, f->st.data_pos = 20, f->gen.offset = 44, f->sched.lr = 0.04;
    R_OK(dt_optim_steps_set(f->o, 0, 2));
    R_OK(dt_optim_set_lr(f->o, 0.02));
    dt_tensor *w;
    R_OK(dt_params_at(f->m.params, 0, NULL, &w));
    return dt_tensor_full_tensor(w, f->w0, sizeof f->w0);
}

/* The state is as fixture_make left it. */
static dt_status unchanged(fixture *f, const char *after) {
    dt_train_state *s = &f->st;
    R_CHECK(s->step == 5 && s->data_pos == 20, "after %s: step %lld, data_pos %lld", after,
            (long long)s->step, (long long)s->data_pos);
    R_CHECK(f->gen.seed == 11 && f->gen.offset == 44, "after %s: generator changed", after);
    R_CHECK(f->sched.lr == 0.04 && f->sched.decay_steps == 9, "after %s: schedule changed", after);
    int64_t n;
    double lr;
    R_OK(dt_optim_steps_get(f->o, 0, &n));
    R_OK(dt_optim_get_lr(f->o, &lr));
    R_CHECK(n == 2 && lr == 0.02, "after %s: optimizer steps %lld, lr %g", after, (long long)n, lr);
    dt_tensor *w;
    float now[16 * 8];
    R_OK(dt_params_at(f->m.params, 0, NULL, &w));
    R_OK(dt_tensor_full_tensor(w, now, sizeof now));
    R_CHECK(memcmp(now, f->w0, sizeof now) == 0, "after %s: parameters changed", after);
    return DT_OK;
}

typedef struct err_arg {
    const char *root;
    t_rank_msgs msgs; /* each rank's message of the one-rank mismatch */
} err_arg;

static dt_status plain_save(dt_ctx *ctx, fixture *f, const char *dir, const char *blob) {
    const char *names[16];
    dt_tensor *ts[16];
    int n;
    R_OK(dt_params_arrays(f->m.params, names, ts, 16, &n));
    dt_checkpoint_save_options so = {.blob = blob, .blob_bytes = blob ? strlen(blob) : 0};
    return dt_checkpoint_save(ctx, dir, names, ts, n, blob ? &so : NULL);
}

static dt_status errors_body(dt_ctx *ctx, void *arg) {
    err_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2", &mesh));
    fixture f;
    R_OK(fixture_make(&f, mesh, &cfg, 1));
    char full[512], bare[512], part[512], plain[512], dir[512];
    snprintf(full, sizeof full, "%s/full", a->root);
    snprintf(bare, sizeof bare, "%s/bare", a->root);
    snprintf(part, sizeof part, "%s/part", a->root);
    snprintf(plain, sizeof plain, "%s/plain", a->root);
    R_OK(dt_train_state_save(ctx, full, &f.st, 0));
    R_OK(snap(&f));
    /* the record, as text: fields by hand */
    R_OK(dt_train_state_path(full, 3, dir, sizeof dir));
    char blob[4096] = {0};
    size_t len;
    R_OK(dt_checkpoint_blob(dir, blob, sizeof blob - 1, &len));
    static const char *const lines[] = {
        "dtensor-train-state 1\nstep 3\ndata_pos 9\n",
        "\ngenerator 11 40\n",
        "\nschedule 0.029999999999999999 0.20000000000000001 2 0 9\n",
        "\noptim AdamW 0.01\n",
        "\ntensor tok_embeddings.weight\n",
        "\nstate tok_embeddings.weight.exp_avg_sq\n",
        "\nsteps 1 output.weight\n"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        R_CHECK(strstr(blob, lines[i]), "the record lacks \"%s\":\n%s", lines[i], blob);

    /* arguments */
    dt_train_state s = f.st;
    R_ERR(dt_train_state_save(NULL, full, &s, 0), DT_ERR_ARG, "argument ctx");
    R_ERR(dt_train_state_save(ctx, full, NULL, 0), DT_ERR_ARG, "argument s");
    R_ERR(dt_train_state_save(ctx, NULL, &s, 0), DT_ERR_ARG, "argument root");
    R_ERR(dt_train_state_save_async(ctx, full, &s, 0, NULL), DT_ERR_ARG, "argument out");
    s.step = -2;
    R_ERR(dt_train_state_save(ctx, full, &s, 0), DT_ERR_ARG, "s->step = -2");
    s = f.st, s.params = NULL;
    R_ERR(dt_train_state_save(ctx, full, &s, 0), DT_ERR_ARG, "s->params is NULL");
    R_ERR(dt_train_state_load(ctx, dir, &s), DT_ERR_ARG, "s->params is NULL");
    dt_params *empty;
    R_OK(dt_params_create(mesh, DT_F32, &empty));
    s.params = empty;
    R_ERR(dt_train_state_save(ctx, full, &s, 0), DT_ERR_ARG, "has no parameters");
    dt_module mod;
    R_OK(dt_params_module(empty, "lin", DT_MODULE_LINEAR, &mod));
    R_OK(dt_params_declare(mod, "weight", 1, (int64_t[]){4}, (dt_init){0}, NULL));
    R_ERR(dt_train_state_load(ctx, dir, &s), DT_ERR_ARG, "not materialized");
    dt_params_destroy(empty);
    /* an optimizer over a tensor the registry does not hold */
    dt_tensor *stray;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, (int64_t[]){3}, 1, (dt_placement[]){dt_replicate()},
                         &stray));
    R_OK(dt_tensor_set_requires_grad(stray, 1));
    dt_optim *o2;
    R_OK(dt_optim_adamw_create(&adamw, &(dt_param_group){.params = &stray, .n = 1}, 1, &o2));
    s = f.st, s.optim = o2;
    R_ERR(dt_train_state_save(ctx, full, &s, 0), DT_ERR_ARG, "not one of s->params'");
    dt_optim_destroy(o2), dt_tensor_release(stray);
    R_ERR(dt_train_state_path(NULL, 1, dir, sizeof dir), DT_ERR_ARG, "argument root");
    R_ERR(dt_train_state_path(full, -1, dir, sizeof dir), DT_ERR_ARG, "step = -1");
    R_ERR(dt_train_state_path(full, 1, dir, 8), DT_ERR_SIZE, "cap is 8");
    int found = 7;
    R_ERR(dt_train_state_load_latest(ctx, full, &f.st, NULL), DT_ERR_ARG, "argument found");
    R_ERR(dt_train_state_load(ctx, NULL, &f.st), DT_ERR_ARG, "argument dir");

    /* what is on disk: not there, incomplete, not a train state */
    snprintf(dir, sizeof dir, "%s/nothing", a->root);
    R_OK(dt_train_state_load_latest(ctx, dir, &f.st, &found));
    R_CHECK(found == 0, "a missing root: found %d", found);
    found = 7;
    R_OK(dt_train_state_load_latest(ctx, a->root, &f.st, &found)); /* holds no step dirs */
    R_CHECK(found == 0, "a root without step directories: found %d", found);
    R_OK(unchanged(&f, "load_latest finding nothing"));
    snprintf(dir, sizeof dir, "%s/file", a->root);
    R_ERR(dt_train_state_load_latest(ctx, dir, &f.st, &found), DT_ERR_IO, "cannot list");
    R_ERR(dt_train_state_load(ctx, dir, &f.st), DT_ERR_IO, "file");
    snprintf(dir, sizeof dir, "%s/crashed/step-00000003", a->root); /* no metadata.json */
    R_ERR(dt_train_state_load(ctx, dir, &f.st), DT_ERR_IO, "incomplete");
    R_OK(plain_save(ctx, &f, plain, NULL));
    R_ERR(dt_train_state_load(ctx, plain, &f.st), DT_ERR_PARSE, "holds no train-state record");
    static const struct {
        const char *blob, *needle;
    } bad[] = {
        {"hello\n", "not a train-state record"},
        {"dtensor-train-state 1\ndata_pos 3\n", "no step line"},
        {"dtensor-train-state 1\nstep x\n", "line 2 (\"step x\")"},
        {"dtensor-train-state 1\nstep 1\nstep 2\n", "given twice"},
        {"dtensor-train-state 1\nstep -1\n", "malformed"},
        {"dtensor-train-state 1\nstep 1\nwhat 2\n", "unknown key"},
        {"dtensor-train-state 1\nstep 1\n\nsteps 1 w\n", "line 3"},
        {"dtensor-train-state 1\nstep 1\ngenerator 1\n", "malformed"},
        {"dtensor-train-state 1\nstep 1\nschedule 0.1 2 0 0 5\n", "rejects"},
        {"dtensor-train-state 1\nstep 1\noptim AdamW nan\n", "malformed"},
        {"dtensor-train-state 1\nstep 1\nsteps -3 w\n", "malformed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        R_OK(plain_save(ctx, &f, plain, bad[i].blob));
        R_ERR(dt_train_state_load(ctx, plain, &f.st), DT_ERR_PARSE, bad[i].needle);
        R_MSG(plain);
    }
    R_OK(unchanged(&f, "loads of bad directories"));

    /* mismatches */
    R_OK(dt_train_state_path(full, 3, dir, sizeof dir));
    fixture g; /* another model: two blocks */
    tl_config two = cfg;
    two.layers = 2;
    R_OK(fixture_make(&g, mesh, &two, 2));
    R_OK(snap(&g));
    R_ERR(dt_train_state_load(ctx, dir, &g.st), DT_ERR_ARG, "has no parameter \"layers.1.");
    R_OK(unchanged(&g, "a missing parameter"));
    fixture_free(&g);
    tl_config wide = cfg; /* every shape differs */
    wide.dim = 12, wide.hidden = 16;
    R_OK(fixture_make(&g, mesh, &wide, 2));
    g.st.step = 5, g.gen.offset = 44;
    R_ERR(dt_train_state_load(ctx, dir, &g.st), DT_ERR_SHAPE, "tok_embeddings.weight");
    R_CHECK(g.st.step == 5 && g.gen.offset == 44, "a shape mismatch changed the state");
    fixture_free(&g);
    /* an SGD optimizer over the same model */
    dt_sgd_options sgd = {.lr = 0.1, .momentum = 0.9};
    dt_optim *so;
    int np;
    dt_tensor *ps[16];
    R_OK(dt_params_arrays(f.m.params, NULL, ps, 16, &np));
    R_OK(dt_optim_sgd_create(&sgd, &(dt_param_group){.params = ps, .n = np}, 1, &so));
    s = f.st, s.optim = so;
    R_ERR(dt_train_state_load(ctx, dir, &s), DT_ERR_ARG, "saved from AdamW, s->optim is SGD");
    R_OK(unchanged(&f, "another optimizer kind"));
    /* SGD saved without momentum, loaded with: a slot the checkpoint lacks */
    char sgd_root[512];
    snprintf(sgd_root, sizeof sgd_root, "%s/sgd", a->root);
    dt_optim *plain_sgd;
    dt_sgd_options nomom = {.lr = 0.1};
    R_OK(dt_optim_sgd_create(&nomom, &(dt_param_group){.params = ps, .n = np}, 1, &plain_sgd));
    s = f.st, s.optim = plain_sgd;
    R_OK(dt_train_state_save(ctx, sgd_root, &s, 0));
    dt_optim_destroy(plain_sgd);
    R_OK(dt_train_state_path(sgd_root, 5, dir, sizeof dir));
    s.optim = so;
    R_ERR(dt_train_state_load(ctx, dir, &s), DT_ERR_ARG,
          "no optimizer state \"tok_embeddings.weight.momentum_buffer\"");
    dt_optim_destroy(so);
    R_OK(unchanged(&f, "a slot the checkpoint lacks"));
    R_OK(dt_train_state_path(full, 3, dir, sizeof dir));
    /* saved without optimizer and generator; an optimizer over the first two parameters */
    s = f.st, s.optim = NULL, s.gen = NULL, s.schedule = NULL;
    R_OK(dt_train_state_save(ctx, bare, &s, 0));
    R_OK(dt_optim_adamw_create(&adamw, &(dt_param_group){.params = ps, .n = 2}, 1, &o2));
    s = f.st, s.optim = o2;
    R_OK(dt_train_state_save(ctx, part, &s, 0));
    dt_optim_destroy(o2);
    R_OK(dt_train_state_path(bare, 5, dir, sizeof dir));
    R_ERR(dt_train_state_load(ctx, dir, &f.st), DT_ERR_ARG, "saved without a generator");
    s = f.st, s.gen = NULL;
    R_ERR(dt_train_state_load(ctx, dir, &s), DT_ERR_ARG, "saved without an optimizer");
    R_OK(unchanged(&f, "a checkpoint without optimizer or generator"));
    const char *third;
    R_OK(dt_params_at(f.m.params, 2, &third, NULL));
    R_OK(dt_train_state_path(part, 5, dir, sizeof dir));
    R_ERR(dt_train_state_load(ctx, dir, &f.st), DT_ERR_ARG, "no optimizer state for parameter");
    R_MSG(third);
    R_OK(unchanged(&f, "an optimizer over fewer parameters"));
    /* a mismatch on one rank only (rank 1 asks for a generator): every rank fails alike */
    R_OK(dt_train_state_path(bare, 5, dir, sizeof dir));
    s = f.st, s.optim = NULL, s.gen = dt_ctx_rank(ctx) == 1 ? &f.gen : NULL;
    dt_status st = t_keep_msg(&a->msgs, ctx, dt_train_state_load(ctx, dir, &s));
    R_CHECK(st == DT_ERR_ARG, "one rank's mismatch: %s", dt_status_str(st));
    R_OK(unchanged(&f, "one rank's mismatch"));
    /* without optimizer and generator it loads, and the schedule stays (none was saved) */
    s.gen = NULL, s.step = 0;
    R_OK(dt_train_state_load(ctx, dir, &s));
    R_CHECK(s.step == 5 && f.sched.lr == 0.04, "step %lld, schedule lr %g", (long long)s.step,
            f.sched.lr);
    fixture_free(&f);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(train_state, bad_input_and_mismatches_fail_alike_and_change_nothing) {
    err_arg a = {.root = t_tmpdir()};
    char p[512];
    snprintf(p, sizeof p, "%s/file", a.root);
    t_spit(p, "x", 1);
    snprintf(p, sizeof p, "%s/crashed/step-00000003", a.root);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    cr_assert_eq(system(cmd), 0);
    t_run(2, errors_body, &a);
    cr_expect_str_eq(a.msgs.msg[0], a.msgs.msg[1]);
    cr_expect(strstr(a.msgs.msg[0], "saved without a generator"), "%s", a.msgs.msg[0]);
    t_rmtree((char *)a.root);
}
