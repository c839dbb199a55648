/* Pipeline parallelism over one mesh dim (pp): the model is split into stages, stage s running
 * on the sub-mesh of the other dims at pp coordinate s (a run of transformer blocks with their
 * own dp/tp sharding), and a batch into micro-batches. Every rank runs its own stage's
 * forwards and backwards in the order of a schedule; a stage's output goes to the next stage
 * and the gradient of that stage's input comes back, each rank sending its own shard to the
 * rank with the same coordinates in the neighbour stage (the two stage meshes have one shape,
 * so the move is the identity: one point-to-point message, or none when the shard is empty,
 * plus a small header with the shape and placements).
 *
 * Schedules (as Megatron-LM and torch.distributed.pipelining write them):
 *   - DT_PIPELINE_AFAB (GPipe): all forwards, then all backwards. Stage s holds the
 *     activations of every micro-batch before its first backward: m at the peak.
 *   - DT_PIPELINE_1F1B: p - s - 1 warm-up forwards, then one forward and one backward in
 *     turn, then the remaining backwards. Stage s holds at most min(p - s, m) micro-batches.
 *   - DT_PIPELINE_INTERLEAVED_1F1B (Megatron-LM's interleaved schedule, PyTorch's
 *     ScheduleInterleaved1F1B) with v virtual stages per rank (config->nvirtual): the model is
 *     split into v p chunks, rank s holding chunks s, s + p, ..., s + (v - 1) p; a chunk's
 *     output goes to chunk + 1 on the next rank, from rank p - 1 back to rank 0. Forwards run
 *     in rounds of p micro-batches per chunk (Megatron's order), (v - 1) p + p - s - 1 of them
 *     as warm-up, then one forward and one backward in turn. Rank s holds at most
 *     min(v m, (v - 1) p + p - s) chunk activations (each 1/v of a stage's: rank 0 holds as
 *     many bytes as 1F1B's stage 0). Needs m a multiple of p (as PyTorch); v = 1 is 1F1B.
 * All idle for (p - 1) / (v m + p - 1) of the step on every stage (the bubble; v = 1 for the
 * first two) when the chunks take equal time. Where a stage sends to a neighbour that sends back at
 * the same point of its schedule (1F1B's steady state), the two messages form one exchange in which
 * the lower stage sends first, so that blocking point-to-point messages cannot deadlock. The
 * interleaved schedule places its messages by simulating all ranks (forward 1, backward 2 time
 * units): a message goes when both ranks are between computations, so each rank's list is a
 * projection of one global order of events and blocking messages cannot deadlock. A message
 * may so arrive before its chunk runs: its tensor is held from then on. (Megatron's warm-up,
 * (v - 1) p + 2 (p - s - 1), is deeper to hide asynchronous transfers; with blocking ones that
 * buys nothing.)
 *
 * Gradients accumulate over micro-batches in the parameters' leaves: each micro-batch's loss
 * is scaled (1/m for DT_REDUCTION_MEAN, 1 for DT_REDUCTION_SUM) so that the sum equals the
 * unpipelined loss of the whole batch (a stage's own loss terms, such as MoE's load-balancing
 * loss, are per micro-batch: with them the sum is gradient accumulation's), and grad sync
 * (dtensor/autograd.h) is off for every backward of a step but each chunk's last, which
 * reduces that chunk's accumulated gradients once (so a parameter belongs to one chunk).
 *
 * While tracing (dtensor/trace.h), each rank's "pipeline" row holds its forward, backward and
 * idle spans ("stage S micro M", S the virtual stage: the chunk), which the timeline page draws
 * as one row per (virtual) stage; an idle span is charged to the chunk that runs after it. */
#ifndef DTENSOR_PIPELINE_H
#define DTENSOR_PIPELINE_H

#include "dtensor/ops.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_pipeline_schedule {
    DT_PIPELINE_AFAB = 0, /* all forward, all backward (GPipe) */
    DT_PIPELINE_1F1B,
    DT_PIPELINE_INTERLEAVED_1F1B, /* with config->nvirtual virtual stages per rank */
    DT_PIPELINE_SCHEDULE_COUNT
} dt_pipeline_schedule;

/* "afab", "1f1b", "interleaved_1f1b"; "?" for an unknown schedule. */
DT_API const char *dt_pipeline_schedule_name(dt_pipeline_schedule schedule);
/* The schedule named name: dt_pipeline_schedule_name's names, or torchtitan's ("GPipe", "1F1B",
 * "Interleaved1F1B"), case and '_' ignored. DT_ERR_ARG naming name otherwise. Not collective. */
