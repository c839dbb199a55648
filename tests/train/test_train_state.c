/* The whole training state saved and restored in one call (dtensor/train_state.h), on the tiny
 * Llama of examples/tiny_llama.c: trained with AdamW under a warmup-cosine schedule, its data
 * loader's position and a generator that picks each batch, saved every other step under one
 * root with keep_last, and resumed from the newest complete step directory on other meshes.
 * The reference is the uninterrupted run: a resumed run's losses must equal its losses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include "../../examples/tiny_llama_pp.h"
#include "helpers.h"

enum { STEPS = 12, DATA_STRIDE = 3 };
static const tl_config cfg = {.vocab = 16,
                              .seq = 6,
                              .batch = 4,
                              .dim = 8,
                              .layers = 1,
                              .heads = 2,
                              .kv_heads = 2,
                              .hidden = 12};
static const dt_lr_schedule sched0 = {
    .lr = 0.02, .lr_min = 0.1, .warmup_steps = 3, .stable_steps = 2, .decay_steps = 6};

typedef struct layout_case {
    const char *name, *mesh;
    int ranks;
    tl_layout l;
} layout_case;

static const layout_case fsdp4 = {"dp=4 fsdp", "4", 4, {.dp_dim = 0, .tp_dim = -1, .fsdp = 1}};
static const layout_case resumes[] = {
    {"one rank", "1", 1, {.dp_dim = -1, .tp_dim = -1}},
    {"dp=2 x tp=2", "dp=2,tp=2", 4, {.dp_dim = 0, .tp_dim = 1}},
    {"dp=2 fsdp x tp=2", "dp=2,tp=2", 4, {.dp_dim = 0, .tp_dim = 1, .fsdp = 1}},
    {"dp=4 fsdp", "4", 4, {.dp_dim = 0, .tp_dim = -1, .fsdp = 1}},
    {"tp=3", "tp=3", 3, {.dp_dim = -1, .tp_dim = 0}},
};

typedef struct train_arg {
    const layout_case *lc;
    const char *root;
    int resume;       /* 0: from step 0, saving before steps 4, 6 and 8; 1: load_latest first */
    int keep_last;    /* for the saves */
    int no_optim;     /* resume without the optimizer's state (the comparison must then fail) */
    int64_t async_at; /* > 0: also saves asynchronously before this step, waiting after it */
    const char *dir;  /* resume from this step directory (else the newest under root) */
    int64_t first;    /* the first step this run took */
    float loss[STEPS];
    int64_t data_at[STEPS]; /* the loader's position before step s */
    dt_generator gen_at[STEPS];
    double lr_at[STEPS];
} train_arg;

static int saves_before(int64_t s) {
    return s == 4 || s == 6 || s == 8;
}

