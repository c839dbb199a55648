/* Backward rules of the pointwise ops past the arithmetic (grad_basic.c has those): maximum,
 * minimum, where, the unary maps and pow_scalar, sign. Derivatives are built from the
 * library's ops on the forward's inputs (outputs are recomputed, not kept); masks come from
 * the comparison ops. Non-smooth points follow PyTorch: relu' = abs' = 0 at 0, ties of
 * maximum/minimum split the gradient evenly. */
#include "autograd/grad_chain.h"

#define IN(i) (c->in[(i)])

/* ---- maximum, minimum, where ------------------------------------------------------------ */

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

/* ---- unary maps ------------------------------------------------------------------------- */

/* in_grad[0] = g * d (d: the derivative at x, made on ch). */
static dt_status times_grad(const dt_grad_call *c, chain *ch, dt_tensor *d, dt_tensor **gin) {
    return chain_end1(ch, chain2(ch, dt_mul, c->grad, d), gin);
}

/* 1 - y */
static dt_tensor *one_minus(chain *ch, dt_tensor *y) {
    return chains(ch, dt_add_scalar, chains(ch, dt_mul_scalar, y, -1), 1);
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
