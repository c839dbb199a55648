/* FSDP units by declaration (dtensor/fsdp.h's dt_fully_shard): which registry groups are
 * units and over which mesh dim, checked when declared; the dt_fsdp state made at
 * materialize; and the use path that begins and ends units as the forward reaches them. */
#include <stdlib.h>
#include <string.h>

#include "autograd/saved.h"
#include "core/check.h"
#include "dtensor/fsdp.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/params_impl.h"

typedef struct unit_entry {
    int fsdp_unit;    /* its index in the dt_fsdp */
    int n;            /* parameters */
    dt_tensor **full; /* borrowed from the dt_fsdp: the last begin's gathered parameters */
    bool begun;       /* full is set (cleared by dt_params_reshard) */
} unit_entry;

struct dt_units {
    int dp_dim, prefetch, coalesce;
    int float8_all_gather, bf16_all_gather; /* dt_fsdp_options' */
    char **by;        /* per group: the pattern that made it a unit (NULL: none) */
    dt_reshard *mode; /* per group */
    bool root;        /* the root unit is declared */
    dt_reshard root_mode;
    /* made at materialize */
    dt_ctx *ctx;
    bool end_hooked; /* forward_end waits for the next backward's beginning */
    dt_fsdp *fsdp;
    unit_entry *u;
    int nu, current;        /* current: the unit whose forward runs (-1: none) */
    int root_unit;          /* the root's index (-1: none): it spans the whole forward */
    bool root_open;         /* the root's forward began and has not ended */
    int *unit_of, *slot_of; /* per parameter: its unit (-1: none) and place there */
};

static char *copy_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

/* The first tensor dim of e no mesh dim but dp shards (-1: none). */
static int free_dim(const dt_params *p, const param_entry *e, int dp) {
    int mnd = dt_mesh_ndim(p->mesh);
    for (int d = 0; d < e->ndim; d++) {
        int taken = 0;
        for (int m = 0; m < mnd; m++)
            taken |= m != dp && e->stored[m].kind == DT_PLACEMENT_SHARD && e->stored[m].dim == d;
        if (!taken) return d;
    }
    return -1;
}

static void shard_over_dp(dt_params *p, param_entry *e, int dp) {
    int d = free_dim(p, e, dp);
    if (d >= 0 && e->stored[dp].kind == DT_PLACEMENT_REPLICATE) e->stored[dp] = dt_shard(d);
}

/* A module of kind DT_MODULE_EXPERTS among parameters [first, first + n) (-1: none). */
static int expert_in(const dt_params *p, int first, int n) {
    for (int i = first; i < first + n; i++)
        if (p->modules[p->params[i].module].kind == DT_MODULE_EXPERTS) return i;
    return -1;
}

/* The mesh dim options name (NULL: "dp_shard", else "dp"). */
static dt_status find_dp(const dt_params *p, const dt_fully_shard_options *o, int *out) {
    const dt_mesh *mesh = p->mesh;
    if (o->dp_dim) {
        DT_ARG(dt_mesh_dim_index(mesh, o->dp_dim, out) == DT_OK,
               "dt_fully_shard: options->dp_dim = \"%s\" names no dim of the registry's mesh",
               o->dp_dim);
        return DT_OK;
    }
    DT_ARG(dt_mesh_dim_index(mesh, "dp_shard", out) == DT_OK ||
               dt_mesh_dim_index(mesh, "dp", out) == DT_OK,
           "dt_fully_shard: options->dp_dim is NULL and the registry's mesh has no dim named "
           "\"dp_shard\" or \"dp\" (name one)");
    return DT_OK;
}

