/* Local CPU kernels (src/ops/kernels.h) against naive double-precision references written
 * here with plain nested loops, on small odd shapes (size-1 and size-0 dims, broadcasting) for
 * every dtype each kernel supports. Tolerance: |got - want| <= tol * max(1, |want|) with tol
 * 0 for integers, 1e-12 for f64, 1e-5 for f32 and 1e-2 for bf16/f16 (the reference runs on
 * the values as stored, so only the kernel's own rounding counts). Data comes from a
 * xorshift generator; every failure message prints the seed. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"
#include "ops/kernels.h"

#define SEED 0x5eed2024u

/* ---- test plumbing ------------------------------------------------------------------------ */

/* Every buffer a test allocates, freed after the test (so the sanitizer sees no leaks). */
static void **allocs;
static size_t nallocs, cap;

static void *talloc(size_t bytes) {
    if (nallocs == cap) {
        cap = cap ? 2 * cap : 256;
        allocs = realloc(allocs, cap * sizeof *allocs);
        cr_assert(allocs);
    }
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert(p);
    return allocs[nallocs++] = p;
}

static void free_all(void) {
    while (nallocs > 0) free(allocs[--nallocs]);
    free(allocs);
    allocs = NULL;
    cap = 0;
}

TestSuite(kernels, .fini = free_all);

