/* Placements: how a tensor lies along one mesh dimension. Plain values, no ranks involved.
 * Text form, one per mesh dimension, comma-separated: "S(0),R,P(sum)". The parser also takes
 * PyTorch's spelling ("Shard(0), Replicate(), Partial(avg)"); "P" alone is P(sum). A pending
 * p-norm (PyTorch's _NormPartial) is "NormP(2)", "NormP(1)", "NormP(inf)", "NormP(-inf)",
 * "NormP(0.5)" (the shortest text that reads back as the same double). */
#ifndef DTENSOR_PLACEMENT_H
#define DTENSOR_PLACEMENT_H

#include "dtensor/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_placement_kind {
    DT_PLACEMENT_REPLICATE = 0,
    DT_PLACEMENT_SHARD,
    DT_PLACEMENT_PARTIAL,
} dt_placement_kind;

typedef struct dt_placement {
    dt_placement_kind kind;
    int dim;         /* Shard: tensor dimension (negative counts from the end until normalised) */
    dt_reduce_op op; /* Partial: sum, avg, max, min or norm */
    double norm_ord; /* Partial(norm): p (inf allowed, never NaN); 0 for every other placement */
} dt_placement;

static inline dt_placement dt_replicate(void) {
    dt_placement p = {DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM, 0};
    return p;
}
static inline dt_placement dt_shard(int dim) {
    dt_placement p = {DT_PLACEMENT_SHARD, dim, DT_REDUCE_SUM, 0};
    return p;
}
static inline dt_placement dt_partial(dt_reduce_op op) {
    dt_placement p = {DT_PLACEMENT_PARTIAL, 0, op, 0};
    return p;
}
/* A pending p-norm: each rank of the mesh dim holds the p-norm (torch.linalg.vector_norm with
 * ord p) of its part, and the tensor is the p-norm of those: (sum_i v_i^p)^(1/p) for finite
 * p (p = 0: sum_i v_i; p = 1: sum_i v_i), max_i v_i for p = inf, min_i v_i for -inf. Made by
 * norm ops (dt_vector_norm), never by creating a tensor; redistributing it to R or S(d) is one
 * all_reduce or reduce_scatter. Float dtypes only. */
static inline dt_placement dt_norm_partial(double ord) {
    dt_placement p = {DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_NORM, ord};
    return p;
}

/* Number of elements of an array (not a pointer): the count that goes with a placements
 * array, e.g. dt_tensor_zeros(mesh, DT_F32, 2, shape, DT_COUNT_OF(pl), pl, &t). Every call
 * that takes placements takes their count and checks it against the mesh's ndim, as
 * PyTorch checks len(placements) == mesh.ndim. */
#define DT_COUNT_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Parses text into at most cap placements; *n_out = how many. Malformed text is
 * DT_ERR_PARSE with the offending position in dt_last_error(). */
DT_API dt_status dt_placements_parse(const char *text, dt_placement *placements_out, int cap,
                                     int *n_out);

/* Writes "S(0),R,P(sum)" (NUL-terminated) into buf; DT_ERR_SIZE if cap is too small. */
DT_API dt_status dt_placements_format(const dt_placement *placements, int n, char *buf, size_t cap);

/* Checks each placement and rewrites negative shard dims as dim + tensor_ndim. */
DT_API dt_status dt_placements_normalize(dt_placement *placements, int n, int tensor_ndim);

/* 1 when two placements are equal (after normalisation), else 0: Partial(norm) compares p. */
DT_API int dt_placement_equal(dt_placement a, dt_placement b);

#ifdef __cplusplus
}
#endif
#endif
