/* Backward rules of bmm, matmul and addmm. The batch dims broadcast (NumPy rules), so each
 * operand's gradient is computed at the output's batch shape and summed back to the operand's
 * with dt_grad_sum_to; where a contracted dim was sharded the products come back Partial and
 * dispatch reduces them where they are used. (mm and linear are in grad_basic.c.) */
#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"

/* x with its last two dims swapped. */
static dt_status swap_last(dt_tensor *x, dt_tensor **out) {
    return dt_transpose(x, x->ndim - 2, x->ndim - 1, out);
}

/* The product the forward used: bmm keeps its 3-D contract, matmul (and addmm's mm) its own. */
static dt_status product(dt_op op, dt_tensor *x, dt_tensor *y, dt_tensor **out) {
    return op == DT_OP_BMM ? dt_bmm(x, y, out) : op == DT_OP_ADDMM ? dt_mm(x, y, out)
                                                                   : dt_matmul(x, y, out);
}

/* a (..., M, K) @ b (..., K, N) = out (batch..., M, N), g of out's shape:
 * ga = sum_to(g @ b^T, a), gb = sum_to(a^T @ g, b). want[0], want[1] say which. */
static dt_status matmul_grads(dt_op op, dt_tensor *a, dt_tensor *b, dt_tensor *g,
                              const bool *want, dt_tensor **ga, dt_tensor **gb) {
    dt_tensor *t = NULL, *p = NULL, *r[2] = {0};
    dt_tensor *const op_of[2] = {b, a};
    dt_status st = DT_OK;
    for (int i = 0; i < 2 && st == DT_OK; i++) {
        if (!want[i]) continue;
        dt_tensor *x = i == 0 ? a : b;
        st = swap_last(op_of[i], &t);
        if (st == DT_OK) st = i == 0 ? product(op, g, t, &p) : product(op, t, g, &p);
        if (st == DT_OK) st = dt_grad_sum_to(p, x->ndim, x->shape, &r[i]);
        dt_tensor_release(t), dt_tensor_release(p);
        t = p = NULL;
    }
    if (st != DT_OK) {
        dt_tensor_release(r[0]), dt_tensor_release(r[1]);
        return st;
    }
    *ga = r[0], *gb = r[1];
    return DT_OK;
}

dt_status dt_grad_bmm(const dt_grad_call *c, dt_tensor **gin) {
    return matmul_grads(c->op, c->in[0], c->in[1], c->grad, c->need, &gin[0], &gin[1]);
}

/* matmul's operands are at least 2-D (the forward refuses 1-D ones), so bmm's rule serves. */
dt_status dt_grad_matmul(const dt_grad_call *c, dt_tensor **gin) { return dt_grad_bmm(c, gin); }

/* bias + a @ b, bias broadcast to (M, N): gbias = g summed to bias's shape. */
dt_status dt_grad_addmm(const dt_grad_call *c, dt_tensor **gin) {
    dt_tensor *bias = c->in[0];
    DT_CHECK(matmul_grads(c->op, c->in[1], c->in[2], c->grad, c->need + 1, &gin[1], &gin[2]));
    if (!c->need[0]) return DT_OK;
    dt_status st = dt_grad_sum_to(c->grad, bias->ndim, bias->shape, &gin[0]);
    if (st != DT_OK) {
        dt_tensor_release(gin[1]), dt_tensor_release(gin[2]);
        gin[1] = gin[2] = NULL;
    }
    return st;
}
