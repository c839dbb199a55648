/* CPU pointwise kernels: unary maps, broadcasting binary ops and where. Broadcasting is done
 * with strides (0 on broadcast dims) over dims collapsed as far as every operand allows, so
 * equal shapes become one contiguous loop. The per-element math lives in elementwise.h. Large
 * outputs are cut into pieces of at least PIECE elements for the intra-op pool (core/pool.h);
 * every piece writes its own outputs, so the bits do not depend on the thread count. */
#include <stdint.h>
#include <string.h>

#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h"
#include "ops/kernel_args.h"
#include "ops/kernels.h"

#define BLOCK 256
#define PIECE 8192 /* elements a pool chunk maps at least (32 KiB of f32): smaller stays serial */
#define FLATTEN __attribute__((flatten)) /* inlines the op switch so each case folds */

static const char *const unary_names[] = {
    [DT_UNARY_NEG] = "neg",     [DT_UNARY_EXP] = "exp",
    [DT_UNARY_LOG] = "log",     [DT_UNARY_SQRT] = "sqrt",
    [DT_UNARY_RSQRT] = "rsqrt", [DT_UNARY_ABS] = "abs",
    [DT_UNARY_RELU] = "relu",   [DT_UNARY_GELU] = "gelu",
    [DT_UNARY_SILU] = "silu",   [DT_UNARY_TANH] = "tanh",
    [DT_UNARY_SIGMOID] = "sigmoid", [DT_UNARY_POW_SCALAR] = "pow_scalar",
    [DT_UNARY_ADD_SCALAR] = "add_scalar", [DT_UNARY_MUL_SCALAR] = "mul_scalar",
    [DT_UNARY_SIGN] = "sign",
};
_Static_assert(sizeof unary_names / sizeof unary_names[0] == DT_UNARY_COUNT,
               "unary name table incomplete");

static size_t numel(const dt_local *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static int same_shape(const dt_local *x, const dt_local *y) {
    if (x->ndim != y->ndim) return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != y->shape[d]) return 0;
    return 1;
}

/* ---- unary ------------------------------------------------------------------------------ */

#define MAP_CASE(SUF, OP)                                                                          \
    case OP:                                                                                       \
        for (size_t i = 0; i < n; i++) y[i] = dt_ew_unary_##SUF(OP, x[i], s);                      \
        break;

#define DEFINE_UNARY_MAP(SUF, T)                                                                   \
    static FLATTEN void unary_map_##SUF(dt_unary f, T s, const T *x, T *y, size_t n) {             \
        switch (f) {                                                                               \
            MAP_CASE(SUF, DT_UNARY_NEG)                                                            \
            MAP_CASE(SUF, DT_UNARY_EXP)                                                            \
            MAP_CASE(SUF, DT_UNARY_LOG)                                                            \
            MAP_CASE(SUF, DT_UNARY_SQRT)                                                           \
            MAP_CASE(SUF, DT_UNARY_RSQRT)                                                          \
            MAP_CASE(SUF, DT_UNARY_ABS)                                                            \
            MAP_CASE(SUF, DT_UNARY_RELU)                                                           \
            MAP_CASE(SUF, DT_UNARY_GELU)                                                           \
            MAP_CASE(SUF, DT_UNARY_SILU)                                                           \
            MAP_CASE(SUF, DT_UNARY_TANH)                                                           \
            MAP_CASE(SUF, DT_UNARY_SIGMOID)                                                        \
            MAP_CASE(SUF, DT_UNARY_POW_SCALAR)                                                     \
            MAP_CASE(SUF, DT_UNARY_ADD_SCALAR)                                                     \
            MAP_CASE(SUF, DT_UNARY_MUL_SCALAR)                                                     \
            MAP_CASE(SUF, DT_UNARY_SIGN)                                                           \
        default: break;                                                                            \
        }                                                                                          \
    }

DEFINE_UNARY_MAP(f32, float)
DEFINE_UNARY_MAP(f64, double)

