/* tl_explain (examples/tl_explain.h), one rank's view of one training step, checked against
 * computations of its own for seven layouts (1 rank, dp=4 FSDP, dp=2 x tp=2 with sequence
 * parallel, tp=4, dp=2 x pp=2 x tp=2, dp=2 x ep=2 x tp=2 MoE, cp=2 x tp=2):
 *   - the step totals per (kind, group) equal the dt_comm_stats of rank R in a step this file
 *     runs itself, as examples/train.c runs one (no observer);
 *   - every module's rows add up to those totals;
 *   - each parameter's local shape is its global shape cut by the stored placements at R's
 *     coordinates (row-major over the mesh) with torch.chunk's rule, applied mesh dim by dim;
 *   - the ring order: at step s, R's queries see the block of cp rank (me - s) mod cp, whose
 *     positions are chunks o and 2cp-1-o of 2cp (ceil-sized) chunks of the sequence;
 *   - MoE: the tokens per expert and the rows sent to each ep peer are recomputed from layer
 *     0's router input and weight of this file's own step (logits in f64, top-k with ties to
 *     the lower expert);
 *   - the pipeline's saved micro-batches peak at min(stages - stage, micro) under 1F1B, none
 *     are left at the end, and after each action they are as many as the pipeline's count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/tl_explain.h"
#include "helpers.h"

static const tl_config small = {.vocab = 256,
                                .seq = 32,
                                .batch = 8,
                                .dim = 64,
                                .layers = 2,
                                .heads = 4,
                                .kv_heads = 2,
                                .hidden = 96,
                                .top_k = 2};

/* ---- this file's own step, as examples/train.c runs it ------------------------------------- */

typedef struct real {
    const tl_explain_setup *s;
    int rank;
    dt_comm_stats stats;
    /* MoE: layer 0's router input rows and weight on rank R, first call */
    int moe_seen;
    int64_t tokens, dim, experts, ep_size, ep_me;
    double *x, *w;
} real;

static void on_moe(void *user, dt_tensor *x, dt_tensor *router_w, const dt_moe_plan *plan) {
    real *r = user;
    dt_tensor_info xi, wi;
    dt_moe_plan_info p;
    if (r->moe_seen++ || dt_tensor_info_get(x, &xi) || dt_tensor_info_get(router_w, &wi) ||
        dt_moe_plan_info_get(plan, &p))
        return;
    r->dim = xi.local_shape[xi.ndim - 1];
    r->tokens = (int64_t)xi.local_numel / r->dim;
    r->experts = wi.shape[0], r->ep_size = p.ep, r->ep_me = p.me;
    r->x = malloc(sizeof(double) * xi.local_numel);
    r->w = malloc(sizeof(double) * wi.local_numel);
    for (size_t i = 0; i < xi.local_numel; i++)
        r->x[i] = ((const float *)xi.local_data)[i];
    for (size_t i = 0; i < wi.local_numel; i++)
        r->w[i] = ((const float *)wi.local_data)[i];
}