static dt_status train_body(dt_ctx *ctx, void *arg) {
    train_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, a->lc->mesh, &mesh));
    tl_model m;
    /* a resumed run starts from other weights, schedule and generator: all it has of the
     * saved run comes from the checkpoint */
    R_OK(tl_model_init(&m, mesh, &cfg, &a->lc->l, a->resume ? 999 : 1234));
    dt_adamw_options ao = {
        .lr = 0.5, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *o;
    R_OK(dt_optim_adamw_create_params(&ao, m.params, &o));
    dt_lr_schedule sched = sched0;
    dt_generator gen = dt_generator_make(77);
    if (a->resume) {
        sched = (dt_lr_schedule){.lr = 0.5, .warmup_steps = 1, .decay_steps = 40};
        gen = dt_generator_make(5);
    }
    dt_train_state st = {.params = m.params, .optim = o, .schedule = &sched, .gen = &gen};
    if (a->resume) {
        int found = -1;
        if (a->no_optim) st.optim = NULL;
        if (a->dir) {
            R_OK(dt_train_state_load(ctx, a->dir, &st));
            found = 1;
        } else {
            R_OK(dt_train_state_load_latest(ctx, a->root, &st, &found));
        }
        R_CHECK(found == 1, "found = %d", found);
        st.optim = o;
    }
    a->first = st.step;
    const dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    for (int64_t s = st.step; s < STEPS; s++) {
        if (!a->resume && saves_before(s))
            R_OK(dt_train_state_save(ctx, a->root, &st, a->keep_last));
        dt_checkpoint_pending *pending = NULL;
        if (!a->resume && s == a->async_at)
            R_OK(dt_train_state_save_async(ctx, a->root, &st, a->keep_last, &pending));
        a->data_at[s] = st.data_pos, a->gen_at[s] = gen;
        double lr;
        R_OK(dt_lr_warmup_cosine(&sched, s, &lr));
        R_OK(dt_optim_set_lr(o, lr));
        a->lr_at[s] = lr;
        /* the loader: the batch at its position plus a skip the generator draws */
        dt_tensor *u;
        R_OK(dt_tensor_rand(mesh, DT_F32, 1, (int64_t[]){1}, dt_mesh_ndim(mesh), rep, &gen, &u));
        float uf;
        R_OK(dt_tensor_full_tensor(u, &uf, sizeof uf));
        dt_tensor_release(u);
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, (int)(st.data_pos + (int64_t)(uf * 5)), &tok, &tgt));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_OK(dt_tensor_full_tensor(loss, &a->loss[s], sizeof a->loss[s]));
        R_OK(dt_backward(loss));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
        R_OK(dt_optim_step(o));
        R_OK(dt_optim_zero_grad(o));
        st.step = s + 1, st.data_pos += DATA_STRIDE;
        if (pending) R_OK(dt_checkpoint_wait(pending)); /* the parameters changed meanwhile */
    }
    R_OK(dt_optim_destroy(o));
    tl_model_free(&m);
    dt_mesh_release(mesh);
    return DT_OK;
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void sh(const char *fmt, const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* Saved on dp=4 FSDP before steps 4, 6 and 8 (keep_last 2), with a crashed save of step 10 (a
 * step directory without its metadata.json) and a stale partial one beside them; resumed on
 * one rank, dp x tp, FSDP x tp, dp=4 FSDP and tp=3: every resumed run starts at step 8, with
 * the saved run's loader position, generator and learning rate, and its losses equal the
 * uninterrupted run's. */
Test(train_state, resumed_on_other_meshes_continues_the_uninterrupted_run) {
    char *root = t_tmpdir(), path[512], p2[512];
    train_arg ref = {.lc = &fsdp4, .root = root, .keep_last = 2};
    t_run(4, train_body, &ref);
    /* keep_last: the two newest remain */
    static const struct {
        int64_t step;
        int kept;
    } want[] = {{4, 0}, {6, 1}, {8, 1}};
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(dt_train_state_path(root, want[i].step, path, sizeof path), DT_OK);
        cr_expect_eq(is_dir(path), want[i].kept, "%s kept: %d", path, is_dir(path));
    }
    snprintf(p2, sizeof p2, "%s/step-00000008", root);
    cr_expect_str_eq(path, p2);
    /* a save that crashed before publishing: step 10 without its metadata.json */
    snprintf(p2, sizeof p2, "%s/step-00000010", root);
    sh("cp -r '%s' '%s'", path, p2);
    sh("rm '%s/metadata.json'%s", p2, "");
    sh("cp -r '%s' '%s.partial'", path, p2);
    for (size_t i = 0; i < sizeof resumes / sizeof resumes[0]; i++) {
        train_arg r = {.lc = &resumes[i], .root = root, .resume = 1};
        t_run(resumes[i].ranks, train_body, &r);
        cr_expect_eq(r.first, 8, "%s: resumed at step %lld", resumes[i].name, (long long)r.first);
        double worst = 0;
        for (int s = 8; s < STEPS; s++) {
            cr_expect_eq(r.data_at[s], ref.data_at[s],
                         "%s step %d: data position %lld, saved run "
                         "%lld",
                         resumes[i].name, s, (long long)r.data_at[s], (long long)ref.data_at[s]);
            cr_expect(r.gen_at[s].seed == ref.gen_at[s].seed &&
                          r.gen_at[s].offset == ref.gen_at[s].offset,
                      "%s step %d: generator differs", resumes[i].name, s);
            cr_expect_eq(r.lr_at[s], ref.lr_at[s], "%s step %d: lr %.17g, saved run %.17g",
                         resumes[i].name, s, r.lr_at[s], ref.lr_at[s]);
            double rel = fabs((double)r.loss[s] - ref.loss[s]) / fabs((double)ref.loss[s]);
            if (rel > worst) worst = rel;
            cr_expect(rel <= 1e-6, "%s step %d: loss %.9g, uninterrupted %.9g (%.2g relative)",
                      resumes[i].name, s, r.loss[s], ref.loss[s], rel);
        }
        cr_log_info("resumed on %s: worst relative loss difference %.3g", resumes[i].name, worst);
    }
    /* without the optimizer's state the curve leaves the uninterrupted one: the comparison
     * above can fail */
    train_arg fresh = {.lc = &resumes[0], .root = root, .resume = 1, .no_optim = 1};
    t_run(1, train_body, &fresh);
    double off = 0;
    for (int s = 8; s < STEPS; s++)
        off = fmax(off, fabs((double)fresh.loss[s] - ref.loss[s]) / fabs((double)ref.loss[s]));
    cr_expect(off > 1e-4, "without the optimizer's state: %.3g relative at most", off);
    t_rmtree(root);
}

