/* Dispatch's front to its strategy cache: per mesh and op, the last call's inputs' specs and the
 * cache entry they found, compared field by field, so that a call like the one before it skips
 * the key words, the hash and the bucket walk. Only a shortcut: a miss here goes to the cache. */
#ifndef DT_OPS_DISPATCH_MEMO_H
#define DT_OPS_DISPATCH_MEMO_H

#include <stdbool.h>
#include <string.h>

#include "core/lru.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"

#define DT_MEMO_SLOTS  32 /* one per op, by op modulo this: a family's ops stay apart */
#define DT_MEMO_INPUTS 3  /* calls with more inputs always go to the cache */

typedef struct dt_memo_input {
    int ndim; /* -1: the input was absent (NULL) */
    dt_dtype dtype;
    int64_t shape[DT_MAX_NDIM];
    dt_placement placements[DT_MESH_MAX_NDIM];
} dt_memo_input;

typedef struct dt_memo {
    dt_lru_entry *entry; /* NULL: empty */
    /* Any eviction since the fill may have freed entry; the cost model's version is in the
     * cache's key. */
    uint64_t evictions, model;
    dt_op op;
    int n;
    bool args_null; /* filled by a call without arguments (a zeroed struct matches too) */
    unsigned nargs;
    uint64_t args[DT_OP_ARGS_KEY_WORDS];
    dt_memo_input in[DT_MEMO_INPUTS];
} dt_memo;

/* Whether n 64-bit words at a and b are equal bytes. Placements compare as bytes too: bytes
 * equal means fields equal (padding that differs, or -0 against 0, can only make a miss). */
static inline bool dt_memo_words_same(const void *a, const void *b, size_t n) {
    for (size_t i = 0; i < n; i++) { /* an early exit: a loop the compiler keeps short */
        uint64_t x, y;
        memcpy(&x, (const char *)a + 8 * i, 8);
        memcpy(&y, (const char *)b + 8 * i, 8);
        if (x != y) return false;
    }
    return true;
}
_Static_assert(sizeof(dt_placement) % 8 == 0, "placements compare as 64-bit words");

/* The slot op's calls on mesh use, NULL when there is none yet. */
static inline dt_memo *dt_memo_slot(const dt_mesh *mesh, dt_op op) {
    dt_memo *table = mesh->op_memo;
    return table ? &table[(unsigned)op % DT_MEMO_SLOTS] : NULL;
}

/* The cache entry of the call (op, in[0..n), args nullable) when m holds it, NULL otherwise
 * (the hit is not counted: dt_lru_hit does). model: the rank's cost model version. */
static inline dt_lru_entry *dt_memo_match(const dt_memo *m, const dt_lru *cache, dt_op op,
                                          dt_tensor *const *in, int n, const dt_op_args *args,
                                          int mnd, uint64_t model) {
    if (!m || !m->entry || m->op != op || m->n != n || m->model != model ||
        m->evictions != cache->stats.evictions)
        return NULL;
    for (int i = 0; i < n; i++) {
        const dt_tensor *t = in[i];
        const dt_memo_input *w = &m->in[i];
        if (!t) {
            if (w->ndim != -1) return NULL;
            continue;
        }
        if (w->ndim != t->ndim || w->dtype != t->dtype ||
            !dt_memo_words_same(w->shape, t->shape, (size_t)t->ndim) ||
            !dt_memo_words_same(w->placements, t->placements,
                                (size_t)mnd * sizeof(dt_placement) / 8))
            return NULL;
    }
    if (args || !m->args_null) {
        static const dt_op_args none;
        uint64_t k[DT_OP_ARGS_KEY_WORDS];
        unsigned nk = dt_op_args_key(op, args ? args : &none, k);
        if (nk != m->nargs) return NULL;
        for (unsigned i = 0; i < nk; i++)
            if (k[i] != m->args[i]) return NULL;
    }
    return m->entry;
}

/* Remembers that the call found entry in cache (a put or a hit just now). Nothing when the
 * call has too many inputs or the table cannot be made. */
void dt_memo_fill(dt_mesh *mesh, const dt_lru *cache, dt_lru_entry *entry, dt_op op,
                  dt_tensor *const *in, int n, const dt_op_args *args, uint64_t model);

#endif
