/* The pipeline executor: each rank runs its stage's schedule (pipeline_schedule.c) action by
 * action, calling the user's stage forward, running backwards, and handing tensors to its
 * neighbour stages (pipeline_wire.c). What it measures (times, live bytes) is kept per step. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "core/check.h"
#include "core/clock.h"
#include "dtensor/autograd.h"
#include "nn/pipeline_impl.h"
#include "trace/trace_impl.h"

struct dt_pipeline {
    dt_mesh *mesh, *stage_mesh;
    dt_pipeline_config cfg;
    int stage, nstages, nvirtual;
    /* with the neighbour stages' rank (group rank 0 = the lower stage); with virtual stages
     * stage 0 and stage p - 1 are neighbours too, and with p = 2 both are one communicator */
    dt_comm *prev, *next;
    dt_pipeline_action *actions;
    int nactions;
    dt_pipeline_record *rec; /* nactions of them, for the last step */
    dt_pipeline_stats stats;
};

/* A pair communicator with the rank of this one's coordinates at pp = stage. */
static dt_status pair_comm(dt_pipeline *p, int stage, dt_comm **out) {
    int coord[DT_MESH_MAX_NDIM], mr, wr, me = dt_ctx_rank(dt_mesh_ctx(p->mesh));
    for (int d = 0; d < dt_mesh_ndim(p->mesh); d++)
        coord[d] = dt_mesh_coord(p->mesh, d);
    coord[p->cfg.pp_dim] = stage;
    DT_CHECK(dt_mesh_rank_of(p->mesh, coord, &mr));
    DT_CHECK(dt_mesh_world_rank(p->mesh, mr, &wr));
    int ranks[2] = {stage < p->stage ? wr : me, stage < p->stage ? me : wr};
    return dt_comm_create(dt_mesh_ctx(p->mesh), ranks, 2, out);
}

dt_status dt_pipeline_create(dt_mesh *mesh, const dt_pipeline_config *config, dt_pipeline **out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(config);
    DT_ARG_NOT_NULL(out);
    const dt_pipeline_config *c = config;
    int nd = dt_mesh_ndim(mesh);
    DT_ARG(c->pp_dim >= 0 && c->pp_dim < nd,
           "dt_pipeline_create: argument config->pp_dim = %d is not in [0, %d)", c->pp_dim, nd);
    DT_ARG(nd >= 2,
           "dt_pipeline_create: argument mesh has only the pp dim; give the stages a dim "
           "of their own (a size-1 one will do: \"pp=%d,dp=1\")",
           dt_mesh_dim_size(mesh, 0));
    DT_ARG(c->nmicro >= 1, "dt_pipeline_create: argument config->nmicro = %d (want >= 1)",
           c->nmicro);
    DT_ARG(c->nvirtual >= 0,
           "dt_pipeline_create: argument config->nvirtual = %d (want >= 1, or 0 "
           "for 1)",
           c->nvirtual);
    DT_ARG((unsigned)c->schedule < DT_PIPELINE_SCHEDULE_COUNT,
           "dt_pipeline_create: argument config->schedule = %d is not a schedule",
           (int)c->schedule);
    DT_ARG(c->loss_reduction == DT_REDUCTION_MEAN || c->loss_reduction == DT_REDUCTION_SUM,
           "dt_pipeline_create: argument config->loss_reduction = %d is neither MEAN nor SUM",
           (int)c->loss_reduction);
    DT_ARG(c->stage_fn != NULL, "dt_pipeline_create: argument config->stage_fn is NULL");
    DT_ARG(dt_mesh_rank(mesh) >= 0, "dt_pipeline_create: argument mesh does not hold this rank");
    dt_pipeline *p = calloc(1, sizeof *p);
    if (!p) return dt_error(DT_ERR_NOMEM, "dt_pipeline_create: out of memory");
    p->mesh = mesh;
    dt_mesh_retain(mesh);
    p->cfg = *c;
    p->stage = dt_mesh_coord(mesh, c->pp_dim);
    p->nstages = dt_mesh_dim_size(mesh, c->pp_dim);
    p->nvirtual = c->nvirtual ? c->nvirtual : 1;
    const char *names[DT_MESH_MAX_NDIM];
    int n = 0;
    for (int d = 0; d < nd; d++)
        if (d != c->pp_dim) names[n++] = dt_mesh_dim_name(mesh, d);
    dt_status st;
    DT_CHECK_GOTO(dt_mesh_submesh(mesh, names, n, &p->stage_mesh), st, fail);
    DT_CHECK_GOTO(dt_pipeline_schedule_build(c->schedule, p->nstages, p->nvirtual, c->nmicro,
                                             p->stage, NULL, 0, &p->nactions),
                  st, fail);
    p->actions = malloc(sizeof *p->actions * (size_t)p->nactions);
    p->rec = calloc((size_t)p->nactions, sizeof *p->rec);
    if (!p->actions || !p->rec) {
        st = dt_error(DT_ERR_NOMEM, "dt_pipeline_create: out of memory");
        goto fail;
    }
    DT_CHECK_GOTO(dt_pipeline_schedule_build(c->schedule, p->nstages, p->nvirtual, c->nmicro,
                                             p->stage, p->actions, p->nactions, &p->nactions),
                  st, fail);
    int ring = p->nvirtual > 1, ps = p->nstages; /* chunks wrap from stage p - 1 to stage 0 */
    if (p->stage > 0 || ring)
        DT_CHECK_GOTO(pair_comm(p, (p->stage + ps - 1) % ps, &p->prev), st, fail);
    if (ring && ps == 2)
        p->next = p->prev;
    else if (p->stage < ps - 1 || ring)
        DT_CHECK_GOTO(pair_comm(p, (p->stage + 1) % ps, &p->next), st, fail);
    *out = p;
    return DT_OK;
fail:
    dt_pipeline_destroy(p);
    return st;
}