static dt_status real_step(dt_ctx *ctx, void *arg) {
    real *r = arg;
    const tl_explain_setup *o = r->s;
    int mine = dt_ctx_rank(ctx) == r->rank, pp_dim = -1;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, o->mesh, &mesh));
    tl_layout l = {.fsdp = o->fsdp, .ac = o->ac};
    tl_layout_find_dims(mesh, &l);
    l.sequence_parallel = o->sp && l.tp_dim >= 0, l.loss_parallel = l.tp_dim >= 0;
    if (dt_mesh_dim_index(mesh, "pp", &pp_dim) != DT_OK) pp_dim = -1;
    l.fsdp_units = pp_dim < 0 && !o->cfg.experts; /* train's default */
    dt_adamw_options adamw = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    dt_optim *opt;
    dt_tensor *tok, *tgt, *loss = NULL;
    tl_model one;
    tl_pp pipe;
    if (pp_dim >= 0) {
        R_OK(tl_pp_init(&pipe, mesh, pp_dim, o->micro, o->schedule, &o->cfg, &l, 1234));
        R_OK(tl_pp_adamw(&pipe, &adamw, &opt));
        R_OK(tl_pp_batch(&pipe, NULL, 0, 0, &tok, &tgt));
    } else {
        R_OK(tl_model_init(&one, mesh, &o->cfg, &l, 1234));
        R_OK(dt_optim_adamw_create_params(&adamw, one.params, &opt));
        R_OK(tl_batch(&one, NULL, 0, 0, &tok, &tgt));
    }
    R_OK(dt_comm_stats_reset(ctx));
    if (mine) dt_moe_set_observer(on_moe, r);
    if (pp_dim >= 0) {
        R_OK(tl_pp_step(&pipe, tok, tgt, NULL));
    } else {
        R_OK(tl_loss(&one, tok, tgt, &loss));
        R_OK(dt_backward(loss));
    }
    R_OK(dt_optim_step(opt));
    R_OK(dt_optim_zero_grad(opt));
    if (mine) {
        dt_moe_set_observer(NULL, NULL);
        R_OK(dt_comm_stats_get(ctx, &r->stats));
    }
    dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
    R_OK(dt_optim_destroy(opt));
    if (pp_dim >= 0)
        tl_pp_free(&pipe);
    else
        tl_model_free(&one);
    return dt_mesh_release(mesh);
}

/* ---- the checks --------------------------------------------------------------------------- */

typedef struct mesh_info {
    int nd, shape[DT_MESH_MAX_NDIM], coord[DT_MESH_MAX_NDIM], world;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
} mesh_info;

static mesh_info mesh_of(const char *text, int rank) {
    mesh_info m = {.world = 1};
    cr_assert_eq(dt_mesh_parse(text, m.shape, m.names, &m.nd), DT_OK);
    for (int d = 0; d < m.nd; d++)
        m.world *= m.shape[d];
    for (int d = m.nd - 1, r = rank; d >= 0; d--) /* row-major, the last dim fastest */
        m.coord[d] = r % m.shape[d], r /= m.shape[d];
    return m;
}

static int dim_of(const mesh_info *m, const char *name) {
    for (int d = 0; d < m->nd; d++)
        if (!strcmp(m->names[d], name)) return d;
    return -1;
}

static void check_totals(const json_t *v, const dt_comm_stats *s) {
    const json_t *totals = json_object_get(v, "totals");
    cr_assert_eq(json_array_size(totals), (size_t)s->nentries, "%zu total rows, stats has %d",
                 json_array_size(totals), s->nentries);
    for (int i = 0; i < s->nentries; i++) {
        const dt_comm_stats_entry *e = &s->entries[i];
        json_t *row = NULL, *r;
        size_t k;
        json_array_foreach(totals, k, r) {
            if (!strcmp(json_string_value(json_object_get(r, "kind")),
                        dt_coll_kind_name(e->kind)) &&
                !strcmp(json_string_value(json_object_get(r, "group")), e->group) &&
                json_integer_value(json_object_get(r, "group_size")) == e->group_size)
                row = r;
        }
        cr_assert(row, "no total row for %s on %s", dt_coll_kind_name(e->kind), e->group);
        cr_assert_eq(json_integer_value(json_object_get(row, "calls")), (json_int_t)e->calls,
                     "%s on %s: %lld calls, stats %llu", dt_coll_kind_name(e->kind), e->group,
                     (long long)json_integer_value(json_object_get(row, "calls")),
                     (unsigned long long)e->calls);
        cr_assert_eq(json_integer_value(json_object_get(row, "bytes_in")), (json_int_t)e->bytes_in);
        cr_assert_eq(json_integer_value(json_object_get(row, "bytes_out")),
                     (json_int_t)e->bytes_out);
    }
    /* the modules' rows sum to the totals */
    uint64_t calls = 0, want = 0;
    size_t i, k;
    json_t *m, *r;
    json_array_foreach(json_object_get(v, "modules"), i, m) {
        const char *pass[2] = {"forward", "backward"};
        for (int p = 0; p < 2; p++)
            json_array_foreach(json_object_get(m, pass[p]), k, r) calls +=
                (uint64_t)json_integer_value(json_object_get(r, "calls"));
    }
    for (int e = 0; e < s->nentries; e++)
        want += s->entries[e].calls;
    cr_assert_eq(calls, want, "modules' rows hold %llu calls, the step %llu",
                 (unsigned long long)calls, (unsigned long long)want);
}