DT_API dt_status dt_pipeline_schedule_parse(const char *name, dt_pipeline_schedule *out);

/* One step of a stage's schedule. Sends and receives name the neighbour stage (peer). With
 * virtual stages, "stage + 1" is the rank holding chunk + 1 (stage 0 after stage p - 1). */
typedef enum dt_pipeline_op {
    DT_PIPE_FORWARD = 0,
    DT_PIPE_BACKWARD,
    DT_PIPE_SEND_ACT,  /* the micro-batch's output to stage peer = stage + 1 */
    DT_PIPE_RECV_ACT,  /* its input from stage peer = stage - 1 */
    DT_PIPE_SEND_GRAD, /* the gradient of its input to stage peer = stage - 1 */
    DT_PIPE_RECV_GRAD, /* the gradient of its output from stage peer = stage + 1 */
} dt_pipeline_op;

typedef struct dt_pipeline_action {
    dt_pipeline_op op;
    int micro; /* micro-batch, 0 .. nmicro - 1 */
    int peer;  /* the other stage of a send or receive; -1 for forward and backward */
    int chunk; /* the model chunk (virtual stage) on this rank the action is about: the one that
                  runs, sends its output or its input's gradient, or receives its input or its
                  output's gradient (so SEND_ACT of chunk c meets RECV_ACT of chunk c + 1);
                  the stage itself without virtual stages */
} dt_pipeline_action;

/* The actions stage runs, in order, for schedule with nstages stages (ranks along pp), nvirtual
 * virtual stages per rank (1 but for DT_PIPELINE_INTERLEAVED_1F1B) and nmicro micro-batches:
 * pure data, the same on every call (a test can simulate all stages against each other).
 * actions NULL: only *n_out is set (the count needed). DT_ERR_ARG naming the value for
 * nstages < 1, nvirtual < 1, nvirtual > 1 with another schedule or with nstages < 2, nmicro < 1,
 * nmicro not a multiple of nstages with nvirtual > 1, stage outside [0, nstages), an unknown
 * schedule, or cap below the count; DT_ERR_NOMEM. Not collective. */
DT_API dt_status dt_pipeline_schedule_build(dt_pipeline_schedule schedule, int nstages,
                                            int nvirtual, int nmicro, int stage,
                                            dt_pipeline_action *actions, int cap, int *n_out);

/* What a stage callback is given. */
typedef struct dt_pipeline_stage_call {
    int stage, nstages;
    int chunk, nchunks; /* the model chunk to run, of nstages x nvirtual (= stage, nstages
                           without virtual stages): chunk 0 reads the step's inputs, the last
                           computes the loss */
    int micro, nmicro;
    dt_mesh *mesh; /* the stage's sub-mesh (borrowed): the dims other than pp */
    /* Chunk 0: the micro-batch of the step's inputs; later chunks: the previous chunk's
     * output (a leaf that requires grad when that output did). Borrowed. */
    dt_tensor *input;
    /* Last chunk: the micro-batch of the step's targets (NULL when the step has none); NULL
     * on the other chunks. Borrowed. */
    dt_tensor *target;
    /* With config->stage_aux (else NULL): where the stage may hand back a loss term of its own,
     * a one-element tensor its forward made (a MoE layer's load-balancing loss), or leave NULL.
     * The reference passes to the pipeline, which scales it as the micro-batch's loss, adds it
     * to the step's loss and backpropagates it with the stage's backward of that micro-batch
     * (its gradient is the loss scale: it needs nothing from the later stages). */
    dt_tensor **aux;
} dt_pipeline_stage_call;

/* Computes call->chunk's forward on call->mesh and hands back a new tensor in *out: the input
 * of the next chunk, or, on the last chunk, the micro-batch's loss (one element, reduced over
 * the micro-batch as the unpipelined loss is over the batch). Ops it runs record autograd
 * nodes as usual; the pipeline runs the backward later in schedule order. */
typedef dt_status (*dt_pipeline_stage_fn)(void *user, const dt_pipeline_stage_call *call,
                                          dt_tensor **out);

