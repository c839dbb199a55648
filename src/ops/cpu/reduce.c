/* CPU reductions over a set of dims (sum, mean, max, min, prod) and arg max/min along one dim.
 * Dims are collapsed into runs of kept and reduced dims; the inner loop runs over the
 * innermost run, contiguous, and odometers step the outer runs with incremental offsets.
 * Floats accumulate in double, integers in wrapping int64. Knows nothing of shards. The
 * intra-op pool shares out outputs; a few outputs of many elements each are cut into fixed
 * pieces whose partials are combined in piece order, so no result depends on the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/half.h"
#include "core/pool.h"
#include "core/reduce.h"
#include "ops/kernels.h"

#define BLOCK 256
#define PIECE 8192 /* elements a pool chunk reads at least: smaller stays serial */
/* Outputs of at least this many elements each, fewer than SPLIT_OUTS of them: each output's
 * elements are cut into pieces of PIECE (partials combined in order) instead. */
#define SPLIT_COUNT 65536
#define SPLIT_OUTS  8
#define FLATTEN __attribute__((flatten))

#define ID(v) (v)
#define MAXOF(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define MINOF(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))
#define F_ADD(a, v) ((a) + (v))
#define F_MUL(a, v) ((a) * (v))
#define I_ADD(a, v) ((int64_t)((uint64_t)(a) + (uint64_t)(v)))
#define I_MUL(a, v) ((int64_t)((uint64_t)(a) * (uint64_t)(v)))

/* x's dims as runs: kept (k*) and reduced (r*), sizes and strides in elements. */
typedef struct rplan {
    int nk, nr, inner_reduced;
    int64_t ks[DT_MAX_NDIM], kst[DT_MAX_NDIM], rs[DT_MAX_NDIM], rst[DT_MAX_NDIM];
    size_t nout, count; /* output elements; elements reduced into each */
} rplan;

static void plan_reduce(unsigned mask, const dt_local *x, rplan *p) {
    int64_t stride[DT_MAX_NDIM];
    for (int d = x->ndim - 1; d >= 0; d--)
        stride[d] = d == x->ndim - 1 ? 1 : stride[d + 1] * x->shape[d + 1];
    p->nk = p->nr = 0;
    int last = -1; /* class of the previous run: 0 kept, 1 reduced */
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue; /* size-1 dims neither move nor reduce anything */
        int red = (mask >> d) & 1u;
        int *n = red ? &p->nr : &p->nk;
        int64_t *sz = red ? p->rs : p->ks, *st = red ? p->rst : p->kst;
        if (last == red) { /* adjacent in x once size-1 dims are gone: one run */
            sz[*n - 1] *= x->shape[d];
        } else {
            sz[*n] = x->shape[d];
            (*n)++;
        }
        st[*n - 1] = stride[d];
        last = red;
    }
    p->inner_reduced = last == 1;
    if (!p->inner_reduced && p->nk == 0) { /* nothing left: one output, one element */
        p->ks[0] = p->kst[0] = 1;
        p->nk = 1;
    }
    p->nout = p->count = 1;
    for (int i = 0; i < p->nk; i++) p->nout *= (size_t)p->ks[i];
    for (int i = 0; i < p->nr; i++) p->count *= (size_t)p->rs[i];
}

/* Sets an odometer over n dims to position pos (row-major), and *off to its element. */
static inline void odo_seek(int n, const int64_t *size, const int64_t *stride, int64_t pos,
                            int64_t *idx, int64_t *off) {
    *off = 0;
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = pos % size[d];
        pos /= size[d];
        *off += idx[d] * stride[d];
    }
}

/* Steps an odometer over n dims (all of them), keeping *off at the current element. */
static inline void odo_next(int n, const int64_t *size, const int64_t *stride, int64_t *idx,
                            int64_t *off) {
    for (int d = n - 1; d >= 0; d--) {
        *off += stride[d];
        if (++idx[d] < size[d]) return;
        *off -= stride[d] * size[d];
        idx[d] = 0;
    }
}