static uint64_t rng = SEED;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static const dt_dtype FLOATS[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
static const dt_dtype ALL[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_I64};
#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static int is_int(dt_dtype dt) { return dt == DT_I32 || dt == DT_I64; }

typedef struct shp {
    int nd;
    int64_t s[DT_MAX_NDIM];
} shp;
#define SH(...) ((shp){sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), {__VA_ARGS__}})
#define SH0 ((shp){0, {0}})

static size_t numel(shp s) {
    size_t n = 1;
    for (int d = 0; d < s.nd; d++) n *= (size_t)s.s[d];
    return n;
}

/* A tensor and its values as stored, in double. */
typedef struct tens {
    dt_local t;
    double *v;
    size_t n;
} tens;

static tens mk_shape(dt_dtype dt, shp s) {
    tens r = {.t = {.dtype = dt, .ndim = s.nd}, .n = numel(s)};
    memcpy(r.t.shape, s.s, sizeof r.t.shape);
    r.t.data = talloc(r.n * dt_dtype_size(dt));
    r.v = talloc(r.n * sizeof(double));
    return r;
}

/* Stores v[] into t and reads back what the kernel will see. */
static void store(tens *r) {
    dt_convert_from_f64(r->t.dtype, r->v, r->t.data, r->n);
    dt_convert_to_f64(r->t.dtype, r->t.data, r->v, r->n);
}

/* Uniform in [lo, hi); integer dtypes (every dtype when ints) take the floor. */
static tens mk_any(dt_dtype dt, shp s, double lo, double hi, int ints) {
    tens r = mk_shape(dt, s);
    for (size_t i = 0; i < r.n; i++) {
        double x = lo + (hi - lo) * urand();
        r.v[i] = ints || is_int(dt) ? floor(x) : x;
    }
    store(&r);
    return r;
}
static tens mk(dt_dtype dt, shp s, double lo, double hi) { return mk_any(dt, s, lo, hi, 0); }

/* An output poisoned with 0x7f bytes (a huge value in every dtype) to catch unwritten slots. */
static tens mk_out(dt_dtype dt, shp s) {
    tens r = mk_shape(dt, s);
    memset(r.t.data, 0x7f, r.n * dt_dtype_size(dt));
    return r;
}

static double tol_of(dt_dtype dt) {
    switch (dt) {
    case DT_F32: return 1e-5;
    case DT_F64: return 1e-12;
    case DT_BF16:
    case DT_F16: return 1e-2;
    default: return 0.0;
    }
}

static void expect(const char *what, const dt_local *got, const double *want, size_t n) {
    double tol = tol_of(got->dtype);
    for (size_t i = 0; i < n; i++) {
        double g = t_get(got->dtype, got->data, i), w = want[i];
        int ok = (isnan(w) && isnan(g)) || g == w || fabs(g - w) <= tol * fmax(1.0, fabs(w));
        cr_assert(ok, "%s [%s] element %zu: got %.10g, want %.10g (tol %g, seed %#x)", what,
                  dt_dtype_name(got->dtype), i, g, w, tol, SEED);
    }
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        cr_assert_eq(st_, DT_OK, "%s: %s: %s", #call, dt_status_str(st_), dt_last_error());        \
    } while (0)

static void unravel(size_t i, shp s, int64_t *idx) {
    for (int d = s.nd - 1; d >= 0; d--) {
        idx[d] = s.s[d] ? (int64_t)(i % (size_t)s.s[d]) : 0;
        i = s.s[d] ? i / (size_t)s.s[d] : 0;
    }
}

/* Flat index into a tensor of shape s broadcast against out index oidx of ond dims. */
static size_t bidx(shp s, int ond, const int64_t *oidx) {
    size_t off = 0;
    for (int d = 0; d < s.nd; d++) {
        int64_t i = s.s[d] == 1 ? 0 : oidx[d + ond - s.nd];
        off = off * (size_t)s.s[d] + (size_t)i;
    }
    return off;
}

static shp bshape(shp a, shp b) {
    shp o = {a.nd > b.nd ? a.nd : b.nd, {0}};
    for (int d = 0; d < o.nd; d++) {
        int da = d - (o.nd - a.nd), db = d - (o.nd - b.nd);
        int64_t x = da < 0 ? 1 : a.s[da], y = db < 0 ? 1 : b.s[db];
        o.s[d] = x == 1 ? y : x;
    }
    return o;
}

/* ---- pointwise ---------------------------------------------------------------------------- */

static double ref_unary(dt_unary f, double x, double s, int integer) {
    switch (f) {
    case DT_UNARY_NEG: return -x;
    case DT_UNARY_EXP: return exp(x);
    case DT_UNARY_LOG: return log(x);
    case DT_UNARY_SQRT: return sqrt(x);
    case DT_UNARY_RSQRT: return 1.0 / sqrt(x);
    case DT_UNARY_ABS: return fabs(x);
    case DT_UNARY_RELU: return x > 0 ? x : 0;
    case DT_UNARY_GELU: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case DT_UNARY_SILU: return x / (1 + exp(-x));
    case DT_UNARY_TANH: return tanh(x);
    case DT_UNARY_SIGMOID: return 1 / (1 + exp(-x));
    case DT_UNARY_POW_SCALAR: return pow(x, s);
    case DT_UNARY_ADD_SCALAR: return x + (integer ? trunc(s) : s);
    case DT_UNARY_MUL_SCALAR: return x * (integer ? trunc(s) : s);
    default: return NAN;
    }
}

Test(kernels, unary_all_ops_dtypes_and_in_place) {
    shp shapes[] = {SH(3, 1, 5), SH(7), SH(0, 4), SH0};
    for (size_t di = 0; di < LEN(ALL); di++) {
        dt_dtype dt = ALL[di];
        for (int f = 0; f < DT_UNARY_COUNT; f++) {
            int positive = f == DT_UNARY_LOG || f == DT_UNARY_SQRT || f == DT_UNARY_RSQRT ||
                           f == DT_UNARY_POW_SCALAR;
            double s = f == DT_UNARY_POW_SCALAR ? 1.5 : f == DT_UNARY_MUL_SCALAR ? -2.5 : 1.75;
            int int_ok = f == DT_UNARY_NEG || f == DT_UNARY_ABS || f == DT_UNARY_RELU ||
                         f == DT_UNARY_ADD_SCALAR || f == DT_UNARY_MUL_SCALAR;
            for (size_t si = 0; si < LEN(shapes); si++) {
                tens x = is_int(dt) ? mk(dt, shapes[si], -9, 10)
                                    : mk(dt, shapes[si], positive ? 0.1 : -3, 3);
                tens y = mk_out(dt, shapes[si]);
                if (is_int(dt) && !int_ok) {
                    T_ERR(dt_cpu_unary(f, s, &x.t, &y.t), DT_ERR_DTYPE, "dt_cpu_unary");
                    cr_assert(strstr(dt_last_error(), dt_dtype_name(dt)));
                    continue;
                }
                double *want = talloc(x.n * sizeof(double) + 1);
                for (size_t i = 0; i < x.n; i++)
                    want[i] = ref_unary(f, x.v[i], s, is_int(dt));
                OK(dt_cpu_unary(f, s, &x.t, &y.t));
                expect("unary", &y.t, want, x.n);
                OK(dt_cpu_unary(f, s, &x.t, &x.t)); /* in place */
                expect("unary in place", &x.t, want, x.n);
            }
        }
    }
}

static double ref_binary(dt_binary f, double a, double b, int integer) {
    switch (f) {
    case DT_BINARY_ADD: return a + b;
    case DT_BINARY_SUB: return a - b;
    case DT_BINARY_MUL: return a * b;
    case DT_BINARY_DIV: return integer ? (b == 0 ? 0 : trunc(a / b)) : a / b;
    case DT_BINARY_MAX: return a > b ? a : b;
    case DT_BINARY_MIN: return a < b ? a : b;
    default: return NAN;
    }
}

Test(kernels, binary_broadcasting_and_aliasing) {
    struct {
        shp a, b;
        int alias; /* 1: out aliases a, 2: out aliases b */
    } cases[] = {
        {SH(3, 1, 5), SH(4, 1), 0}, {SH(2, 3), SH(2, 3), 0},     {SH(2, 3), SH(2, 3), 1},
        {SH(3, 4, 5), SH(4, 1), 1}, {SH(5), SH(3, 5), 2},        {SH(2, 1, 3), SH(1, 4, 1), 0},
        {SH(0, 3), SH(1, 3), 0},    {SH(4, 1), SH0, 0},          {SH0, SH0, 0},
        {SH(1, 1), SH(6), 0},       {SH(2, 3, 300), SH(300), 1}, {SH(2, 1, 4), SH(2, 3, 1), 0},
    };
    for (size_t di = 0; di < LEN(ALL); di++) {
        dt_dtype dt = ALL[di];
        for (int f = 0; f < DT_BINARY_COUNT; f++) {
            for (size_t c = 0; c < LEN(cases); c++) {
                shp os = bshape(cases[c].a, cases[c].b);
                tens a = is_int(dt) ? mk(dt, cases[c].a, -9, 10) : mk(dt, cases[c].a, -3, 3);
                tens b = is_int(dt) ? mk(dt, cases[c].b, -3, 4) /* zeros: division by zero */
                         : f == DT_BINARY_DIV ? mk(dt, cases[c].b, 0.5, 3)
                                              : mk(dt, cases[c].b, -3, 3);
                size_t n = numel(os);
                double *want = talloc(n * sizeof(double) + 1);
                int64_t idx[DT_MAX_NDIM];
                for (size_t i = 0; i < n; i++) {
                    unravel(i, os, idx);
                    want[i] = ref_binary(f, a.v[bidx(cases[c].a, os.nd, idx)],
                                         b.v[bidx(cases[c].b, os.nd, idx)], is_int(dt));
                }
                tens o = cases[c].alias == 1 ? a : cases[c].alias == 2 ? b : mk_out(dt, os);
                OK(dt_cpu_binary(f, &a.t, &b.t, &o.t));
                expect(cases[c].alias ? "binary aliased" : "binary", &o.t, want, n);
            }
        }
    }
    tens a = mk(DT_F32, SH(3, 2), 0, 1), b = mk(DT_F32, SH(3), 0, 1), o = mk_out(DT_F32, SH(3, 3));
    T_ERR(dt_cpu_binary(DT_BINARY_ADD, &a.t, &b.t, &o.t), DT_ERR_SHAPE, "broadcast");
}

Test(kernels, where_broadcasting_any_cond_dtype) {
    struct {
        shp c, a, b;
    } cases[] = {
        {SH(3, 1, 5), SH(4, 1), SH(5)},
        {SH(2, 3), SH(2, 3), SH(2, 3)},
        {SH(1), SH(2, 2), SH0},
        {SH(0, 2), SH(2), SH(1, 2)},
    };
    for (size_t ci = 0; ci < LEN(ALL); ci++) {
        for (size_t di = 0; di < LEN(ALL); di++) {
            dt_dtype cdt = ALL[ci], dt = ALL[di];
            for (size_t k = 0; k < LEN(cases); k++) {
                shp os = bshape(bshape(cases[k].c, cases[k].a), cases[k].b);
                tens c = mk(cdt, cases[k].c, -2, 2);
                for (size_t i = 0; i < c.n; i++)
                    if (urand() < 0.5) c.v[i] = 0; /* about half false */
                store(&c);
                if (!is_int(cdt) && c.n > 0) { /* -0 is false, NaN is true */
                    double special[2] = {-0.0, NAN};
                    dt_convert_from_f64(cdt, special, c.t.data, c.n > 1 ? 2 : 1);
                    c.v[0] = 0.0;
                    if (c.n > 1) c.v[1] = 1.0;
                }
                tens a = mk(dt, cases[k].a, -9, 9), b = mk(dt, cases[k].b, -9, 9);
                tens o = mk_out(dt, os);
                size_t n = numel(os);
                double *want = talloc(n * sizeof(double) + 1);
                int64_t idx[DT_MAX_NDIM];
                for (size_t i = 0; i < n; i++) {
                    unravel(i, os, idx);
                    want[i] = c.v[bidx(cases[k].c, os.nd, idx)] != 0
                                  ? a.v[bidx(cases[k].a, os.nd, idx)]
                                  : b.v[bidx(cases[k].b, os.nd, idx)];
                }
                OK(dt_cpu_where(&c.t, &a.t, &b.t, &o.t));
                expect("where", &o.t, want, n);
            }
        }
    }
}

/* ---- matmul ------------------------------------------------------------------------------- */

Test(kernels, matmul_batched_broadcast_trans_b) {
    struct {
        shp a, b; /* b as (..., K, N); transposed on the fly for trans_b */
    } cases[] = {
        {SH(3, 5), SH(5, 4)},       {SH(2, 3, 5), SH(5, 4)},      {SH(3, 5), SH(2, 5, 4)},
        {SH(2, 1, 3, 5), SH(3, 5, 4)}, {SH(1, 7), SH(7, 1)},      {SH(3, 0), SH(0, 4)},
        {SH(0, 5), SH(5, 4)},       {SH(2, 0, 3, 2), SH(2, 3)},   {SH(37, 130), SH(130, 70)},
        {SH(2, 300, 9), SH(9, 5)},  {SH(2, 6, 3), SH(2, 3, 5)},   {SH(5, 20), SH(20, 300)},
    };
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t c = 0; c < LEN(cases); c++) {
            for (int tb = 0; tb < 2; tb++) {
                shp as = cases[c].a, bs = cases[c].b;
                int64_t M = as.s[as.nd - 2], K = as.s[as.nd - 1], N = bs.s[bs.nd - 1];
                shp ab = as, bb = bs; /* batch parts */
                ab.nd -= 2;
                bb.nd -= 2;
                shp os = bshape(ab, bb);
                os.s[os.nd] = M;
                os.s[os.nd + 1] = N;
                os.nd += 2;
                shp bgiven = bs;
                if (tb) {
                    bgiven.s[bs.nd - 2] = N;
                    bgiven.s[bs.nd - 1] = K;
                }
                tens a = mk(dt, as, -1, 1), b = mk(dt, bgiven, -1, 1), o = mk_out(dt, os);
                size_t n = numel(os);
                double *want = talloc(n * sizeof(double) + 1);
                int64_t idx[DT_MAX_NDIM];
                for (size_t i = 0; i < n; i++) {
                    unravel(i, os, idx);
                    int64_t m = idx[os.nd - 2], j = idx[os.nd - 1];
                    size_t ao = bidx(ab, os.nd - 2, idx), bo = bidx(bb, os.nd - 2, idx);
                    double s = 0;
                    for (int64_t k = 0; k < K; k++) {
                        double bv = tb ? b.v[bo * (size_t)(N * K) + (size_t)(j * K + k)]
                                       : b.v[bo * (size_t)(K * N) + (size_t)(k * N + j)];
                        s += a.v[ao * (size_t)(M * K) + (size_t)(m * K + k)] * bv;
                    }
                    want[i] = s;
                }
                OK(dt_cpu_matmul(&a.t, &b.t, tb, &o.t));
                expect(tb ? "matmul trans_b" : "matmul", &o.t, want, n);
            }
        }
    }
    tens a = mk(DT_I32, SH(2, 2), 0, 3), b = mk(DT_I32, SH(2, 2), 0, 3);
    tens o = mk_out(DT_I32, SH(2, 2));
    T_ERR(dt_cpu_matmul(&a.t, &b.t, 0, &o.t), DT_ERR_DTYPE, "dt_cpu_matmul");
    cr_assert(strstr(dt_last_error(), "i32"));
}

