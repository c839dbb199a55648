/* make train's training loop on one rank: trainer.h. */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtensor/train_state.h"
#include "train_layout.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) {                                                                        \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", dt_ctx_rank(ctx), #call,               \
                    dt_status_str(st_), dt_last_error());                                          \
            return st_;                                                                            \
        }                                                                                          \
    } while (0)

void tr_data_windows(const tr_data *d, int seq, int batch, int64_t pos, size_t *starts) {
    uint64_t span = d->train_n - (size_t)seq - 1;
    for (int b = 0; b < batch; b++)
        starts[b] = (size_t)((uint64_t)(pos + b) * (uint64_t)seq % span);
}

void tr_data_eval_windows(const tr_data *d, int seq, int batch, int i, size_t *starts) {
    uint64_t span = d->n - d->train_n - (size_t)seq - 1;
    for (int b = 0; b < batch; b++)
        starts[b] = d->train_n + (size_t)((uint64_t)i * batch + b) * (uint64_t)seq % span;
}

dt_status tr_rope_tables(dt_params *p, const tl_config *c, dt_tensor **cos, dt_tensor **sin) {
    dt_mesh *mesh = dt_params_mesh(p);
    dt_placement rep[DT_MESH_MAX_NDIM];
    for (int d = 0; d < dt_mesh_ndim(mesh); d++)
        rep[d] = dt_replicate();
    return dt_rope_tables(mesh, DT_F32, c->seq, c->dim / c->heads, 1e4, dt_mesh_ndim(mesh), rep,
                          cos, sin);
}