dt_status dt_pipeline_destroy(dt_pipeline *p) {
    if (!p) return DT_OK;
    if (p->prev) dt_comm_destroy(p->prev);
    if (p->next && p->next != p->prev) dt_comm_destroy(p->next);
    dt_mesh_release(p->stage_mesh);
    dt_mesh_release(p->mesh);
    free(p->actions);
    free(p->rec);
    free(p);
    return DT_OK;
}

int dt_pipeline_stage(const dt_pipeline *p) {
    return p ? p->stage : -1;
}
int dt_pipeline_nstages(const dt_pipeline *p) {
    return p ? p->nstages : -1;
}
int dt_pipeline_nvirtual(const dt_pipeline *p) {
    return p ? p->nvirtual : -1;
}
dt_mesh *dt_pipeline_stage_mesh(const dt_pipeline *p) {
    return p ? p->stage_mesh : NULL;
}

dt_status dt_pipeline_stats_get(const dt_pipeline *p, dt_pipeline_stats *out) {
    DT_ARG_NOT_NULL(p);
    DT_ARG_NOT_NULL(out);
    *out = p->stats;
    return DT_OK;
}

dt_status dt_pipeline_record_get(const dt_pipeline *p, int i, dt_pipeline_record *out) {
    DT_ARG_NOT_NULL(p);
    DT_ARG_NOT_NULL(out);
    DT_ARG(i >= 0 && i < p->stats.nrecords,
           "dt_pipeline_record_get: argument i = %d is not in [0, %d)", i, p->stats.nrecords);
    *out = p->rec[i];
    return DT_OK;
}

/* What one step holds per chunk of this rank and micro-batch. */
typedef struct micro {
    dt_tensor *in;   /* chunks > 0: the received input leaf, until its gradient is sent */
    dt_tensor *out;  /* the chunk's output (last chunk: the scaled loss), until backward */
    dt_tensor *grad; /* the gradient of out from the next chunk, until backward */
    dt_tensor *aux;  /* chunks but the last: the chunk's scaled loss term, until backward */
} micro;

typedef struct step {
    dt_pipeline *p;
    dt_ctx *ctx;
    dt_tensor *inputs, *targets;
    micro *mb;                           /* chunk c's micro-batch i at (c / p) m + i */
    double loss, t_begin, t_compute_end; /* the end of the last forward or backward */
    double aux;                          /* chunks but the last: their scaled loss terms */
    int *nbackward;                      /* per chunk of this rank */
    int inflight;
    bool sync; /* the caller's grad sync, used for each chunk's last backward of the step */
} step;

/* *t (one element) scaled as the micro-batch's loss (1/m under MEAN), its value added to *sum
 * (read in f64 whatever its dtype: an f32 loss's 4 bytes are not a double). */
static dt_status scale_loss(const dt_pipeline *p, dt_tensor **t, double *sum) {
    if (p->cfg.loss_reduction == DT_REDUCTION_MEAN) {
        dt_tensor *scaled;
        DT_CHECK(dt_mul_scalar(*t, 1.0 / p->cfg.nmicro, &scaled));
        dt_tensor_release(*t);
        *t = scaled;
    }
    dt_tensor *t64 = NULL;
    double v = 0;
    dt_status st = dt_cast(*t, DT_F64, &t64);
    if (st == DT_OK) st = dt_tensor_full_tensor(t64, &v, sizeof v);
    dt_tensor_release(t64);
    if (st == DT_OK) *sum += v;
    return st;
}