static inline double comb_fl(dt_reduce_op op, double a, double v) {
    switch (op) {
    case DT_REDUCE_PROD: return F_MUL(a, v);
    case DT_REDUCE_MAX: return MAXOF(a, v);
    case DT_REDUCE_MIN: return MINOF(a, v);
    default: return F_ADD(a, v);
    }
}

static inline int64_t comb_in(dt_reduce_op op, int64_t a, int64_t v) {
    switch (op) {
    case DT_REDUCE_PROD: return I_MUL(a, v);
    case DT_REDUCE_MAX: return MAXOF(a, v);
    case DT_REDUCE_MIN: return MINOF(a, v);
    default: return I_ADD(a, v);
    }
}

static inline double fin_fl(dt_reduce_op op, double a, size_t n) {
    return op == DT_REDUCE_AVG ? a / (double)n : a;
}

static inline int64_t fin_in(dt_reduce_op op, int64_t a, size_t n) {
    return op == DT_REDUCE_AVG ? (n ? a / (int64_t)n : 0) : a;
}

/* One switch case per op so the combine folds to one instruction in each loop. */
#define OP_CASES(CASE, LOAD)                                                                       \
    CASE(DT_REDUCE_SUM, LOAD) CASE(DT_REDUCE_AVG, LOAD) CASE(DT_REDUCE_PROD, LOAD)                 \
    CASE(DT_REDUCE_MAX, LOAD) CASE(DT_REDUCE_MIN, LOAD)

