/* Pointwise ops: unary, scalar, binary with NumPy broadcasting, where. A shard of the output
 * needs the matching shard of every input that is not broadcast along that dim; linear ops
 * keep Partial, monotone ones keep P(max)/P(min). */
#include <string.h>

#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

static int is_binary(dt_op op) {
    return (op >= DT_OP_ADD && op <= DT_OP_MINIMUM) || (op >= DT_OP_EQ && op <= DT_OP_LE);
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)a;
    int want = op == DT_OP_WHERE ? 3 : is_binary(op) ? 2 : 1;
    if (n != want)
        return dt_error(DT_ERR_ARG, "%s: takes %d inputs, got %d", dt_op_name(op), want, n);
    int nd = 0;
    for (int i = 0; i < n; i++) nd = in[i].ndim > nd ? in[i].ndim : nd;
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            int di = d - (nd - in[i].ndim);
            if (di < 0 || in[i].shape[di] == 1) continue;
            if (size != 1 && in[i].shape[di] != size)
                return dt_error(DT_ERR_SHAPE, "%s: input %d has size %lld in dim %d where another "
                                              "input has %lld: they do not broadcast",
                                dt_op_name(op), i, (long long)in[i].shape[di], di,
                                (long long)size);
            size = in[i].shape[di];
        }
        out->shape[d] = size;
    }
    int first = op == DT_OP_WHERE; /* where: the condition may have any dtype */
    out->dtype = in[first].dtype;
    for (int i = first + 1; i < n; i++)
        if (in[i].dtype != out->dtype)
            return dt_error(DT_ERR_DTYPE, "%s: input %d is %s, input %d is %s", dt_op_name(op),
                            first, dt_dtype_name(out->dtype), i, dt_dtype_name(in[i].dtype));
    return DT_OK;
}

/* Non-decreasing maps, NaN to NaN: f(max_i a_i) = max_i f(a_i), also when some a_i is NaN
 * (both sides NaN). The comparisons are not among them for that reason: with a NaN among the
 * a_i, max_i a_i > b is 0 while max_i (a_i > b) may be 1; nor are they linear, so a Partial
 * input is reduced before any comparison. */
