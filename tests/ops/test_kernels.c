/* Local CPU kernels (src/ops/kernels.h) against naive double-precision references written
 * here with plain nested loops, on small odd shapes (size-1 and size-0 dims, broadcasting) for
 * every dtype each kernel supports. Tolerance: |got - want| <= tol * max(1, |want|) with tol
 * 0 for integers, 1e-12 for f64, 1e-5 for f32 and 1e-2 for bf16/f16 (the reference runs on
 * the values as stored, so only the kernel's own rounding counts). Data comes from a
 * xorshift generator; every failure message prints the seed. */
#include "kernel_check.h"
#include "ops/kernel_args.h"


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
    case DT_UNARY_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
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
                         f == DT_UNARY_ADD_SCALAR || f == DT_UNARY_MUL_SCALAR ||
                         f == DT_UNARY_SIGN;
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

/* f32 silu and sigmoid take a four-lane exp a block of 256 at a time: 1000 values over the
 * whole f32 exp range (and past it), with +-inf, NaN and +-0 planted, across block edges,
 * within 4e-7 relative of the double formulas (1e-30 absolute near zero). */
Test(kernels, silu_sigmoid_f32_wide_range_and_specials) {
    enum { N = 1000 };
    float *x = talloc(N * sizeof(float)), *y = talloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x[i] = (float)(-120.0 + 240.0 * urand());
    const float special[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 88.7f, -88.7f, 1e-30f};
    for (size_t i = 0; i < LEN(special); i++) x[255 + 97 * i] = special[i];
    dt_local xt = {.data = x, .dtype = DT_F32, .ndim = 1, .shape = {N}}, yt = xt;
    yt.data = y;
    const dt_unary fns[] = {DT_UNARY_SILU, DT_UNARY_SIGMOID};
    for (size_t k = 0; k < LEN(fns); k++) {
        dt_unary f = fns[k];
        OK(dt_cpu_unary(f, 0.0, &xt, &yt));
        for (int i = 0; i < N; i++) {
            double v = x[i], w = f == DT_UNARY_SILU ? v / (1 + exp(-v)) : 1 / (1 + exp(-v));
            int ok = (isnan(w) && isnan(y[i])) || (double)y[i] == w ||
                     fabs(y[i] - w) <= 4e-7 * fabs(w) + 1e-30;
            cr_assert(ok, "%s(%.9g): got %.9g, want %.9g", f == DT_UNARY_SILU ? "silu" : "sigmoid",
                      v, y[i], w);
        }
    }
}

/* f32 exp takes the vector exp a block of 256 at a time, and expf where the vector form would
 * flush a subnormal result to zero: 1000 values over and past the f32 exp range (subnormal
 * results included), with +-inf, NaN, +-0 and the range's edges planted across block edges,
 * within 4e-7 relative of the double exp (one ulp of the smallest normal below it; inf where
 * the float overflows), out of place and in place. */