/* f32 exp, and silu and sigmoid with exp(-x), on the vector exp (glibc's expf is a call per
 * element; loss parallel's softmax runs exp over its logits shard forward and backward), a
 * block at a time; other ops take the per-element map. exp's results the vector form flushes
 * to zero (x below DT_VEXPF_LO: a subnormal result) come from expf, so exp keeps them as torch
 * does. */
static void unary_f32(dt_unary f, float s, const float *x, float *y, size_t n) {
    if (f != DT_UNARY_SILU && f != DT_UNARY_SIGMOID && f != DT_UNARY_EXP) {
        unary_map_f32(f, s, x, y, n);
        return;
    }
    float e[BLOCK];
    for (size_t base = 0; base < n; base += BLOCK) {
        size_t m = n - base < BLOCK ? n - base : BLOCK;
        dt_vexpf_affine(e, x + base, (int64_t)m, f == DT_UNARY_EXP ? 1.0f : -1.0f, 0.0f);
        if (f == DT_UNARY_EXP)
            for (size_t i = 0; i < m; i++) /* e first: y may be x */
                y[base + i] = x[base + i] < DT_VEXPF_LO ? expf(x[base + i]) : e[i];
        else if (f == DT_UNARY_SILU)
            for (size_t i = 0; i < m; i++) y[base + i] = x[base + i] / (1.0f + e[i]);
        else
            for (size_t i = 0; i < m; i++) y[base + i] = 1.0f / (1.0f + e[i]);
    }
}

/* bf16/f16: widen a block to f32, map it, narrow it back (x and y may be the same buffer). */
#define DEFINE_UNARY_HALF(SUF, LOAD, STORE)                                                        \
    static void unary_##SUF(dt_unary f, float s, const uint16_t *x, uint16_t *y, size_t n) {       \
        float buf[BLOCK];                                                                          \
        for (size_t base = 0; base < n; base += BLOCK) {                                           \
            size_t m = n - base < BLOCK ? n - base : BLOCK;                                        \
            for (size_t i = 0; i < m; i++) buf[i] = LOAD(x[base + i]);                             \
            unary_f32(f, s, buf, buf, m);                                                          \
            for (size_t i = 0; i < m; i++) y[base + i] = STORE(buf[i]);                            \
        }                                                                                          \
    }

DEFINE_UNARY_HALF(bf16, dt_bf16_to_f32, dt_f32_to_bf16)
DEFINE_UNARY_HALF(f16, dt_f16_to_f32, dt_f32_to_f16)

#define DEFINE_UNARY_INT(SUF, T)                                                                   \
    static void unary_##SUF(dt_unary f, T s, const T *x, T *y, size_t n) {                         \
        switch (f) {                                                                               \
        case DT_UNARY_NEG:                                                                         \
            for (size_t i = 0; i < n; i++) y[i] = dt_ew_neg_##SUF(x[i]);                           \
            break;                                                                                 \
        case DT_UNARY_ABS:                                                                         \
            for (size_t i = 0; i < n; i++) y[i] = dt_ew_abs_##SUF(x[i]);                           \
            break;                                                                                 \
        case DT_UNARY_RELU:                                                                        \
            for (size_t i = 0; i < n; i++) y[i] = dt_ew_relu_##SUF(x[i]);                          \
            break;                                                                                 \
        case DT_UNARY_SIGN:                                                                        \
            for (size_t i = 0; i < n; i++) y[i] = dt_ew_sign_##SUF(x[i]);                          \
            break;                                                                                 \
        case DT_UNARY_ADD_SCALAR:                                                                  \
            for (size_t i = 0; i < n; i++) y[i] = dt_ew_add_##SUF(x[i], s);                        \
            break;                                                                                 \
        case DT_UNARY_MUL_SCALAR:                                                                  \
            for (size_t i = 0; i < n; i++) y[i] = dt_ew_mul_##SUF(x[i], s);                        \
            break;                                                                                 \
        default: break;                                                                            \
        }                                                                                          \
    }

DEFINE_UNARY_INT(i32, int32_t)
DEFINE_UNARY_INT(i64, int64_t)

typedef struct {
    dt_unary f;
    double scalar;
    dt_dtype dtype;
    const void *x;
    void *y;
} unary_job;

