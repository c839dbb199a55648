/* The demo's transformer block (examples/block.c). */
#ifndef DT_EXAMPLES_BLOCK_H
#define DT_EXAMPLES_BLOCK_H

#include <dtensor.h>

/* The block's input (2, 8, 16) with the given placements on mesh. */
dt_status dt_demo_input(dt_mesh *mesh, const char *placements, dt_tensor **out);

/* One forward of the block. sharded: tensor-parallel weights (else all replicated); verbose:
 * print each step's placements. Collective over the mesh. */
dt_status dt_demo_block(dt_ctx *ctx, dt_mesh *mesh, int sharded, int verbose, dt_tensor *x,
                        dt_tensor **out);

#endif