/* ---- reductions --------------------------------------------------------------------------- */

static double identity(dt_reduce_op op, dt_dtype dt) {
    switch (op) {
    case DT_REDUCE_PROD: return 1;
    case DT_REDUCE_MAX:
        return dt == DT_I32 ? INT32_MIN : dt == DT_I64 ? (double)INT64_MIN : -INFINITY;
    case DT_REDUCE_MIN:
        return dt == DT_I32 ? INT32_MAX : dt == DT_I64 ? (double)INT64_MAX : INFINITY;
    default: return 0;
    }
}

Test(kernels, reduce_any_dims_every_dtype) {
    struct {
        shp s;
        unsigned mask;
    } cases[] = {
        {SH(3, 4, 5), 1}, {SH(3, 4, 5), 2},  {SH(3, 4, 5), 4},       {SH(3, 4, 5), 5},
        {SH(3, 4, 5), 6}, {SH(3, 4, 5), 7},  {SH(3, 4, 5), 0},       {SH(2, 1, 3, 1, 4), 5},
        {SH(2, 1, 3, 1, 4), 26}, {SH(2, 3, 4, 5), 10}, {SH(2, 300), 1}, {SH(2, 300), 2},
        {SH(0, 3), 1},    {SH(3, 0), 2},     {SH(0, 3), 2},          {SH0, 0},
    };
    for (size_t di = 0; di < LEN(ALL); di++) {
        dt_dtype dt = ALL[di];
        for (int op = 0; op < DT_REDUCE_COUNT; op++) {
            for (size_t c = 0; c < LEN(cases); c++) {
                shp s = cases[c].s, os = s;
                unsigned mask = cases[c].mask;
                if (op == DT_REDUCE_PROD && numel(s) > 60) continue; /* keep products exact */
                for (int d = 0; d < s.nd; d++)
                    if ((mask >> d) & 1) os.s[d] = 1;
                tens x = op == DT_REDUCE_PROD ? (is_int(dt) ? mk(dt, s, -1, 2) : mk(dt, s, .5, 1.5))
                         : is_int(dt)         ? mk(dt, s, -9, 10)
                                              : mk(dt, s, -3, 3);
                if (op != DT_REDUCE_PROD && is_int(dt) && x.n > 3) { /* negative means truncate */
                    x.v[0] = x.v[1] = x.v[2] = -9;
                    dt_convert_from_f64(dt, x.v, x.t.data, 3);
                }
                tens o = mk_out(dt, os);
                size_t n = numel(os);
                double *acc = talloc(n * sizeof(double) + 1), *cnt = talloc(n * sizeof(double) + 1);
                for (size_t i = 0; i < n; i++) acc[i] = identity((dt_reduce_op)op, dt);
                int64_t idx[DT_MAX_NDIM];
                for (size_t i = 0; i < x.n; i++) {
                    unravel(i, s, idx);
                    for (int d = 0; d < s.nd; d++)
                        if ((mask >> d) & 1) idx[d] = 0;
                    size_t oi = bidx(os, os.nd, idx);
                    double v = x.v[i];
                    cnt[oi] += 1;
                    switch (op) {
                    case DT_REDUCE_PROD: acc[oi] *= v; break;
                    case DT_REDUCE_MAX: acc[oi] = v > acc[oi] ? v : acc[oi]; break;
                    case DT_REDUCE_MIN: acc[oi] = v < acc[oi] ? v : acc[oi]; break;
                    default: acc[oi] += v; break;
                    }
                }
                if (op == DT_REDUCE_AVG)
                    for (size_t i = 0; i < n; i++)
                        acc[i] = !is_int(dt) ? acc[i] / cnt[i]
                                 : cnt[i]    ? trunc(acc[i] / cnt[i])
                                             : 0;
                OK(dt_cpu_reduce((dt_reduce_op)op, mask, &x.t, &o.t));
                char what[64];
                snprintf(what, sizeof what, "reduce %s case %zu", dt_reduce_op_name(op), c);
                expect(what, &o.t, acc, n);
            }
        }
    }
    tens x = mk(DT_F32, SH(2, 2), 0, 1), o = mk_out(DT_F32, SH(2, 2));
    T_ERR(dt_cpu_reduce(DT_REDUCE_SUM, 4, &x.t, &o.t), DT_ERR_ARG, "mask");
}

