/* tiny_llama's FSDP units (layout.fsdp_units): the registry's groups (tok_embeddings, each
 * block, the output norm and projection) become dtensor/fsdp.h units in forward order, and
 * the registry's use hook hands layers the unit's gathered weights. A unit's first use
 * gathers it (one all_gather for the whole group, the next unit's issued early) and ends the
 * unit before it, which frees that unit's gathered storage (reshard after forward; the last
 * unit stays gathered, as torchtitan does); backward gathers each unit again and
 * reduce_scatters its gradients in one call. */
#include <stdlib.h>

#include "tiny_llama.h"

struct tl_fsdp {
    dt_fsdp *fsdp;
    int nunits, current;       /* current: the unit whose forward runs; -1 none */
    int *unit_of, *slot_of;    /* per parameter: its unit and place in it */
    dt_tensor ***full;         /* per unit: its gathered parameters (borrowed) */
};

static dt_status use_hook(void *user, dt_params *params, int i, dt_tensor *stored, int ncompute,
                          const dt_placement *compute, dt_tensor **out) {
    (void)params, (void)stored, (void)ncompute, (void)compute;
    struct tl_fsdp *f = user;
    int u = f->unit_of[i];
    if (u != f->current) {
        dt_status st = f->current >= 0 ? dt_fsdp_unit_end(f->fsdp, f->current) : DT_OK;
        if (st == DT_OK) st = dt_fsdp_unit_begin(f->fsdp, u, f->full[u]);
        if (st != DT_OK) return st;
        f->current = u;
    }
    *out = f->full[u][f->slot_of[i]];
    return dt_tensor_retain(*out);
}

dt_status tl_fsdp_attach(tl_model *m) {
    dt_params *p = m->params;
    int n = dt_params_count(p), groups = dt_params_group_count(p);
    struct tl_fsdp *f = calloc(1, sizeof *f);
    if (!f) return dt_error_set(DT_ERR_NOMEM, "tl_fsdp_attach: out of memory");
    m->fsdp = f;
    f->current = -1, f->nunits = groups;
    f->unit_of = calloc((size_t)n + 1, sizeof *f->unit_of);
    f->slot_of = calloc((size_t)n + 1, sizeof *f->slot_of);
    f->full = calloc((size_t)groups + 1, sizeof *f->full);
    dt_tensor **members = calloc((size_t)n + 1, sizeof *members);
    if (!f->unit_of || !f->slot_of || !f->full || !members) {
        free(members);
        return dt_error_set(DT_ERR_NOMEM, "tl_fsdp_attach: out of memory");
    }
    dt_fsdp_options o = dt_fsdp_options_default();
    o.dp_dim = m->layout.dp_dim;
    dt_status st = dt_fsdp_create(m->mesh, &o, &f->fsdp);
    for (int g = 0; g < groups && st == DT_OK; g++) {
        int k = 0;
        for (int i = 0; i < n && st == DT_OK; i++) {
            if (dt_params_group_of(p, i) != g) continue;
            st = dt_params_at(p, i, NULL, &members[k]);
            f->unit_of[i] = g, f->slot_of[i] = k++;
        }
        if (st == DT_OK && !(f->full[g] = calloc((size_t)k + 1, sizeof *f->full[g])))
            st = dt_error_set(DT_ERR_NOMEM, "tl_fsdp_attach: out of memory");
        if (st == DT_OK) st = dt_fsdp_add_unit(f->fsdp, k, members, NULL);
    }
    if (st == DT_OK) st = dt_fsdp_unit_set_reshard_after_forward(f->fsdp, groups - 1, 0);
    if (st == DT_OK) st = dt_params_set_use_hook(p, use_hook, f);
    free(members);
    return st;
}

dt_status tl_fsdp_end_forward(const tl_model *m) {
    struct tl_fsdp *f = m->fsdp;
    if (!f || f->current < 0) return DT_OK;
    int u = f->current;
    f->current = -1;
    return dt_fsdp_unit_end(f->fsdp, u);
}

void tl_fsdp_detach(tl_model *m) {
    struct tl_fsdp *f = m->fsdp;
    if (!f) return;
    if (m->params) dt_params_set_use_hook(m->params, NULL, NULL);
    if (f->fsdp) dt_fsdp_destroy(f->fsdp);
    for (int g = 0; f->full && g < f->nunits; g++) free(f->full[g]);
    free(f->full), free(f->unit_of), free(f->slot_of), free(f);
    m->fsdp = NULL;
}