/* torch.chunk's share of n elements for rank c of k: ceil-sized chunks, the last ones short. */
static int64_t chunk_of(int64_t n, int k, int c) {
    int64_t size = (n + k - 1) / k, lo = size * c, hi = size * (c + 1);
    lo = lo < n ? lo : n, hi = hi < n ? hi : n;
    return hi - lo;
}

static void check_parameters(const json_t *v, const mesh_info *m) {
    int pp = dim_of(m, "pp"), coord[DT_MESH_MAX_NDIM], size[DT_MESH_MAX_NDIM], nd = 0;
    for (int d = 0; d < m->nd; d++) /* a stage's parameters live on the mesh without pp */
        if (d != pp) coord[nd] = m->coord[d], size[nd++] = m->shape[d];
    size_t i;
    json_t *p;
    cr_assert(json_array_size(json_object_get(v, "parameters")) > 0);
    json_array_foreach(json_object_get(v, "parameters"), i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *stored = json_string_value(json_object_get(p, "stored"));
        json_t *shape = json_object_get(p, "shape"), *local = json_object_get(p, "local_shape");
        int64_t want[DT_MAX_NDIM];
        int ndim = (int)json_array_size(shape);
        for (int d = 0; d < ndim; d++)
            want[d] = json_integer_value(json_array_get(shape, d));
        /* "S(1),R": one placement per mesh dim, read by hand */
        const char *t = stored;
        for (int md = 0; md < nd; md++) {
            cr_assert(*t, "%s: stored %s has fewer than %d placements", name, stored, nd);
            if (t[0] == 'S') {
                int d = atoi(t + 2);
                want[d] = chunk_of(want[d], size[md], coord[md]);
            }
            t = strchr(t, ',') ? strchr(t, ',') + 1 : t + strlen(t);
        }
        for (int d = 0; d < ndim; d++)
            cr_assert_eq(json_integer_value(json_array_get(local, d)), want[d],
                         "%s (%s): local dim %d is %lld, want %lld", name, stored, d,
                         (long long)json_integer_value(json_array_get(local, d)),
                         (long long)want[d]);
    }
}

static void check_ring(const json_t *v, const mesh_info *m, int T) {
    int cp = dim_of(m, "cp"), n = m->shape[cp], me = m->coord[cp];
    const json_t *ring = json_object_get(v, "ring");
    cr_assert_eq(json_array_size(ring), (size_t)(2 * n), "want %d forward and %d backward steps", n,
                 n);
    int64_t c = (T + 2 * n - 1) / (2 * n);
    for (size_t k = 0; k < json_array_size(ring); k++) {
        json_t *s = json_array_get(ring, k);
        int step = (int)json_integer_value(json_object_get(s, "step"));
        int o = ((me - step) % n + n) % n;
        cr_assert_eq(step, (int)(k % n));
        cr_assert_eq(json_integer_value(json_object_get(s, "source")), o);
        int coord[DT_MESH_MAX_NDIM], world = 0;
        memcpy(coord, m->coord, sizeof coord);
        coord[cp] = o;
        for (int d = 0; d < m->nd; d++)
            world = world * m->shape[d] + coord[d];
        cr_assert_eq(json_integer_value(json_object_get(s, "source_world")), world);
        json_t *pos = json_object_get(s, "positions");
        size_t j = 0;
        int chunks[2] = {o, 2 * n - 1 - o};
        for (int h = 0; h < 2; h++)
            for (int64_t p = c * chunks[h]; p < c * (chunks[h] + 1) && p < T; p++, j++)
                cr_assert_eq(json_integer_value(json_array_get(pos, j)), p, "step %d: position %zu",
                             step, j);
        cr_assert_eq(json_array_size(pos), j);
    }
}

