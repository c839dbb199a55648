/* A scratch list for backward rules that chain many ops: each step runs only while every
 * earlier one succeeded (a failed step's result is NULL and the later steps are skipped), and
 * chain_end hands the results out and releases every temporary, on success and on failure
 * alike. Private to src/autograd. */
#ifndef DT_AUTOGRAD_GRAD_CHAIN_H
#define DT_AUTOGRAD_GRAD_CHAIN_H

#include "autograd/autograd_impl.h"
#include "core/check.h"
#include "dtensor/create.h"
#include "dtensor/tensor_impl.h"

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

#endif