static dt_status check_aux(const dt_pipeline *p, int i, dt_tensor *aux) {
    dt_tensor_info info;
    DT_CHECK(dt_tensor_info_get(aux, &info));
    if (info.numel != 1)
        return dt_error(DT_ERR_SHAPE,
                        "dt_pipeline_step: stage %d's stage_fn handed back a loss term of "
                        "%zu elements for micro-batch %d, not 1",
                        p->stage, info.numel, i);
    DT_ARG(dt_mesh_equal(info.mesh, p->stage_mesh),
           "dt_pipeline_step: stage %d's loss term for micro-batch %d is not on the stage's "
           "sub-mesh",
           p->stage, i);
    return DT_OK;
}

/* Chunk c's state for micro-batch i. */
static micro *at(step *s, int c, int i) {
    return &s->mb[(size_t)(c / s->p->nstages) * (size_t)s->p->cfg.nmicro + (size_t)i];
}

static int nchunks(const dt_pipeline *p) {
    return p->nstages * p->nvirtual;
}

static dt_status forward(step *s, int c, int i) {
    dt_pipeline *p = s->p;
    int last = c == nchunks(p) - 1;
    micro *m = at(s, c, i);
    dt_pipeline_stage_call call = {.stage = p->stage,
                                   .nstages = p->nstages,
                                   .chunk = c,
                                   .nchunks = nchunks(p),
                                   .micro = i,
                                   .nmicro = p->cfg.nmicro,
                                   .mesh = p->stage_mesh};
    dt_tensor *in = NULL, *target = NULL, *y = NULL;
    dt_status st = DT_OK;
    if (c == 0) DT_CHECK_GOTO(dt_pipe_micro(s->inputs, i, p->cfg.nmicro, "inputs", &in), st, done);
    if (last && s->targets)
        DT_CHECK_GOTO(dt_pipe_micro(s->targets, i, p->cfg.nmicro, "targets", &target), st, done);
    call.input = c == 0 ? in : m->in;
    call.target = target;
    dt_tensor *aux = NULL;
    if (p->cfg.stage_aux) call.aux = &aux;
    DT_CHECK_GOTO(p->cfg.stage_fn(p->cfg.user, &call, &y), st, done);
    if (!y) {
        st = dt_error(DT_ERR_ARG,
                      "dt_pipeline_step: stage_fn of chunk %d gave no output for micro-batch %d", c,
                      i);
        goto done;
    }
    if (aux) DT_CHECK_GOTO(check_aux(p, i, aux), st, done);
    if (aux && last) { /* the loss and the stage's own term, scaled together below */
        dt_tensor *sum;
        DT_CHECK_GOTO(dt_add(y, aux, &sum), st, done);
        dt_tensor_release(y), dt_tensor_release(aux);
        y = sum, aux = NULL;
    } else if (aux) {
        DT_CHECK_GOTO(scale_loss(p, &aux, &s->aux), st, done);
        m->aux = aux, aux = NULL;
    }
    if (last) {
        dt_tensor_info info;
        DT_CHECK_GOTO(dt_tensor_info_get(y, &info), st, done);
        if (info.numel != 1) {
            st = dt_error(DT_ERR_SHAPE,
                          "dt_pipeline_step: the last chunk's stage_fn gave %zu "
                          "elements for micro-batch %d's loss, not 1",
                          info.numel, i);
            goto done;
        }
        DT_CHECK_GOTO(scale_loss(p, &y, &s->loss), st, done);
    }
    m->out = y;
    y = NULL;
    s->inflight++;
done:
    dt_tensor_release(in), dt_tensor_release(target), dt_tensor_release(y);
    dt_tensor_release(aux);
    return st;
}

/* The backward root of a stage with a loss term of its own: one element whose rule hands the
 * stage output the gradient the next stage sent (state) and the term its own seed, so that
 * one backward (one grad sync, one pass over the shared nodes) takes both. */
static dt_status join_backward(void *state, dt_tensor *const *in, const bool *need, dt_tensor *grad,
                               dt_tensor **in_grad) {
    (void)in;
    if (need[0]) dt_tensor_retain(in_grad[0] = state);
    if (need[1]) dt_tensor_retain(in_grad[1] = grad);
    return DT_OK;
}

static void join_free(void *state) {
    dt_tensor_release(state);
}