/* An asynchronous save before step 5, waited for after the step changed the parameters and the
 * optimizer's state, holds the state from before the step: resumed from it on one rank, the
 * losses are the uninterrupted run's. */
Test(train_state, an_async_save_holds_the_state_it_was_started_with) {
    char *root = t_tmpdir(), dir[512];
    train_arg ref = {.lc = &fsdp4, .root = root, .async_at = 5};
    t_run(4, train_body, &ref);
    cr_assert_eq(dt_train_state_path(root, 5, dir, sizeof dir), DT_OK);
    train_arg r = {.lc = &resumes[0], .root = root, .resume = 1, .dir = dir};
    t_run(1, train_body, &r);
    cr_expect_eq(r.first, 5, "resumed at step %lld", (long long)r.first);
    for (int s = 5; s < STEPS; s++)
        cr_expect(fabs((double)r.loss[s] - ref.loss[s]) <= 1e-6 * fabs((double)ref.loss[s]),
                  "step %d: loss %.9g, uninterrupted %.9g", s, r.loss[s], ref.loss[s]);
    t_rmtree(root);
}

/* ---- bf16 parameters with f32 master weights ---------------------------------------------- */

typedef struct mw_arg {
    const char *mesh, *root;
    int resume, master; /* master: the optimizer keeps f32 master weights */
    float master_out[24];
    uint16_t w_out[24];
} mw_arg;

