/* The pipeline stages of tiny_llama_pp.h. */
#include "tiny_llama_pp.h"

#include <stdlib.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

/* The part of chunk stage + j nstages. */
static const tl_model *part(const tl_pp *pp, int j) {
    return j ? &pp->rest[j - 1] : &pp->model;
}

/* tl_loss split at the chunk's bounds: the embedding in chunk 0, the head in the last. */
static dt_status stage_fn(void *user, const dt_pipeline_stage_call *c, dt_tensor **out) {
    const tl_pp *pp = user;
    const tl_model *m = part(pp, c->chunk / c->nstages);
    int L = m->cfg.layers, first = c->chunk * L / c->nchunks, end = (c->chunk + 1) * L / c->nchunks;
    dt_scope *s;
    TRY(dt_scope_create(&s));
    dt_tensor *x = c->input, *aux = NULL; /* MoE: the chunk's blocks' aux losses, scaled */
    if (c->chunk == 0) x = dt_nn_embedding_forward(s, m->tok_embeddings, x); /* (B, T, dim) */
    x = tl_layers_forward(s, m, first, end, x, &aux);
    if (c->chunk == c->nchunks - 1) x = tl_head_loss(s, m, x, c->target);
    /* the aux losses go to the pipeline, which adds them to the step's loss and backpropagates
     * them with this stage's backward (c->aux is set when the config has stage_aux) */
    if (aux && c->aux && dt_scope_ok(s)) *c->aux = aux, dt_tensor_retain(aux);
    return dt_scope_end(s, x, out);
}

dt_status tl_pp_init(tl_pp *pp, dt_mesh *mesh, int pp_dim, int nmicro,
                     dt_pipeline_schedule schedule, const tl_config *cfg, const tl_layout *layout,
                     uint64_t seed) {
    return tl_pp_init_virtual(pp, mesh, pp_dim, nmicro, schedule, 1, cfg, layout, seed);
}

/* The parts of this rank's chunks, on the stage mesh. */
static dt_status init_parts(tl_pp *pp, const tl_config *cfg, const tl_layout *layout,
                            uint64_t seed) {
    int p = pp->nstages, C = p * pp->nvirtual;
    /* the stage's layers run on the stage mesh: their dims are found there by name, never
     * at positions counted on the whole mesh (which has the pp dim) */
    dt_mesh *stage_mesh = dt_pipeline_stage_mesh(pp->pipe);
    tl_layout l = *layout;
    tl_layout_find_dims(stage_mesh, &l);
    if (pp->nvirtual > 1 && !(pp->rest = calloc((size_t)pp->nvirtual - 1, sizeof *pp->rest)))
        return dt_error_set(DT_ERR_NOMEM, "tl_pp_init: out of memory");
    for (int j = 0; j < pp->nvirtual; j++) {
        int c = j * p + pp->stage;
        tl_part pt = {.first = c * cfg->layers / C,
                      .end = (c + 1) * cfg->layers / C,
                      .embed = c == 0,
                      .head = c == C - 1};
        TRY(tl_model_init_part(j ? &pp->rest[j - 1] : &pp->model, stage_mesh, cfg, &l, seed, &pt));
    }
    return DT_OK;
}

dt_status tl_pp_init_virtual(tl_pp *pp, dt_mesh *mesh, int pp_dim, int nmicro,
                             dt_pipeline_schedule schedule, int nvirtual, const tl_config *cfg,
                             const tl_layout *layout, uint64_t seed) {
    *pp = (tl_pp){0};
    if (layout->fsdp_units)
        return dt_error_set(DT_ERR_ARG,
                            "tl_pp_init: layout->fsdp_units = %d: FSDP units do "
                            "not run under a pipeline here; use 0",
                            layout->fsdp_units);
    dt_pipeline_config pc = {.pp_dim = pp_dim,
                             .nmicro = nmicro,
                             .schedule = schedule,
                             .loss_reduction = DT_REDUCTION_MEAN,
                             .stage_fn = stage_fn,
                             .user = pp,
                             .stage_aux = cfg->experts > 0,
                             .nvirtual = nvirtual};
    TRY(dt_pipeline_create(mesh, &pc, &pp->pipe));
    pp->stage = dt_pipeline_stage(pp->pipe), pp->nstages = dt_pipeline_nstages(pp->pipe);
    pp->nmicro = nmicro, pp->nvirtual = dt_pipeline_nvirtual(pp->pipe);
    int C = pp->nstages * pp->nvirtual;
    pp->first = pp->stage * cfg->layers / C;
    pp->end = (pp->stage + 1) * cfg->layers / C;
    dt_status st = DT_OK;
    if (pp->nvirtual > 1 && cfg->layers % C)
        st = dt_error_set(DT_ERR_ARG,
                          "tl_pp_init: cfg->layers = %d does not split into nvirtual x stages = "
                          "%d x %d chunks of equal blocks",
                          cfg->layers, pp->nvirtual, pp->nstages);
    if (st == DT_OK) st = init_parts(pp, cfg, layout, seed);
    if (st != DT_OK) tl_pp_free(pp);
    return st;
}