static dt_status backward_joined(micro *m) {
    dt_tensor *root, *in[2] = {m->out, m->aux};
    DT_CHECK(dt_tensor_zeros_like(m->aux, &root));
    dt_tensor_retain(m->grad);
    dt_status st = dt_autograd_record_custom("pipeline_stage_loss", in, 2, root, join_backward,
                                             m->grad, join_free);
    if (st == DT_OK) st = dt_backward(root);
    dt_tensor_release(root);
    return st;
}

static dt_status backward(step *s, int c, int i) {
    dt_pipeline *p = s->p;
    micro *m = at(s, c, i);
    /* Gradients of every backward but a chunk's last of the step stay as backward leaves them
     * (accumulated, Partial where the leaf is replicated); the last reduces the leaves it
     * reached, the chunk's, once (a parameter belongs to one chunk). */
    dt_autograd_of(s->ctx)->grad_unsynced =
        ++s->nbackward[c / p->nstages] < p->cfg.nmicro ? true : !s->sync;
    dt_status st = DT_OK;
    if (c == nchunks(p) - 1) {
        if (dt_tensor_requires_grad(m->out)) st = dt_backward(m->out);
    } else if (m->grad && m->aux && dt_tensor_requires_grad(m->aux)) {
        st = backward_joined(m);
    } else if (m->grad) {
        st = dt_backward_with(m->out, m->grad);
    } else if (m->aux && dt_tensor_requires_grad(m->aux)) {
        st = dt_backward(m->aux);
    }
    dt_autograd_of(s->ctx)->grad_unsynced = !s->sync;
    dt_tensor_release(m->out), dt_tensor_release(m->grad), dt_tensor_release(m->aux);
    m->out = m->grad = m->aux = NULL;
    s->inflight--;
    return st;
}

/* The group rank of stage peer in this rank's pair communicator with it. */
static int peer_rank(const dt_pipeline *p, int peer) {
    return peer < p->stage ? 0 : 1;
}

/* Runs send or receive a: the pipeline's own collectives, of the forward (activations) or
 * the backward (gradients), for dt_comm_set_observer. */
static dt_status run_p2p(step *s, const dt_pipeline_action *a) {
    dt_pipeline *p = s->p;
    micro *m = at(s, a->chunk, a->micro);
    int peer = peer_rank(p, a->peer);
    int bw = a->op == DT_PIPE_SEND_GRAD || a->op == DT_PIPE_RECV_GRAD;
    dt_comm_site site =
        dt_comm_site_swap((dt_comm_site){.caller = "pipeline", .module = "pipeline", .backward = bw});
    dt_status st;
    switch (a->op) {
    case DT_PIPE_SEND_ACT:
        st = dt_pipe_send(p->next, peer, m->out);
        break;
    case DT_PIPE_RECV_ACT:
        st = dt_pipe_recv(p->prev, peer, p->stage_mesh, &m->in);
        break;
    case DT_PIPE_RECV_GRAD:
        st = dt_pipe_recv(p->next, peer, p->stage_mesh, &m->grad);
        break;
    case DT_PIPE_SEND_GRAD:
        st = dt_pipe_send(p->prev, peer, dt_tensor_grad(m->in));
        dt_tensor_release(m->in);
        m->in = NULL;
        break;
    default:
        st = dt_error(DT_ERR_ARG, "dt_pipeline_step: unknown action %d", (int)a->op);
    }
    dt_comm_site_swap(site);
    return st;
}

/* Runs a, which started at t0; a forward's or backward's end is s->t_compute_end. The trace
 * names the chunk as the stage (the timeline page's rows: one per virtual stage). */
static dt_status run_action(step *s, const dt_pipeline_action *a, double t0) {
    if (a->op != DT_PIPE_FORWARD && a->op != DT_PIPE_BACKWARD) return run_p2p(s, a);
    const char *what = a->op == DT_PIPE_FORWARD ? "forward" : "backward";
    if (s->ctx->trace && t0 > s->t_compute_end)
        dt_trace_record(s->ctx, DT_LANE_PIPELINE, "idle", s->t_compute_end,
                        "stage %d idle before micro %d %s", a->chunk, a->micro, what);
    dt_status st = a->op == DT_PIPE_FORWARD ? forward(s, a->chunk, a->micro)
                                            : backward(s, a->chunk, a->micro);
    if (s->ctx->trace)
        dt_trace_record(s->ctx, DT_LANE_PIPELINE, what, t0, "stage %d micro %d %s", a->chunk,
                        a->micro, what);
    s->t_compute_end = dt_now_us();
    s->p->stats.busy_us += s->t_compute_end - t0;
    return st;
}