Test(kernels, exp_f32_wide_range_subnormals_and_specials) {
    enum { N = 1000 };
    float *x = talloc(N * sizeof(float)), *y = talloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x[i] = (float)(-110.0 + 200.0 * urand());
    const float special[] = {INFINITY, -INFINITY, NAN,       0.0f,       -0.0f,  88.72f,
                             89.0f,    -87.3f,    -87.34f,   -100.0f,    -103.9f, -104.0f};
    for (size_t i = 0; i < LEN(special); i++) x[250 + 61 * i] = special[i];
    dt_local xt = {.data = x, .dtype = DT_F32, .ndim = 1, .shape = {N}}, yt = xt;
    yt.data = y;
    for (int in_place = 0; in_place < 2; in_place++) {
        float *got = in_place ? x : y;
        double *want = talloc(N * sizeof(double));
        for (int i = 0; i < N; i++) want[i] = exp((double)x[i]);
        OK(dt_cpu_unary(DT_UNARY_EXP, 0.0, &xt, in_place ? &xt : &yt));
        for (int i = 0; i < N; i++) {
            double w = want[i]; /* past FLT_MAX the float result is inf */
            int ok = (isnan(w) && isnan(got[i])) || (double)got[i] == w ||
                     (isinf((float)w) && got[i] == (float)w) ||
                     fabs(got[i] - w) <= 4e-7 * fabs(w) + 0x1p-149;
            cr_assert(ok, "exp(%.9g)%s: got %.9g, want %.9g", in_place ? log(w) : (double)x[i],
                      in_place ? " in place" : "", got[i], w);
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
    case DT_BINARY_EQ: return a == b;
    case DT_BINARY_NE: return a != b;
    case DT_BINARY_GT: return a > b;
    case DT_BINARY_GE: return a >= b;
    case DT_BINARY_LT: return a < b;
    case DT_BINARY_LE: return a <= b;
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
        /* equal shapes past the pool's piece (8192): the flat path through the pool */
        {SH(3, 2731), SH(3, 2731), 0}, {SH(8193), SH(8193), 2},
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

/* Comparisons on whole-number floats (ties in every row), with NaN, -0 and +0 planted; sign of
 * the same values. NaN compares false except under ne; -0 equals +0; sign(NaN) is NaN. */
Test(kernels, comparisons_ties_nan_signed_zero_and_sign) {
    for (size_t di = 0; di < LEN(ALL); di++) {
        dt_dtype dt = ALL[di];
        shp as = SH(4, 6), bs = SH(6);
        tens a = mk_any(dt, as, -3, 3, 1), b = mk_any(dt, bs, -3, 3, 1);
        if (!is_int(dt)) {
            a.v[0] = NAN, a.v[1] = -0.0, b.v[1] = 0.0, b.v[2] = NAN, a.v[3] = -0.0, b.v[3] = -0.0;
            store(&a), store(&b);
        }
        size_t n = numel(as);
        for (int f = DT_BINARY_EQ; f <= DT_BINARY_LE; f++) {
            double *want = talloc(n * sizeof(double) + 1);
            for (size_t i = 0; i < n; i++) want[i] = ref_binary(f, a.v[i], b.v[i % 6], 0);
            tens o = mk_out(dt, as);
            OK(dt_cpu_binary(f, &a.t, &b.t, &o.t));
            expect("comparison", &o.t, want, n);
        }
        tens s = mk_out(dt, as);
        OK(dt_cpu_unary(DT_UNARY_SIGN, 0, &a.t, &s.t));
        for (size_t i = 0; i < n; i++) {
            double g = t_get(dt, s.t.data, i), x = a.v[i];
            if (isnan(x)) cr_assert(isnan(g), "sign(NaN) [%s] is %g", dt_dtype_name(dt), g);
            else /* +0 for -0 */
                cr_assert(g == (x > 0) - (x < 0) && !(g == 0 && signbit(g)),
                          "sign(%g) [%s] is %g", x, dt_dtype_name(dt), g);
        }
    }
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

/* out = x with its last two dims swapped when swap, else x copied (f32, dense). */
static void swap_last_copy(const dt_local *x, int swap, dt_local *out) {
    int64_t r = x->shape[x->ndim - 2], c = x->shape[x->ndim - 1], mats = 1;
    for (int d = 0; d < x->ndim - 2; d++)
        mats *= x->shape[d];
    const float *s = x->data;
    float *o = out->data;
    for (int64_t m = 0; m < mats; m++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                o[m * r * c + (swap ? j * r + i : i * c + j)] = s[m * r * c + i * c + j];
}

/* Every trans form (DT_MM_TRANS_A: a given as (..., K, M); DT_MM_TRANS_B: b as (..., N, K))
 * against the naive sum; f32 also bit for bit against the plain product of transposed copies
 * (the operand read in place must give the same sums in the same order). */
Test(kernels, matmul_batched_broadcast_trans) {
    struct {
        shp a, b; /* a as (..., M, K), b as (..., K, N); given transposed as trans says */
    } cases[] = {
        {SH(3, 5), SH(5, 4)},       {SH(2, 3, 5), SH(5, 4)},      {SH(3, 5), SH(2, 5, 4)},
        {SH(2, 1, 3, 5), SH(3, 5, 4)}, {SH(1, 7), SH(7, 1)},      {SH(3, 0), SH(0, 4)},
        {SH(0, 5), SH(5, 4)},       {SH(2, 0, 3, 2), SH(2, 3)},   {SH(37, 130), SH(130, 70)},
        {SH(2, 300, 9), SH(9, 5)},  {SH(2, 6, 3), SH(2, 3, 5)},   {SH(5, 20), SH(20, 300)},
    };
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t c = 0; c < LEN(cases); c++) {
            for (int trans = 0; trans < 4; trans++) {
                int ta = (trans & DT_MM_TRANS_A) != 0, tb = (trans & DT_MM_TRANS_B) != 0;
                shp as = cases[c].a, bs = cases[c].b;
                int64_t M = as.s[as.nd - 2], K = as.s[as.nd - 1], N = bs.s[bs.nd - 1];
                shp ab = as, bb = bs; /* batch parts */
                ab.nd -= 2;
                bb.nd -= 2;
                shp os = bshape(ab, bb);
                os.s[os.nd] = M;
                os.s[os.nd + 1] = N;
                os.nd += 2;
                shp bgiven = bs, agiven = as;
                if (tb) {
                    bgiven.s[bs.nd - 2] = N;
                    bgiven.s[bs.nd - 1] = K;
                }
                if (ta) {
                    agiven.s[as.nd - 2] = K;
                    agiven.s[as.nd - 1] = M;
                }
                tens a = mk(dt, agiven, -1, 1), b = mk(dt, bgiven, -1, 1), o = mk_out(dt, os);
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
                        double av = ta ? a.v[ao * (size_t)(M * K) + (size_t)(k * M + m)]
                                       : a.v[ao * (size_t)(M * K) + (size_t)(m * K + k)];
                        s += av * bv;
                    }
                    want[i] = s;
                }
                OK(dt_cpu_matmul(&a.t, &b.t, trans, &o.t));
                static const char *names[] = {"matmul", "matmul trans_b", "matmul trans_a",
                                              "matmul trans_a trans_b"};
                expect(names[trans], &o.t, want, n);
                if (dt == DT_F32 && trans) { /* the same bits as transposed copies give */
                    tens ac = mk_out(dt, as), bc = mk_out(dt, bs), oc = mk_out(dt, os);
                    swap_last_copy(&a.t, ta, &ac.t);
                    swap_last_copy(&b.t, tb, &bc.t);
                    OK(dt_cpu_matmul(&ac.t, &bc.t, 0, &oc.t));
                    cr_assert(!memcmp(o.t.data, oc.t.data, n * sizeof(float)),
                              "%s (case %zu) differs in its bits from the product of transposed "
                              "copies",
                              names[trans], c);
                }
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