Test(kernels, arg_reduce_ties_take_first_index) {
    shp shapes[] = {SH(3, 4, 5), SH(1, 7), SH(2, 300), SH(3, 0), SH(0, 4)};
    for (size_t di = 0; di < LEN(ALL); di++) {
        dt_dtype dt = ALL[di];
        for (size_t si = 0; si < LEN(shapes); si++) {
            shp s = shapes[si];
            for (int dim = 0; dim < s.nd; dim++) {
                for (int is_max = 0; is_max < 2; is_max++) {
                    tens x = mk_any(dt, s, 0, 3, 1); /* {0, 1, 2}: many ties */
                    shp os = s;
                    os.s[dim] = 1;
                    tens idx = mk_out(DT_I64, os), val = mk_out(dt, os);
                    size_t n = numel(os);
                    double *wi = talloc(n * sizeof(double) + 1);
                    double *wv = talloc(n * sizeof(double) + 1);
                    int64_t oidx[DT_MAX_NDIM];
                    for (size_t i = 0; i < n; i++) {
                        unravel(i, os, oidx);
                        wi[i] = 100; /* empty dim: the offset and the identity */
                        wv[i] = identity(is_max ? DT_REDUCE_MAX : DT_REDUCE_MIN, dt);
                        for (int64_t t = 0; t < s.s[dim]; t++) {
                            oidx[dim] = t;
                            double v = x.v[bidx(s, s.nd, oidx)];
                            if (t == 0 || (is_max ? v > wv[i] : v < wv[i])) {
                                wv[i] = v;
                                wi[i] = (double)(100 + t);
                            }
                        }
                    }
                    OK(dt_cpu_arg_reduce(is_max, dim, 100, &x.t, &idx.t, &val.t));
                    expect(is_max ? "argmax index" : "argmin index", &idx.t, wi, n);
                    expect(is_max ? "argmax value" : "argmin value", &val.t, wv, n);
                    OK(dt_cpu_arg_reduce(is_max, dim, 100, &x.t, &idx.t, NULL));
                    expect("arg index without values", &idx.t, wi, n);
                }
            }
        }
    }
}