static void unary_range(void *arg, int64_t begin, int64_t end) {
    const unary_job *j = arg;
    size_t n = (size_t)(end - begin), es = dt_dtype_size(j->dtype);
    const void *x = (const char *)j->x + (size_t)begin * es;
    void *y = (char *)j->y + (size_t)begin * es;
    int64_t si = dt_ew_scalar_i64(j->scalar);
    switch (j->dtype) {
    case DT_F32: unary_f32(j->f, (float)j->scalar, x, y, n); break;
    case DT_F64: unary_map_f64(j->f, j->scalar, x, y, n); break;
    case DT_BF16: unary_bf16(j->f, (float)j->scalar, x, y, n); break;
    case DT_F16: unary_f16(j->f, (float)j->scalar, x, y, n); break;
    case DT_I32: unary_i32(j->f, (int32_t)si, x, y, n); break;
    case DT_I64: unary_i64(j->f, si, x, y, n); break;
    default: break;
    }
}

dt_status dt_cpu_unary(dt_unary f, double scalar, const dt_local *x, dt_local *out) {
    if ((unsigned)f >= DT_UNARY_COUNT)
        return dt_error(DT_ERR_ARG, "dt_cpu_unary: unknown unary op %d", (int)f);
    int is_int = x->dtype == DT_I32 || x->dtype == DT_I64;
    if (is_int && !dt_ew_unary_int_ok(f))
        return dt_error(DT_ERR_DTYPE, "dt_cpu_unary: %s is not defined for dtype %s",
                        unary_names[f], dt_dtype_name(x->dtype));
    switch (x->dtype) {
    case DT_F32:
    case DT_F64:
    case DT_BF16:
    case DT_F16:
    case DT_I32:
    case DT_I64: break;
    default:
        return dt_error(DT_ERR_DTYPE, "dt_cpu_unary: unknown dtype %d", (int)x->dtype);
    }
    unary_job j = {.f = f, .scalar = scalar, .dtype = x->dtype, .x = x->data, .y = out->data};
    dt_parallel_for((int64_t)numel(x), PIECE, unary_range, &j);
    return DT_OK;
}

/* ---- broadcasting ----------------------------------------------------------------------- */

/* The offsets of row r (all dims but the last) in each of nin inputs. */
/* Where output row `row` starts in each input: an odometer over all dims but the last, set
 * once per chunk and then stepped row by row (no divisions per row). */
typedef struct {
    int64_t row, idx[DT_MAX_NDIM], off[3];
} bcast_cursor;

static void cursor_seek(const dt_bcast *it, int nin, int64_t r, bcast_cursor *c) {
    c->row = r;
    for (int k = 0; k < nin; k++) c->off[k] = 0;
    for (int d = it->ndim - 2; d >= 0; d--) {
        c->idx[d] = r % it->shape[d];
        r /= it->shape[d];
        for (int k = 0; k < nin; k++) c->off[k] += c->idx[d] * it->stride[k][d];
    }
}

static inline void cursor_to(const dt_bcast *it, int nin, int64_t r, bcast_cursor *c) {
    if (r == c->row) return;
    if (r != c->row + 1) {
        cursor_seek(it, nin, r, c);
        return;
    }
    c->row = r;
    for (int d = it->ndim - 2; d >= 0; d--) {
        for (int k = 0; k < nin; k++) c->off[k] += it->stride[k][d];
        if (++c->idx[d] < it->shape[d]) return;
        for (int k = 0; k < nin; k++) c->off[k] -= it->stride[k][d] * it->shape[d];
        c->idx[d] = 0;
    }
}

/* The pool's unit of broadcast work: a piece of PIECE columns (or fewer, at a row's end) of
 * one output row; units run row-major, so a chunk of them is a run of output elements. */
typedef struct {
    const dt_bcast *it;
    int64_t n, pieces; /* row length, pieces per row */
} bcast_units;

static bcast_units bcast_plan(const dt_bcast *it) {
    int64_t n = it->shape[it->ndim - 1];
    return (bcast_units){.it = it, .n = n, .pieces = (n + PIECE - 1) / PIECE};
}