double tr_step_flops(const tr_config *c) {
    const tl_config *m = &c->model;
    double hd = (double)m->dim / m->heads, kv = hd * m->kv_heads;
    double ffn = (m->experts ? m->top_k : 1) * 3.0 * m->dim * m->hidden; /* active per token */
    double block = m->dim * (m->dim + 2 * kv) + (double)m->dim * m->dim + ffn + 2.0 * m->dim;
    if (m->experts) block += (double)m->dim * m->experts;
    double active = m->layers * block + (double)m->vocab * m->dim + m->dim; /* no embedding */
    double tokens = (double)m->batch * m->seq * c->grad_accum;
    return 6 * active * tokens + 12.0 * m->layers * m->dim * m->seq * tokens;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The model on this rank: the whole model, or its pipeline stage, or a custom model (its
 * registry, config, layout and mesh in one: what batches are cut by). */
typedef struct rank_model {
    tl_model one;
    tl_pp pipe;
    int piped;
    tl_model *m; /* the one holding this rank's parameters */
    const tr_model *custom;
    void *self;
    dt_optim *opt;
} rank_model;

/* The custom model declared, parallelized by the config's plan and FSDP units, materialized. */
static dt_status custom_init(dt_ctx *ctx, const tr_config *c, dt_mesh *mesh, const tl_layout *l,
                             rank_model *rm) {
    if (c->pp || l->cp_dim || l->ep_dim)
        return dt_error_set(DT_ERR_UNSUPPORTED,
                            "train: model %s with mesh %s: a custom model "
                            "runs over dp_replicate, dp_shard and tp (pp, cp and ep need "
                            "tiny_llama's stages, sequence order and experts)",
                            rm->custom->name, c->mesh);
    dt_style_rule plan[TR_PLAN_MAX];
    dt_parallelize_options o = {.tp_dim = l->tp_dim,
                                .plan = plan,
                                .dp_dim = l->dp_dim,
                                .dp_mode = l->fsdp ? DT_DP_SHARD : DT_DP_REPLICATE};
    rm->one = (tl_model){.cfg = c->model, .layout = *l, .mesh = mesh};
    rm->m = &rm->one;
    if (!(rm->self = calloc(1, rm->custom->size + 1)))
        return dt_error_set(DT_ERR_NOMEM, "train: out of memory");
    TRY(tr_config_plan(c, plan, TR_PLAN_MAX, &o.nplan));
    TRY(dt_params_create(mesh, DT_F32, &rm->one.params));
    TRY(rm->custom->declare(rm->self, rm->one.params, &c->model));
    TRY(dt_parallelize(rm->one.params, &o));
    if (l->fsdp && l->fsdp_units && l->dp_dim >= 0) {
        dt_fully_shard_options fo = {.no_coalesce = l->fsdp_no_coalesce};
        TRY(dt_fully_shard(rm->one.params, c->fsdp_unit_groups, &fo));
        TRY(dt_fully_shard(rm->one.params, NULL, &fo));
    }
    dt_generator gen = dt_generator_make(c->seed);
    TRY(dt_params_materialize(rm->one.params, &gen));
    return dt_optim_adamw_create_params(&c->adamw, rm->one.params, &rm->opt);
}

static dt_status model_init(dt_ctx *ctx, const tr_config *c, dt_mesh *mesh, rank_model *rm) {
    tl_layout l = {.fsdp = c->fsdp,
                   .fsdp_units = c->fsdp_units,
                   .fsdp_no_coalesce = !c->fsdp_coalesce,
                   .ac = c->ac,
                   .ac_budget = c->ac_budget_kib << 10,
                   .ac_measure_steps = c->ac_measure_steps,
                   .float8 = c->float8,
                   .bf16 = c->bf16,
                   .async_tp = c->async_tp};
    dt_style_rule plan[TR_PLAN_MAX];
    tl_layout_find_dims(mesh, &l);
    l.sequence_parallel = c->sequence_parallel && l.tp_dim >= 0;
    l.loss_parallel = c->loss_parallel && l.tp_dim >= 0;
    TRY(tr_config_plan(c, plan, TR_PLAN_MAX, &l.nplan));
    l.plan = plan;
    if (rm->custom) return custom_init(ctx, c, mesh, &l, rm);
    int pp_dim = -1;
    rm->piped = c->pp && dt_mesh_dim_index(mesh, "pp", &pp_dim) == DT_OK;
    if (rm->piped) {
        TRY(tl_pp_init_virtual(&rm->pipe, mesh, pp_dim, c->microbatches, c->schedule,
                               c->virtual_stages, &c->model, &l, c->seed));
        rm->m = &rm->pipe.model;
        TRY(tl_pp_adamw(&rm->pipe, &c->adamw, &rm->opt));
    } else {
        TRY(tl_model_init(&rm->one, mesh, &c->model, &l, c->seed));
        rm->m = &rm->one;
        TRY(dt_optim_adamw_create_params(&c->adamw, rm->one.params, &rm->opt));
    }
    return DT_OK;
}

static void model_free(rank_model *rm) {
    if (rm->opt) dt_optim_destroy(rm->opt);
    if (rm->piped) {
        tl_pp_free(&rm->pipe);
    } else if (rm->custom) {
        if (rm->self && rm->custom->release) rm->custom->release(rm->self);
        dt_params_destroy(rm->one.params);
        free(rm->self);
    } else if (rm->m) {
        tl_model_free(&rm->one);
    }
}

/* The mean loss of one batch (not pipelined). */
static dt_status forward_loss(rank_model *rm, dt_tensor *tok, dt_tensor *tgt, dt_tensor **out) {
    if (!rm->custom) return tl_loss(rm->m, tok, tgt, out);
    dt_scope *s;
    dt_status st = dt_scope_create(&s);
    if (st != DT_OK) return st;
    return dt_scope_end(s, rm->custom->loss(rm->self, s, tok, tgt), out);
}

/* Forward and backward of the batch at starts, its loss scaled by scale into the gradients;
 * *loss = the batch's mean loss (unscaled), on every rank. */
static dt_status run_batch(dt_ctx *ctx, rank_model *rm, const tr_data *d, const size_t *starts,
                           double scale, double *loss) {
    dt_tensor *tok, *tgt, *l = NULL, *scaled = NULL;
    dt_status st;
    if (rm->piped) {
        TRY(tl_pp_batch_at(&rm->pipe, d->text, d->n, starts, &tok, &tgt));
        st = tl_pp_step(&rm->pipe, tok, tgt, loss); /* the pipeline takes the mean itself */
    } else {
        TRY(tl_batch_at(rm->m, d->text, d->n, starts, 1, &tok, &tgt));
        st = forward_loss(rm, tok, tgt, &l);
        if (st == DT_OK && scale != 1) st = dt_mul_scalar(l, scale, &scaled);
        if (st == DT_OK) st = dt_backward(scaled ? scaled : l);
        float f = 0;
        if (st == DT_OK) st = dt_tensor_full_tensor(l, &f, sizeof f);
        *loss = f;
    }
    dt_tensor_release(scaled), dt_tensor_release(l);
    dt_tensor_release(tok), dt_tensor_release(tgt);
    if (st != DT_OK)
        fprintf(stderr, "rank %d: a training batch failed: %s: %s\n", dt_ctx_rank(ctx),
                dt_status_str(st), dt_last_error());
    return st;
}

/* The mean loss over the config's held-out batches. Under a pipeline, whose schedule always
 * runs backward too, the gradients it leaves are dropped (grad sync off, then zeroed). */
static dt_status eval_loss(dt_ctx *ctx, const tr_config *c, rank_model *rm, const tr_data *d,
                           size_t *starts, double *out) {
    double sum = 0;
    for (int i = 0; i < c->eval_batches; i++) {
        double v = 0;
        tr_data_eval_windows(d, c->model.seq, c->model.batch, i, starts);
        if (rm->piped) {
            TRY(dt_ctx_set_grad_sync(ctx, 0));
            TRY(run_batch(ctx, rm, d, starts, 1, &v));
            TRY(dt_ctx_set_grad_sync(ctx, 1));
            TRY(dt_optim_zero_grad(rm->opt));
        } else {
            dt_tensor *tok, *tgt, *l;
            TRY(tl_batch_at(rm->m, d->text, d->n, starts, 1, &tok, &tgt));
            TRY(dt_no_grad_enter(ctx));
            dt_status st = forward_loss(rm, tok, tgt, &l);
            float f = 0;
            if (st == DT_OK) st = dt_tensor_full_tensor(l, &f, sizeof f), dt_tensor_release(l);
            TRY(dt_no_grad_exit(ctx));
            dt_tensor_release(tok), dt_tensor_release(tgt);
            TRY(st);
            v = f;
        }
        sum += v;
    }
    *out = sum / c->eval_batches;
    return DT_OK;
}

/* Clips the gradients of every rank's parameters to max_norm by their global 2-norm: under a
 * pipeline each stage holds its own parameters, so the stages' squared norms are summed over
 * pp first (an all_reduce of one number), then each stage scales its own. *total = the norm
 * before clipping. */
static dt_status clip(dt_ctx *ctx, dt_mesh *mesh, rank_model *rm, double max_norm, double *total) {
    int n = dt_params_count(rm->m->params), k = 0;
    dt_tensor **g = calloc((size_t)n + 1, sizeof *g);
    if (!g) return dt_error_set(DT_ERR_NOMEM, "train: out of memory");
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++) {
        dt_tensor *p;
        st = dt_params_at(rm->m->params, i, NULL, &p);
        if (st == DT_OK && dt_tensor_grad(p)) g[k++] = dt_tensor_grad(p);
    }
    double local = 0, global;
    if (st == DT_OK) st = dt_total_norm(g, k, 2, &local);
    global = local;
    if (st == DT_OK && rm->piped) { /* sum the stages' squares over pp */
        int pp_dim, nd = dt_mesh_ndim(mesh);
        dt_placement pl[DT_MESH_MAX_NDIM];
        dt_mesh_dim_index(mesh, "pp", &pp_dim);
        for (int d = 0; d < nd; d++)
            pl[d] = d == pp_dim ? dt_partial(DT_REDUCE_SUM) : dt_replicate();
        double sq = local * local;
        int64_t one = 1;
        dt_tensor *t = NULL;
        st = dt_tensor_from_local(mesh, &sq, DT_F64, 1, &one, nd, pl, &one, 0, &t);
        if (st == DT_OK) st = dt_tensor_full_tensor(t, &sq, sizeof sq);
        dt_tensor_release(t);
        global = sqrt(sq);
    }
    /* dt_clip_grad_norm_ scales by max / (its norm + 1e-6): give it the max that makes that
     * max_norm / (global + 1e-6), torch's factor for the global norm */
    if (st == DT_OK && global > 0)
        st = dt_clip_grad_norm_(g, k, max_norm * (local + 1e-6) / (global + 1e-6), 2, NULL);
    free(g);
    *total = global;
    if (st != DT_OK)
        fprintf(stderr, "rank %d: clipping failed: %s\n", dt_ctx_rank(ctx), dt_last_error());
    return st;
}

