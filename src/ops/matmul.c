/* mm, bmm, matmul (batch dims broadcast), addmm, linear. Per mesh dim: shard M of the left
 * input, N of the right one, a batch dim of both, or the contracted K of both (giving a
 * Partial sum); a Partial input with the other replicated stays Partial. mm, bmm and matmul
 * take operands given transposed (args trans_a, trans_b), which the kernel reads in place:
 * the backward's g^T x and g w^T make no transposed copies. */
#include "core/check.h"
#include "ops/grad.h"
#include "ops/kernel_args.h"
#include "ops/op_impl.h"

/* Indices of the two matrix inputs and the bias (-1 if none) for each op. */
static void roles(dt_op op, int n, int *a, int *b, int *bias) {
    *a = 0, *b = 1, *bias = -1;
    if (op == DT_OP_ADDMM) *bias = 0, *a = 1, *b = 2;
    if (op == DT_OP_LINEAR && n == 3) *bias = 2;
}

static dt_status infer_plain(dt_op op, const op_input *in, int n, op_out *out) {
    int ia, ib, ibias;
    roles(op, n, &ia, &ib, &ibias);
    int want_min = op == DT_OP_ADDMM ? 3 : 2, want_max = op == DT_OP_LINEAR || op == DT_OP_ADDMM ? 3 : 2;
    if (n < want_min || n > want_max)
        return dt_error(DT_ERR_ARG, "%s: takes %d to %d inputs, got %d", dt_op_name(op), want_min,
                        want_max, n);
    const op_input *a = &in[ia], *b = &in[ib];
    int trans = op == DT_OP_LINEAR;
    int need_a = op == DT_OP_BMM ? 3 : 2, need_b = op == DT_OP_BMM ? 3 : 2;
    if ((op == DT_OP_MM || op == DT_OP_ADDMM || op == DT_OP_BMM) && (a->ndim != need_a || b->ndim != need_b))
        return dt_error(DT_ERR_SHAPE, "%s: needs %d-D inputs, got %d-D and %d-D", dt_op_name(op),
                        need_a, a->ndim, b->ndim);
    if (a->ndim < (trans ? 1 : 2) || b->ndim < 2 || (trans && b->ndim != 2))
        return dt_error(DT_ERR_SHAPE, "%s: inputs of %d and %d dims cannot be multiplied",
                        dt_op_name(op), a->ndim, b->ndim);
    int64_t K = a->shape[a->ndim - 1];
    int64_t Kb = trans ? b->shape[1] : b->shape[b->ndim - 2];
    int64_t N = trans ? b->shape[0] : b->shape[b->ndim - 1];
    if (K != Kb)
        return dt_error(DT_ERR_SHAPE, "%s: contracted sizes differ: %lld and %lld", dt_op_name(op),
                        (long long)K, (long long)Kb);
    int f8 = dt_matmul_is_float8(a->dtype) && dt_matmul_is_float8(b->dtype);
    if (!f8 && (a->dtype != b->dtype || (a->dtype != DT_F32 && a->dtype != DT_F64 && a->dtype != DT_BF16 && a->dtype != DT_F16)))
        return dt_error(DT_ERR_DTYPE, "%s: inputs are %s and %s; both must be the same float type "
                        "(or both float8)", dt_op_name(op), dt_dtype_name(a->dtype),
                        dt_dtype_name(b->dtype));
    /* Output: broadcast batch dims, then M (for linear: every leading dim), then N. */
    int batch_a = trans ? a->ndim - 1 : a->ndim - 2, batch_b = trans ? 0 : b->ndim - 2;
    int nb = batch_a > batch_b ? batch_a : batch_b;
    out->ndim = nb + (trans ? 1 : 2);
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - batch_a), db = d - (nb - batch_b);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return dt_error(DT_ERR_SHAPE, "%s: batch dims %lld and %lld do not broadcast",
                            dt_op_name(op), (long long)sa, (long long)sb);
        out->shape[d] = sa > sb ? sa : sb;
    }
    if (!trans) out->shape[nb] = a->shape[a->ndim - 2];
    out->shape[out->ndim - 1] = N;
    out->dtype = f8 ? DT_F32 : a->dtype; /* float8 products accumulate into f32 */
    if (ibias >= 0 && in[ibias].ndim >= 0) {
        const op_input *c = &in[ibias];
        if (c->dtype != out->dtype)
            return dt_error(DT_ERR_DTYPE, "%s: bias is %s, the output %s", dt_op_name(op),
                            dt_dtype_name(c->dtype), dt_dtype_name(out->dtype));
        for (int d = 0; d < c->ndim; d++) {
            int od = out->ndim - c->ndim + d;
            if (od < 0 || (c->shape[d] != 1 && c->shape[d] != out->shape[od]))
                return dt_error(DT_ERR_SHAPE, "%s: bias dim %d (size %lld) does not broadcast to "
                                              "the output", dt_op_name(op), d, (long long)c->shape[d]);
        }
    }
    return DT_OK;
}

