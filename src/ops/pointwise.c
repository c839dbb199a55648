/* Pointwise ops: unary, scalar, binary with NumPy broadcasting, where. A shard of the output
 * needs the matching shard of every input that is not broadcast along that dim; linear ops
 * keep Partial, monotone ones keep P(max)/P(min). */
#include <string.h>

#include "core/check.h"
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