static dt_status mw_body(dt_ctx *ctx, void *arg) {
    mw_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, a->mesh, &mesh));
    dt_params *p;
    dt_module lin;
    R_OK(dt_params_create(mesh, DT_BF16, &p));
    R_OK(dt_params_module(p, "lin", DT_MODULE_LINEAR, &lin));
    R_OK(dt_params_declare(lin, "weight", 2, (int64_t[]){4, 6}, (dt_init){DT_INIT_NORMAL, 0.5},
                           NULL));
    dt_generator init = dt_generator_make(a->resume ? 3 : 21);
    R_OK(dt_params_materialize(p, &init));
    dt_tensor *w;
    R_OK(dt_params_at(p, 0, NULL, &w));
    dt_adamw_options ao = {.lr = 0.05, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    dt_optim *o;
    R_OK(dt_optim_adamw_create(
        &ao, &(dt_param_group){.params = &w, .n = 1, .master_weights = a->master}, 1, &o));
    dt_train_state st = {.params = p, .optim = o};
    if (a->resume) {
        dt_status rs = dt_train_state_load(ctx, a->root, &st);
        if (rs != DT_OK) { /* the caller checks the message */
            dt_optim_destroy(o), dt_params_destroy(p), dt_mesh_release(mesh);
            return rs;
        }
    }
    const dt_placement rep[1] = {dt_replicate()};
    for (int64_t s = st.step; s < 4; s++) {
        if (!a->resume && s == 2) R_OK(dt_train_state_save(ctx, a->root, &st, 0));
        dt_generator gg = dt_generator_make(100 + (uint64_t)s);
        dt_tensor *g;
        R_OK(dt_tensor_randn(mesh, DT_BF16, 2, (int64_t[]){4, 6}, 1, rep, &gg, &g));
        R_OK(dt_backward_with(w, g));
        dt_tensor_release(g);
        R_OK(dt_optim_step(o));
        R_OK(dt_optim_zero_grad(o));
        st.step = s + 1;
    }
    dt_tensor *m;
    R_OK(dt_optim_state(o, 0, 2, &m));
    R_CHECK(!m == !a->master, "master copy %p with master_weights %d", (void *)m, a->master);
    if (m) R_OK(dt_tensor_full_tensor(m, a->master_out, sizeof a->master_out));
    R_OK(dt_tensor_full_tensor(w, a->w_out, sizeof a->w_out));
    R_OK(dt_optim_destroy(o));
    R_OK(dt_params_destroy(p));
    return dt_mesh_release(mesh);
}

/* bf16 weights updated through f32 master copies: saved on two ranks before step 2 and resumed
 * on one, the master copy and the weight after step 4 are the uninterrupted run's, bit for bit;
 * an optimizer that keeps master weights cannot resume from a save without them. */
Test(train_state, master_weights_resume_bit_exactly) {
    char *root = t_tmpdir(), dir[512], plain[512];
    mw_arg ref = {.mesh = "2", .root = root, .master = 1};
    t_run(2, mw_body, &ref);
    cr_assert_eq(dt_train_state_path(root, 2, dir, sizeof dir), DT_OK);
    mw_arg r = {.mesh = "1", .root = dir, .resume = 1, .master = 1};
    t_run(1, mw_body, &r);
    cr_expect(memcmp(r.master_out, ref.master_out, sizeof r.master_out) == 0,
              "the master copy differs after resuming");
    cr_expect(memcmp(r.w_out, ref.w_out, sizeof r.w_out) == 0, "the weight differs");
    snprintf(plain, sizeof plain, "%s/plain", root);
    mw_arg nomaster = {.mesh = "1", .root = plain};
    t_run(1, mw_body, &nomaster);
    cr_expect(memcmp(nomaster.w_out, ref.w_out, sizeof ref.w_out) != 0,
              "without master weights the weight is the same: the comparison cannot fail");
    cr_assert_eq(dt_train_state_path(plain, 2, dir, sizeof dir), DT_OK);
    mw_arg bad = {.mesh = "1", .root = dir, .resume = 1, .master = 1};
    T_ERR(dt_local_run(1, mw_body, &bad, NULL), DT_ERR_ARG,
          "no optimizer state \"lin.weight.master\"");
    t_rmtree(root);
}

/* ---- pipeline stages: each rank holds and saves its own stage's parameters ----------------- */

enum { PP_STEPS = 8, PP_SAVE = 4 };
static const tl_config pp_cfg = {.vocab = 16,
                                 .seq = 6,
                                 .batch = 4,
                                 .dim = 8,
                                 .layers = 2,
                                 .heads = 2,
                                 .kv_heads = 2,
                                 .hidden = 12};

typedef struct pp_arg {
    const char *mesh, *root;
    int resume;
    int64_t first;
    float loss[PP_STEPS];
} pp_arg;

