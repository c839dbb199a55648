/* tiny_llama.h's model as pipeline stages (dtensor/pipeline.h): the mesh's pp dim splits the
 * model, stage s of p running blocks [s L / p, (s + 1) L / p), stage 0 also the token
 * embedding and the last stage the final norm, the output projection and the cross_entropy;
 * each stage runs on the sub-mesh of the other dims with the layout given for it, its dims
 * found by name in that sub-mesh. A stage holds its own parameters only (tl_model_init_part),
 * with the values they have in the whole model on one rank. With v virtual stages per rank
 * (interleaved 1F1B) the model is cut into C = v p chunks of L / C blocks, chunk c running
 * blocks [c L / C, (c + 1) L / C) (chunk 0 also the embedding, chunk C - 1 the head), and rank
 * s holds the parts of chunks s, s + p, ..., s + (v - 1) p. */
#ifndef DT_EXAMPLES_TINY_LLAMA_PP_H
#define DT_EXAMPLES_TINY_LLAMA_PP_H

#include "tiny_llama.h"

typedef struct tl_pp {
    dt_pipeline *pipe;
    tl_model model; /* the stage's part (chunk stage's), on the stage's sub-mesh */
    tl_model *rest; /* nvirtual > 1: the parts of chunks stage + j nstages at rest[j - 1] */
    int stage, nstages, nmicro, nvirtual;
    int first, end; /* the blocks of chunk stage */
} tl_pp;

/* The stages over mesh's pp_dim, nmicro micro-batches per step run in schedule, the loss the
 * mean over the batch. The layout's mesh dims are found by name on the stage mesh (mesh without
 * pp_dim; tl_layout_find_dims), its other fields taken as given; FSDP units are not supported
 * (DT_ERR_ARG). pp is the pipeline's user data: it must not move until
 * tl_pp_free. */
dt_status tl_pp_init(tl_pp *pp, dt_mesh *mesh, int pp_dim, int nmicro,
                     dt_pipeline_schedule schedule, const tl_config *cfg, const tl_layout *layout,
                     uint64_t seed);
/* The same with nvirtual virtual stages per rank (DT_PIPELINE_INTERLEAVED_1F1B; 1: tl_pp_init).
 * DT_ERR_ARG on every rank when nvirtual > 1 and cfg->layers is not a multiple of nvirtual x
 * the stages (and dt_pipeline_create's errors: nmicro not a multiple of the stages, ...). */
dt_status tl_pp_init_virtual(tl_pp *pp, dt_mesh *mesh, int pp_dim, int nmicro,
                             dt_pipeline_schedule schedule, int nvirtual, const tl_config *cfg,
                             const tl_layout *layout, uint64_t seed);
void tl_pp_free(tl_pp *pp);

/* tl_batch_micro's step on the stage mesh (the rows of micro-batch i those of a one-rank
 * run's micro-batch i): *tokens on stage 0, *targets on the last stage, NULL on
 * the stages that do not read them. */
dt_status tl_pp_batch(const tl_pp *pp, const unsigned char *text, size_t n, int step,
                      dt_tensor **tokens, dt_tensor **targets);

/* tl_pp_batch of the windows of text at starts (tl_batch_at). */
dt_status tl_pp_batch_at(const tl_pp *pp, const unsigned char *text, size_t n,
                         const size_t *starts, dt_tensor **tokens, dt_tensor **targets);

/* AdamW over the stage's own parameters (all its chunks'). */
dt_status tl_pp_adamw(const tl_pp *pp, const dt_adamw_options *options, dt_optim **out);

/* One step's forwards and backwards (dt_pipeline_step); *loss (nullable): the batch's mean
 * loss, on every rank. */
dt_status tl_pp_step(tl_pp *pp, dt_tensor *tokens, dt_tensor *targets, double *loss);

#endif