/* ---- softmax and norms -------------------------------------------------------------------- */

Test(kernels, softmax_and_log_softmax_stable) {
    struct {
        shp s;
        int dim;
        double shift; /* added to every value: exp would overflow without the max */
    } cases[] = {
        {SH(3, 4, 5), 0, 0}, {SH(3, 4, 5), 1, 0}, {SH(3, 4, 5), 2, 0},   {SH(2, 1), 1, 0},
        {SH(0, 3), 1, 0},    {SH(2, 3), 1, 500},  {SH(1, 300), 1, 0},    {SH(3, 300), 0, -400},
    };
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t c = 0; c < LEN(cases); c++) {
            for (int lg = 0; lg < 2; lg++) {
                shp s = cases[c].s;
                int dim = cases[c].dim;
                tens x = mk(dt, s, cases[c].shift - 4, cases[c].shift + 4), o = mk_out(dt, s);
                double *want = talloc(x.n * sizeof(double) + 1);
                int64_t idx[DT_MAX_NDIM];
                for (size_t i = 0; i < x.n; i++) {
                    unravel(i, s, idx);
                    double mx = -INFINITY, sum = 0, xi = x.v[i];
                    for (int64_t t = 0; t < s.s[dim]; t++) {
                        idx[dim] = t;
                        mx = fmax(mx, x.v[bidx(s, s.nd, idx)]);
                    }
                    for (int64_t t = 0; t < s.s[dim]; t++) {
                        idx[dim] = t;
                        sum += exp(x.v[bidx(s, s.nd, idx)] - mx);
                    }
                    want[i] = lg ? xi - mx - log(sum) : exp(xi - mx) / sum;
                }
                OK(dt_cpu_softmax(lg, dim, &x.t, &o.t));
                expect(lg ? "log_softmax" : "softmax", &o.t, want, x.n);
                OK(dt_cpu_softmax(lg, dim, &x.t, &x.t)); /* in place */
                expect(lg ? "log_softmax in place" : "softmax in place", &x.t, want, x.n);
            }
        }
    }
    tens x = mk(DT_I32, SH(2, 2), 0, 3), o = mk_out(DT_I32, SH(2, 2));
    T_ERR(dt_cpu_softmax(0, 1, &x.t, &o.t), DT_ERR_DTYPE, "i32");
}