/* The bias placement that goes with an output shard of dim od (or R when it broadcasts). */
static dt_placement bias_for(const op_input *c, const op_out *o, int od) {
    int d = od - (o->ndim - c->ndim);
    return d >= 0 && c->shape[d] == o->shape[od] ? SP(d) : RP;
}

static int rules_plain(dt_op op, const op_input *in, int n, rule_row *rows) {
    op_out o;
    if (infer_plain(op, in, n, &o) != DT_OK) return 0;
    int ia, ib, ic, trans = op == DT_OP_LINEAR;
    roles(op, n, &ia, &ib, &ic);
    if (ic >= 0 && in[ic].ndim < 0) ic = -1;
    const op_input *a = &in[ia], *b = &in[ib];
    int k = 0;
#define ROW(pa, pb, pc, po)                                                                        \
    do {                                                                                           \
        rows[k] = (rule_row){.out = (po)};                                                         \
        rows[k].in[ia] = (pa);                                                                     \
        rows[k].in[ib] = (pb);                                                                     \
        if (ic >= 0) rows[k].in[ic] = (pc);                                                        \
        k++;                                                                                       \
    } while (0)
    ROW(RP, RP, RP, RP);
    /* Leading dims of a: batch dims (broadcast against b's) and M. */
    int lead_a = a->ndim - 1, batch_b = trans ? 0 : b->ndim - 2, nb = o.ndim - (trans ? 1 : 2);
    for (int da = 0; da < lead_a && k < DT_OP_MAX_ROWS - 8; da++) {
        int od = o.ndim - 1 - lead_a + da; /* a's leading dims end right before N */
        if (a->shape[da] != o.shape[od]) continue; /* broadcast: sharding it would duplicate */
        int db = od - (nb - batch_b);
        dt_placement pb = od < nb && db >= 0 && b->shape[db] == o.shape[od] ? SP(db) : RP;
        ROW(SP(da), pb, ic >= 0 ? bias_for(&in[ic], &o, od) : RP, SP(od));
    }
    /* Batch dims only b has. */
    for (int db = 0; db < batch_b; db++) {
        int od = db + (nb - batch_b), da = od - (nb - (a->ndim - 2));
        if (da >= 0 || b->shape[db] != o.shape[od]) continue;
        ROW(RP, SP(db), ic >= 0 ? bias_for(&in[ic], &o, od) : RP, SP(od));
    }
    /* N. */
    ROW(RP, SP(trans ? 0 : b->ndim - 1), ic >= 0 ? bias_for(&in[ic], &o, o.ndim - 1) : RP,
        SP(o.ndim - 1));
    /* K: contracted, giving partial sums (the bias joins as a Partial too). */
    ROW(SP(a->ndim - 1), SP(trans ? 1 : b->ndim - 2), PP(DT_REDUCE_SUM), PP(DT_REDUCE_SUM));
    static const dt_reduce_op lin[] = {DT_REDUCE_SUM, DT_REDUCE_AVG};
    for (int l = 0; l < 2; l++) {
        ROW(PP(lin[l]), RP, PP(lin[l]), PP(lin[l]));
        ROW(RP, PP(lin[l]), PP(lin[l]), PP(lin[l]));
    }
#undef ROW
    return k;
}

/* The operands as the product sees them: an input given transposed (trans_a, trans_b) with
 * its last two dims swapped into shapes[i]. Returns the DT_MM_TRANS_* bits; DT_ERR_ARG for
 * flags on an op that takes none, DT_ERR_SHAPE for a transposed operand under 2-D. */
