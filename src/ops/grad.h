/* What an op family's backward rule sees and the helpers rules share. Each family file holds
 * its sharding rules and, below them, its backward rules (dt_grad_<token>, named in the op
 * list's grad column). Rules are written with the library's own ops (dt_add, dt_mm, ...):
 * the gradients they return are DTensors in whatever placements dispatch gives them. They run
 * with grad mode off (autograd/engine.c calls them), so the ops they call record nothing. */
#ifndef DT_OPS_GRAD_H
#define DT_OPS_GRAD_H

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/create.h"
#include "dtensor/ops.h"
#include "dtensor/tensor_impl.h"
#include "ops/op_list.h"

#define DT_GRAD_MAX_INPUTS 5

/* What a backward rule sees: the forward call and the gradient of its output. */
typedef struct dt_grad_call {
    dt_op op;
    const dt_op_args *args;
    int n;
    dt_tensor *const *in; /* the forward's inputs, as they were (NULL where optional and absent) */
    dt_tensor *const *saved; /* the forward's other outputs (attention's log-sum-exp) */
    int nsaved;
    const bool *need; /* need[i]: input i wants a gradient */
    dt_tensor *grad;  /* the gradient of the output (the output's shape) */
} dt_grad_call;

/* Sets in_grad[i] (a new tensor of input i's shape, any placements) for every i with need[i];
 * the others are left NULL. On failure nothing is returned. */
typedef dt_status (*dt_grad_fn)(const dt_grad_call *c, dt_tensor **in_grad);

/* The rule of every grad token in ops/op_list.h (in its family's file), and the two tokens
 * that are not rules:
 * none (no derivative: a clear error when a gradient is needed) and through (composites,
 * whose constituents recorded the graph: never called). */
#define DT_GRAD_DECLARE(e, name, family, lo, hi, kernel, args, wrapper, grad)                      \
    dt_status dt_grad_##grad(const dt_grad_call *c, dt_tensor **in_grad);
DT_OP_LIST(DT_GRAD_DECLARE)
#undef DT_GRAD_DECLARE

/* g summed down to shape (ndim dims) as NumPy broadcasting expanded it: leading extra dims
 * and dims where shape has 1 are summed. A new reference to g when the shapes already match
 * (grad.c). */
dt_status dt_grad_sum_to(dt_tensor *g, int ndim, const int64_t *shape, dt_tensor **out);

/* Input i of the forward call. */
#define IN(i) (c->in[(i)])

/* Runs x while every call so far succeeded: a rule chains its ops with it and frees its
 * temporaries once at the end. */
#define DO(x)                                                                                      \
    do {                                                                                           \
        if (st == DT_OK) st = (x);                                                                 \
    } while (0)

static inline void dt_grad_release_all(dt_tensor **t, int n) {
    for (int i = 0; i < n; i++)
        dt_tensor_release(t[i]), t[i] = NULL;
}

/* On failure the rule returns no gradient at all. */
static inline dt_status dt_grad_finish(const dt_grad_call *c, dt_tensor **gin, dt_status st) {
    if (st != DT_OK) dt_grad_release_all(gin, c->n);
    return st;
}

/* ---- a scratch list for rules that chain many ops ---------------------------------------
 * Each step runs only while every earlier one succeeded (a failed step's result is NULL and
 * the later steps are skipped), and chain_end hands the results out and releases every
 * temporary, on success and on failure alike. */

#define CHAIN_MAX 32

typedef struct chain {
    dt_status st;
    int n;
    dt_tensor *t[CHAIN_MAX];
} chain;

typedef dt_status (*chain_fn1)(dt_tensor *x, dt_tensor **out);
typedef dt_status (*chain_fn2)(dt_tensor *a, dt_tensor *b, dt_tensor **out);
typedef dt_status (*chain_fns)(dt_tensor *x, double s, dt_tensor **out);

/* Takes t (made by a step that returned st) into the list. */
static inline dt_tensor *chain_keep(chain *c, dt_status st, dt_tensor *t) {
    if (c->st != DT_OK) return dt_tensor_release(t), NULL;
    if (st != DT_OK) return c->st = st, NULL;
    if (c->n == CHAIN_MAX) {
        dt_tensor_release(t);
        c->st = dt_error(DT_ERR_UNSUPPORTED, "backward: a rule made more than %d temporaries",
                         CHAIN_MAX);
        return NULL;
    }
    return c->t[c->n++] = t;
}

/* f(x), f(a, b), f(x, s) */
static inline dt_tensor *chain1(chain *c, chain_fn1 f, dt_tensor *x) {
    dt_tensor *o = NULL;
    if (c->st != DT_OK) return NULL;
    dt_status st = f(x, &o);
    return chain_keep(c, st, o);
}
static inline dt_tensor *chain2(chain *c, chain_fn2 f, dt_tensor *a, dt_tensor *b) {
    dt_tensor *o = NULL;
    if (c->st != DT_OK) return NULL;
    dt_status st = f(a, b, &o);
    return chain_keep(c, st, o);
}
static inline dt_tensor *chains(chain *c, chain_fns f, dt_tensor *x, double s) {
    dt_tensor *o = NULL;
    if (c->st != DT_OK) return NULL;
    dt_status st = f(x, s, &o);
    return chain_keep(c, st, o);
}

/* cond ? a : b */
static inline dt_tensor *chain_where(chain *c, dt_tensor *cond, dt_tensor *a, dt_tensor *b) {
    dt_tensor *o = NULL;
    if (c->st != DT_OK) return NULL;
    dt_status st = dt_where(cond, a, b, &o);
    return chain_keep(c, st, o);
}

/* g summed to x's shape (dt_grad_sum_to). */
static inline dt_tensor *chain_sum_to(chain *c, dt_tensor *g, dt_tensor *x) {
    dt_tensor *o = NULL;
    if (c->st != DT_OK) return NULL;
    dt_status st = dt_grad_sum_to(g, x->ndim, x->shape, &o);
    return chain_keep(c, st, o);
}

/* Sets in_grad[i] = res[i] (a new reference; res[i] NULL leaves it NULL) for i < n when every
 * step succeeded, then releases the temporaries. On failure in_grad is left as it was. */
static inline dt_status chain_end(chain *c, int n, dt_tensor *const *res, dt_tensor **in_grad) {
    if (c->st == DT_OK)
        for (int i = 0; i < n; i++)
            if (res[i]) dt_tensor_retain(res[i]), in_grad[i] = res[i];
    for (int i = 0; i < c->n; i++)
        dt_tensor_release(c->t[i]);
    return c->st;
}

/* The single-input form. */
static inline dt_status chain_end1(chain *c, dt_tensor *res, dt_tensor **in_grad) {
    return chain_end(c, 1, &res, in_grad);
}

/* For the reductions' and norms' rules (grad.c), each a step on ch: x reduced by op over the
 * call's dims, kept (keepdim form); the output's gradient in that form (reduced dims of x as
 * 1, every dim when ndims is 0); and g / count(hit) where hit (1/0 of x's shape, 1 somewhere
 * in every reduced slice) is 1, times sign when given: a max's gradient split among ties. */
dt_tensor *dt_grad_reduce_kept(chain *ch, const dt_grad_call *c, dt_op op, dt_tensor *x);
dt_tensor *dt_grad_kept(chain *ch, const dt_grad_call *c);
dt_tensor *dt_grad_split_among(chain *ch, const dt_grad_call *c, dt_tensor *hit, dt_tensor *sign);

#endif
