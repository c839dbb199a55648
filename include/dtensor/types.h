/* Element types and reduction operators: plain values shared by every layer. */
#ifndef DTENSOR_TYPES_H
#define DTENSOR_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MAX_NDIM      8 /* most tensor dimensions */
#define DT_MESH_MAX_NDIM 8 /* most device-mesh dimensions */

typedef enum dt_dtype {
    DT_F32 = 0,
    DT_F64,
    DT_BF16, /* stored as uint16_t; reductions and math in f32 */
    DT_F16,  /* IEEE half, stored as uint16_t; reductions and math in f32 */
    DT_I32,
    DT_I64,
    /* OCP 8-bit floats, stored as uint8_t: storage and transport only (casts, scaled casts and
     * the float8 matmul of dtensor/float8.h, gathers, copies); no arithmetic op or reduction
     * takes them. Conversions round to nearest even and saturate finite overflow to +-max. */
    DT_F8E4M3, /* 4 exponent bits, 3 mantissa bits, bias 7, max 448, no inf (torch float8_e4m3fn) */
    DT_F8E5M2, /* 5 exponent bits, 2 mantissa bits, bias 15, max 57344, +-inf (float8_e5m2) */
    DT_DTYPE_COUNT
} dt_dtype;

typedef enum dt_reduce_op {
    DT_REDUCE_SUM = 0,
    DT_REDUCE_AVG, /* sum / n; integer types truncate toward zero */
    DT_REDUCE_MAX,
    DT_REDUCE_MIN,
    DT_REDUCE_PROD,
    DT_REDUCE_COUNT, /* collectives and kernels take the ops above, and only those */
    /* Placements only: Partial's pending p-norm (p in dt_placement.norm_ord), text "NormP(2)".
     * Each rank holds the p-norm of its part; no collective takes it: redistribute reduces
     * |x|^p with sum (max for p = inf, min for p = -inf) and takes the p-th root. */
    DT_REDUCE_NORM = 16
} dt_reduce_op;

/* Bytes per element; 0 for an unknown dtype. */
DT_API size_t dt_dtype_size(dt_dtype dtype);
/* "f32", "f64", "bf16", "f16", "i32", "i64", "f8e4m3", "f8e5m2"; "?" for an unknown dtype. */
DT_API const char *dt_dtype_name(dt_dtype dtype);
/* Parses a dtype name as printed by dt_dtype_name. */
DT_API dt_status dt_dtype_parse(const char *name, dt_dtype *out);
/* "sum", "avg", "max", "min", "prod", "norm"; "?" for an unknown op. */
DT_API const char *dt_reduce_op_name(dt_reduce_op op);

/* The caches every mesh keeps (see dt_mesh_set_cache_capacity): the sharding strategies op
 * dispatch chose, and the redistribute plans. */
typedef enum dt_cache_kind {
    DT_CACHE_STRATEGY = 0,
    DT_CACHE_PLAN,
    DT_CACHE_KIND_COUNT
} dt_cache_kind;

typedef struct dt_cache_stats {
    uint64_t hits, misses, evictions;
    uint64_t entries, capacity; /* a mesh's cache now (0 in the rank's totals, dt_comm_stats) */
} dt_cache_stats;

/* Element conversions used by tests and examples to fill tensors of any dtype.
 * bf16/f16/float8 round to nearest even (float8 through f32, saturating: core/float8.h);
 * integers truncate toward zero. */
DT_API dt_status dt_convert_from_f64(dt_dtype dtype, const double *src, void *dst, size_t count);
DT_API dt_status dt_convert_to_f64(dt_dtype dtype, const void *src, double *dst, size_t count);

#ifdef __cplusplus
}
#endif
#endif