/* Checks what does not depend on the pattern; *dp_out = the dp dim. */
static dt_status check_call(dt_params *p, const dt_fully_shard_options *o, int *dp_out) {
    DT_ARG(!p->materialized,
           "dt_fully_shard: the registry is materialized already (declare units between "
           "dt_parallelize and dt_params_materialize)");
    DT_ARG(!p->use_hook, "dt_fully_shard: the registry has a use hook (dt_params_set_use_hook)");
    DT_ARG(o->reshard_after_forward >= DT_RESHARD_AUTO &&
               o->reshard_after_forward <= DT_RESHARD_OFF,
           "dt_fully_shard: options->reshard_after_forward = %d is not a dt_reshard",
           (int)o->reshard_after_forward);
    const dt_mesh *root = p->mesh->root;
    int pp;
    if (root && dt_mesh_dim_index(root, "pp", &pp) == DT_OK &&
        dt_mesh_dim_index(p->mesh, "pp", &pp))
        return dt_error(DT_ERR_UNSUPPORTED,
                        "dt_fully_shard: the registry's mesh is a pipeline stage's (cut from a "
                        "mesh with a pp dim): FSDP units hold one forward's gathered parameters, "
                        "a schedule runs several micro-batches' forwards before their backwards");
    int dp = -1;
    DT_CHECK(find_dp(p, o, &dp));
    const char *name = dt_mesh_dim_name(p->mesh, dp);
    DT_ARG(dp != p->tp_dim, "dt_fully_shard: dp dim \"%s\" is dt_parallelize's tp_dim", name);
    DT_ARG(!p->dp_shard || p->dp_dim == dp,
           "dt_fully_shard: dp dim \"%s\" (%d), but dt_parallelize sharded the parameters over "
           "mesh dim %d (DT_DP_SHARD)",
           name, dp, p->dp_dim);
    const struct dt_units *s = p->units;
    DT_ARG(!s || s->dp_dim == dp,
           "dt_fully_shard: dp dim \"%s\", but an earlier call declared units over \"%s\"", name,
           dt_mesh_dim_name(p->mesh, s ? s->dp_dim : 0));
    DT_ARG(!s || s->prefetch == !o->no_prefetch,
           "dt_fully_shard: options->no_prefetch = %d, an earlier call's was %d", o->no_prefetch,
           s ? !s->prefetch : 0);
    DT_ARG(!s || s->coalesce == !o->no_coalesce,
           "dt_fully_shard: options->no_coalesce = %d, an earlier call's was %d", o->no_coalesce,
           s ? !s->coalesce : 0);
    DT_ARG(!s || (s->float8_all_gather == (o->float8_all_gather != 0) &&
                  s->bf16_all_gather == (o->bf16_all_gather != 0)),
           "dt_fully_shard: options->float8_all_gather = %d, bf16_all_gather = %d differ from "
           "an earlier call's (one gather dtype for all units)",
           o->float8_all_gather, o->bf16_all_gather);
    *dp_out = dp;
    return DT_OK;
}

static dt_status units_make(dt_params *p, int dp, const dt_fully_shard_options *o) {
    if (p->units) return DT_OK;
    struct dt_units *s = calloc(1, sizeof *s);
    int ng = p->ngroups;
    if (s) {
        s->by = calloc((size_t)ng + 1, sizeof *s->by);
        s->mode = calloc((size_t)ng + 1, sizeof *s->mode);
    }
    if (!s || !s->by || !s->mode) {
        if (s) free(s->by), free(s->mode);
        free(s);
        return dt_error(DT_ERR_NOMEM, "dt_fully_shard: out of memory");
    }
    s->dp_dim = dp, s->prefetch = !o->no_prefetch, s->current = s->root_unit = -1;
    s->coalesce = !o->no_coalesce;
    s->float8_all_gather = o->float8_all_gather != 0;
    s->bf16_all_gather = o->bf16_all_gather != 0;
    p->units = s;
    return DT_OK;
}

dt_status dt_fully_shard(dt_params *params, const char *pattern,
                         const dt_fully_shard_options *options) {
    DT_ARG_NOT_NULL(params);
    dt_fully_shard_options o = options ? *options : (dt_fully_shard_options){0};
    dt_params *p = params;
    int dp = -1;
    DT_CHECK(check_call(p, &o, &dp));
    const struct dt_units *s = p->units;
    if (!pattern) {
        DT_ARG(!s || !s->root, "dt_fully_shard: the root unit (pattern NULL) is declared already");
        int e = expert_in(p, 0, p->nparams);
        if (e >= 0)
            return dt_error(DT_ERR_UNSUPPORTED,
                            "dt_fully_shard: root unit: parameter \"%s\" is in an expert bank, "
                            "which FSDP units do not take",
                            p->params[e].name);
        DT_CHECK(units_make(p, dp, &o));
        p->units->root = true, p->units->root_mode = o.reshard_after_forward;
        for (int i = 0; i < p->nparams; i++)
            shard_over_dp(p, &p->params[i], dp);
        return DT_OK;
    }
    int hits = 0;
    for (int g = 0; g < p->ngroups; g++) {
        const group_entry *ge = &p->groups[g];
        if (!dt_name_match(pattern, ge->name)) continue;
        hits++;
        DT_ARG(!s || !s->by[g],
               "dt_fully_shard: pattern \"%s\": group \"%s\" is a unit already (pattern \"%s\")",
               pattern, ge->name, s ? s->by[g] : "");
        int e = expert_in(p, ge->first, ge->n);
        if (e >= 0)
            return dt_error(DT_ERR_UNSUPPORTED,
                            "dt_fully_shard: pattern \"%s\": parameter \"%s\" is in an expert "
                            "bank, which FSDP units do not take",
                            pattern, p->params[e].name);
    }
    DT_ARG(hits, "dt_fully_shard: pattern \"%s\" matches no group of the registry's %d", pattern,
           p->ngroups);
    DT_CHECK(units_make(p, dp, &o));
    struct dt_units *u = p->units;
    for (int g = 0; g < p->ngroups; g++) {
        const group_entry *ge = &p->groups[g];
        if (!dt_name_match(pattern, ge->name)) continue;
        if (!(u->by[g] = copy_str(pattern)))
            return dt_error(DT_ERR_NOMEM, "dt_fully_shard: out of memory");
        u->mode[g] = o.reshard_after_forward;
        for (int i = ge->first; i < ge->first + ge->n; i++)
            shard_over_dp(p, &p->params[i], dp);
    }
    return DT_OK;
}