Test(kernels, layer_norm_and_rms_norm) {
    shp shapes[] = {SH(3, 7), SH(2, 1, 5), SH(4, 1), SH(0, 5), SH(9)};
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t si = 0; si < LEN(shapes); si++) {
            for (int rms = 0; rms < 2; rms++) {
                for (int wb = 0; wb < 4; wb++) { /* bit 0: weight, bit 1: bias */
                    shp s = shapes[si];
                    int64_t H = s.s[s.nd - 1];
                    tens x = mk(dt, s, -3, 5), o = mk_out(dt, s);
                    tens w = mk(dt, SH(H), 0.5, 2), b = mk(dt, SH(H), -1, 1);
                    double *want = talloc(x.n * sizeof(double) + 1), eps = 1e-5;
                    for (size_t r = 0; H && r < x.n / (size_t)H; r++) {
                        const double *xr = x.v + r * (size_t)H;
                        double mean = 0, var = 0;
                        for (int64_t j = 0; j < H && !rms; j++) mean += xr[j] / (double)H;
                        for (int64_t j = 0; j < H; j++)
                            var += (xr[j] - mean) * (xr[j] - mean) / (double)H;
                        for (int64_t j = 0; j < H; j++)
                            want[r * (size_t)H + (size_t)j] =
                                (xr[j] - mean) / sqrt(var + eps) * (wb & 1 ? w.v[j] : 1) +
                                (wb & 2 && !rms ? b.v[j] : 0);
                    }
                    OK(dt_cpu_layer_norm(rms, eps, &x.t, wb & 1 ? &w.t : NULL,
                                         wb & 2 ? &b.t : NULL, &o.t));
                    expect(rms ? "rms_norm" : "layer_norm", &o.t, want, x.n);
                }
            }
        }
    }
    tens x = mk(DT_I64, SH(2, 2), 0, 3), o = mk_out(DT_I64, SH(2, 2));
    T_ERR(dt_cpu_layer_norm(0, 1e-5, &x.t, NULL, NULL, &o.t), DT_ERR_DTYPE, "i64");
}