/* Checked before the step communicates, so that a bad batch fails on its stage at once. */
static dt_status check_batch(const dt_pipeline *p, dt_tensor *t, const char *what) {
    DT_CHECK(dt_pipe_micro_check(t, p->cfg.nmicro, what));
    dt_tensor_info info;
    DT_CHECK(dt_tensor_info_get(t, &info));
    DT_ARG(dt_mesh_equal(info.mesh, p->stage_mesh),
           "dt_pipeline_step: argument %s does not live on stage %d's sub-mesh", what, p->stage);
    return DT_OK;
}

static int64_t live_bytes(dt_ctx *ctx) {
    dt_tensor_memory mem = {0};
    dt_ctx_tensor_memory(ctx, &mem);
    return mem.bytes;
}

dt_status dt_pipeline_step(dt_pipeline *p, dt_tensor *inputs, dt_tensor *targets,
                           double *loss_out) {
    DT_ARG_NOT_NULL(p);
    int last = p->stage == p->nstages - 1;
    if (p->stage == 0) {
        DT_ARG(inputs != NULL, "dt_pipeline_step: argument inputs is NULL on stage 0");
        DT_CHECK(check_batch(p, inputs, "inputs"));
    }
    if (last && targets) DT_CHECK(check_batch(p, targets, "targets"));
    step s = {.p = p, .ctx = dt_mesh_ctx(p->mesh), .inputs = inputs, .targets = targets};
    size_t nmb = (size_t)p->nvirtual * (size_t)p->cfg.nmicro;
    s.mb = calloc(nmb, sizeof *s.mb);
    s.nbackward = calloc((size_t)p->nvirtual, sizeof *s.nbackward);
    if (!s.mb || !s.nbackward) {
        free(s.mb), free(s.nbackward);
        return dt_error(DT_ERR_NOMEM, "dt_pipeline_step: out of memory");
    }
    s.sync = !dt_autograd_of(s.ctx)->grad_unsynced;
    memset(&p->stats, 0, sizeof p->stats);
    p->stats.start_bytes = live_bytes(s.ctx);
    s.t_begin = s.t_compute_end = dt_now_us();
    dt_status st = DT_OK;
    for (int k = 0; k < p->nactions && st == DT_OK; k++) {
        double t0 = dt_now_us();
        st = run_action(&s, &p->actions[k], t0);
        double t1 = p->actions[k].op <= DT_PIPE_BACKWARD ? s.t_compute_end : dt_now_us();
        if (s.inflight > p->stats.peak_inflight) p->stats.peak_inflight = s.inflight;
        p->rec[k] = (dt_pipeline_record){.action = p->actions[k],
                                         .start_us = t0 - s.t_begin,
                                         .end_us = t1 - s.t_begin,
                                         .live_bytes = live_bytes(s.ctx),
                                         .inflight = s.inflight};
        p->stats.nrecords = k + 1;
    }
    double t_end = dt_now_us();
    if (st == DT_OK && s.ctx->trace && t_end > s.t_compute_end)
        dt_trace_record(s.ctx, DT_LANE_PIPELINE, "idle", s.t_compute_end,
                        "stage %d idle after "
                        "its last backward",
                        p->actions[p->nactions - 1].chunk);
    p->stats.step_us = t_end - s.t_begin;
    p->stats.idle_us = p->stats.step_us - p->stats.busy_us;
    for (size_t i = 0; i < nmb; i++) {
        dt_tensor_release(s.mb[i].in), dt_tensor_release(s.mb[i].out);
        dt_tensor_release(s.mb[i].grad), dt_tensor_release(s.mb[i].aux);
    }
    free(s.mb), free(s.nbackward);
    dt_autograd_of(s.ctx)->grad_unsynced = !s.sync;
    if (st != DT_OK) return st;
    /* The loss is known on the last stage (it holds the last chunk): every pp group hands it
     * to its other stages. A stage's own loss terms are in s.aux (the last chunk's in s.loss). */
    dt_comm *pp;
    DT_CHECK(dt_mesh_dim_comm(p->mesh, p->cfg.pp_dim, &pp));
    double loss = s.loss + s.aux;
    dt_comm_site site =
        dt_comm_site_swap((dt_comm_site){.caller = "pipeline", .module = "pipeline"});
    if (p->cfg.stage_aux)
        st = dt_all_reduce(pp, &loss, &loss, 1, DT_F64, DT_REDUCE_SUM);
    else
        st = dt_broadcast(pp, &loss, 1, DT_F64, p->nstages - 1);
    dt_comm_site_swap(site);
    if (st != DT_OK) return st;
    if (loss_out) *loss_out = loss;
    return DT_OK;
}