/* ---- made at materialize ----------------------------------------------------------------- */

/* Adds the unit of group (-1: the root, every parameter in no declared group), its members
 * the group's parameters stored sharded over dp; *added: whether it has any. */
static dt_status add_unit(dt_params *p, int group, dt_tensor **members, bool *added) {
    struct dt_units *s = p->units;
    int dp = s->dp_dim, n = 0, k = s->nu;
    for (int i = 0; i < p->nparams; i++) {
        const param_entry *e = &p->params[i];
        int g = e->group;
        bool mine = group >= 0 ? g == group : (g < 0 || !s->by[g]);
        if (!mine || e->stored[dp].kind != DT_PLACEMENT_SHARD) continue;
        s->unit_of[i] = k, s->slot_of[i] = n;
        members[n++] = e->tensor;
    }
    *added = n > 0;
    if (!n) return DT_OK;
    unit_entry *u = &s->u[k];
    *u = (unit_entry){.n = n};
    if (!(u->full = calloc((size_t)n, sizeof *u->full)))
        return dt_error(DT_ERR_NOMEM, "dt_params_materialize: out of memory");
    s->nu++;
    dt_status st = dt_fsdp_add_unit(s->fsdp, n, members, &u->fsdp_unit);
    if (st != DT_OK) dt_error_prefix(group >= 0 ? p->groups[group].name : "root unit");
    return st;
}

static bool reshards(dt_reshard mode, bool on) {
    return mode == DT_RESHARD_AUTO ? on : mode == DT_RESHARD_ON;
}

static dt_status forward_end(void *user);

/* What dt_units_build made (declarations stay). */
static void built_free(struct dt_units *s) {
    if (s->end_hooked) dt_autograd_cancel_backward_begin(s->ctx, forward_end, s);
    s->end_hooked = false;
    dt_fsdp_destroy(s->fsdp);
    for (int k = 0; s->u && k < s->nu; k++)
        free(s->u[k].full);
    free(s->u), free(s->unit_of), free(s->slot_of);
    s->fsdp = NULL, s->u = NULL, s->unit_of = s->slot_of = NULL, s->nu = 0, s->current = -1;
    s->root_unit = -1, s->root_open = false;
}

dt_status dt_units_build(dt_params *p) {
    struct dt_units *s = p->units;
    if (!s) return DT_OK;
    built_free(s);
    int n = p->nparams;
    s->unit_of = malloc(sizeof *s->unit_of * ((size_t)n + 1));
    s->slot_of = calloc((size_t)n + 1, sizeof *s->slot_of);
    s->u = calloc((size_t)p->ngroups + 1, sizeof *s->u);
    dt_tensor **members = calloc((size_t)n + 1, sizeof *members);
    if (!s->unit_of || !s->slot_of || !s->u || !members) {
        free(members), built_free(s);
        return dt_error(DT_ERR_NOMEM, "dt_params_materialize: out of memory");
    }
    for (int i = 0; i < n; i++)
        s->unit_of[i] = -1;
    s->ctx = dt_mesh_ctx(p->mesh);
    dt_fsdp_options o = {.dp_dim = s->dp_dim,
                         .reshard_after_forward = 1,
                         .prefetch = s->prefetch,
                         .float8_all_gather = s->float8_all_gather,
                         .bf16_all_gather = s->bf16_all_gather,
                         .coalesce_bytes = s->prefetch && s->coalesce ? DT_FSDP_COALESCE_BYTES : 0};
    dt_status st = dt_fsdp_create(p->mesh, &o, &s->fsdp);
    bool added = false, root = false;
    if (st == DT_OK && s->root) st = add_unit(p, -1, members, &root);
    if (root) s->root_unit = 0;
    if (st == DT_OK && root) /* FSDP2 never reshards its root */
        st = dt_fsdp_unit_set_reshard_after_forward(s->fsdp, 0, reshards(s->root_mode, false));
    int last = -1; /* the group of the last non-root unit, in forward order */
    for (int g = 0; g < p->ngroups && st == DT_OK; g++) {
        if (!s->by[g]) continue;
        st = add_unit(p, g, members, &added);
        if (st != DT_OK || !added) continue;
        last = g;
        st = dt_fsdp_unit_set_reshard_after_forward(s->fsdp, s->u[s->nu - 1].fsdp_unit,
                                                    reshards(s->mode[g], true));
    }
    /* torchtitan keeps the last block gathered: its backward comes right after its forward */
    if (st == DT_OK && last >= 0)
        st = dt_fsdp_unit_set_reshard_after_forward(s->fsdp, s->u[s->nu - 1].fsdp_unit,
                                                    reshards(s->mode[last], false));
    free(members);
    if (st != DT_OK) built_free(s);
    return st;
}