static dt_status logical(dt_op op, const op_input *in, int n, const dt_op_args *args, op_input *lin,
                         int64_t (*shapes)[DT_MAX_NDIM], int *trans) {
    int t[2] = {args && args->trans_a, args && args->trans_b};
    *trans = 0;
    if (!t[0] && !t[1]) return DT_OK;
    if (op != DT_OP_MM && op != DT_OP_BMM && op != DT_OP_MATMUL)
        return dt_error(DT_ERR_ARG,
                        "%s: trans_a %d, trans_b %d: only mm, bmm and matmul take "
                        "transposed operands",
                        dt_op_name(op), args->trans_a, args->trans_b);
    for (int i = 0; i < n; i++) {
        lin[i] = in[i];
        if (i > 1 || !t[i]) continue;
        int nd = in[i].ndim;
        if (nd < 2)
            return dt_error(DT_ERR_SHAPE, "%s: %s given transposed must be 2-D or more, got %d-D",
                            dt_op_name(op), i ? "b" : "a", nd);
        for (int d = 0; d < nd; d++)
            shapes[i][d] = in[i].shape[d];
        shapes[i][nd - 2] = in[i].shape[nd - 1], shapes[i][nd - 1] = in[i].shape[nd - 2];
        lin[i].shape = shapes[i];
    }
    *trans = (t[0] ? DT_MM_TRANS_A : 0) | (t[1] ? DT_MM_TRANS_B : 0);
    return DT_OK;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *args, op_out *out) {
    op_input lin[DT_OP_MAX_INPUTS];
    int64_t shapes[2][DT_MAX_NDIM];
    int trans;
    DT_CHECK(logical(op, in, n, args, lin, shapes, &trans));
    return infer_plain(op, trans ? lin : in, n, out);
}

/* A transposed operand's rows: the logical operand's, its shard of dim nd - 2 or nd - 1 moved to
 * the other. */
static int rules(dt_op op, const op_input *in, int n, const dt_op_args *args, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)mesh_size, (void)mesh_total;
    op_input lin[DT_OP_MAX_INPUTS];
    int64_t shapes[2][DT_MAX_NDIM];
    int trans;
    if (logical(op, in, n, args, lin, shapes, &trans) != DT_OK) return 0;
    int k = rules_plain(op, trans ? lin : in, n, rows);
    for (int i = 0; i < 2 && trans; i++) {
        if (!(trans & (i ? DT_MM_TRANS_B : DT_MM_TRANS_A))) continue;
        int nd = in[i].ndim;
        for (int r = 0; r < k; r++) {
            dt_placement *p = &rows[r].in[i];
            if (p->kind == DT_PLACEMENT_SHARD && p->dim >= nd - 2) p->dim = 2 * nd - 3 - p->dim;
        }
    }
    return k;
}

static dt_status compute(local_call *c) {
    int ia, ib, ic;
    roles(c->op, c->ninputs, &ia, &ib, &ic);
    int trans =
        c->op == DT_OP_LINEAR ? DT_MM_TRANS_B
        : c->args ? (c->args->trans_a ? DT_MM_TRANS_A : 0) | (c->args->trans_b ? DT_MM_TRANS_B : 0)
                  : 0;
    DT_CHECK(c->k->matmul(&c->in[ia], &c->in[ib], trans, &c->out));
    if (ic >= 0 && c->in[ic].data) return c->k->binary(DT_BINARY_ADD, &c->out, &c->in[ic], &c->out);
    return DT_OK;
}

const op_family dt_family_matmul = {
    .optional = 1u << 2, /* linear's bias */
    .infer = infer, .rules = rules, .compute = compute,
};

/* ---- backward rules ------------------------------------------------------------------ */

/* Whether a mesh dim shards x (B, T, in) on T: flattening (B, T) to rows would move data then
 * (a shard survives a view only on its group's leading dim). Context parallel's sequence. */
static int seq_sharded(const dt_tensor *x) {
    for (int m = 0; x->ndim == 3 && m < dt_mesh_ndim(x->mesh); m++)
        if (x->placements[m].kind == DT_PLACEMENT_SHARD && x->placements[m].dim == 1) return 1;
    return 0;
}

/* The product the forward used, on operands given transposed as ta, tb say: bmm keeps its 3-D
 * contract, matmul (and addmm's mm) its own. */
static dt_status product(dt_op op, dt_tensor *x, dt_tensor *y, int ta, int tb, dt_tensor **out) {
    dt_op_args args = {.trans_a = ta, .trans_b = tb};
    dt_tensor *in[2] = {x, y};
    return dt_op_call(op == DT_OP_ADDMM ? DT_OP_MM : op, in, 2, &args, out);
}

/* op(a) (..., M, K) @ op(b) (..., K, N) = out (batch..., M, N), op(t) = t^T where ta, tb say,
 * g of out's shape: op(a)'s gradient is g op(b)^T, op(b)'s op(a)^T g; a transposed operand's
 * is that transposed, written as the swapped product ((g op(b)^T)^T = op(b) g^T), so no
 * operand is ever copied transposed. Summed to the operand's shape over broadcast batch dims.
 * want[0], want[1] say which. */
