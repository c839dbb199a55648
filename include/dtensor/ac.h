/* Activation checkpointing, as torchtitan offers it per transformer block: a region around a
 * block's forward decides which of the tensors its recorded ops made stay alive for backward.
 *
 *   none       everything the block's nodes saved stays (no region needed; a no-op region)
 *   full       only the block's inputs (made before the region) and the outputs named at its
 *              end stay; the rest is dropped and recomputed in backward
 *   selective  the outputs of matmuls (mm, bmm, matmul, addmm, linear) and of attention stay
 *              too; pointwise ops, norms, views and redistributes are recomputed
 *
 * The graph is the one a forward without a region records; dropping frees the storage of the
 * tensors its nodes saved, and the first node of the block that backward reaches recomputes
 * every dropped tensor of the region from the kept ones (the same kernels on the same values,
 * including the redistributes dispatch inserted, which communicate again), so gradients are
 * bitwise those of no checkpointing. Ranks recompute at the same point of the same graph, so
 * recomputation is collective exactly where the forward was. Nothing may read a dropped
 * tensor outside backward (ops fail with DT_ERR_ARG on one): use only the outputs named at
 * dt_ac_end after the region. */
#ifndef DTENSOR_AC_H
#define DTENSOR_AC_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_ac_mode {
    DT_AC_NONE = 0,
    DT_AC_FULL,
    DT_AC_SELECTIVE,
    DT_AC_MODE_COUNT
} dt_ac_mode;

/* "none", "full", "selective"; NULL for another value. */
DT_API const char *dt_ac_mode_name(dt_ac_mode mode);
/* The mode a name gives; DT_ERR_ARG naming the text for an unknown one. */
DT_API dt_status dt_ac_mode_parse(const char *text, dt_ac_mode *out);

typedef struct dt_ac_region dt_ac_region;

/* Opens a region on the calling rank: from now on the tensors recorded ops make are noted
 * (and held until dt_ac_end). One region at a time per rank (DT_ERR_ARG for a second). Not
 * collective; does not block. The caller owns the handle until dt_ac_end. */
DT_API dt_status dt_ac_begin(dt_ctx *ctx, dt_ac_mode mode, dt_ac_region **out);
/* Closes the region: the nkeep tensors of keep (the block's outputs) stay, and so do tensors
 * the mode saves; the storage of the other noted tensors that nodes still hold is dropped
 * (the rest go now). Releases the caller's handle (the region lives on, internally, while
 * tensors it dropped do). Not collective. */
DT_API dt_status dt_ac_end(dt_ac_region *region, int nkeep, dt_tensor *const *keep);

#ifdef __cplusplus
}
#endif
#endif
