/* Activation checkpointing, as torchtitan offers it per transformer block: a region around a
 * block's forward decides which of the tensors its recorded ops made stay alive for backward.
 *
 *   none       everything the block's nodes saved stays (no region needed; a no-op region)
 *   full       only the block's inputs (made before the region) and the outputs named at its
 *              end stay; the rest is dropped and recomputed in backward
 *   selective  the outputs of matmuls (mm, bmm, matmul, addmm, linear) and of attention stay
 *              too; pointwise ops, norms, views and redistributes are recomputed
 *   measured   a policy (dt_ac_policy, below) chooses what stays, by measurement, under a
 *              memory budget per block
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

#include <stdio.h>

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_ac_mode {
    DT_AC_NONE = 0,
    DT_AC_FULL,
    DT_AC_SELECTIVE,
    DT_AC_MEASURED, /* through dt_ac_begin_measured, with a policy */
    DT_AC_MODE_COUNT
} dt_ac_mode;

/* "none", "full", "selective", "measured"; NULL for another value. */
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
 * tensors it dropped do). Not collective, but for a measured region at its policy's decision
 * (below). On failure the region is closed all the same (dropped as full checkpointing does). */
DT_API dt_status dt_ac_end(dt_ac_region *region, int nkeep, dt_tensor *const *keep);

/* ---- the measured policy ---------------------------------------------------------------
 *
 * A region's candidates are the tensors full checkpointing drops. For its first
 * measure_steps backward passes on the rank (a pipeline's micro-batches count one each) the
 * policy runs each region as full and times, in backward, each candidate's recomputation (its
 * op or redistribute replayed on the kept inputs: what keeping it would save); it notes each
 * candidate's bytes and the bytes the region keeps anyway (its outputs, what cannot be
 * recomputed: the block's minimum). Regions are told apart by what they record (each
 * tensor's op, dtype and global shape, in order): identical blocks share one entry, and
 * their measurements pool (a candidate's time is the fastest of its recomputations).
 *
 * At the first dt_ac_end of a kind of region after that, the ranks of the region's mesh
 * agree on the figures (one all_reduce of the slowest rank's times, the largest bytes and the
 * smallest budget: the collective point), and the policy chooses, the same on every rank, a knapsack by
 * ratio: candidates in decreasing order of recompute microseconds per byte (ties: the one
 * made first), each kept when it still fits in budget_bytes minus the minimum, the others
 * recomputed; a candidate never recomputed in the measured passes is not kept. Every later
 * region of that kind drops the candidates not kept. Results are bitwise those of no
 * checkpointing, as with the fixed modes. */
typedef struct dt_ac_policy dt_ac_policy;

typedef struct dt_ac_policy_options {
    /* Per region (block) on each rank: the most bytes of the tensors its recorded ops made
     * that stay alive for backward, its outputs included (> 0; below the block's minimum,
     * dt_ac_end at the decision fails with DT_ERR_ARG naming both, on every rank). */
    int64_t budget_bytes;
    int measure_steps; /* backward passes measured before choosing (>= 1) */
} dt_ac_policy_options;

/* budget_bytes 0 (to be set), measure_steps 1. */
DT_API dt_ac_policy_options dt_ac_policy_options_default(void);

/* A policy for one rank's regions (like a context, used by one thread; DT_ERR_ARG when
 * regions of another rank use it). DT_ERR_ARG naming the field for a budget <= 0 or
 * measure_steps < 1. Not collective. dt_ac_policy_destroy drops the caller's handle; regions
 * still alive keep the policy until they die. */
DT_API dt_status dt_ac_policy_create(const dt_ac_policy_options *opt, dt_ac_policy **out);
DT_API dt_status dt_ac_policy_destroy(dt_ac_policy *policy);

/* dt_ac_begin for a measured region, which policy measures and decides. */
DT_API dt_status dt_ac_begin_measured(dt_ctx *ctx, dt_ac_policy *policy, dt_ac_region **out);

/* What the policy knows of one kind of region (in the order first seen). */
typedef struct dt_ac_policy_block {
    int ntensors;          /* tensors its recorded ops make */
    int ncandidates;       /* of which full checkpointing drops */
    int decided;           /* measured and chosen (0: still measuring) */
    int nkept;             /* candidates kept */
    int64_t min_bytes;     /* kept anyway: its outputs, what cannot be recomputed */
    int64_t kept_bytes;    /* min_bytes + the kept candidates' (<= budget_bytes) */
    int64_t candidate_bytes; /* all candidates' */
    double saved_us;       /* recomputation the kept candidates save per block */
    double recompute_us;   /* recomputation left per block (the dropped candidates') */
} dt_ac_policy_block;

/* The kinds of region seen (-1 for a NULL policy), and kind i's figures. Not collective. */
DT_API int dt_ac_policy_nblocks(const dt_ac_policy *policy);
DT_API dt_status dt_ac_policy_block_get(const dt_ac_policy *policy, int i,
                                        dt_ac_policy_block *out);
/* Tensor k (in the order made, k < ntensors) of kind i: what the choice read. */
typedef struct dt_ac_policy_tensor {
    const char *op;  /* its op's name, "redistribute", or "custom" (never recomputed) */
    int candidate;   /* full checkpointing drops it */
    int kept;        /* decided, and the policy keeps it */
    int64_t bytes;   /* a candidate's bytes on this rank (agreed: the ranks' largest) */
    double us;       /* a candidate's recomputation, microseconds (-1: never measured) */
} dt_ac_policy_tensor;
DT_API dt_status dt_ac_policy_tensor_get(const dt_ac_policy *policy, int i, int k,
                                         dt_ac_policy_tensor *out);
/* Prints each kind of region's candidates: op, bytes, measured recompute time, kept or not. */
DT_API dt_status dt_ac_policy_print(const dt_ac_policy *policy, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