/* Unit u's place: its output row, first column and length. */
static void bcast_span(const bcast_units *b, int64_t u, int64_t *row, int64_t *c0, int64_t *n) {
    *row = b->pieces == 1 ? u : u / b->pieces;
    *c0 = b->pieces == 1 ? 0 : (u % b->pieces) * PIECE;
    *n = b->n - *c0 < PIECE ? b->n - *c0 : PIECE;
}

/* Units per pool chunk: at least PIECE elements' worth. */
static int64_t bcast_grain(const bcast_units *u) {
    int64_t per = u->n < PIECE ? u->n : PIECE;
    return per >= PIECE ? 1 : PIECE / per;
}

/* ---- binary ----------------------------------------------------------------------------- */

/* One output row of n elements; a and b advance by sa and sb. */
#define BIN_ROW(CT, LOAD, STORE, EXPR)                                                             \
    if (sa == 1 && sb == 1) {                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            CT x = LOAD(a[i]), y = LOAD(b[i]);                                                     \
            o[i] = STORE(EXPR);                                                                    \
        }                                                                                          \
    } else if (sa == 0 && sb == 1) {                                                               \
        CT x = LOAD(a[0]);                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                          \
            CT y = LOAD(b[i]);                                                                     \
            o[i] = STORE(EXPR);                                                                    \
        }                                                                                          \
    } else if (sa == 1 && sb == 0) {                                                               \
        CT y = LOAD(b[0]);                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                          \
            CT x = LOAD(a[i]);                                                                     \
            o[i] = STORE(EXPR);                                                                    \
        }                                                                                          \
    } else {                                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                          \
            CT x = LOAD(a[i * sa]), y = LOAD(b[i * sb]);                                           \
            o[i] = STORE(EXPR);                                                                    \
        }                                                                                          \
    }

#define BIN_CASE(CT, LOAD, STORE, FN, OP)                                                          \
    case OP: BIN_ROW(CT, LOAD, STORE, FN(OP, x, y)) break;

#define DEFINE_BINARY_ROW(SUF, T, CT, LOAD, STORE, FN)                                             \
    static FLATTEN void binary_row_##SUF(dt_binary f, T *o, const T *a, int64_t sa, const T *b,    \
                                         int64_t sb, int64_t n) {                                  \
        switch (f) {                                                                               \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_ADD)                                           \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_SUB)                                           \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_MUL)                                           \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_DIV)                                           \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_MAX)                                           \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_MIN)                                           \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_EQ)                                            \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_NE)                                            \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_GT)                                            \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_GE)                                            \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_LT)                                            \
            BIN_CASE(CT, LOAD, STORE, FN, DT_BINARY_LE)                                            \
        default: break;                                                                            \
        }                                                                                          \
    }

#define ID(v) (v)
DEFINE_BINARY_ROW(f32, float, float, ID, ID, dt_ew_binary_f32)
DEFINE_BINARY_ROW(f64, double, double, ID, ID, dt_ew_binary_f64)
DEFINE_BINARY_ROW(bf16, uint16_t, float, dt_bf16_to_f32, dt_f32_to_bf16, dt_ew_binary_f32)
DEFINE_BINARY_ROW(f16, uint16_t, float, dt_f16_to_f32, dt_f32_to_f16, dt_ew_binary_f32)
DEFINE_BINARY_ROW(i32, int32_t, int32_t, ID, ID, dt_ew_binary_i32)
DEFINE_BINARY_ROW(i64, int64_t, int64_t, ID, ID, dt_ew_binary_i64)

typedef struct {
    dt_binary f;
    dt_dtype dtype;
    bcast_units u;
    const void *a, *b;
    void *out;
} binary_job;