static dt_status pp_body(dt_ctx *ctx, void *arg) {
    pp_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, a->mesh, &mesh));
    int pp_dim, piped = dt_mesh_dim_index(mesh, "pp", &pp_dim) == DT_OK;
    tl_layout l = {.dp_dim = -1, .tp_dim = -1};
    dt_adamw_options ao = {
        .lr = 0.02, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    uint64_t seed = a->resume ? 999 : 7;
    tl_pp pp;
    tl_model one;
    dt_optim *o;
    if (piped) {
        R_OK(tl_pp_init(&pp, mesh, pp_dim, 2, DT_PIPELINE_1F1B, &pp_cfg, &l, seed));
        R_OK(tl_pp_adamw(&pp, &ao, &o));
    } else {
        R_OK(tl_model_init(&one, mesh, &pp_cfg, &l, seed));
        R_OK(dt_optim_adamw_create_params(&ao, one.params, &o));
    }
    dt_train_state st = {.params = piped ? pp.model.params : one.params, .optim = o};
    if (a->resume) {
        int found = 0;
        R_OK(dt_train_state_load_latest(ctx, a->root, &st, &found));
        R_CHECK(found == 1, "found = %d", found);
    }
    a->first = st.step;
    for (int64_t s = st.step; s < PP_STEPS; s++) {
        if (!a->resume && s == PP_SAVE) R_OK(dt_train_state_save(ctx, a->root, &st, 0));
        dt_tensor *tok, *tgt, *loss;
        double v;
        if (piped) {
            R_OK(tl_pp_batch(&pp, NULL, 0, (int)s, &tok, &tgt));
            R_OK(tl_pp_step(&pp, tok, tgt, &v));
        } else {
            float f;
            R_OK(tl_batch(&one, NULL, 0, (int)s, &tok, &tgt));
            R_OK(tl_loss(&one, tok, tgt, &loss));
            R_OK(dt_tensor_full_tensor(loss, &f, sizeof f));
            R_OK(dt_backward(loss));
            dt_tensor_release(loss);
            v = f;
        }
        dt_tensor_release(tok), dt_tensor_release(tgt);
        R_OK(dt_optim_step(o));
        R_OK(dt_optim_zero_grad(o));
        if (dt_ctx_rank(ctx) == 0) a->loss[s] = (float)v;
        st.step = s + 1;
    }
    R_OK(dt_optim_destroy(o));
    if (piped)
        tl_pp_free(&pp);
    else
        tl_model_free(&one);
    return dt_mesh_release(mesh);
}

/* Two pipeline stages of two tp ranks each save their own parameters and optimizer state into
 * one checkpoint (the record lists both stages'); it resumes on two one-rank stages, on one rank
 * holding the whole model, and on the saving mesh, and the losses continue the pipeline's. */
Test(train_state, pipeline_stages_save_one_checkpoint_that_resumes_anywhere) {
    char *root = t_tmpdir();
    pp_arg ref = {.mesh = "pp=2,tp=2", .root = root};
    t_run(4, pp_body, &ref);
    static const struct {
        const char *mesh;
        int ranks;
    } onto[] = {{"pp=2,dp=1", 2}, {"1", 1}, {"pp=2,tp=2", 4}};
    for (size_t i = 0; i < 3; i++) {
        pp_arg r = {.mesh = onto[i].mesh, .root = root, .resume = 1};
        t_run(onto[i].ranks, pp_body, &r);
        cr_expect_eq(r.first, PP_SAVE, "%s: resumed at step %lld", r.mesh, (long long)r.first);
        double worst = 0;
        for (int s = PP_SAVE; s < PP_STEPS; s++) {
            double rel = fabs((double)r.loss[s] - ref.loss[s]) / fabs((double)ref.loss[s]);
            worst = fmax(worst, rel);
            cr_expect(rel <= 1e-6, "%s step %d: loss %.9g, uninterrupted %.9g (%.2g relative)",
                      r.mesh, s, r.loss[s], ref.loss[s], rel);
        }
        cr_log_info("pipeline resumed on %s: worst relative loss difference %.3g", r.mesh, worst);
    }
    t_rmtree(root);
}
