/* The whole training state in one call (torchtitan's CheckpointManager over DCP): the model's
 * parameters, the optimizer's state and step counts, the learning-rate schedule, the random
 * generator, the step and the data loader's position, saved as one distributed checkpoint
 * (dtensor/checkpoint.h) under root/step-<step> and restored from the newest complete one onto
 * whatever mesh and placements the state has now.
 *
 * Layout of a step directory: an ordinary checkpoint whose tensors are the parameters under
 * their registry names and the optimizer's state under dt_optim_state_named's names
 * ("<param>.exp_avg", ...), and whose blob is a short text record (first line
 * "dtensor-train-state 1") of the rest: step, data position, generator, schedule, optimizer
 * kind and learning rate, and each optimizer parameter's step count by name.
 *
 * Restoring, and what must match: every parameter of the registry must be in the checkpoint
 * with its shape and dtype (extra tensors there are ignored); with an optimizer, it must be of
 * the saved kind (AdamW, SGD) over parameters the checkpoint has state for, slot for slot
 * (momentum buffers, f32 master copies). The optimizer's hyper-parameters (betas, eps, weight
 * decay, momentum) stay the caller's; its learning rate is the saved one. The schedule, when
 * the state has one, is replaced by the saved one (the checkpoint's schedule wins, so a resumed
 * run keeps its curve; a checkpoint saved without one leaves it as it is), as the generator is
 * by the saved position (an error when the checkpoint has none). */
#ifndef DTENSOR_TRAIN_STATE_H
#define DTENSOR_TRAIN_STATE_H

#include "dtensor/checkpoint.h"
#include "dtensor/optim.h"
#include "dtensor/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a training loop saves and restores; every pointer is borrowed. */
typedef struct dt_train_state {
    dt_params *params;        /* the model's registry, materialized (required) */
    dt_optim *optim;          /* nullable: its state tensors and per-parameter step counts;
                                 every parameter it updates must be one of params' */
    dt_lr_schedule *schedule; /* nullable: saved; restored into it */
    dt_generator *gen;        /* nullable: the random stream's position */
    int64_t step;             /* optimizer steps done (>= 0): names the step directory */
    int64_t data_pos;         /* the data loader's position (opaque to the library) */
} dt_train_state;

/* The prefix of step directories: root/step-00000012. dt_checkpoint_latest(root,
 * DT_TRAIN_STATE_PREFIX, ...) finds the newest complete one. */
#define DT_TRAIN_STATE_PREFIX "step-"

/* The directory of step under root ("root/step-%08lld") into buf. DT_ERR_ARG for a NULL root
 * or buf or a negative step, DT_ERR_SIZE when it does not fit in cap bytes. Not collective. */
DT_API dt_status dt_train_state_path(const char *root, int64_t step, char *buf, size_t cap);

/* Saves the state under dt_train_state_path(root, s->step) (created with root when missing;
 * a checkpoint already there is replaced), published atomically as dt_checkpoint_save does: a
 * crash at any point leaves the directory incomplete and every older one as it was. Then
 * removes all but the keep_last newest complete step directories under root, and incomplete
 * ones older than this one (keep_last <= 0: keeps all). Collective over the world of ctx, which
 * must be the context of the params' mesh: every rank calls it, with the same step, data
 * position, generator, schedule and optimizer kind; ranks of different pipeline stages pass
 * their own stage's registry and optimizer (every rank's names go into the record, one
 * checkpoint holds all stages). Blocks until the checkpoint is complete. DT_ERR_ARG naming the
 * field for a NULL or unmaterialized params, a negative step or an optimizer parameter that is not
 * in params; the checkpoint's errors otherwise (every rank fails alike; root keeps its previous
 * content). */
DT_API dt_status dt_train_state_save(dt_ctx *ctx, const char *root, const dt_train_state *s,
                                     int keep_last);

/* dt_train_state_save's asynchronous form (dt_checkpoint_save_async, as torchtitan's async
 * checkpointing): gathers the record and copies every rank's shards to host staging buffers
 * (collective, blocks for that much), then writes the files on a background thread and
 * returns; training may go on (the parameters and optimizer state may change from then on).
 * The caller owns *out and must pass it to dt_checkpoint_wait (collective, blocks), which
 * publishes the step directory and then prunes as keep_last says; until then the directory is
 * incomplete and load_latest skips it. No other call on ctx's collectives may overlap the
 * wait. Errors as dt_train_state_save's, and DT_ERR_ARG for a NULL out. */
DT_API dt_status dt_train_state_save_async(dt_ctx *ctx, const char *root,
                                           const dt_train_state *s, int keep_last,
                                           dt_checkpoint_pending **out);

/* Restores s from the checkpoint at dir (a step directory) onto the tensors' current meshes and
 * placements, in place: parameters and optimizer state are loaded by dt_checkpoint_load (any
 * source mesh onto any target mesh; each rank the tensors of its own state, so pipeline stages
 * saved together load onto another split, or onto ranks holding the whole model), then step,
 * data_pos, *schedule, *gen, the optimizer's step counts and learning rate are set. Collective over
 * the world of ctx (the params' mesh's); blocks; every rank returns the same status and message.
 * Everything that must match (above) is checked, on every rank, before anything of s changes:
 * DT_ERR_IO for a directory that is not a complete checkpoint, DT_ERR_PARSE for one without a
 * train-state record or with a malformed one, DT_ERR_ARG naming the parameter, slot or component
 * that is missing or of another kind, DT_ERR_SHAPE / DT_ERR_DTYPE (from dt_checkpoint_load) naming
 * the tensor. After an I/O or checksum error while reading data the tensors' contents are
 * unspecified (their values are read straight into them), the rest of s unchanged. */
DT_API dt_status dt_train_state_load(dt_ctx *ctx, const char *dir, dt_train_state *s);

/* dt_train_state_load from the newest complete step directory under root (an incomplete one,
 * a save that crashed, is skipped). *found = 1 then; *found = 0 and nothing changed when root
 * does not exist or holds no complete step directory. Collective as dt_train_state_load (every
 * rank must see the same root). */
DT_API dt_status dt_train_state_load_latest(dt_ctx *ctx, const char *root, dt_train_state *s,
                                            int *found);

#ifdef __cplusplus
}
#endif
#endif
