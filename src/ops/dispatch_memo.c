/* Filling dispatch's per-op front to the strategy cache (dispatch_memo.h): the table is made on
 * a mesh's first fill and freed with the mesh. */
#include <stdlib.h>
#include <string.h>

#include "ops/dispatch_memo.h"

void dt_memo_fill(dt_mesh *mesh, const dt_lru *cache, dt_lru_entry *entry, dt_op op,
                  dt_tensor *const *in, int n, const dt_op_args *args, uint64_t model) {
    if (n > DT_MEMO_INPUTS) return;
    if (!mesh->op_memo && !(mesh->op_memo = calloc(DT_MEMO_SLOTS, sizeof(dt_memo))))
        return; /* out of memory: every call goes to the cache, as before */
    dt_memo *m = dt_memo_slot(mesh, op);
    static const dt_op_args none;
    m->entry = entry;
    m->evictions = cache->stats.evictions;
    m->model = model;
    m->op = op;
    m->n = n;
    m->args_null = args == NULL;
    m->nargs = dt_op_args_key(op, args ? args : &none, m->args);
    for (int i = 0; i < n; i++) {
        dt_memo_input *w = &m->in[i];
        if (!in[i]) {
            w->ndim = -1;
            continue;
        }
        w->ndim = in[i]->ndim;
        w->dtype = in[i]->dtype;
        memcpy(w->shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->ndim);
        memcpy(w->placements, in[i]->placements, sizeof(dt_placement) * (size_t)mesh->ndim);
    }
}