/* n elements of dtype, a and b at element strides sa and sb, o contiguous: o = f(a, b). */
static void binary_strided(dt_binary f, dt_dtype dtype, void *o, const void *a, int64_t sa,
                           const void *b, int64_t sb, int64_t n) {
    /* f32 arithmetic on contiguous rows: the widest vectors the CPU has (the same bits) */
    if (dtype == DT_F32 && sa == 1 && sb == 1 && f <= DT_BINARY_DIV) {
        _Static_assert(DT_BINARY_ADD == 0 && DT_BINARY_SUB == 1 && DT_BINARY_MUL == 2 &&
                           DT_BINARY_DIV == 3 && DT_SIMD_ADD == 0 && DT_SIMD_SUB == 1 &&
                           DT_SIMD_MUL == 2 && DT_SIMD_DIV == 3,
                       "binary ops and the SIMD arithmetic keep one order");
        dt_simd_arith((dt_simd_arith_op)f, n, a, b, o);
        return;
    }
#define BINARY_CASE(DT, SUF, T)                                                                    \
    case DT: binary_row_##SUF(f, (T *)o, (const T *)a, sa, (const T *)b, sb, n); break;
    switch (dtype) {
        BINARY_CASE(DT_F32, f32, float)
        BINARY_CASE(DT_F64, f64, double)
        BINARY_CASE(DT_BF16, bf16, uint16_t)
        BINARY_CASE(DT_F16, f16, uint16_t)
        BINARY_CASE(DT_I32, i32, int32_t)
        BINARY_CASE(DT_I64, i64, int64_t)
    default: break;
    }
#undef BINARY_CASE
}

/* n contiguous elements of dtype: o = f(a, b). */
static void binary_flat(dt_binary f, dt_dtype dtype, void *o, const void *a, const void *b,
                        int64_t n) {
    binary_strided(f, dtype, o, a, 1, b, 1, n);
}

static void binary_range(void *arg, int64_t begin, int64_t end) {
    const binary_job *j = arg;
    const dt_bcast *it = j->u.it;
    size_t es = dt_dtype_size(j->dtype);
    int64_t sa = it->stride[0][it->ndim - 1], sb = it->stride[1][it->ndim - 1];
    bcast_cursor cur = {.row = -2};
    for (int64_t u = begin; u < end; u++) {
        int64_t r, c0, n;
        bcast_span(&j->u, u, &r, &c0, &n);
        cursor_to(it, 2, r, &cur);
        const int64_t *off = cur.off;
        dt_binary f = j->f;
        char *o = (char *)j->out + ((size_t)r * (size_t)j->u.n + (size_t)c0) * es;
        const char *pa = (const char *)j->a + (size_t)(off[0] + c0 * sa) * es;
        const char *pb = (const char *)j->b + (size_t)(off[1] + c0 * sb) * es;
        binary_strided(f, j->dtype, o, pa, sa, pb, sb, n);
    }
}

dt_status dt_cpu_binary(dt_binary f, const dt_local *a, const dt_local *b, dt_local *out) {
    if ((unsigned)f >= DT_BINARY_COUNT)
        return dt_error(DT_ERR_ARG, "dt_cpu_binary: unknown binary op %d", (int)f);
    size_t es = dt_dtype_size(a->dtype);
    if (es == 0 || a->dtype != b->dtype)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_binary: dtypes %s and %s", dt_dtype_name(a->dtype),
                        dt_dtype_name(b->dtype));
    dt_bcast it;
    size_t total;
    if (same_shape(a, out) && same_shape(b, out)) {
        /* The common case, equal shapes: one flat contiguous row, no broadcast plan to build;
         * a row that stays serial runs here, without the pool (a small op's set-up otherwise
         * costs more than its arithmetic). */
        total = numel(out);
        if (total == 0) return DT_OK;
        if (total <= PIECE) {
            binary_flat(f, a->dtype, out->data, a->data, b->data, (int64_t)total);
            return DT_OK;
        }
        it = (dt_bcast){.ndim = 1, .shape = {(int64_t)total}, .stride = {{1}, {1}}};
    } else {
        const dt_local *in[2] = {a, b};
        DT_CHECK(dt_bcast_init(&it, "dt_cpu_binary", out, in, 2));
        total = numel(out);
        if (total == 0) return DT_OK;
    }
    binary_job j = {.f = f, .dtype = a->dtype, .u = bcast_plan(&it), .a = a->data,
                    .b = b->data, .out = out->data};
    int64_t units = (int64_t)(total / (size_t)j.u.n) * j.u.pieces;
    dt_parallel_for(units, bcast_grain(&j.u), binary_range, &j);
    return DT_OK;
}

