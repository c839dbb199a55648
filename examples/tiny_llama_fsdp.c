/* tiny_llama's FSDP units (layout.fsdp_units), as torchtitan wraps Llama: one unit per block
 * and a root unit holding the rest (tok_embeddings, the output norm and projection: the
 * registry's first and last groups), in forward order root, blocks. The registry's use hook
 * hands layers the unit's gathered weights. A unit's first use in a forward gathers it (one
 * all_gather for the whole unit, the next unit's issued early) and ends the unit before it,
 * which frees that unit's gathered storage (reshard after forward). As torchtitan (FSDP2
 * never reshards its root; torchtitan keeps the last block), the root and the last block stay
 * gathered from forward into backward: the output uses the root's gathered weights again
 * without a second gather, and backward gathers again only the blocks before the last. Each
 * unit reduce_scatters its gradients in one call. */
#include <stdlib.h>
#include <string.h>

#include "tiny_llama.h"

struct tl_fsdp {
    dt_fsdp *fsdp;
    int nunits, current;       /* current: the unit whose forward runs; -1 none */
    int *unit_of, *slot_of;    /* per parameter: its unit and place in it */
    unsigned char *begun;      /* per unit: gathered in this forward */
    dt_tensor ***full;         /* per unit: its gathered parameters (borrowed) */
};

static dt_status use_hook(void *user, dt_params *params, int i, dt_tensor *stored, int ncompute,
                          const dt_placement *compute, dt_tensor **out) {
    (void)params, (void)stored, (void)ncompute, (void)compute;
    struct tl_fsdp *f = user;
    int u = f->unit_of[i];
    if (u != f->current) {
        dt_status st = f->current >= 0 ? dt_fsdp_unit_end(f->fsdp, f->current) : DT_OK;
        /* the root's second use (the output after the blocks) finds it still gathered */
        if (st == DT_OK && !f->begun[u]) st = dt_fsdp_unit_begin(f->fsdp, u, f->full[u]);
        if (st != DT_OK) return st;
        f->begun[u] = 1, f->current = u;
    }
    *out = f->full[u][f->slot_of[i]];
    return dt_tensor_retain(*out);
}

/* Unit of registry group g of groups: the first and the last group are the root (0), the
 * groups between them (the blocks) units 1, 2, ... */
static int unit_of_group(int g, int groups) { return g == groups - 1 ? 0 : g; }

dt_status tl_fsdp_attach(tl_model *m) {
    dt_params *p = m->params;
    int n = dt_params_count(p), groups = dt_params_group_count(p);
    int units = groups > 2 ? groups - 1 : 1;
    struct tl_fsdp *f = calloc(1, sizeof *f);
    if (!f) return dt_error_set(DT_ERR_NOMEM, "tl_fsdp_attach: out of memory");
    m->fsdp = f;
    f->current = -1, f->nunits = units;
    f->unit_of = calloc((size_t)n + 1, sizeof *f->unit_of);
    f->slot_of = calloc((size_t)n + 1, sizeof *f->slot_of);
    f->full = calloc((size_t)units + 1, sizeof *f->full);
    f->begun = calloc((size_t)units + 1, 1);
    dt_tensor **members = calloc((size_t)n + 1, sizeof *members);
    if (!f->unit_of || !f->slot_of || !f->full || !f->begun || !members) {
        free(members);
        return dt_error_set(DT_ERR_NOMEM, "tl_fsdp_attach: out of memory");
    }
    dt_fsdp_options o = dt_fsdp_options_default();
    o.dp_dim = m->layout.dp_dim;
    dt_status st = dt_fsdp_create(m->mesh, &o, &f->fsdp);
    for (int u = 0; u < units && st == DT_OK; u++) {
        int k = 0;
        for (int i = 0; i < n && st == DT_OK; i++) {
            if (unit_of_group(dt_params_group_of(p, i), groups) != u) continue;
            st = dt_params_at(p, i, NULL, &members[k]);
            f->unit_of[i] = u, f->slot_of[i] = k++;
        }
        if (st == DT_OK && !(f->full[u] = calloc((size_t)k + 1, sizeof *f->full[u])))
            st = dt_error_set(DT_ERR_NOMEM, "tl_fsdp_attach: out of memory");
        if (st == DT_OK) st = dt_fsdp_add_unit(f->fsdp, k, members, NULL);
    }
    /* the root and the last block stay gathered from forward into backward */
    if (st == DT_OK) st = dt_fsdp_unit_set_reshard_after_forward(f->fsdp, 0, 0);
    if (st == DT_OK) st = dt_fsdp_unit_set_reshard_after_forward(f->fsdp, units - 1, 0);
    if (st == DT_OK) st = dt_params_set_use_hook(p, use_hook, f);
    free(members);
    return st;
}

dt_status tl_fsdp_end_forward(const tl_model *m) {
    struct tl_fsdp *f = m->fsdp;
    if (!f || f->current < 0) return DT_OK;
    int u = f->current;
    f->current = -1;
    memset(f->begun, 0, (size_t)f->nunits);
    return dt_fsdp_unit_end(f->fsdp, u);
}

void tl_fsdp_detach(tl_model *m) {
    struct tl_fsdp *f = m->fsdp;
    if (!f) return;
    if (m->params) dt_params_set_use_hook(m->params, NULL, NULL);
    if (f->fsdp) dt_fsdp_destroy(f->fsdp);
    for (int g = 0; f->full && g < f->nunits; g++) free(f->full[g]);
    free(f->full), free(f->unit_of), free(f->slot_of), free(f->begun), free(f);
    m->fsdp = NULL;
}
