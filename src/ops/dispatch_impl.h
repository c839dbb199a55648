/* What dispatch.c and dispatch_cache.c share: a chosen strategy as the cache holds it, the
 * cache's slots and the strategy lookup (the per-mesh cache with the memo in front of it). */
#ifndef DT_OPS_DISPATCH_IMPL_H
#define DT_OPS_DISPATCH_IMPL_H

#include "core/lru.h"
#include "dtensor/tensor_impl.h"
#include "ops/op_impl.h"
#include "redistribute/redistribute_impl.h"

struct dt_op_choice {
    dt_placement in[DT_OP_MAX_INPUTS][DT_MESH_MAX_NDIM];
    dt_placement out[DT_MESH_MAX_NDIM];
    op_out spec;
    /* What a cached call would recompute each time, all fixed by the key and the mesh: bit i
     * set when input i is already in its chosen placements (the key holds the inputs'
     * placements), and this rank's block of the output. */
    unsigned in_place;
    int64_t out_local_shape[DT_MAX_NDIM], out_local_offset[DT_MAX_NDIM];
    char text[160]; /* "S(0),R | R,S(1) -> S(0),S(1)", for traces */
};
typedef struct dt_op_choice strategy;

#define CALL_KEY_WORDS                                                                             \
    (2 + DT_OP_MAX_INPUTS * (1 + DT_MAX_NDIM + DT_PLACEMENTS_KEY_WORDS) + DT_OP_ARGS_KEY_WORDS)

/* A call's entry in its mesh's strategy cache: *found, or NULL and where to put one. */
typedef struct cache_slot {
    dt_lru *c;
    uint64_t key[CALL_KEY_WORDS];
    unsigned nk;
    uint64_t h;
} cache_slot;

extern const dt_op_args dt_dispatch_no_args; /* what a NULL args means */

/* The inputs' global specs as families see them (absent optional inputs: ndim -1). */
void dt_dispatch_globals(dt_tensor *const *in, int n, op_input *gin);
/* The strategy for a call the memo (dispatch_memo.h) did not find: from the cache, or a
 * search (cached); model: the cost model version. */
dt_status dt_strategy_lookup_slow(dt_op op, const op_family *f, dt_tensor *const *in, int n,
                                  const dt_op_args *args, uint64_t model, const strategy **out);
/* The call's cache slot and its strategy (*found NULL on a miss); then a put of s (malloc'd,
 * freed when st or the put failed). */
dt_status dt_strategy_cache_find(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                 cache_slot *at, strategy **found);
dt_status dt_strategy_cache_put(cache_slot *at, strategy *s, dt_status st);

#endif
