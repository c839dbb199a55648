/* Fully sharded data parallelism (PyTorch's FSDP2) over one mesh dim, on plain parameter
 * arrays (a model written on a parameter registry declares its units instead: dt_fully_shard,
 * below). Parameters are stored sharded over the data-parallel dim (dt_fsdp_shard_param) and
 * grouped in units, one per layer or block, in forward order. Model code brackets each unit's
 * forward with dt_fsdp_unit_begin (which hands out the unit's parameters gathered over dp) and
 * dt_fsdp_unit_end.
 *
 *   - Gather: one all_gather per unit (the shards of all its parameters packed into one
 *     buffer, each padded to its largest shard), recorded in the autograd graph as a
 *     redistribute of each parameter, so backward sends each gradient home.
 *   - Reshard after forward (default on): dt_fsdp_unit_end frees the gathered storage; the
 *     graph keeps the tensors, and backward gathers the unit again (one all_gather) before the
 *     first of its nodes runs. Off: the gathered parameters stay from forward to backward.
 *     Either way they are freed once the unit's backward is done.
 *   - Gradients: once backward has the whole gradient of every parameter of a unit, one
 *     reduce_scatter per unit (packed like the gather) leaves each parameter's gradient in
 *     the parameter's own placements; it runs on the communication thread while backward goes
 *     on, and is waited for at the end of backward.
 *   - Prefetch (default on): dt_fsdp_unit_begin of unit k issues unit k+1's all_gather on
 *     the communication thread before returning (unless unit k+1 still holds its gathered
 *     parameters: a forward with no backward since may use them as they are), and backward's gather of unit k issues unit
 *     k-1's (as does unit k's first gradient, for a unit kept gathered after its forward), so
 *     communication overlaps the current unit's computation (the trace shows both).
 *
 * HSDP: a mesh (replicate, shard): parameters Replicate over the first dim and sharded over
 * the second (dp_dim); after the unit's reduce_scatter one all_reduce of the unit's reduced
 * shards over the replicate dim (when every gradient of the unit is Partial there; otherwise
 * each parameter's own sync, dtensor/autograd.h, all_reduces it). FSDP x TP: a parameter already
 * sharded over a tp dim is sharded over dp on its first tensor dim that no other mesh dim
 * shards (PyTorch nests both on dim 0 with a strided shard; this library has none).
 *
 * Every rank of the mesh makes the same calls in the same order (each call says whether it
 * communicates). The gathers and reduces run on the dp group's communicator of the
 * communication thread (dtensor/redistribute.h's async lane), and are counted in
 * dt_comm_stats_get under the dp dim's name. Gradient sync off (dt_ctx_set_grad_sync) bypasses
 * the unit reduce: gradients are then left to the leaves as usual, and the next synced
 * backward adds the unit's reduced shards to them. */
#ifndef DTENSOR_FSDP_H
#define DTENSOR_FSDP_H

#include "dtensor/params.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_fsdp dt_fsdp;

typedef struct dt_fsdp_options {
    int dp_dim;                /* mesh dim the parameters are sharded over */
    int reshard_after_forward; /* free gathered parameters after each unit's forward */
    int prefetch;              /* issue the next unit's all_gather early */
    /* torchtitan's enable_fsdp_float8_all_gather: each unit's shards travel as e4m3 bytes (a
     * quarter of f32's), each parameter under the tensorwise scale of its whole tensor
     * (dtensor/float8.h; one small all_reduce MAX of the unit's shard amaxes over the mesh
     * dims that shard them, before each gather), and are widened back to f32 after it. The
     * gathered parameters, the forward and the gradients stay f32 (the gather's backward is
     * the usual f32 reduce_scatter). f32 parameters in host memory only. */
    int float8_all_gather;
    /* torchtitan's mixed_precision_param = "bfloat16" (FSDP2's param_dtype): each unit's f32
     * shards are rounded to bf16 (nearest, ties to even) and travel as bf16 (half of f32's
     * bytes, twice float8's); the gathered parameters hold the bf16 values in f32, so the
     * forward computes with bf16 parameters while the shards, gradients and optimizer state
     * stay f32 (the gather's backward is the usual f32 reduce_scatter). f32 parameters in host
     * memory only; not with float8_all_gather. */
    int bf16_all_gather;
    /* Small units move together, as DDP's buckets do: a unit's forward gather also carries the
     * next units' (those with nothing gathered yet) while their gathered bytes total at most
     * this, and a unit's reduce_scatter waits for the end of backward, to go as one with the
     * others', while the deferred gradients total at most this: fewer points where every rank
     * waits for the slowest, at the price of that many bytes gathered early and of the
     * reduces' overlap with backward. Where the runtime moves pieces straight between ranks
     * (the local runtime) and with neither low-precision gather; the bits are the same. 0:
     * off (each unit alone, prefetching the next). */
    int64_t coalesce_bytes;
} dt_fsdp_options;