#define DEFINE_REDUCE(SUF, T, ACC, FAM, LOAD, STORE, LO, HI)                                       \
    static FLATTEN void reduce_##SUF(dt_reduce_op op, const rplan *p, const T *x, T *out,          \
                                     size_t u0, size_t u1) {                                       \
        ACC init = op == DT_REDUCE_PROD  ? (ACC)1                                                  \
                   : op == DT_REDUCE_MAX ? (ACC)(LO)                                               \
                   : op == DT_REDUCE_MIN ? (ACC)(HI)                                               \
                                         : (ACC)0;                                                 \
        int64_t kidx[DT_MAX_NDIM] = {0}, koff = 0;                                                 \
        if (p->inner_reduced) { /* each output folds rows of the innermost reduced run */          \
            int64_t L = p->rs[p->nr - 1];                                                          \
            size_t rows = L ? p->count / (size_t)L : 0;                                            \
            odo_seek(p->nk, p->ks, p->kst, (int64_t)u0, kidx, &koff);                              \
            for (size_t o = u0; o < u1; o++) {                                                     \
                ACC acc = init;                                                                    \
                int64_t ridx[DT_MAX_NDIM] = {0}, roff = 0;                                         \
                for (size_t r = 0; r < rows; r++) {                                                \
                    const T *row = x + koff + roff;                                                \
                    switch (op) {                                                                  \
                        OP_CASES(ROW_CASE_##FAM, LOAD)                                             \
                    default: break;                                                                \
                    }                                                                              \
                    odo_next(p->nr - 1, p->rs, p->rst, ridx, &roff);                               \
                }                                                                                  \
                out[o] = STORE(fin_##FAM(op, acc, p->count));                                      \
                odo_next(p->nk, p->ks, p->kst, kidx, &koff);                                       \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        /* innermost run kept: fold whole rows of up to BLOCK outputs at a time */                 \
        int64_t L = p->ks[p->nk - 1];                                                              \
        size_t nb = (size_t)((L + BLOCK - 1) / BLOCK); /* units: (outer index, column block) */   \
        for (size_t u = u0; u < u1; u++) {                                                         \
            size_t o = u / nb;                                                                     \
            if (u == u0 || u % nb == 0)                                                            \
                odo_seek(p->nk - 1, p->ks, p->kst, (int64_t)o, kidx, &koff);                       \
            {                                                                                      \
                int64_t j0 = (int64_t)(u % nb) * BLOCK;                                            \
                int64_t m = L - j0 < BLOCK ? L - j0 : BLOCK;                                       \
                ACC acc[BLOCK];                                                                    \
                for (int64_t j = 0; j < m; j++) acc[j] = init;                                     \
                int64_t ridx[DT_MAX_NDIM] = {0}, roff = 0;                                         \
                for (size_t r = 0; r < p->count; r++) {                                            \
                    const T *row = x + koff + roff + j0;                                           \
                    switch (op) {                                                                  \
                        OP_CASES(VEC_CASE_##FAM, LOAD)                                             \
                    default: break;                                                                \
                    }                                                                              \
                    odo_next(p->nr, p->rs, p->rst, ridx, &roff);                                   \
                }                                                                                  \
                T *dst = out + o * (size_t)L + j0;                                                 \
                for (int64_t j = 0; j < m; j++)                                                    \
                    dst[j] = STORE(fin_##FAM(op, acc[j], p->count));                               \
            }                                                                                      \
        }                                                                                          \
    }

#define ROW_CASE_fl(OP, LOAD)                                                                      \
    case OP:                                                                                       \
        for (int64_t j = 0; j < L; j++) acc = comb_fl(OP, acc, (double)LOAD(row[j]));              \
        break;
#define VEC_CASE_fl(OP, LOAD)                                                                      \
    case OP:                                                                                       \
        for (int64_t j = 0; j < m; j++) acc[j] = comb_fl(OP, acc[j], (double)LOAD(row[j]));        \
        break;
#define ROW_CASE_in(OP, LOAD)                                                                      \
    case OP:                                                                                       \
        for (int64_t j = 0; j < L; j++) acc = comb_in(OP, acc, (int64_t)LOAD(row[j]));             \
        break;
#define VEC_CASE_in(OP, LOAD)                                                                      \
    case OP:                                                                                       \
        for (int64_t j = 0; j < m; j++) acc[j] = comb_in(OP, acc[j], (int64_t)LOAD(row[j]));       \
        break;

#define F32_STORE(v) ((float)(v))
#define I32_STORE(v) ((int32_t)(v))
#define BF16_STORE(v) dt_f32_to_bf16((float)(v))
#define F16_STORE(v) dt_f32_to_f16((float)(v))

DEFINE_REDUCE(f32, float, double, fl, ID, F32_STORE, -INFINITY, INFINITY)
DEFINE_REDUCE(f64, double, double, fl, ID, ID, -INFINITY, INFINITY)
DEFINE_REDUCE(bf16, uint16_t, double, fl, dt_bf16_to_f32, BF16_STORE, -INFINITY, INFINITY)
DEFINE_REDUCE(f16, uint16_t, double, fl, dt_f16_to_f32, F16_STORE, -INFINITY, INFINITY)
DEFINE_REDUCE(i32, int32_t, int64_t, in, ID, I32_STORE, INT32_MIN, INT32_MAX)
DEFINE_REDUCE(i64, int64_t, int64_t, in, ID, ID, INT64_MIN, INT64_MAX)

/* The split form (inner run reduced, few outputs of many elements): unit u is piece u % pieces
 * of output u / pieces, PIECE elements of its reduced run in row-major order; its partial goes
 * to part[u], combined with the others in piece order by finish_##SUF. */
#define SEG_CASE_fl(OP, LOAD)                                                                      \
    case OP:                                                                                       \
        for (int64_t t = j; t < jend; t++) acc = comb_fl(OP, acc, (double)LOAD(row[t]));           \
        break;
#define SEG_CASE_in(OP, LOAD)                                                                      \
    case OP:                                                                                       \
        for (int64_t t = j; t < jend; t++) acc = comb_in(OP, acc, (int64_t)LOAD(row[t]));          \
        break;

#define DEFINE_SPLIT(SUF, T, ACC, FAM, LOAD, STORE, LO, HI)                                        \
    static ACC init_##SUF(dt_reduce_op op) {                                                       \
        return op == DT_REDUCE_PROD  ? (ACC)1                                                      \
               : op == DT_REDUCE_MAX ? (ACC)(LO)                                                   \
               : op == DT_REDUCE_MIN ? (ACC)(HI)                                                   \
                                     : (ACC)0;                                                     \
    }                                                                                              \
    static FLATTEN void pieces_##SUF(dt_reduce_op op, const rplan *p, const T *x, size_t piece,    \
                                     size_t pieces, size_t u0, size_t u1, ACC *part) {             \
        int64_t L = p->rs[p->nr - 1];                                                              \
        for (size_t u = u0; u < u1; u++) {                                                         \
            int64_t kidx[DT_MAX_NDIM], koff, ridx[DT_MAX_NDIM], roff;                              \
            odo_seek(p->nk, p->ks, p->kst, (int64_t)(u / pieces), kidx, &koff);                    \
            size_t e = (u % pieces) * piece, e1 = e + piece < p->count ? e + piece : p->count;     \
            odo_seek(p->nr - 1, p->rs, p->rst, (int64_t)(e / (size_t)L), ridx, &roff);             \
            int64_t j = (int64_t)(e % (size_t)L);                                                  \
            ACC acc = init_##SUF(op);                                                              \
            while (e < e1) {                                                                       \
                const T *row = x + koff + roff;                                                    \
                int64_t jend = L - j < (int64_t)(e1 - e) ? L : j + (int64_t)(e1 - e);              \
                switch (op) {                                                                      \
                    OP_CASES(SEG_CASE_##FAM, LOAD)                                                 \
                default: break;                                                                    \
                }                                                                                  \
                e += (size_t)(jend - j);                                                           \
                j = 0;                                                                             \
                odo_next(p->nr - 1, p->rs, p->rst, ridx, &roff);                                   \
            }                                                                                      \
            part[u] = acc;                                                                         \
        }                                                                                          \
    }                                                                                              \
    static void finish_##SUF(dt_reduce_op op, const rplan *p, size_t pieces, const ACC *part,     \
                             T *out) {                                                             \
        for (size_t o = 0; o < p->nout; o++) {                                                     \
            ACC acc = init_##SUF(op);                                                              \
            for (size_t c = 0; c < pieces; c++) acc = comb_##FAM(op, acc, part[o * pieces + c]);   \
            out[o] = STORE(fin_##FAM(op, acc, p->count));                                          \
        }                                                                                          \
    }

DEFINE_SPLIT(f32, float, double, fl, ID, F32_STORE, -INFINITY, INFINITY)
DEFINE_SPLIT(f64, double, double, fl, ID, ID, -INFINITY, INFINITY)
DEFINE_SPLIT(bf16, uint16_t, double, fl, dt_bf16_to_f32, BF16_STORE, -INFINITY, INFINITY)
DEFINE_SPLIT(f16, uint16_t, double, fl, dt_f16_to_f32, F16_STORE, -INFINITY, INFINITY)
DEFINE_SPLIT(i32, int32_t, int64_t, in, ID, I32_STORE, INT32_MIN, INT32_MAX)
DEFINE_SPLIT(i64, int64_t, int64_t, in, ID, ID, INT64_MIN, INT64_MAX)

typedef struct {
    dt_reduce_op op;
    const rplan *p;
    dt_dtype dtype;
    const void *x;
    void *out;
    size_t piece, pieces; /* split form: elements per piece, pieces per output; 0: whole outputs */
    void *part;
} reduce_job;

static void reduce_range(void *arg, int64_t begin, int64_t end) {
    const reduce_job *j = arg;
    size_t u0 = (size_t)begin, u1 = (size_t)end;
#define REDUCE_CASE(DT, SUF)                                                                       \
    case DT:                                                                                       \
        if (j->pieces) pieces_##SUF(j->op, j->p, j->x, j->piece, j->pieces, u0, u1, j->part);      \
        else reduce_##SUF(j->op, j->p, j->x, j->out, u0, u1);                                      \
        break;
    switch (j->dtype) {
        REDUCE_CASE(DT_F32, f32)
        REDUCE_CASE(DT_F64, f64)
        REDUCE_CASE(DT_BF16, bf16)
        REDUCE_CASE(DT_F16, f16)
        REDUCE_CASE(DT_I32, i32)
        REDUCE_CASE(DT_I64, i64)
    default: break;
    }
#undef REDUCE_CASE
}

dt_status dt_cpu_reduce(dt_reduce_op op, unsigned mask, const dt_local *x, dt_local *out) {
    if ((unsigned)op >= DT_REDUCE_COUNT)
        return dt_error(DT_ERR_ARG, "dt_cpu_reduce: unknown reduce op %d", (int)op);
    if (x->ndim < 32 && (mask >> x->ndim) != 0)
        return dt_error(DT_ERR_ARG, "dt_cpu_reduce: mask 0x%x names dims beyond ndim %d", mask,
                        x->ndim);
    rplan p;
    plan_reduce(mask, x, &p);
    if (p.nout == 0) return DT_OK;
    switch (x->dtype) {
    case DT_F32:
    case DT_F64:
    case DT_BF16:
    case DT_F16:
    case DT_I32:
    case DT_I64: break;
    default:
        return dt_error(DT_ERR_DTYPE, "dt_cpu_reduce: unknown dtype %d", (int)x->dtype);
    }
    reduce_job j = {.op = op, .p = &p, .dtype = x->dtype, .x = x->data, .out = out->data};
    if (p.inner_reduced && p.nout < SPLIT_OUTS && p.count >= SPLIT_COUNT) {
        j.piece = PIECE; /* fixed: never from the thread count */
        j.pieces = (p.count + j.piece - 1) / j.piece;
        size_t units = p.nout * j.pieces;
        double part[SPLIT_OUTS * 64]; /* doubles and int64s alike: 8 bytes each */
        j.part =
            units <= sizeof part / sizeof part[0] ? part : dt_host_alloc(units * sizeof(double));
        if (!j.part)
            return dt_error(DT_ERR_NOMEM, "dt_cpu_reduce: out of memory for %zu partials", units);
        dt_parallel_for((int64_t)units, 1, reduce_range, &j);
        switch (x->dtype) {
        case DT_F32: finish_f32(op, &p, j.pieces, j.part, out->data); break;
        case DT_F64: finish_f64(op, &p, j.pieces, j.part, out->data); break;
        case DT_BF16: finish_bf16(op, &p, j.pieces, j.part, out->data); break;
        case DT_F16: finish_f16(op, &p, j.pieces, j.part, out->data); break;
        case DT_I32: finish_i32(op, &p, j.pieces, j.part, out->data); break;
        case DT_I64: finish_i64(op, &p, j.pieces, j.part, out->data); break;
        default: break;
        }
        if (j.part != part) dt_host_free(j.part);
        return DT_OK;
    }
    /* Units: outputs, or (inner run kept) BLOCK-column blocks of outputs. */
    size_t per = p.count, units = p.nout;
    if (!p.inner_reduced) {
        int64_t L = p.ks[p.nk - 1];
        size_t nb = (size_t)((L + BLOCK - 1) / BLOCK);
        units = p.nout / (size_t)L * nb;
        per = p.count * (size_t)(L < BLOCK ? L : BLOCK);
    }
    int64_t grain = per >= PIECE ? 1 : per ? (int64_t)(PIECE / per) : PIECE;
    dt_parallel_for((int64_t)units, grain, reduce_range, &j);
    return DT_OK;
}

/* ---- arg max / min ---------------------------------------------------------------------- */

/* x viewed as (outer, n, inner); BLOCK columns of inner are scanned together along n. A NaN
 * wins over any number (first NaN kept), as in torch.argmax. */
#define DEFINE_ARG(SUF, T, CT, LOAD)                                                               \
    static void arg_##SUF(int is_max, int64_t outer, int64_t n, int64_t inner, int64_t offset,     \
                          const T *x, int64_t *idx, T *val) {                                      \
        for (int64_t o = 0; o < outer; o++) {                                                      \
            for (int64_t j0 = 0; j0 < inner; j0 += BLOCK) {                                        \
                int64_t m = inner - j0 < BLOCK ? inner - j0 : BLOCK;                               \
                const T *base = x + o * n * inner + j0;                                            \
                CT best[BLOCK];                                                                    \
                int64_t bi[BLOCK];                                                                 \
                for (int64_t j = 0; j < m; j++) {                                                  \
                    best[j] = LOAD(base[j]);                                                       \
                    bi[j] = 0;                                                                     \
                }                                                                                  \
                for (int64_t t = 1; t < n; t++) {                                                  \
                    const T *row = base + t * inner;                                               \
                    for (int64_t j = 0; j < m; j++) {                                              \
                        CT v = LOAD(row[j]), b = best[j];                                          \
                        int better = (is_max ? v > b : v < b) || (v != v && b == b);               \
                        if (better) {                                                              \
                            best[j] = v;                                                           \
                            bi[j] = t;                                                             \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
                int64_t *oi = idx + o * inner + j0;                                                \
                for (int64_t j = 0; j < m; j++) {                                                  \
                    oi[j] = bi[j] + offset;                                                        \
                    if (val) val[o * inner + j0 + j] = base[bi[j] * inner + j];                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_ARG(f32, float, float, ID)
DEFINE_ARG(f64, double, double, ID)
DEFINE_ARG(bf16, uint16_t, float, dt_bf16_to_f32)
DEFINE_ARG(f16, uint16_t, float, dt_f16_to_f32)
DEFINE_ARG(i32, int32_t, int32_t, ID)
DEFINE_ARG(i64, int64_t, int64_t, ID)

dt_status dt_cpu_arg_reduce(int is_max, int dim, int64_t offset, const dt_local *x,
                            dt_local *out, dt_local *values) {
    if (dim < 0 || dim >= x->ndim)
        return dt_error(DT_ERR_ARG, "dt_cpu_arg_reduce: dim %d out of range for %d dims", dim,
                        x->ndim);
    if (dt_dtype_size(x->dtype) == 0)
        return dt_error(DT_ERR_DTYPE, "dt_cpu_arg_reduce: unknown dtype %d", (int)x->dtype);
    int64_t outer = 1, inner = 1, n = x->shape[dim];
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    int64_t *idx = out->data;
    void *val = values ? values->data : NULL;
    if (outer * inner == 0) return DT_OK;
    if (n == 0) {
        /* An empty shard along dim: the op's identity at index offset (the shard's end), so
         * combining with other shards never picks it. */
        for (int64_t i = 0; i < outer * inner; i++) idx[i] = offset;
        if (val)
            dt_fill_identity(x->dtype, is_max ? DT_REDUCE_MAX : DT_REDUCE_MIN, val,
                             (size_t)(outer * inner));
        return DT_OK;
    }
    switch (x->dtype) {
    case DT_F32: arg_f32(is_max, outer, n, inner, offset, x->data, idx, val); break;
    case DT_F64: arg_f64(is_max, outer, n, inner, offset, x->data, idx, val); break;
    case DT_BF16: arg_bf16(is_max, outer, n, inner, offset, x->data, idx, val); break;
    case DT_F16: arg_f16(is_max, outer, n, inner, offset, x->data, idx, val); break;
    case DT_I32: arg_i32(is_max, outer, n, inner, offset, x->data, idx, val); break;
    case DT_I64: arg_i64(is_max, outer, n, inner, offset, x->data, idx, val); break;
    default: break;
    }
    return DT_OK;
}
