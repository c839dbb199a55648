/* make train's table of what each rank holds (metrics.layout): its coordinates on the named
 * mesh dims, its pipeline stage's blocks, the parameter elements it stores and its share of
 * the batch and of the sequence. */
#ifndef DT_EXAMPLES_TRAIN_LAYOUT_H
#define DT_EXAMPLES_TRAIN_LAYOUT_H

#include "train_config.h"

/* Gathers every rank's row (one all_gather over the mesh) and prints the table on rank 0 to f.
 * params: this rank's registry (its stage's under a pipeline). Collective over mesh. */
dt_status tr_layout_print(dt_ctx *ctx, const tr_config *c, dt_mesh *mesh, dt_params *params,
                          FILE *f);

#endif