/* What a run carries from step to step on this rank. */
typedef struct loop {
    const tr_run *run;
    dt_mesh *mesh;
    rank_model rm;
    dt_train_state state;
    dt_lr_schedule sched;
    int scheduled, tracing;
    size_t *starts; /* a batch's window starts */
    double total;   /* seconds of the steps after the first */
    int timed;
} loop;

/* Step s: its batches, clipping, the optimizer, the progress line, eval and the checkpoint. */
static dt_status train_step(dt_ctx *ctx, loop *L, int s, int first) {
    const tr_config *c = L->run->c;
    int rank = dt_ctx_rank(ctx);
    if (!L->tracing && !L->run->probe && c->trace_steps > 0 && s >= c->steps - c->trace_steps) {
        TRY(dt_trace_start(ctx));
        /* The run in the trace, so that a page can scale compute to this machine's rate. */
        char layout[TR_MESH_MAX + 64];
        snprintf(layout, sizeof layout, "%s%s%s%s", c->mesh, c->fsdp ? " fsdp" : "",
                 c->sequence_parallel ? " sequence_parallel" : "",
                 c->pp > 1 ? " pipeline" : "");
        TRY(dt_trace_set_run_info(ctx, L->run->custom ? L->run->custom->name : "tiny_llama",
                                  L->run->peak_gflops, layout));
        L->tracing = 1;
    }
    if (L->tracing) TRY(dt_trace_step(ctx, s)); /* closes the previous step's span */
    double lr = c->adamw.lr, loss = 0, norm = 0;
    if (L->scheduled) TRY(dt_lr_warmup_cosine(&L->sched, s, &lr));
    TRY(dt_optim_set_lr(L->rm.opt, lr));
    TRY(dt_ctx_reset_peak(ctx));
    TRY(dt_comm_stats_reset(ctx));
    const tr_probe *probe = L->run->probe;
    if (probe) probe->before(ctx, probe->user);
    double t0 = now_s();
    for (int a = 0; a < c->grad_accum; a++) { /* sync the gradients once, at the last */
        double v;
        tr_data_windows(&L->run->data, c->model.seq, c->model.batch, L->state.data_pos, L->starts);
        if (c->grad_accum > 1) TRY(dt_ctx_set_grad_sync(ctx, a == c->grad_accum - 1));
        TRY(run_batch(ctx, &L->rm, &L->run->data, L->starts, 1.0 / c->grad_accum, &v));
        L->state.data_pos += c->model.batch;
        loss += v / c->grad_accum;
    }
    if (c->max_norm > 0) TRY(clip(ctx, L->mesh, &L->rm, c->max_norm, &norm));
    TRY(dt_optim_step(L->rm.opt));
    TRY(dt_optim_zero_grad(L->rm.opt));
    double dt = now_s() - t0;
    L->state.step = s + 1;
    if (probe)
        return probe->after(ctx, probe->user, L->mesh, L->rm.m, L->rm.piped ? &L->rm.pipe : NULL);
    dt_tensor_memory mem;
    dt_comm_stats cs;
    TRY(dt_ctx_tensor_memory(ctx, &mem));
    TRY(dt_comm_stats_get(ctx, &cs));
    uint64_t colls = 0;
    for (int k = 0; k < DT_COLL_KIND_COUNT; k++)
        colls += cs.calls[k];
    if (rank == 0 && c->comms && s == first) {
        char label[48];
        snprintf(label, sizeof label, "rank 0, step %d", s + 1);
        dt_comm_stats_print(&cs, label, stdout);
    }
    if (s > first) L->total += dt, L->timed++;
    double tokens = (double)c->model.batch * c->model.seq * c->grad_accum;
    char peak[32] = "";
    if (L->run->peak_gflops > 0)
        snprintf(peak, sizeof peak, "  %5.1f%% of peak",
                 tr_step_flops(c) / dt / (L->run->peak_gflops * 1e9) * 100);
    if (rank == 0) {
        printf("step %3d/%d  loss %.*f  %8.0f tokens/s  step %7.1f ms  peak %6.2f MiB  "
               "%3llu collectives%s  lr %.3g",
               s + 1, c->steps, c->loss_digits, loss, tokens / dt, dt * 1e3,
               (double)mem.peak_bytes / (1 << 20), (unsigned long long)colls, peak, lr);
        if (c->max_norm > 0) printf("  grad norm %.4g", norm);
        printf("\n"), fflush(stdout);
    }
    if (c->eval_every && (s + 1) % c->eval_every == 0) {
        double e;
        TRY(eval_loss(ctx, c, &L->rm, &L->run->data, L->starts, &e));
        if (rank == 0) printf("eval at step %d: loss %.*f\n", s + 1, c->loss_digits, e);
    }
    if (c->ckpt_folder[0] && c->ckpt_every && (s + 1) % c->ckpt_every == 0) {
        TRY(dt_train_state_save(ctx, c->ckpt_folder, &L->state, c->keep_last));
        if (rank == 0) printf("checkpoint %s/step-%08d\n", c->ckpt_folder, s + 1);
    }
    if (rank == 0) fflush(stdout);
    return DT_OK;
}