/* dt_fully_shard's coalesce_bytes (dt_fsdp_options). */
#define DT_FSDP_COALESCE_BYTES ((int64_t)16 << 20)

/* dp_dim 0, reshard_after_forward 1, prefetch 1, float8_all_gather 0, bf16_all_gather 0. */
DT_API dt_fsdp_options dt_fsdp_options_default(void);

/* An FSDP state for parameters on mesh (retained). options NULL = the defaults. The caller owns
 * it: free with dt_fsdp_destroy. Not collective. */
DT_API dt_status dt_fsdp_create(dt_mesh *mesh, const dt_fsdp_options *options, dt_fsdp **out);
/* Waits for anything the state still has in flight and frees it; the units' parameters are
 * released (the caller's references stay). Collective when a request is in flight. */
DT_API dt_status dt_fsdp_destroy(dt_fsdp *fsdp);

/* A new leaf holding param (Replicate over dp_dim) sharded over dp_dim on its first tensor
 * dim that no other mesh dim shards, requiring grad when param does. The caller owns it;
 * param is unchanged. Collective (no communication: each rank keeps its slice). */
DT_API dt_status dt_fsdp_shard_param(dt_fsdp *fsdp, dt_tensor *param, dt_tensor **out);

/* Adds a unit of n parameters (leaves sharded over dp_dim as dt_fsdp_shard_param leaves them;
 * retained; one dtype and device) after the units added so far; *unit_out (nullable) = its
 * index. Units run their forward in the order added. DT_ERR_UNSUPPORTED for a parameter whose
 * gradient dtype was set (mixed-precision reduction is not done here). Not collective. */
DT_API dt_status dt_fsdp_add_unit(dt_fsdp *fsdp, int n, dt_tensor *const *params, int *unit_out);

/* Before the unit's forward: full_out[i] (borrowed, valid until the unit's next begin) is
 * parameter i gathered over dp_dim, recorded as a redistribute of it when grad mode is on.
 * Collective; blocks until the unit's gather is in (then issues the next unit's). */
DT_API dt_status dt_fsdp_unit_begin(dt_fsdp *fsdp, int unit, dt_tensor **full_out);
/* After the unit's forward: frees the gathered storage when reshard_after_forward is set
 * (use only what the unit's ops made from here on). Not collective. */
DT_API dt_status dt_fsdp_unit_end(dt_fsdp *fsdp, int unit);

/* Overrides reshard_after_forward for one unit: torchtitan keeps the last unit gathered, since
 * its backward starts right after its forward. Not collective (every rank sets the same). */
DT_API dt_status dt_fsdp_unit_set_reshard_after_forward(dt_fsdp *fsdp, int unit, int reshard);

/* What the state did since its creation or the last reset: unit gathers issued in forward
 * and in backward (prefetched ones included), those issued as prefetches, unit
 * reduce_scatters, and unit all_reduces over the mesh dims where the unit's gradients were
 * left Partial (HSDP's replicate dim). Not collective. */
typedef struct dt_fsdp_stats {
    int64_t forward_gathers, backward_gathers, prefetches, reduce_scatters, all_reduces;
    int64_t max_gathered_bytes; /* most bytes of gathered parameters alive at once on this rank */
} dt_fsdp_stats;
DT_API dt_status dt_fsdp_stats_get(const dt_fsdp *fsdp, dt_fsdp_stats *out);
DT_API dt_status dt_fsdp_stats_reset(dt_fsdp *fsdp);

/* ---- units by declaration on a parameter registry (torchtitan's fully_shard) ------------- */

/* Which units free their gathered parameters after their forward. AUTO is torchtitan's
 * choice: every unit but the root (FSDP2 never reshards its root: the output projection uses
 * it again right after the blocks) and the last non-root unit in forward order (its backward
 * starts right after its forward). */
typedef enum dt_reshard {
    DT_RESHARD_AUTO = 0,
    DT_RESHARD_ON,
    DT_RESHARD_OFF,
} dt_reshard;

