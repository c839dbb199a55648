/* dtype sizes, names and conversions to and from f64 (for filling and checking tensors). */
#include <string.h>

#include "core/check.h"
#include "core/float8.h"
#include "core/half.h"
#include "dtensor/types.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [DT_F32] = {"f32", 4}, [DT_F64] = {"f64", 8}, [DT_BF16] = {"bf16", 2},
    [DT_F16] = {"f16", 2}, [DT_I32] = {"i32", 4}, [DT_I64] = {"i64", 8},
    [DT_F8E4M3] = {"f8e4m3", 1}, [DT_F8E5M2] = {"f8e5m2", 1},
};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == DT_DTYPE_COUNT, "dtype table incomplete");

static const char *const reduce_names[] = {
    [DT_REDUCE_SUM] = "sum", [DT_REDUCE_AVG] = "avg", [DT_REDUCE_MAX] = "max",
    [DT_REDUCE_MIN] = "min", [DT_REDUCE_PROD] = "prod",
};
_Static_assert(sizeof reduce_names / sizeof reduce_names[0] == DT_REDUCE_COUNT,
               "reduce op table incomplete");

size_t dt_dtype_size(dt_dtype dtype) {
    return (unsigned)dtype < DT_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *dt_dtype_name(dt_dtype dtype) {
    return (unsigned)dtype < DT_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

dt_status dt_dtype_parse(const char *name, dt_dtype *out) {
    DT_ARG_NOT_NULL(name);
    DT_ARG_NOT_NULL(out);
    for (int i = 0; i < DT_DTYPE_COUNT; i++) {
        if (strcmp(name, dtypes[i].name) == 0) {
            *out = (dt_dtype)i;
            return DT_OK;
        }
    }
    return dt_error(DT_ERR_PARSE, "dt_dtype_parse: unknown dtype \"%s\" (expected f32, f64, bf16, "
                                  "f16, i32, i64, f8e4m3 or f8e5m2)", name);
}

const char *dt_reduce_op_name(dt_reduce_op op) {
    if (op == DT_REDUCE_NORM) return "norm";
    return (unsigned)op < DT_REDUCE_COUNT ? reduce_names[op] : "?";
}

dt_status dt_convert_from_f64(dt_dtype dtype, const double *src, void *dst, size_t count) {
    DT_ARG(count == 0 || (src && dst), "dt_convert_from_f64: src or dst is NULL");
    for (size_t i = 0; i < count; i++) {
        double v = src[i];
        switch (dtype) {
        case DT_F32: ((float *)dst)[i] = (float)v; break;
        case DT_F64: ((double *)dst)[i] = v; break;
        case DT_BF16: ((uint16_t *)dst)[i] = dt_f32_to_bf16((float)v); break;
        case DT_F16: ((uint16_t *)dst)[i] = dt_f32_to_f16((float)v); break;
        case DT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
        case DT_I64: ((int64_t *)dst)[i] = (int64_t)v; break;
        case DT_F8E4M3: ((uint8_t *)dst)[i] = dt_f32_to_f8e4m3((float)v); break;
        case DT_F8E5M2: ((uint8_t *)dst)[i] = dt_f32_to_f8e5m2((float)v); break;
        default: return dt_error(DT_ERR_DTYPE, "dt_convert_from_f64: unknown dtype %d", (int)dtype);
        }
    }
    return DT_OK;
}

dt_status dt_convert_to_f64(dt_dtype dtype, const void *src, double *dst, size_t count) {
    DT_ARG(count == 0 || (src && dst), "dt_convert_to_f64: src or dst is NULL");
    for (size_t i = 0; i < count; i++) {
        switch (dtype) {
        case DT_F32: dst[i] = ((const float *)src)[i]; break;
        case DT_F64: dst[i] = ((const double *)src)[i]; break;
        case DT_BF16: dst[i] = dt_bf16_to_f32(((const uint16_t *)src)[i]); break;
        case DT_F16: dst[i] = dt_f16_to_f32(((const uint16_t *)src)[i]); break;
        case DT_I32: dst[i] = ((const int32_t *)src)[i]; break;
        case DT_I64: dst[i] = (double)((const int64_t *)src)[i]; break;
        case DT_F8E4M3: dst[i] = dt_f8e4m3_to_f32(((const uint8_t *)src)[i]); break;
        case DT_F8E5M2: dst[i] = dt_f8e5m2_to_f32(((const uint8_t *)src)[i]); break;
        default: return dt_error(DT_ERR_DTYPE, "dt_convert_to_f64: unknown dtype %d", (int)dtype);
        }
    }
    return DT_OK;
}
