/* tl_explain (tl_explain.h): the step on the local runtime, rank R's observers recording what
 * it does, and R's view built as JSON once the step is done. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tl_explain.h"
#include "trainer.h"

#define TRY_GOTO(call)                                                                             \
    do {                                                                                           \
        if ((st = (call)) != DT_OK) goto out;                                                      \
    } while (0)

/* One collective of R's step, as dt_comm_set_observer saw it. */
typedef struct event {
    dt_coll_kind kind;
    int group_size, backward;
    char group[32], op[32], module[96];
    size_t bytes_in, bytes_out;
} event;

typedef struct recorder {
    pthread_mutex_t mu; /* the rank's thread and its communication thread both report */
    event *ev;
    int nev, cap;
    dt_status failed;             /* out of memory while recording */
    json_t *layouts, *ring, *moe; /* from the rank's own thread only */
    int ring_forward, ring_backward;
} recorder;

typedef struct job {
    const tl_explain_setup *s;
    int rank;
    recorder rec;
    json_t *view; /* built by rank R */
} job;

static void copy(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

static void on_comm(void *user, const dt_comm_event *e) {
    recorder *r = user;
    pthread_mutex_lock(&r->mu);
    if (r->nev == r->cap) {
        int cap = r->cap ? 2 * r->cap : 256;
        event *ev = realloc(r->ev, sizeof *ev * (size_t)cap);
        if (ev)
            r->ev = ev, r->cap = cap;
        else
            r->failed = DT_ERR_NOMEM;
    }
    if (r->nev < r->cap) {
        event *v = &r->ev[r->nev++];
        v->kind = e->kind, v->group_size = e->group_size, v->backward = e->backward;
        v->bytes_in = e->bytes_in, v->bytes_out = e->bytes_out;
        copy(v->group, sizeof v->group, e->group);
        copy(v->op, sizeof v->op, e->op ? e->op : "(direct)");
        copy(v->module, sizeof v->module, e->module ? e->module : "(none)");
    }
    pthread_mutex_unlock(&r->mu);
}

static json_t *placement_json(dt_placement p) {
    char buf[32];
    dt_placements_format(&p, 1, buf, sizeof buf);
    return json_string(buf);
}

/* Each distinct (module, input or output, from, to) once: micro-batches repeat them. */
static void on_layout(void *user, const char *module, int output, dt_placement from,
                      dt_placement to) {
    recorder *r = user;
    json_t *c =
        json_pack("{s:s, s:s, s:o, s:o}", "module", module, "at", output ? "output" : "input",
                  "from", placement_json(from), "to", placement_json(to));
    size_t i;
    json_t *old;
    json_array_foreach(r->layouts, i, old) {
        if (json_equal(old, c)) {
            json_decref(c);
            return;
        }
    }
    json_array_append_new(r->layouts, c);
}

/* The first ring of the forward (layer 0's) and of the backward (the last layer's): every
 * attention layer runs the same one. */
static void on_ring(void *user, const dt_ring_step *e) {
    recorder *r = user;
    int *seen = e->backward ? &r->ring_backward : &r->ring_forward;
    if (*seen >= e->nsteps) return;
    (*seen)++;
    json_t *pos = json_array();
    for (int64_t i = 0; i < e->rows; i++)
        json_array_append_new(pos, json_integer(e->positions[i]));
    json_array_append_new(r->ring,
                          json_pack("{s:s, s:i, s:i, s:i, s:i, s:o, s:b, s:b, s:i}", "pass",
                                    e->backward ? "backward" : "forward", "step", e->step, "source",
                                    e->source, "source_world", e->source_world, "next_world",
                                    e->next_world, "positions", pos, "sends_kv", e->sends_kv,
                                    "sends_dkv", e->sends_dkv, "cp_rank", e->me));
}

static json_t *i64_array(const int64_t *v, int64_t n) {
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* Layer 0's routing of the first batch (the first call). */
static void on_moe(void *user, dt_tensor *x, dt_tensor *router_w, const dt_moe_plan *plan) {
    recorder *r = user;
    (void)x, (void)router_w;
    dt_moe_plan_info p;
    if (r->moe || dt_moe_plan_info_get(plan, &p) != DT_OK) return;
    r->moe = json_pack("{s:i, s:i, s:I, s:I, s:I, s:i, s:o, s:o, s:o, s:o}", "ep", p.ep, "ep_rank",
                       p.me, "experts", (json_int_t)p.experts, "local_experts",
                       (json_int_t)p.local_experts, "tokens", (json_int_t)p.tokens, "top_k",
                       p.top_k, "send_counts", i64_array(p.send_counts, p.ep), "tokens_per_expert",
                       i64_array(p.tokens_per_expert, p.experts), "recv_counts",
                       i64_array(p.recv_counts, p.ep), "recv_per_expert",
                       i64_array(p.recv_per_expert, p.ep * p.local_experts));
}

static void observe(dt_ctx *ctx, recorder *r, int on) {
    dt_comm_set_observer(ctx, on ? on_comm : NULL, r);
    dt_module_set_layout_observer(on ? on_layout : NULL, r);
    dt_ring_set_observer(on ? on_ring : NULL, r);
    dt_moe_set_observer(on ? on_moe : NULL, r);
}

static json_t *shape_json(const int64_t *shape, int ndim) {
    return i64_array(shape, ndim);
}

static dt_status parameters_json(const dt_params *p, json_t *out) {
    int n = dt_params_count(p), mnd = dt_mesh_ndim(dt_params_mesh(p));
    for (int i = 0; i < n; i++) {
        const char *name;
        dt_tensor *t;
        dt_tensor_info info;
        dt_placement stored[DT_MESH_MAX_NDIM], compute[DT_MESH_MAX_NDIM];
        char sb[128], cb[128];
        TR_TRY(dt_params_at(p, i, &name, &t));
        TR_TRY(dt_tensor_info_get(t, &info));
        TR_TRY(dt_params_placements(p, i, stored, compute));
        TR_TRY(dt_placements_format(stored, mnd, sb, sizeof sb));
        TR_TRY(dt_placements_format(compute, mnd, cb, sizeof cb));
        json_array_append_new(out, json_pack("{s:s, s:o, s:s, s:s, s:o}", "name", name, "shape",
                                             shape_json(info.shape, info.ndim), "stored", sb,
                                             "compute", cb, "local_shape",
                                             shape_json(info.local_shape, info.ndim)));
    }
    return DT_OK;
}

static const char *str_of(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* rows (an array) gains e, summed into the row of the same key fields. */
static void add_row(json_t *rows, const event *e, int with_op) {
    json_t *row = NULL;
    for (size_t i = 0; !row && i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i);
        if (!strcmp(str_of(r, "kind"), dt_coll_kind_name(e->kind)) &&
            !strcmp(str_of(r, "group"), e->group) &&
            json_integer_value(json_object_get(r, "group_size")) == e->group_size &&
            (!with_op || !strcmp(str_of(r, "op"), e->op)))
            row = r;
    }
    if (!row) {
        row = json_pack("{s:s, s:s, s:i, s:i, s:I, s:I}", "kind", dt_coll_kind_name(e->kind),
                        "group", e->group, "group_size", e->group_size, "calls", 0, "bytes_in",
                        (json_int_t)0, "bytes_out", (json_int_t)0);
        if (with_op) json_object_set_new(row, "op", json_string(e->op));
        json_array_append_new(rows, row);
    }
    const char *k[3] = {"calls", "bytes_in", "bytes_out"};
    json_int_t add[3] = {1, (json_int_t)e->bytes_in, (json_int_t)e->bytes_out};
    for (int f = 0; f < 3; f++)
        json_object_set_new(row, k[f],
                            json_integer(json_integer_value(json_object_get(row, k[f])) + add[f]));
}

/* The events by module (in the order modules first issued one), forward then backward, and
 * the totals per (kind, group). */
static void collectives_json(const recorder *r, json_t *view) {
    json_t *modules = json_array(), *totals = json_array();
    for (int k = 0; k < r->nev; k++) {
        const event *e = &r->ev[k];
        json_t *m = NULL;
        for (size_t i = 0; !m && i < json_array_size(modules); i++)
            if (!strcmp(str_of(json_array_get(modules, i), "module"), e->module))
                m = json_array_get(modules, i);
        if (!m) {
            m = json_pack("{s:s, s:[], s:[]}", "module", e->module, "forward", "backward");
            json_array_append_new(modules, m);
        }
        add_row(json_object_get(m, e->backward ? "backward" : "forward"), e, 1);
        add_row(totals, e, 0);
    }
    json_object_set_new(view, "modules", modules);
    json_object_set_new(view, "totals", totals);
}

static const char *const pipe_ops[] = {"forward",  "backward",  "send_act",
                                       "recv_act", "send_grad", "recv_grad"};

/* The stage's actions in order, with the micro-batches whose activations are saved (their
 * forward ran, their backward not yet) after each. */
static dt_status pipeline_json(const tl_pp *pp, json_t *view) {
    dt_pipeline_stats ps;
    TR_TRY(dt_pipeline_stats_get(pp->pipe, &ps));
    json_t *actions = json_array(), *saved = json_array();
    for (int i = 0; i < ps.nrecords; i++) {
        dt_pipeline_record rec;
        TR_TRY(dt_pipeline_record_get(pp->pipe, i, &rec));
        const dt_pipeline_action *a = &rec.action;
        const char *event = NULL;
        if (a->op == DT_PIPE_FORWARD) {
            json_array_append_new(saved, json_integer(a->micro));
            event = "saved";
        } else if (a->op == DT_PIPE_BACKWARD) {
            for (size_t k = 0; k < json_array_size(saved); k++)
                if (json_integer_value(json_array_get(saved, k)) == a->micro)
                    json_array_remove(saved, k--);
            event = "freed";
        }
        json_t *row = json_pack("{s:s, s:i, s:i, s:i, s:I, s:i, s:o}", "op", pipe_ops[a->op],
                                "micro", a->micro, "chunk", a->chunk, "peer", a->peer, "live_bytes",
                                (json_int_t)rec.live_bytes, "inflight", rec.inflight, "saved",
                                json_deep_copy(saved));
        if (event) json_object_set_new(row, "activations", json_string(event));
        json_array_append_new(actions, row);
    }
    json_decref(saved);
    /* interleaved 1F1B: the rank's chunks stage, stage + p, ..., each its blocks */
    json_t *chunks = json_array();
    int nchunks = pp->nstages * (pp->nvirtual > 1 ? pp->nvirtual : 1), L = pp->model.cfg.layers;
    for (int c = pp->stage; c < nchunks; c += pp->nstages)
        json_array_append_new(chunks,
                              json_pack("{s:i, s:i, s:i}", "chunk", c, "first_layer",
                                        c * L / nchunks, "end_layer", (c + 1) * L / nchunks));
    json_object_set_new(view, "chunks", chunks);
    json_object_set_new(view, "pipeline",
                        json_pack("{s:i, s:i, s:i, s:i, s:b, s:b, s:i, s:I, s:o}", "stage",
                                  pp->stage, "nstages", pp->nstages, "first_layer", pp->first,
                                  "end_layer", pp->end, "embedding", pp->stage == 0, "head",
                                  pp->stage == pp->nstages - 1, "peak_inflight", ps.peak_inflight,
                                  "start_bytes", (json_int_t)ps.start_bytes, "actions", actions));
    return DT_OK;
}

static json_t *config_json(const tl_explain_setup *s, const tl_layout *l, int rank, int world) {
    const tl_config *c = &s->cfg;
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:i, s:s, s:{s:i, s:i, s:i, "
                     "s:i, s:i, s:i, s:i, s:i, s:i, s:i}}",
                     "mesh", s->mesh, "rank", rank, "world", world, "fsdp", s->fsdp, "fsdp_units",
                     l->fsdp_units, "sequence_parallel", l->sequence_parallel, "loss_parallel",
                     l->loss_parallel, "bucket_kb", s->bucket_kb, "ac", dt_ac_mode_name(s->ac),
                     "micro", s->micro, "schedule", dt_pipeline_schedule_name(s->schedule), "model",
                     "vocab", c->vocab, "seq", c->seq, "batch", c->batch, "dim", c->dim, "layers",
                     c->layers, "heads", c->heads, "kv_heads", c->kv_heads, "hidden", c->hidden,
                     "experts", c->experts, "top_k", c->top_k);
}

/* R's view of the step: what its observers recorded, and the state after it. */
static dt_status view_json(job *j, dt_mesh *mesh, const tl_layout *l, const tl_model *m,
                           const tl_pp *pp) {
    json_t *v = json_object(), *coords = json_object(), *params = json_array();
    j->view = v;
    json_object_set_new(v, "config", config_json(j->s, l, j->rank, dt_mesh_nranks(mesh)));
    for (int d = 0; d < dt_mesh_ndim(mesh); d++)
        json_object_set_new(coords, dt_mesh_dim_name(mesh, d),
                            json_integer(dt_mesh_coord(mesh, d)));
    json_object_set_new(v, "coords", coords);
    json_object_set_new(v, "parameters", params);
    TR_TRY(parameters_json(m->params, params));
    for (int k = 1; pp && k < pp->nvirtual; k++) /* the rank's other chunks' parameters */
        TR_TRY(parameters_json(pp->rest[k - 1].params, params));
    collectives_json(&j->rec, v);
    json_object_set(v, "sequence_parallel", j->rec.layouts);
    if (pp) TR_TRY(pipeline_json(pp, v));
    if (json_array_size(j->rec.ring)) json_object_set(v, "ring", j->rec.ring);
    if (j->rec.moe) json_object_set(v, "moe", j->rec.moe);
    return DT_OK;
}

/* One rank of the step, as examples/train.c runs it; rank R observes. */
static dt_status run_rank(dt_ctx *ctx, void *arg) {
    job *j = arg;
    const tl_explain_setup *o = j->s;
    int mine = dt_ctx_rank(ctx) == j->rank, pp_dim = -1;
    dt_mesh *mesh;
    TR_TRY(dt_mesh_create_str(ctx, o->mesh, &mesh));
    tl_layout l = {.fsdp = o->fsdp, .fsdp_units = o->fsdp_units, .ac = o->ac};
    tl_layout_find_dims(mesh, &l);
    l.sequence_parallel = o->sp && l.tp_dim >= 0, l.loss_parallel = l.tp_dim >= 0;
    if (dt_mesh_dim_index(mesh, "pp", &pp_dim) != DT_OK) pp_dim = -1;
    if (l.fsdp_units < 0) l.fsdp_units = pp_dim < 0 && !o->cfg.experts;
    tl_model one = {0}, *mp = &one;
    tl_pp pipe = {0};
    dt_optim *opt = NULL;
    dt_tensor *tok = NULL, *tgt = NULL, *loss = NULL;
    dt_adamw_options adamw = {
        .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01};
    dt_status st = DT_OK;
    if (o->bucket_kb >= 0) TRY_GOTO(dt_ctx_set_grad_bucket_bytes(ctx, (size_t)o->bucket_kb << 10));
    if (pp_dim >= 0) {
        TRY_GOTO(tl_pp_init(&pipe, mesh, pp_dim, o->micro, o->schedule, &o->cfg, &l, 1234));
        mp = &pipe.model;
        TRY_GOTO(tl_pp_adamw(&pipe, &adamw, &opt));
        TRY_GOTO(tl_pp_batch(&pipe, NULL, 0, 0, &tok, &tgt));
    } else {
        TRY_GOTO(tl_model_init(&one, mesh, &o->cfg, &l, 1234));
        TRY_GOTO(dt_optim_adamw_create_params(&adamw, one.params, &opt));
        TRY_GOTO(tl_batch(&one, NULL, 0, 0, &tok, &tgt));
    }
    TRY_GOTO(dt_comm_stats_reset(ctx));
    if (mine) observe(ctx, &j->rec, 1);
    if (pp_dim >= 0) {
        TRY_GOTO(tl_pp_step(&pipe, tok, tgt, NULL));
    } else {
        TRY_GOTO(tl_loss(&one, tok, tgt, &loss));
        TRY_GOTO(dt_backward(loss));
    }
    TRY_GOTO(dt_optim_step(opt));
    TRY_GOTO(dt_optim_zero_grad(opt));
    if (mine) {
        observe(ctx, &j->rec, 0);
        TRY_GOTO(j->rec.failed);
        TRY_GOTO(view_json(j, mesh, &l, mp, pp_dim >= 0 ? &pipe : NULL));
    }
out:
    if (mine) observe(ctx, &j->rec, 0);
    dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    dt_optim_destroy(opt);
    if (pp_dim >= 0)
        tl_pp_free(&pipe);
    else if (one.params)
        tl_model_free(&one);
    dt_mesh_release(mesh);
    return st;
}

/* The arguments checked before any rank starts; *world_out the mesh's rank count. */
static dt_status check_setup(const tl_explain_setup *s, int rank, int *world_out) {
    if (!s) return dt_error_set(DT_ERR_ARG, "tl_explain: argument s is NULL");
    if (!s->mesh) return dt_error_set(DT_ERR_ARG, "tl_explain: s->mesh is NULL");
    int shape[DT_MESH_MAX_NDIM], nd, world = 1, pp = 0;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    TR_TRY(dt_mesh_parse(s->mesh, shape, names, &nd));
    for (int d = 0; d < nd; d++) {
        world *= shape[d];
        pp |= !strcmp(names[d], "pp");
    }
    if (rank < 0 || rank >= world)
        return dt_error_set(DT_ERR_ARG, "tl_explain: rank %d is not in [0, %d) (mesh %s)", rank,
                            world, s->mesh);
    if (pp && (s->micro < 1 || s->cfg.batch % s->micro))
        return dt_error_set(DT_ERR_ARG, "tl_explain: micro %d does not divide batch %d", s->micro,
                            s->cfg.batch);
    if (pp && s->fsdp_units > 0)
        return dt_error_set(DT_ERR_ARG,
                            "tl_explain: fsdp_units %d: FSDP units do not run under a pipeline",
                            s->fsdp_units);
    if ((unsigned)s->schedule >= DT_PIPELINE_SCHEDULE_COUNT)
        return dt_error_set(DT_ERR_ARG, "tl_explain: schedule %d is unknown", (int)s->schedule);
    *world_out = world;
    return DT_OK;
}

/* Runs fn on world in-process ranks for j, and hands R's view to *out. */
static dt_status run_job(job *j, int world, dt_spmd_fn fn, void *arg, json_t **out) {
    pthread_mutex_init(&j->rec.mu, NULL);
    j->rec.layouts = json_array(), j->rec.ring = json_array();
    dt_status st = dt_local_run(world, fn, arg, NULL);
    pthread_mutex_destroy(&j->rec.mu);
    free(j->rec.ev);
    json_decref(j->rec.layouts), json_decref(j->rec.ring), json_decref(j->rec.moe);
    if (st == DT_OK && !j->view) st = dt_error_set(DT_ERR_NOMEM, "tl_explain: no view was made");
    if (st != DT_OK) {
        json_decref(j->view);
        return st;
    }
    *out = j->view;
    return DT_OK;
}

dt_status tl_explain_json(const tl_explain_setup *s, int rank, json_t **out) {
    int world = 0;
    TR_TRY(check_setup(s, rank, &world));
    if (!out) return dt_error_set(DT_ERR_ARG, "tl_explain_json: argument out is NULL");
    job j = {.s = s, .rank = rank};
    return run_job(&j, world, run_rank, &j, out);
}

/* The trainer's probe: R observes its step, then builds its view. */
static void probe_before(dt_ctx *ctx, void *user) {
    job *j = user;
    if (dt_ctx_rank(ctx) == j->rank) observe(ctx, &j->rec, 1);
}

static dt_status probe_after(dt_ctx *ctx, void *user, dt_mesh *mesh, const tl_model *m,
                             const tl_pp *pipe) {
    job *j = user;
    if (dt_ctx_rank(ctx) != j->rank) return DT_OK;
    observe(ctx, &j->rec, 0);
    TR_TRY(j->rec.failed);
    return view_json(j, mesh, &m->layout, m, pipe);
}

dt_status tl_explain_train(const tr_config *c, const tr_data *data, const tr_model *custom,
                           int rank, json_t **out) {
    if (!c || !data || !out)
        return dt_error_set(DT_ERR_ARG, "tl_explain_train: a NULL argument (c %p, data %p, out %p)",
                            (const void *)c, (const void *)data, (void *)out);
    int world = tr_config_world(c);
    if (rank < 0 || rank >= world)
        return dt_error_set(DT_ERR_ARG, "tl_explain_train: rank %d is not in [0, %d) (mesh %s)",
                            rank, world, c->mesh);
    tl_explain_setup s = {.mesh = c->mesh,
                          .cfg = c->model,
                          .fsdp = c->fsdp,
                          .fsdp_units = c->fsdp_units,
                          .sp = c->sequence_parallel,
                          .bucket_kb = c->bucket_kb,
                          .ac = c->ac,
                          .micro = c->microbatches,
                          .schedule = c->schedule};
    job j = {.s = &s, .rank = rank};
    tr_probe probe = {probe_before, probe_after, &j};
    tr_run run = {.c = c, .data = *data, .custom = custom, .probe = &probe};
    return run_job(&j, world, tr_train, &run, out);
}

dt_status tl_explain(const tl_explain_setup *s, int rank, FILE *text_out, FILE *json_out) {
    json_t *v;
    TR_TRY(tl_explain_json(s, rank, &v));
    dt_status st = text_out ? tl_explain_print(v, text_out) : DT_OK;
    if (st == DT_OK && json_out && json_dumpf(v, json_out, JSON_INDENT(1)) != 0)
        st = dt_error_set(DT_ERR_IO, "tl_explain: writing the JSON failed");
    if (st == DT_OK && json_out) fputc('\n', json_out);
    json_decref(v);
    return st;
}