/* ---- where ------------------------------------------------------------------------------ */

/* m[i] = cond[i * sc] != 0 (a bf16/f16 -0 is zero, NaN is true). */
static void cond_mask(dt_dtype dt, const void *c, int64_t sc, int64_t n, uint8_t *m) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case DT_F32: m[i] = ((const float *)c)[i * sc] != 0.0f; break;
        case DT_F64: m[i] = ((const double *)c)[i * sc] != 0.0; break;
        case DT_BF16:
        case DT_F16: m[i] = (((const uint16_t *)c)[i * sc] & 0x7fffu) != 0; break;
        case DT_I32: m[i] = ((const int32_t *)c)[i * sc] != 0; break;
        case DT_I64: m[i] = ((const int64_t *)c)[i * sc] != 0; break;
        default: m[i] = 0; break;
        }
    }
}

#define WHERE_ROW(T)                                                                               \
    for (int64_t i = 0; i < n; i++)                                                                \
        ((T *)o)[i] = m[i] ? ((const T *)a)[i * sa] : ((const T *)b)[i * sb];

static void where_row(size_t es, const uint8_t *m, void *o, const void *a, int64_t sa,
                      const void *b, int64_t sb, int64_t n) {
    switch (es) {
    case 2: WHERE_ROW(uint16_t) break;
    case 4: WHERE_ROW(uint32_t) break;
    case 8: WHERE_ROW(uint64_t) break;
    default: break;
    }
}

typedef struct {
    bcast_units u;
    dt_dtype cdt;
    size_t es, cs;
    const void *c, *a, *b;
    void *out;
} where_job;

static void where_range(void *arg, int64_t begin, int64_t end) {
    const where_job *j = arg;
    const dt_bcast *it = j->u.it;
    int64_t sc = it->stride[0][it->ndim - 1], sa = it->stride[1][it->ndim - 1],
            sb = it->stride[2][it->ndim - 1];
    size_t es = j->es, cs = j->cs;
    uint8_t m[BLOCK];
    bcast_cursor cur = {.row = -2};
    for (int64_t u = begin; u < end; u++) {
        int64_t r, c0, n;
        bcast_span(&j->u, u, &r, &c0, &n);
        cursor_to(it, 3, r, &cur);
        const int64_t *off = cur.off;
        char *o = (char *)j->out + ((size_t)r * (size_t)j->u.n + (size_t)c0) * es;
        for (int64_t base = 0; base < n; base += BLOCK) {
            int64_t len = n - base < BLOCK ? n - base : BLOCK, col = c0 + base;
            cond_mask(j->cdt, (const char *)j->c + (size_t)(off[0] + col * sc) * cs, sc, len, m);
            where_row(es, m, o + (size_t)base * es,
                      (const char *)j->a + (size_t)(off[1] + col * sa) * es, sa,
                      (const char *)j->b + (size_t)(off[2] + col * sb) * es, sb, len);
        }
    }
}

dt_status dt_cpu_where(const dt_local *cond, const dt_local *a, const dt_local *b, dt_local *out) {
    size_t es = dt_dtype_size(a->dtype), cs = dt_dtype_size(cond->dtype);
    if (es == 0 || cs == 0 || a->dtype != b->dtype)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_where: dtypes cond %s, a %s, b %s",
                        dt_dtype_name(cond->dtype), dt_dtype_name(a->dtype),
                        dt_dtype_name(b->dtype));
    dt_bcast it;
    const dt_local *in[3] = {cond, a, b};
    DT_CHECK(dt_bcast_init(&it, "dt_cpu_where", out, in, 3));
    size_t total = numel(out);
    if (total == 0) return DT_OK;
    where_job j = {.u = bcast_plan(&it), .cdt = cond->dtype, .es = es, .cs = cs,
                   .c = cond->data, .a = a->data, .b = b->data, .out = out->data};
    int64_t units = (int64_t)(total / (size_t)j.u.n) * j.u.pieces;
    dt_parallel_for(units, bcast_grain(&j.u), where_range, &j);
    return DT_OK;
}
