/* The strategy cache of dispatch (dispatch.c): the per-mesh cache's keys, the search it
 * falls back to, and the lookup through the memo (dispatch_memo.h). */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "mesh/mesh_impl.h"
#include "ops/dispatch_impl.h"
#include "ops/dispatch_memo.h"
#include "ops/strategy.h"

const dt_op_args dt_dispatch_no_args;

/* ---- the per-mesh cache (core/lru.h) ----------------------------------------------------
 * The key is every fact the choice depends on, written once as words, so that hashing and
 * comparing cannot disagree. Arguments go in field by field: callers' structs may carry
 * padding garbage. A strategy is only read during the dispatch that looked it up, and nothing
 * in that dispatch looks up this mesh's strategies again (run copies what it traces before
 * the kernel, the one place that could), so eviction frees it directly. */

static uint64_t two(int lo, int hi) {
    return (uint64_t)(uint32_t)lo | (uint64_t)(uint32_t)hi << 32;
}

/* The arguments go in as the op reads them (dt_op_args_key): NULL and a zeroed struct are
 * the same key, and fields the op ignores do not split its entries. */
static unsigned call_key(dt_op op, dt_tensor *const *in, int n, const dt_op_args *a, int mnd,
                         uint64_t model, uint64_t *k) {
    unsigned w = 0;
    k[w++] = two((int)op, n);
    k[w++] = model; /* the cost model version the choice is priced with */
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = in[i];
        if (!t) {
            k[w++] = 0;
            continue;
        }
        k[w++] = 1 | (uint64_t)t->ndim << 8 | (uint64_t)t->dtype << 16;
        for (int d = 0; d < t->ndim; d++)
            k[w++] = (uint64_t)t->shape[d];
        w += dt_placements_key(t->placements, mnd, k + w);
    }
    return w + dt_op_args_key(op, a, k + w);
}

/* ---- strategy search (ops/strategy.h, shared with dt_op_choose) -------------------------- */

/* A move's price: the plan the mesh's cache holds for it. */
static dt_status price_cached(void *user, int i, const dt_placement *want, double *cost_us) {
    dt_tensor *const *in = user;
    const dt_plan *plan;
    DT_CHECK(dt_redistribute_cached_plan(in[i], want, &plan));
    *cost_us = plan->cost_us;
    return DT_OK;
}

void dt_dispatch_globals(dt_tensor *const *in, int n, op_input *gin) {
    for (int i = 0; i < n; i++)
        gin[i] = in[i] ? (op_input){in[i]->ndim, in[i]->shape, in[i]->dtype}
                       : (op_input){-1, NULL, DT_F32};
}

static dt_status choose(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                        const dt_op_args *a, strategy *best) {
    dt_mesh *mesh = in[0]->mesh;
    op_input gin[DT_OP_MAX_INPUTS];
    const dt_placement *have[DT_OP_MAX_INPUTS];
    dt_dispatch_globals(in, n, gin);
    for (int i = 0; i < n; i++)
        have[i] = in[i] ? in[i]->placements : NULL;
    dt_strategy_query q = {.op = op,
                           .family = f,
                           .n = n,
                           .in = gin,
                           .have = have,
                           .args = a,
                           .mesh_ndim = mesh->ndim,
                           .mesh_shape = mesh->shape,
                           .price = price_cached,
                           .user = (void *)in};
    dt_strategy_found found;
    DT_CHECK(dt_strategy_search(&q, &found));
    memcpy(best->in, found.in, sizeof found.in);
    memcpy(best->out, found.out, sizeof found.out);
    best->spec = found.spec;
    return DT_OK;
}

/* "S(0),R | R,S(1) -> S(0),S(1)" for the trace. */
static void strategy_text(const strategy *s, int n, int mnd, char *buf, size_t cap) {
    size_t o = 0;
    char one[128];
    for (int i = 0; i < n && o < cap; i++) {
        dt_placements_format(s->in[i], mnd, one, sizeof one);
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? " | " : "", one);
    }
    dt_placements_format(s->out, mnd, one, sizeof one);
    if (o < cap) snprintf(buf + o, cap - o, " -> %s", one);
}

/* Finds the call's entry (*hit, NULL on a miss) and its strategy (*found). */
static dt_status cache_find_entry(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                  uint64_t model, cache_slot *at, dt_lru_entry **hit,
                                  strategy **found) {
    dt_mesh *mesh = in[0]->mesh;
    at->c = mesh->caches[DT_CACHE_STRATEGY];
    if (!at->c) DT_CHECK(dt_mesh_cache_make(mesh, DT_CACHE_STRATEGY, free, &at->c));
    at->nk = call_key(op, in, n, args, mesh->ndim, model, at->key);
    at->h = dt_lru_hash(at->key, at->nk);
    *hit = dt_lru_get_entry(at->c, at->key, at->nk, at->h);
    *found = *hit ? (*hit)->value : NULL;
    return DT_OK;
}

dt_status dt_strategy_cache_find(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                 cache_slot *at, strategy **found) {
    dt_lru_entry *e;
    return cache_find_entry(op, in, n, args, dt_cost_model_version(in[0]->mesh->ctx), at, &e,
                            found);
}

/* Puts s (malloc'd) at its slot, or frees it when st or the put failed. */
static dt_status cache_put_entry(cache_slot *at, strategy *s, dt_status st, dt_lru_entry **e) {
    if (st == DT_OK) st = dt_lru_put_entry(at->c, at->key, at->nk, at->h, s, e);
    if (st != DT_OK) free(s);
    return st;
}

dt_status dt_strategy_cache_put(cache_slot *at, strategy *s, dt_status st) {
    dt_lru_entry *e;
    return cache_put_entry(at, s, st, &e);
}

/* The memo missed: the call's entry in the cache, or a search whose result is cached; the memo
 * is filled either way. */
dt_status dt_strategy_lookup_slow(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                                  const dt_op_args *args, uint64_t model, const strategy **out) {
    dt_mesh *mesh = in[0]->mesh;
    dt_lru_entry *e;
    cache_slot at;
    strategy *s;
    DT_CHECK(cache_find_entry(op, in, n, args, model, &at, &e, &s));
    if (s) {
        dt_memo_fill(mesh, at.c, e, op, in, n, args, model);
        *out = s;
        return DT_OK;
    }
    if (!(s = malloc(sizeof *s))) return dt_error(DT_ERR_NOMEM, "dispatch: out of memory");
    dt_status st = choose(op, f, in, n, args ? args : &dt_dispatch_no_args, s);
    if (st == DT_OK) {
        strategy_text(s, n, mesh->ndim, s->text, sizeof s->text);
        s->in_place = 0;
        for (int i = 0; i < n; i++) {
            int same = 1;
            for (int m = 0; in[i] && m < mesh->ndim; m++)
                same &= dt_placement_equal(s->in[i][m], in[i]->placements[m]);
            s->in_place |= (unsigned)same << i;
        }
        if (mesh->rank >= 0)
            dt_shard_layout(mesh->ndim, mesh->shape, mesh->coord, s->spec.ndim, s->spec.shape,
                            s->out, s->out_local_shape, s->out_local_offset);
        /* zero past ndim: dt_tensor_alloc_laid_out copies the arrays whole */
        for (int d = s->spec.ndim; d < DT_MAX_NDIM; d++)
            s->spec.shape[d] = s->out_local_shape[d] = s->out_local_offset[d] = 0;
    }
    DT_CHECK(cache_put_entry(&at, s, st, &e));
    dt_memo_fill(mesh, at.c, e, op, in, n, args, model);
    *out = s;
    return DT_OK;
}