void tl_pp_free(tl_pp *pp) {
    if (pp->model.params) tl_model_free(&pp->model);
    for (int j = 1; pp->rest && j < pp->nvirtual; j++)
        if (pp->rest[j - 1].params) tl_model_free(&pp->rest[j - 1]);
    free(pp->rest);
    dt_pipeline_destroy(pp->pipe);
    *pp = (tl_pp){0};
}

static dt_status stage_batch(const tl_pp *pp, dt_tensor **tokens, dt_tensor **targets);

dt_status tl_pp_batch(const tl_pp *pp, const unsigned char *text, size_t n, int step,
                      dt_tensor **tokens, dt_tensor **targets) {
    TRY(tl_batch_micro(&pp->model, text, n, step, pp->nmicro, tokens, targets));
    return stage_batch(pp, tokens, targets);
}

dt_status tl_pp_batch_at(const tl_pp *pp, const unsigned char *text, size_t n,
                         const size_t *starts, dt_tensor **tokens, dt_tensor **targets) {
    TRY(tl_batch_at(&pp->model, text, n, starts, pp->nmicro, tokens, targets));
    return stage_batch(pp, tokens, targets);
}

/* The stage's part of a batch laid out for the pipeline's micro-batches. */
static dt_status stage_batch(const tl_pp *pp, dt_tensor **tokens, dt_tensor **targets) {
    /* tl_batch keeps the targets whole; the pipeline cuts micro-batches out of each rank's
     * shard, so the targets take the tokens' placements (dp-sharded) to cut the same rows */
    dt_tensor_info ti;
    dt_tensor *cut = NULL;
    dt_status st = dt_tensor_info_get(*tokens, &ti);
    if (st == DT_OK) st = dt_tensor_redistribute(*targets, ti.mesh_ndim, ti.placements, &cut);
    dt_tensor_release(*targets);
    *targets = cut;
    if (st != DT_OK) {
        dt_tensor_release(*tokens), *tokens = NULL;
        return st;
    }
    if (pp->stage != 0) dt_tensor_release(*tokens), *tokens = NULL;
    if (pp->stage != pp->nstages - 1) dt_tensor_release(*targets), *targets = NULL;
    return DT_OK;
}

dt_status tl_pp_adamw(const tl_pp *pp, const dt_adamw_options *options, dt_optim **out) {
    if (pp->nvirtual == 1) return dt_optim_adamw_create_params(options, pp->model.params, out);
    /* one group per chunk's part, each of the options' weight decay */
    int n = 0;
    for (int j = 0; j < pp->nvirtual; j++)
        n += dt_params_count(part(pp, j)->params);
    dt_tensor **t = malloc(sizeof *t * (size_t)(n + 1));
    dt_param_group *g = calloc((size_t)pp->nvirtual, sizeof *g);
    dt_status st = t && g ? DT_OK : dt_error_set(DT_ERR_NOMEM, "tl_pp_adamw: out of memory");
    for (int j = 0, at = 0; st == DT_OK && j < pp->nvirtual; j++) {
        const dt_params *ps = part(pp, j)->params;
        g[j] = (dt_param_group){.params = t + at, .n = dt_params_count(ps)};
        st = dt_params_arrays(ps, NULL, t + at, g[j].n, NULL);
        at += g[j].n;
    }
    if (st == DT_OK) st = dt_optim_adamw_create(options, g, pp->nvirtual, out);
    free(t), free(g);
    return st;
}

dt_status tl_pp_step(tl_pp *pp, dt_tensor *tokens, dt_tensor *targets, double *loss) {
    return dt_pipeline_step(pp->pipe, tokens, targets, loss);
}