static dt_status matmul_grads(dt_op op, dt_tensor *a, dt_tensor *b, int ta, int tb, dt_tensor *g,
                              const bool *want, dt_tensor **ga, dt_tensor **gb) {
    dt_tensor *p = NULL, *r[2] = {0};
    dt_status st = DT_OK;
    for (int i = 0; i < 2 && st == DT_OK; i++) {
        if (!want[i]) continue;
        dt_tensor *x = i == 0 ? a : b;
        if (i == 0)
            st = ta ? product(op, b, g, tb, 1, &p) : product(op, g, b, 0, !tb, &p);
        else
            st = tb ? product(op, g, a, 1, ta, &p) : product(op, a, g, !ta, 0, &p);
        if (st == DT_OK) st = dt_grad_sum_to(p, x->ndim, x->shape, &r[i]);
        dt_tensor_release(p);
        p = NULL;
    }
    if (st != DT_OK) {
        dt_tensor_release(r[0]), dt_tensor_release(r[1]);
        return st;
    }
    *ga = r[0], *gb = r[1];
    return DT_OK;
}

static int trans_of(const dt_grad_call *c, int i) {
    return c->args && (i ? c->args->trans_b : c->args->trans_a);
}

/* a (M, K) @ b (K, N): ga = g b^T, gb = a^T g (operands given transposed: see matmul_grads). */
dt_status dt_grad_mm(const dt_grad_call *c, dt_tensor **gin) {
    return matmul_grads(c->op, IN(0), IN(1), trans_of(c, 0), trans_of(c, 1), c->grad, c->need,
                        &gin[0], &gin[1]);
}

/* x (..., in) @ w (out, in)^T + b: gx = g w, gw = g2^T x2, gb = g summed over the leading dims,
 * with g2, x2 the gradient and input flattened to rows; for x (B, T, in) sharded on T, gw = the
 * batch's sum of g^T x per batch row (T's shards become Partial sums, nothing re-shards). g^T
 * is read in place by the product (trans_a), never copied. */
dt_status dt_grad_linear(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *x = IN(0), *w = IN(1), *g = c->grad;
    dt_status st = DT_OK;
    if (c->need[0]) st = dt_matmul(g, w, &gin[0]);
    int64_t rows = 1;
    for (int d = 0; d + 1 < x->ndim; d++)
        rows *= x->shape[d];
    int64_t gshape[2] = {rows, w->shape[0]}, xshape[2] = {rows, w->shape[1]};
    if (st == DT_OK && c->need[1] && seq_sharded(x)) {
        dt_tensor *p = NULL;
        int batch = 0;
        st = product(DT_OP_MATMUL, g, x, 1, 0, &p); /* (B, T, out)^T (B, T, in): (B, out, in) */
        if (st == DT_OK) st = dt_sum(p, &batch, 1, 0, &gin[1]);
        dt_tensor_release(p);
    } else if (st == DT_OK && c->need[1]) {
        dt_tensor *g2 = NULL, *x2 = NULL;
        st = dt_view_borrowed(g, 2, gshape, &g2); /* rows merged in place: no copies */
        if (st == DT_OK) st = dt_view_borrowed(x, 2, xshape, &x2);
        if (st == DT_OK) st = product(DT_OP_MM, g2, x2, 1, 0, &gin[1]);
        dt_tensor_release(g2), dt_tensor_release(x2);
    }
    if (st == DT_OK && c->n > 2 && c->need[2]) st = dt_grad_sum_to(g, 1, &w->shape[0], &gin[2]);
    if (st != DT_OK)
        for (int i = 0; i < 3; i++)
            dt_tensor_release(gin[i]), gin[i] = NULL;
    return st;
}

dt_status dt_grad_bmm(const dt_grad_call *c, dt_tensor **gin) {
    return dt_grad_mm(c, gin);
}

/* matmul's operands are at least 2-D (the forward refuses 1-D ones), so bmm's rule serves. */
dt_status dt_grad_matmul(const dt_grad_call *c, dt_tensor **gin) {
    return dt_grad_bmm(c, gin);
}

/* bias + a @ b, bias broadcast to (M, N): gbias = g summed to bias's shape. */
dt_status dt_grad_addmm(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *bias = c->in[0];
    DT_CHECK(matmul_grads(c->op, c->in[1], c->in[2], 0, 0, c->grad, c->need + 1, &gin[1], &gin[2]));
    if (!c->need[0]) return DT_OK;
    dt_status st = dt_grad_sum_to(c->grad, bias->ndim, bias->shape, &gin[0]);
    if (st != DT_OK) {
        dt_tensor_release(gin[1]), dt_tensor_release(gin[2]);
        gin[1] = gin[2] = NULL;
    }
    return st;
}