typedef struct dt_pipeline_config {
    int pp_dim; /* the mesh dim the stages are laid along */
    int nmicro; /* micro-batches per step, >= 1 */
    dt_pipeline_schedule schedule;
    dt_reduction loss_reduction; /* DT_REDUCTION_MEAN (loss / m per micro-batch) or _SUM */
    dt_pipeline_stage_fn stage_fn;
    void *user;    /* passed to stage_fn */
    int stage_aux; /* non-zero: stages may hand back loss terms (call->aux); the step's loss is
                      then summed over the stages by one all_reduce over pp, which replaces the
                      broadcast of the last stage's loss */
    int nvirtual;  /* virtual stages (model chunks) per rank, DT_PIPELINE_INTERLEAVED_1F1B only;
                      0 or 1: one per rank */
} dt_pipeline_config;

typedef struct dt_pipeline dt_pipeline;

/* A pipeline over mesh, whose pp_dim has one coordinate per stage; mesh needs at least one
 * other dim (a size-1 one will do: "pp=4,dp=1") for the stages' sub-meshes. The config is
 * copied. Makes this rank's communicators to its neighbour stages (not collective, does not
 * block). DT_ERR_ARG names the argument at fault: pp_dim out of range, nmicro < 1, an unknown
 * schedule or reduction, a NULL stage_fn, a mesh without another dim or without this rank,
 * and dt_pipeline_schedule_build's cases (nvirtual < 0, nmicro not a multiple of the stages
 * with nvirtual > 1, ...): every rank of the mesh gets the same answer, as all check the same
 * config.
 * Free with dt_pipeline_destroy. */
DT_API dt_status dt_pipeline_create(dt_mesh *mesh, const dt_pipeline_config *config,
                                    dt_pipeline **out);
/* NULL is fine. */
DT_API dt_status dt_pipeline_destroy(dt_pipeline *pipeline);

/* This rank's stage, the number of stages, and the stage's sub-mesh (borrowed; make the
 * stage's parameters on it). */
DT_API int dt_pipeline_stage(const dt_pipeline *pipeline);
DT_API int dt_pipeline_nstages(const dt_pipeline *pipeline);
/* Virtual stages (model chunks) per rank: config->nvirtual, 1 for 0. */
DT_API int dt_pipeline_nvirtual(const dt_pipeline *pipeline);
DT_API dt_mesh *dt_pipeline_stage_mesh(const dt_pipeline *pipeline);

/* One training step's forward and backward: splits the batch into nmicro micro-batches along
 * tensor dim 0 of each rank's shard (each micro-batch keeps the batch's placements, so a batch
 * sharded over dp stays so) and runs this rank's schedule. inputs lives on stage 0's sub-mesh
 * and is read on stage 0 only (NULL elsewhere is fine); targets (nullable) likewise on the last
 * stage's. Leaves' gradients accumulate (call dt_tensor_zero_grad or the optimizer between
 * steps as without a pipeline). *loss_out (nullable) = the step's loss (the sum of the scaled
 * micro-batch losses), on every rank. Collective over mesh: every rank calls it; blocks.
 * DT_ERR_ARG when the batch (dim 0 of inputs or targets, globally or in this rank's shard)
 * is not divisible by nmicro, or inputs is missing or on another mesh on stage 0; errors of
 * stage_fn are returned as they are (other ranks may then block: the step is not
 * recoverable). */
DT_API dt_status dt_pipeline_step(dt_pipeline *pipeline, dt_tensor *inputs, dt_tensor *targets,
                                  double *loss_out);

/* What happened on this rank in the last step, action by action. Times are microseconds
 * from the step's start; live_bytes is dt_ctx_tensor_memory's bytes right after the action
 * (between actions no transient is alive: what remains is parameters, gradients and the
 * micro-batches in flight); inflight counts micro-batches whose forward ran and backward has
 * not (chunk activations, with virtual stages). */
typedef struct dt_pipeline_record {
    dt_pipeline_action action;
    double start_us, end_us;
    int64_t live_bytes;
    int inflight;
} dt_pipeline_record;

typedef struct dt_pipeline_stats {
    int nrecords;
    double step_us;
    double busy_us; /* in forwards and backwards */
    double idle_us; /* the rest: waiting on neighbours and sending */
    int peak_inflight;
    int64_t start_bytes; /* dt_ctx_tensor_memory's bytes when the step began */
} dt_pipeline_stats;

DT_API dt_status dt_pipeline_stats_get(const dt_pipeline *pipeline, dt_pipeline_stats *out);
/* Record i of the last step, 0 <= i < nrecords. */
DT_API dt_status dt_pipeline_record_get(const dt_pipeline *pipeline, int i,
                                        dt_pipeline_record *out);

#ifdef __cplusplus
}
#endif
#endif