dt_status tr_train(dt_ctx *ctx, void *arg) {
    loop L = {.run = arg};
    const tr_config *c = L.run->c;
    int rank = dt_ctx_rank(ctx), found = 0;
    TRY(dt_mesh_create_str(ctx, c->mesh, &L.mesh));
    L.rm.custom = L.run->custom;
    dt_status st = DT_OK;
    if (c->bucket_kb >= 0) st = dt_ctx_set_grad_bucket_bytes(ctx, (size_t)c->bucket_kb << 10);
    if (st == DT_OK) st = model_init(ctx, c, L.mesh, &L.rm);
    L.starts = calloc((size_t)c->model.batch, sizeof *L.starts);
    if (st == DT_OK && !L.starts) st = dt_error_set(DT_ERR_NOMEM, "train: out of memory");
    L.sched = c->schedule_lr;
    L.sched.lr = c->adamw.lr;
    L.scheduled = L.sched.warmup_steps || L.sched.stable_steps || L.sched.decay_steps;
    L.state = (dt_train_state){.params = L.rm.m ? L.rm.m->params : NULL,
                               .optim = L.rm.opt,
                               .schedule = L.scheduled ? &L.sched : NULL};
    int quiet = L.run->probe != NULL;
    if (st == DT_OK && c->ckpt_folder[0] && c->resume && !quiet)
        st = dt_train_state_load_latest(ctx, c->ckpt_folder, &L.state, &found);
    if (st == DT_OK && rank == 0 && found)
        printf("resumed from %s at step %lld (sample %lld)\n", c->ckpt_folder,
               (long long)L.state.step, (long long)L.state.data_pos),
            fflush(stdout);
    if (st == DT_OK && c->print_layout && !quiet)
        st = tr_layout_print(ctx, c, L.mesh, L.rm.m->params, stdout);
    if (st == DT_OK && rank == 0 && c->print_params && !quiet)
        st = dt_params_print(L.rm.m->params, stdout);
    int first = (int)L.state.step, end = quiet ? first + 1 : c->steps;
    for (int s = first; s < end && st == DT_OK; s++)
        st = train_step(ctx, &L, s, first);
    double tokens = (double)c->model.batch * c->model.seq * c->grad_accum;
    if (st == DT_OK && rank == 0 && L.timed && !quiet)
        printf("mean step %.1f ms (steps after the first), %.0f tokens/s\n",
               L.total / L.timed * 1e3, tokens * L.timed / L.total);
    if (L.tracing) {
        char path[TR_PATH_MAX + 32];
        dt_status stop = dt_trace_stop(ctx);
        snprintf(path, sizeof path, "%s.rank%d.json", c->trace_out, rank);
        if (st == DT_OK) st = stop;
        if (st == DT_OK) st = dt_trace_write(ctx, path);
    }
    free(L.starts);
    model_free(&L.rm);
    dt_mesh_release(L.mesh);
    return st;
}