static void check_moe(const json_t *v, const real *r) {
    const json_t *moe = json_object_get(v, "moe");
    cr_assert(moe && r->x, "no MoE view or no router input seen");
    int64_t E = r->experts, k = json_integer_value(json_object_get(moe, "top_k"));
    int64_t *count = calloc((size_t)E, sizeof *count);
    double *logit = malloc(sizeof(double) * (size_t)E);
    for (int64_t t = 0; t < r->tokens; t++) {
        for (int64_t e = 0; e < E; e++) {
            double s = 0;
            for (int64_t d = 0; d < r->dim; d++)
                s += r->x[t * r->dim + d] * r->w[e * r->dim + d];
            logit[e] = s;
        }
        for (int64_t pick = 0; pick < k; pick++) { /* the largest left, ties to the lower id */
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (!isnan(logit[e]) && (best < 0 || logit[e] > logit[best])) best = e;
            count[best]++, logit[best] = NAN;
        }
    }
    const json_t *tpe = json_object_get(moe, "tokens_per_expert"),
                 *send = json_object_get(moe, "send_counts");
    int64_t local = E / r->ep_size;
    for (int64_t e = 0; e < E; e++)
        cr_assert_eq(json_integer_value(json_array_get(tpe, (size_t)e)), count[e],
                     "expert %lld: %lld tokens, want %lld", (long long)e,
                     (long long)json_integer_value(json_array_get(tpe, (size_t)e)),
                     (long long)count[e]);
    for (int64_t p = 0; p < r->ep_size; p++) {
        int64_t rows = 0;
        for (int64_t e = p * local; e < (p + 1) * local; e++)
            rows += count[e];
        cr_assert_eq(json_integer_value(json_array_get(send, (size_t)p)), rows);
    }
    free(count), free(logit);
}

static void check_pipeline(const json_t *v, const tl_explain_setup *s) {
    const json_t *p = json_object_get(v, "pipeline");
    cr_assert(p);
    int stage = (int)json_integer_value(json_object_get(p, "stage"));
    int nst = (int)json_integer_value(json_object_get(p, "nstages"));
    size_t i, peak = 0;
    json_t *a;
    json_array_foreach(json_object_get(p, "actions"), i, a) {
        size_t n = json_array_size(json_object_get(a, "saved"));
        peak = n > peak ? n : peak;
        cr_assert_eq(n, (size_t)json_integer_value(json_object_get(a, "inflight")),
                     "action %zu: %zu saved, the pipeline counts %lld in flight", i, n,
                     (long long)json_integer_value(json_object_get(a, "inflight")));
    }
    const json_t *acts = json_object_get(p, "actions"),
                 *last = json_array_get(acts, json_array_size(acts) - 1);
    cr_assert_eq(json_array_size(json_object_get(last, "saved")), 0,
                 "activations left after the step");
    int want = nst - stage < s->micro ? nst - stage : s->micro;
    cr_assert_eq(peak, (size_t)want, "stage %d holds %zu micro-batches at most, want %d", stage,
                 peak, want);
}

static void check(const tl_explain_setup *s, int rank) {
    json_t *v;
    dt_status st = tl_explain_json(s, rank, &v);
    cr_assert_eq(st, DT_OK, "tl_explain_json: %s", dt_last_error());
    mesh_info m = mesh_of(s->mesh, rank);
    real r = {.s = s, .rank = rank};
    t_run(m.world, real_step, &r);
    check_totals(v, &r.stats);
    check_parameters(v, &m);
    if (dim_of(&m, "cp") >= 0) check_ring(v, &m, s->cfg.seq);
    if (s->cfg.experts) check_moe(v, &r);
    if (dim_of(&m, "pp") >= 0) check_pipeline(v, s);
    const json_t *coords = json_object_get(v, "coords");
    for (int d = 0; d < m.nd; d++)
        cr_assert_eq(json_integer_value(json_object_get(coords, m.names[d])), m.coord[d]);
    free(r.x), free(r.w);
    json_decref(v);
}

Test(explain, one_rank) {
    check(
        &(tl_explain_setup){
            .mesh = "dp=1", .cfg = small, .fsdp = 1, .fsdp_units = -1, .bucket_kb = -1},
        0);
}

Test(explain, fsdp_dp4) {
    check(
        &(tl_explain_setup){
            .mesh = "dp=4", .cfg = small, .fsdp = 1, .fsdp_units = -1, .bucket_kb = -1},
        2);
}