static int monotone(dt_op op) {
    return op == DT_OP_EXP || op == DT_OP_LOG || op == DT_OP_SQRT || op == DT_OP_RELU ||
           op == DT_OP_TANH || op == DT_OP_SIGMOID || op == DT_OP_ADD_SCALAR ||
           op == DT_OP_SIGN;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)mesh_size, (void)mesh_total;
    op_out o;
    if (infer(op, in, n, a, &o) != DT_OK) return 0;
    int k = 0;
    rows[k].out = RP;
    for (int i = 0; i < n; i++) rows[k].in[i] = RP;
    k++;
    for (int d = 0; d < o.ndim && k < DT_OP_MAX_ROWS - 8; d++, k++) {
        rows[k].out = SP(d);
        for (int i = 0; i < n; i++) {
            int di = d - (o.ndim - in[i].ndim);
            rows[k].in[i] = di >= 0 && in[i].shape[di] == o.shape[d] ? SP(di) : RP;
        }
    }
    /* Partial rows. P(avg) only for floats: an integer avg truncates, and truncation does
     * not commute with adding or scaling (trunc(s/n) + trunc(t/n) != trunc((s+t)/n)). */
    static const dt_reduce_op linear_ops[] = {DT_REDUCE_SUM, DT_REDUCE_AVG};
    int integer = o.dtype == DT_I32 || o.dtype == DT_I64;
    for (int l = 0; l < 2 - integer; l++) {
        dt_placement p = PP(linear_ops[l]);
        if (op == DT_OP_ADD || op == DT_OP_SUB || op == DT_OP_NEG || op == DT_OP_MUL_SCALAR ||
            (op == DT_OP_WHERE)) {
            rows[k].out = p;
            for (int i = 0; i < n; i++) rows[k].in[i] = (op == DT_OP_WHERE && i == 0) ? RP : p;
            k++;
        }
        if (op == DT_OP_MUL || op == DT_OP_DIV) { /* linear in the first input */
            rows[k] = (rule_row){.in = {p, RP}, .out = p};
            k++;
        }
        if (op == DT_OP_MUL) { /* and mul in the second */
            rows[k] = (rule_row){.in = {RP, p}, .out = p};
            k++;
        }
    }
    /* Adding a replicated value commutes with max, min and avg (not with sum, which would
     * count it once per rank): max_i(a_i) + r = max_i(a_i + r), and r - max_i(a_i) =
     * min_i(r - a_i). avg only for floats, as above: trunc(s/n + r) != trunc(s/n) + r when
     * s/n < 0 < s/n + r. */
    if ((op == DT_OP_ADD || op == DT_OP_SUB) && n == 2) {
        static const dt_reduce_op kinds[] = {DT_REDUCE_MAX, DT_REDUCE_MIN, DT_REDUCE_AVG};
        for (int j = 0; j < 3 - integer; j++) {
            dt_reduce_op flipped = op == DT_OP_ADD || kinds[j] == DT_REDUCE_AVG ? kinds[j]
                                   : kinds[j] == DT_REDUCE_MAX              ? DT_REDUCE_MIN
                                                                            : DT_REDUCE_MAX;
            rows[k++] = (rule_row){.in = {PP(kinds[j]), RP}, .out = PP(kinds[j])};
            rows[k++] = (rule_row){.in = {RP, PP(kinds[j])}, .out = PP(flipped)};
        }
    }
    if (op == DT_OP_MAXIMUM) rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MAX), PP(DT_REDUCE_MAX)}, .out = PP(DT_REDUCE_MAX)};
    if (op == DT_OP_MINIMUM) rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MIN), PP(DT_REDUCE_MIN)}, .out = PP(DT_REDUCE_MIN)};
    if (monotone(op) || (op == DT_OP_MUL_SCALAR && a->scalar > 0)) {
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MAX)}, .out = PP(DT_REDUCE_MAX)};
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MIN)}, .out = PP(DT_REDUCE_MIN)};
    }
    if (op == DT_OP_NEG || (op == DT_OP_MUL_SCALAR && a->scalar < 0)) {
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MAX)}, .out = PP(DT_REDUCE_MIN)};
        rows[k++] = (rule_row){.in = {PP(DT_REDUCE_MIN)}, .out = PP(DT_REDUCE_MAX)};
    }
    return k;
}

static const dt_unary unary_of[DT_OP_COUNT] = {
    [DT_OP_NEG] = DT_UNARY_NEG,       [DT_OP_EXP] = DT_UNARY_EXP,
    [DT_OP_LOG] = DT_UNARY_LOG,       [DT_OP_SQRT] = DT_UNARY_SQRT,
    [DT_OP_RSQRT] = DT_UNARY_RSQRT,   [DT_OP_ABS] = DT_UNARY_ABS,
    [DT_OP_RELU] = DT_UNARY_RELU,     [DT_OP_GELU] = DT_UNARY_GELU,
    [DT_OP_SILU] = DT_UNARY_SILU,     [DT_OP_TANH] = DT_UNARY_TANH,
    [DT_OP_SIGMOID] = DT_UNARY_SIGMOID, [DT_OP_POW_SCALAR] = DT_UNARY_POW_SCALAR,
    [DT_OP_ADD_SCALAR] = DT_UNARY_ADD_SCALAR, [DT_OP_MUL_SCALAR] = DT_UNARY_MUL_SCALAR,
    [DT_OP_SIGN] = DT_UNARY_SIGN,
};