/* Zero-initialised (or NULL) = the defaults. */
typedef struct dt_fully_shard_options {
    const char *dp_dim; /* the mesh dim to shard over, by name; NULL: "dp_shard", else "dp" */
    dt_reshard reshard_after_forward;
    int no_prefetch; /* 1: gather each unit when it is first used, not during the one before */
    /* 1: every unit gathers and reduces on its own, as FSDP2 does; 0: small units move
     * together (DT_FSDP_COALESCE_BYTES, below). Off with no_prefetch as well. */
    int no_coalesce;
    /* dt_fsdp_options' low-precision gathers, for every unit (all calls must agree) */
    int float8_all_gather, bf16_all_gather;
} dt_fully_shard_options;

/* Declares FSDP units on params, as torchtitan's fully_shard wraps a model: pattern names
 * registry groups (dt_params_begin_group), exactly or as a glob where '*' matches one or more
 * characters other than '.' ("layers.*"), and each matching group becomes one unit; pattern
 * NULL declares the root unit, every parameter in no other unit (torchtitan: fully_shard on
 * each block, then on the whole model). The model code then only calls dt_params_use: a
 * unit's first use in a forward gathers the whole unit in one all_gather (the next unit's
 * issued meanwhile unless no_prefetch), switching to another unit ends it (frees its gathered
 * storage when it reshards), backward gathers the resharded units again and reduce_scatters
 * each unit's gradients in one call (dtensor/fsdp.h above). Unless no_prefetch or
 * no_coalesce, small units move together (dt_fsdp_options.coalesce_bytes =
 * DT_FSDP_COALESCE_BYTES): a gather carries the next units' too, and their reduce_scatters go
 * as one at the end of backward. No call marks a forward's end: the next backward's beginning
 * ends it (and its root, whose forward spans the whole forward
 * as FSDP2's root module's does), and a unit a backward has run through is gathered anew.
 * Units run their forward in the order root, then the groups in declaration order (what
 * prefetch fetches); a unit's parameters are used in one stretch per forward (the root may
 * come back once the others are done). A forward with grad mode off (evaluation) has no backward to end it, so
 * it gathers each parameter at its use (dt_params_use's default) and leaves the units alone.
 *
 * Order: declare the whole model, dt_parallelize (if at all), dt_fully_shard (any number of
 * calls), dt_params_materialize, which makes the units. Each declared parameter is stored
 * Shard over the dp dim on its first tensor dim no other mesh dim shards (one that every
 * other dim shards stays Replicate and outside its unit); dt_params_placements shows it at
 * once. Every call names the same dp dim and prefetch.
 *
 * DT_ERR_ARG, naming the argument and value, for: a pattern matching no group, or a group (or
 * the root) already in a unit; a call after dt_params_materialize, or a dt_parallelize after
 * one (TP is planned first, as torchtitan does); a mesh with no such dim, or the dp dim being
 * the tp dim, or another dim than dt_parallelize's DT_DP_SHARD dim or than an earlier call's;
 * a use hook set (dt_params_set_use_hook). DT_ERR_UNSUPPORTED for a registry on a pipeline
 * stage's mesh (cut from a mesh with a "pp" dim: micro-batches run several forwards before
 * their backwards, and a unit holds one forward's gathered parameters) and for expert banks
 * (DT_MODULE_EXPERTS). A registry has one dtype and makes every parameter on its mesh's
 * device, so a unit's parameters always agree there (one flat buffer per unit). Not
 * collective, no communication: every rank declares the same and gets the same outcome. The
 * registry owns the units (dt_params_destroy frees them; collective when a gather is still in
 * flight, after a forward that stopped midway). */
DT_API dt_status dt_fully_shard(dt_params *params, const char *pattern,
                                const dt_fully_shard_options *options);

/* The FSDP state dt_params_materialize made for params' units (borrowed, valid until
 * dt_params_destroy), for dt_fsdp_stats_get; NULL without units or before materialize. */
DT_API dt_fsdp *dt_params_fsdp(const dt_params *params);

/* Makes the next forward gather every unit anew. Needed only after a forward that no backward
 * followed, when the parameters changed since (a checkpoint loaded into them): the units it
 * left gathered would otherwise be used as they are. A graph recorded before it can no longer
 * be backwarded through the units. Not collective. */
DT_API dt_status dt_params_reshard(dt_params *params);

#ifdef __cplusplus
}
#endif
#endif