/* ---- indexing ----------------------------------------------------------------------------- */

Test(kernels, embedding_rows_outside_shard_are_zero) {
    shp ishapes[] = {SH(2, 3), SH(7), SH(0), SH0};
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (int i64 = 0; i64 < 2; i64++) {
            for (size_t si = 0; si < LEN(ishapes); si++) {
                for (int64_t offset = 0; offset <= 10; offset += 10) {
                    dt_dtype dt = ALL[di];
                    tens table = mk(dt, SH(5, 3), -9, 9);
                    tens ix = mk(i64 ? DT_I64 : DT_I32, ishapes[si], offset - 3, offset + 8);
                    shp os = ishapes[si];
                    os.s[os.nd++] = 3;
                    tens o = mk_out(dt, os);
                    double *want = talloc(o.n * sizeof(double) + 1);
                    for (size_t i = 0; i < ix.n; i++) {
                        int64_t r = (int64_t)ix.v[i] - offset;
                        for (int h = 0; h < 3; h++)
                            want[i * 3 + (size_t)h] = r >= 0 && r < 5 ? table.v[r * 3 + h] : 0;
                    }
                    OK(dt_cpu_embedding(&table.t, offset, &ix.t, &o.t));
                    expect("embedding", &o.t, want, o.n);
                }
            }
        }
    }
    tens table = mk(DT_F32, SH(5, 3), 0, 1), ix = mk(DT_F32, SH(2), 0, 3);
    tens o = mk_out(DT_F32, SH(2, 3));
    T_ERR(dt_cpu_embedding(&table.t, 0, &ix.t, &o.t), DT_ERR_DTYPE, "f32");
}

Test(kernels, pick_target_with_class_offset) {
    shp lshapes[] = {SH(4, 6), SH(2, 3, 5), SH(6), SH(0, 4)};
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (size_t si = 0; si < LEN(lshapes); si++) {
            dt_dtype dt = ALL[di];
            shp ls = lshapes[si], ts = ls;
            ts.nd--;
            int64_t C = ls.s[ls.nd - 1], off = 7;
            tens logits = mk(dt, ls, -9, 9);
            tens tg = mk(di % 2 ? DT_I64 : DT_I32, ts, off - 2, off + C + 2);
            tens o = mk_out(dt, ts);
            double *want = talloc(o.n * sizeof(double) + 1);
            for (size_t i = 0; i < tg.n; i++) {
                int64_t c = (int64_t)tg.v[i] - off;
                want[i] = c >= 0 && c < C ? logits.v[i * (size_t)C + (size_t)c] : 0;
            }
            OK(dt_cpu_pick(&logits.t, off, &tg.t, &o.t));
            expect("pick", &o.t, want, o.n);
        }
    }
}

Test(kernels, slice_boxes) {
    struct {
        shp x, start, box;
    } cases[] = {
        {SH(4, 5, 6), SH(1, 0, 2), SH(2, 5, 3)},
        {SH(3, 4), SH(0, 4), SH(3, 0)},
        {SH(7), SH(2), SH(5)},
        {SH(2, 3, 1, 4), SH(1, 1, 0, 0), SH(1, 2, 1, 4)},
    };
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (size_t c = 0; c < LEN(cases); c++) {
            dt_dtype dt = ALL[di];
            shp xs = cases[c].x, bs = cases[c].box;
            tens x = mk(dt, xs, -9, 9), o = mk_out(dt, bs);
            double *want = talloc(o.n * sizeof(double) + 1);
            int64_t idx[DT_MAX_NDIM];
            for (size_t i = 0; i < o.n; i++) {
                unravel(i, bs, idx);
                for (int d = 0; d < xs.nd; d++) idx[d] += cases[c].start.s[d];
                want[i] = x.v[bidx(xs, xs.nd, idx)];
            }
            OK(dt_cpu_slice(&x.t, cases[c].start.s, &o.t));
            expect("slice", &o.t, want, o.n);
        }
    }
    tens x = mk(DT_F32, SH(3, 4), 0, 1), o = mk_out(DT_F32, SH(2, 2));
    T_ERR(dt_cpu_slice(&x.t, (int64_t[]){2, 0}, &o.t), DT_ERR_SHAPE, "dim 0");
}