static const dt_binary binary_of[DT_OP_COUNT] = {
    [DT_OP_ADD] = DT_BINARY_ADD, [DT_OP_SUB] = DT_BINARY_SUB, [DT_OP_MUL] = DT_BINARY_MUL,
    [DT_OP_DIV] = DT_BINARY_DIV, [DT_OP_MAXIMUM] = DT_BINARY_MAX, [DT_OP_MINIMUM] = DT_BINARY_MIN,
    [DT_OP_EQ] = DT_BINARY_EQ, [DT_OP_NE] = DT_BINARY_NE, [DT_OP_GT] = DT_BINARY_GT,
    [DT_OP_GE] = DT_BINARY_GE, [DT_OP_LT] = DT_BINARY_LT, [DT_OP_LE] = DT_BINARY_LE,
};

static dt_status compute(local_call *c) {
    if (c->op == DT_OP_WHERE) return c->k->where(&c->in[0], &c->in[1], &c->in[2], &c->out);
    if (is_binary(c->op)) return c->k->binary(binary_of[c->op], &c->in[0], &c->in[1], &c->out);
    return c->k->unary(unary_of[c->op], c->args->scalar, &c->in[0], &c->out);
}

const op_family dt_family_pointwise = {
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* out = sum_to(x, input i's shape), x consumed. */
static dt_status to_input(const dt_grad_call *c, int i, dt_tensor *x, dt_tensor **out) {
    dt_status st = dt_grad_sum_to(x, IN(i)->ndim, IN(i)->shape, out);
    dt_tensor_release(x);
    return st;
}

/* x * y, or -(x * y) when negate. */
static dt_status product(dt_tensor *x, dt_tensor *y, int negate, dt_tensor **out) {
    if (!negate) return dt_mul(x, y, out);
    dt_tensor *p;
    DT_CHECK(dt_mul(x, y, &p));
    dt_status st = dt_neg(p, out);
    dt_tensor_release(p);
    return st;
}

/* The share of the gradient input i of maximum (strict gt, loose ge) or minimum (lt, le)
 * gets: 1 where it is strictly the extremum, 1/2 where the two tie, 0 elsewhere (and where
 * either is NaN). */
static dt_tensor *extremum_share(chain *ch, chain_fn2 strict, chain_fn2 loose, dt_tensor *x,
                                 dt_tensor *y) {
    dt_tensor *both = chain2(ch, dt_add, chain2(ch, strict, x, y), chain2(ch, loose, x, y));
    return chains(ch, dt_mul_scalar, both, 0.5);
}

static dt_status extremum(const dt_grad_call *c, chain_fn2 strict, chain_fn2 loose,
                          dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *res[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        if (!c->need[i]) continue;
        dt_tensor *share = extremum_share(&ch, strict, loose, IN(i), IN(1 - i));
        res[i] = chain_sum_to(&ch, chain2(&ch, dt_mul, c->grad, share), IN(i));
    }
    return chain_end(&ch, 2, res, gin);
}

/* in_grad[0] = g * d (d: the derivative at x, made on ch). */
static dt_status times_grad(const dt_grad_call *c, chain *ch, dt_tensor *d, dt_tensor **gin) {
    return chain_end1(ch, chain2(ch, dt_mul, c->grad, d), gin);
}

/* 1 - y */
static dt_tensor *one_minus(chain *ch, dt_tensor *y) {
    return chains(ch, dt_add_scalar, chains(ch, dt_mul_scalar, y, -1), 1);
}

dt_status dt_grad_add(const dt_grad_call *c, dt_tensor **gin) {
    for (int i = 0; i < 2; i++)
        if (c->need[i]) DT_CHECK(dt_grad_sum_to(c->grad, IN(i)->ndim, IN(i)->shape, &gin[i]));
    return DT_OK;
}

dt_status dt_grad_sub(const dt_grad_call *c, dt_tensor **gin) {
    if (c->need[0]) DT_CHECK(dt_grad_sum_to(c->grad, IN(0)->ndim, IN(0)->shape, &gin[0]));
    if (c->need[1]) {
        dt_tensor *n;
        dt_status st = dt_neg(c->grad, &n);
        if (st == DT_OK) st = to_input(c, 1, n, &gin[1]);
        if (st != DT_OK) return dt_tensor_release(gin[0]), gin[0] = NULL, st;
    }
    return DT_OK;
}

dt_status dt_grad_mul(const dt_grad_call *c, dt_tensor **gin) {
    dt_status st = DT_OK;
    for (int i = 0; i < 2 && st == DT_OK; i++) {
        if (!c->need[i]) continue;
        dt_tensor *p;
        st = dt_mul(c->grad, IN(1 - i), &p);
        if (st == DT_OK) st = to_input(c, i, p, &gin[i]);
    }
    if (st != DT_OK) dt_tensor_release(gin[0]), gin[0] = NULL;
    return st;
}

/* d(a/b) = g/b, -g a / b^2. */
dt_status dt_grad_div(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *q = NULL, *r = NULL;
    dt_status st = dt_div(c->grad, IN(1), &q); /* g / b */
    if (st == DT_OK && c->need[0]) {
        dt_tensor_retain(q);
        st = to_input(c, 0, q, &gin[0]);
    }
    if (st == DT_OK && c->need[1]) {
        dt_tensor *ab = NULL;
        st = dt_div(IN(0), IN(1), &ab); /* a / b */
        if (st == DT_OK) st = product(q, ab, 1, &r);
        dt_tensor_release(ab);
        if (st == DT_OK) st = to_input(c, 1, r, &gin[1]);
    }
    dt_tensor_release(q);
    if (st != DT_OK) dt_tensor_release(gin[0]), gin[0] = NULL;
    return st;
}

dt_status dt_grad_neg(const dt_grad_call *c, dt_tensor **gin) {
    return dt_neg(c->grad, &gin[0]);
}

dt_status dt_grad_add_scalar(const dt_grad_call *c, dt_tensor **gin) {
    DT_CHECK(dt_tensor_retain(c->grad));
    gin[0] = c->grad;
    return DT_OK;
}

dt_status dt_grad_mul_scalar(const dt_grad_call *c, dt_tensor **gin) {
    return dt_mul_scalar(c->grad, c->args->scalar, &gin[0]);
}

/* d exp(x) = g exp(x) (the output, recomputed). */
dt_status dt_grad_exp(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *e;
    DT_CHECK(dt_exp(IN(0), &e));
    dt_status st = dt_mul(c->grad, e, &gin[0]);
    dt_tensor_release(e);
    return st;
}

dt_status dt_grad_maximum(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, dt_gt, dt_ge, gin);
}

dt_status dt_grad_minimum(const dt_grad_call *c, dt_tensor **gin) {
    return extremum(c, dt_lt, dt_le, gin);
}

/* where(cond, a, b): g goes to a where cond holds and to b elsewhere (selected by where, not
 * multiplied by a mask, so a NaN or inf of g stays on its side). The condition gets no
 * gradient, even a float one that requires grad: it is a selector (torch's is bool), and
 * usually a comparison's mask, which has no derivative to pass a zero through. */
dt_status dt_grad_where(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *res[3] = {NULL, NULL, NULL};
    if (c->need[1] || c->need[2]) {
        dt_tensor *zero = chain1(&ch, dt_tensor_zeros_like, c->grad);
        if (c->need[1]) res[1] = chain_sum_to(&ch, chain_where(&ch, IN(0), c->grad, zero), IN(1));
        if (c->need[2]) res[2] = chain_sum_to(&ch, chain_where(&ch, IN(0), zero, c->grad), IN(2));
    }
    return chain_end(&ch, 3, res, gin);
}

dt_status dt_grad_log(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    return chain_end1(&ch, chain2(&ch, dt_div, c->grad, IN(0)), gin);
}

/* g / (2 sqrt(x)) */
dt_status dt_grad_sqrt(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *q = chain2(&ch, dt_div, c->grad, chain1(&ch, dt_sqrt, IN(0)));
    return chain_end1(&ch, chains(&ch, dt_mul_scalar, q, 0.5), gin);
}

/* d x^(-1/2) = -x^(-3/2) / 2 = -rsqrt(x) / (2 x) */
dt_status dt_grad_rsqrt(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *r = chain2(&ch, dt_div, chain1(&ch, dt_rsqrt, IN(0)), IN(0));
    return times_grad(c, &ch, chains(&ch, dt_mul_scalar, r, -0.5), gin);
}

/* g sign(x): 0 at 0, as torch */
dt_status dt_grad_abs(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    return times_grad(c, &ch, chain1(&ch, dt_sign, IN(0)), gin);
}

/* g where x > 0, else 0 (0 at 0, as torch): relu(x) is non-zero exactly there (and at NaN). */
dt_status dt_grad_relu(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *zero = chain1(&ch, dt_tensor_zeros_like, c->grad);
    return chain_end1(&ch, chain_where(&ch, chain1(&ch, dt_relu, IN(0)), c->grad, zero), gin);
}

/* gelu(x) = x (1 + tanh(u)) / 2, u = c (x + k x^3) (the forward's tanh approximation):
 * gelu'(x) = (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2, t = tanh(u). */
dt_status dt_grad_gelu(const dt_grad_call *c, dt_tensor **gin) {
    const double cc = 0.79788456080286535588, k = 0.044715; /* sqrt(2 / pi) */
    chain ch = {0};
    dt_tensor *x = IN(0), *x2 = chain2(&ch, dt_mul, x, x);
    dt_tensor *inner =
        chain2(&ch, dt_mul, x, chains(&ch, dt_add_scalar, chains(&ch, dt_mul_scalar, x2, k), 1));
    dt_tensor *t = chain1(&ch, dt_tanh, chains(&ch, dt_mul_scalar, inner, cc));
    dt_tensor *left = chains(&ch, dt_mul_scalar, chains(&ch, dt_add_scalar, t, 1), 0.5);
    dt_tensor *du = chains(&ch, dt_add_scalar, chains(&ch, dt_mul_scalar, x2, 3 * k), 1);
    dt_tensor *sech2 = one_minus(&ch, chain2(&ch, dt_mul, t, t));
    dt_tensor *right = chain2(&ch, dt_mul, chain2(&ch, dt_mul, x, sech2), du);
    right = chains(&ch, dt_mul_scalar, right, 0.5 * cc);
    return times_grad(c, &ch, chain2(&ch, dt_add, left, right), gin);
}

/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
dt_status dt_grad_silu(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *s = chain1(&ch, dt_sigmoid, IN(0));
    dt_tensor *inner = chains(&ch, dt_add_scalar, chain2(&ch, dt_mul, IN(0), one_minus(&ch, s)), 1);
    return times_grad(c, &ch, chain2(&ch, dt_mul, s, inner), gin);
}

/* tanh' = 1 - tanh^2 */
dt_status dt_grad_tanh(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *t = chain1(&ch, dt_tanh, IN(0));
    return times_grad(c, &ch, one_minus(&ch, chain2(&ch, dt_mul, t, t)), gin);
}

/* sigmoid' = s (1 - s) */
dt_status dt_grad_sigmoid(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    dt_tensor *s = chain1(&ch, dt_sigmoid, IN(0));
    return times_grad(c, &ch, chain2(&ch, dt_mul, s, one_minus(&ch, s)), gin);
}

/* d x^p = p x^(p-1); p = 0 gives zero (as torch, also where x^(-1) is inf). */
dt_status dt_grad_pow_scalar(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    double p = c->args->scalar;
    if (p == 0) return chain_end1(&ch, chain1(&ch, dt_tensor_zeros_like, IN(0)), gin);
    dt_tensor *d = chains(&ch, dt_mul_scalar, chains(&ch, dt_pow_scalar, IN(0), p - 1), p);
    return times_grad(c, &ch, d, gin);
}

/* sign is piecewise constant: zero (as torch). */
dt_status dt_grad_sign(const dt_grad_call *c, dt_tensor **gin) {
    chain ch = {0};
    return chain_end1(&ch, chain1(&ch, dt_tensor_zeros_like, IN(0)), gin);
}