void dt_units_free(dt_params *p) {
    struct dt_units *s = p->units;
    if (!s) return;
    built_free(s);
    for (int g = 0; g < p->ngroups; g++)
        free(s->by[g]);
    free(s->by), free(s->mode), free(s);
    p->units = NULL;
}

/* ---- the use path ------------------------------------------------------------------------ */

int dt_units_has(const dt_params *p, int i) {
    const struct dt_units *s = p->units;
    return s && s->unit_of && s->unit_of[i] >= 0 && dt_grad_enabled(dt_mesh_ctx(p->mesh));
}

/* Whether unit k's gathered parameters serve this forward: gathered, not resharded, and no
 * backward has run through them yet (one has, once the forward that gathered them is over). */
static bool live(const unit_entry *u) {
    return u->begun && !dt_tensor_storage_dropped(u->full[0]) && !dt_node_done(u->full[0]);
}

static dt_status unit_end(struct dt_units *s, int k) {
    return dt_fsdp_unit_end(s->fsdp, s->u[k].fsdp_unit);
}

/* The forward is over: its last unit and the root end (free their gathered storage when they
 * reshard, close their trace spans). */
static dt_status end_forward(struct dt_units *s) {
    int k = s->current;
    bool root = s->root_open;
    s->current = -1, s->root_open = false;
    dt_status st = k >= 0 && k != s->root_unit ? unit_end(s, k) : DT_OK;
    dt_status s2 = root ? unit_end(s, s->root_unit) : DT_OK;
    return st != DT_OK ? st : s2;
}

/* Run when backward begins, which ends the forward. */
static dt_status forward_end(void *user) {
    struct dt_units *s = user;
    s->end_hooked = false;
    return end_forward(s);
}

dt_status dt_units_use(dt_params *p, int i, dt_tensor **out) {
    struct dt_units *s = p->units;
    int k = s->unit_of[i];
    unit_entry *u = &s->u[k];
    if (!s->end_hooked) {
        DT_CHECK(dt_autograd_at_backward_begin(s->ctx, forward_end, s));
        s->end_hooked = true;
    }
    if (k != s->current || !live(u)) {
        int was = s->current;
        s->current = -1;
        /* switching away ends a unit's forward, but for the root's */
        if (was >= 0 && was != s->root_unit) DT_CHECK(unit_end(s, was));
        if (!live(u)) {
            if (k == s->root_unit && s->root_open) { /* a forward no backward ended */
                s->root_open = false;
                DT_CHECK(unit_end(s, k));
            }
            DT_CHECK(dt_fsdp_unit_begin(s->fsdp, u->fsdp_unit, u->full));
            u->begun = true;
        }
        if (k == s->root_unit) s->root_open = true;
        s->current = k;
    }
    *out = u->full[s->slot_of[i]];
    return dt_tensor_retain(*out);
}

dt_fsdp *dt_params_fsdp(const dt_params *params) {
    return params && params->units ? params->units->fsdp : NULL;
}

dt_status dt_params_reshard(dt_params *params) {
    DT_ARG_NOT_NULL(params);
    struct dt_units *s = params->units;
    if (!s || !s->fsdp) return DT_OK;
    DT_CHECK(end_forward(s));
    for (int k = 0; k < s->nu; k++)
        s->u[k].begun = false;
    return DT_OK;
}