Test(kernels, permute_every_order) {
    struct {
        shp x;
        int perm[4];
    } cases[] = {
        {SH(2, 3, 4), {0, 1, 2}}, {SH(2, 3, 4), {0, 2, 1}}, {SH(2, 3, 4), {1, 0, 2}},
        {SH(2, 3, 4), {1, 2, 0}}, {SH(2, 3, 4), {2, 0, 1}}, {SH(2, 3, 4), {2, 1, 0}},
        {SH(2, 1, 3, 1), {3, 2, 1, 0}}, {SH(0, 3), {1, 0}}, {SH(5, 1, 7), {0, 2, 1}},
        {SH(33, 17), {1, 0}},
    };
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (size_t c = 0; c < LEN(cases); c++) {
            dt_dtype dt = ALL[di];
            shp xs = cases[c].x, os = xs;
            for (int d = 0; d < xs.nd; d++) os.s[d] = xs.s[cases[c].perm[d]];
            tens x = mk(dt, xs, -9, 9), o = mk_out(dt, os);
            double *want = talloc(o.n * sizeof(double) + 1);
            int64_t oidx[DT_MAX_NDIM], xidx[DT_MAX_NDIM];
            for (size_t i = 0; i < o.n; i++) {
                unravel(i, os, oidx);
                for (int d = 0; d < xs.nd; d++) xidx[cases[c].perm[d]] = oidx[d];
                want[i] = x.v[bidx(xs, xs.nd, xidx)];
            }
            OK(dt_cpu_permute(&x.t, cases[c].perm, &o.t));
            expect("permute", &o.t, want, o.n);
        }
    }
    tens x = mk(DT_F32, SH(3, 4), 0, 1), o = mk_out(DT_F32, SH(4, 3));
    T_ERR(dt_cpu_permute(&x.t, (int[]){1, 1}, &o.t), DT_ERR_ARG, "permutation");
}

/* ---- attention ---------------------------------------------------------------------------- */

Test(kernels, sdpa_causal_and_full) {
    struct {
        shp batch;
        int64_t Tq, Tk, D, Dv;
    } cases[] = {
        {SH(2, 3), 5, 5, 4, 3}, {SH(2), 3, 6, 4, 4}, {SH(1), 6, 3, 2, 5},
        {SH(1, 1), 1, 1, 1, 1}, {SH(2), 0, 4, 3, 3}, {SH0, 4, 4, 8, 2},
    };
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t c = 0; c < LEN(cases); c++) {
            for (int causal = 0; causal < 2; causal++) {
                shp qs = cases[c].batch, ks = qs, vs = qs, os = qs;
                int nb = qs.nd;
                int64_t Tq = cases[c].Tq, Tk = cases[c].Tk, D = cases[c].D, Dv = cases[c].Dv;
                qs.s[nb] = Tq, qs.s[nb + 1] = D;
                ks.s[nb] = Tk, ks.s[nb + 1] = D;
                vs.s[nb] = Tk, vs.s[nb + 1] = Dv;
                os.s[nb] = Tq, os.s[nb + 1] = Dv;
                qs.nd = ks.nd = vs.nd = os.nd = nb + 2;
                tens q = mk(dt, qs, -2, 2), k = mk(dt, ks, -2, 2), v = mk(dt, vs, -2, 2);
                tens o = mk_out(dt, os);
                double scale = 1.0 / sqrt((double)D), *p = talloc((size_t)Tk * 8 + 8);
                double *want = talloc(o.n * sizeof(double) + 1);
                size_t B = numel(cases[c].batch);
                for (size_t b = 0; b < B; b++) {
                    for (int64_t i = 0; i < Tq; i++) {
                        double mx = -INFINITY, sum = 0;
                        for (int64_t j = 0; j < Tk; j++) {
                            double s = 0;
                            for (int64_t d = 0; d < D; d++)
                                s += q.v[(b * Tq + i) * D + d] * k.v[(b * Tk + j) * D + d];
                            p[j] = causal && j > i ? -INFINITY : s * scale;
                            mx = fmax(mx, p[j]);
                        }
                        for (int64_t j = 0; j < Tk; j++) sum += p[j] = exp(p[j] - mx);
                        for (int64_t e = 0; e < Dv; e++) {
                            double acc = 0;
                            for (int64_t j = 0; j < Tk; j++)
                                acc += p[j] / sum * v.v[(b * Tk + j) * Dv + e];
                            want[(b * Tq + i) * Dv + e] = acc;
                        }
                    }
                }
                OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, scale, &o.t));
                expect(causal ? "sdpa causal" : "sdpa", &o.t, want, o.n);
            }
        }
    }
    tens q = mk(DT_I32, SH(2, 2), 0, 3), o = mk_out(DT_I32, SH(2, 2));
    T_ERR(dt_cpu_sdpa(&q.t, &q.t, &q.t, 0, 1.0, &o.t), DT_ERR_DTYPE, "dt_cpu_sdpa");
}