static int has_row(const json_t *rows, const char *kind, const char *group) {
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        if (!strcmp(json_string_value(json_object_get(r, "kind")), kind) &&
            !strcmp(json_string_value(json_object_get(r, "group")), group))
            return 1;
    }
    return 0;
}

Test(explain, dp2_tp2_sequence_parallel) {
    tl_explain_setup s = {
        .mesh = "dp=2,tp=2", .cfg = small, .fsdp = 1, .fsdp_units = -1, .sp = 1, .bucket_kb = -1};
    check(&s, 1);
    json_t *v;
    cr_assert_eq(tl_explain_json(&s, 1, &v), DT_OK);
    /* each block's attention and feed-forward take their input replicated from Shard(1) */
    int gathers = 0;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(v, "sequence_parallel"), i, c) {
        if (strcmp(json_string_value(json_object_get(c, "from")), "S(1)") ||
            strcmp(json_string_value(json_object_get(c, "to")), "R"))
            continue;
        gathers++;
        /* that module's forward all_gathers over tp, its backward reduce_scatters the gradient */
        const char *name = json_string_value(json_object_get(c, "module"));
        json_t *m = NULL, *x;
        size_t k;
        json_array_foreach(json_object_get(v, "modules"), k, x) {
            if (!strcmp(json_string_value(json_object_get(x, "module")), name)) m = x;
        }
        cr_assert(m, "module %s issued no collective", name);
        cr_assert(has_row(json_object_get(m, "forward"), "all_gather", "tp"), "%s forward", name);
        cr_assert(has_row(json_object_get(m, "backward"), "reduce_scatter", "tp"), "%s backward",
                  name);
    }
    cr_assert_eq(gathers, 2 * small.layers + 1, "%d Shard(1) -> R points", gathers); /* + output */
    json_decref(v);
}

Test(explain, tp4) {
    check(
        &(tl_explain_setup){
            .mesh = "tp=4", .cfg = small, .sp = 1, .fsdp_units = -1, .bucket_kb = -1},
        3);
}

Test(explain, dp2_pp2_tp2) {
    check(&(tl_explain_setup){.mesh = "dp=2,pp=2,tp=2",
                              .cfg = small,
                              .fsdp = 1,
                              .sp = 1,
                              .fsdp_units = -1,
                              .bucket_kb = -1,
                              .micro = 4,
                              .schedule = DT_PIPELINE_1F1B},
          5);
}

Test(explain, moe_dp2_ep2_tp2) {
    tl_config c = small;
    c.experts = 4;
    check(&(tl_explain_setup){.mesh = "dp=2,ep=2,tp=2",
                              .cfg = c,
                              .fsdp = 1,
                              .sp = 1,
                              .fsdp_units = -1,
                              .bucket_kb = -1},
          3);
}

Test(explain, cp2_tp2) {
    check(
        &(tl_explain_setup){
            .mesh = "cp=2,tp=2", .cfg = small, .sp = 1, .fsdp_units = -1, .bucket_kb = -1},
        2);
}

Test(explain, bad_setup) {
    json_t *v = NULL;
    tl_explain_setup s = {.mesh = "dp=2,tp=2", .cfg = small, .fsdp_units = -1, .bucket_kb = -1};
    T_ERR(tl_explain_json(&s, 4, &v), DT_ERR_ARG, "rank 4");
    T_ERR(tl_explain_json(&s, -1, &v), DT_ERR_ARG, "rank -1");
    s.mesh = "dp=2,pp=2";
    s.micro = 3;
    T_ERR(tl_explain_json(&s, 0, &v), DT_ERR_ARG, "micro 3");
    s.micro = 2, s.fsdp_units = 1;
    T_ERR(tl_explain_json(&s, 0, &v), DT_ERR_ARG, "fsdp_units 1");
    s.mesh = "dp=two";
    cr_assert_neq(tl_explain_json(&s, 0, &v), DT_OK);
    s.mesh = "dp=2", s.fsdp_units = 0, s.cfg.heads = 3; /* 64 / 3: the model refuses it */
    cr_assert_neq(tl_explain_json(&s, 0, &v), DT_OK);
    cr_assert_null(v);
}
