/* The graph and the backward walk.
 *
 * A node belongs to the tensor an op made (its autograd slot holds it) and holds references to
 * the op's inputs, whose own nodes reach further back: the graph lives exactly as long as the
 * tensors that can reach it. Backward collects the tensors with nodes reachable from the root in
 * depth-first post-order (holding a reference to each), runs their rules from the root down
 * with grad mode off and adds the results into the inputs' nodes or leaves, freeing the graph
 * as it goes: a node drops its inputs as soon as its rule ran. Saved inputs whose storage an
 * owner dropped after the forward (activation checkpointing, FSDP) are refilled through their
 * hooks (autograd/saved.h) just before a rule reads them. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/saved.h"
#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"

typedef struct dt_node {
    bool redistribute; /* out = redistribute(in[0]); else out = op(in, args) */
    bool freed;        /* a backward ran through it: its inputs are gone */
    dt_op op;
    dt_op_args args;
    int n;
    dt_tensor *in[DT_GRAD_MAX_INPUTS];       /* retained */
    unsigned in_version[DT_GRAD_MAX_INPUTS]; /* each input's version when recorded */
    int nsaved;
    dt_tensor *saved[DT_OP_MAX_AUX]; /* the op's other outputs (retained): rules' state */
    /* a node of dt_autograd_record_custom: */
    const char *custom_name;
    dt_custom_backward_fn custom;
    void *state;
    void (*free_state)(void *);
    const char *module; /* the module whose forward recorded it (comm/flight.h), borrowed */
    /* during a backward: */
    dt_tensor *grad; /* the output's gradient accumulated so far */
    unsigned mark;   /* the walk that visited it */
} dt_node;

static void free_state(dt_node *node) {
    if (node->free_state && node->state) node->free_state(node->state);
    node->state = NULL;
}

void dt_node_release(dt_node *node) {
    if (!node) return;
    for (int i = 0; i < node->n; i++)
        dt_tensor_release(node->in[i]);
    for (int i = 0; i < node->nsaved; i++)
        dt_tensor_release(node->saved[i]);
    dt_tensor_release(node->grad);
    free_state(node);
    free(node);
}

static const char *node_name(const dt_node *node) {
    return node->redistribute ? "a redistribute"
           : node->custom     ? node->custom_name
                              : dt_op_name(node->op);
}

static dt_ctx *ctx_of(const dt_tensor *t) {
    return t->mesh->ctx;
}

/* The node that made t (NULL for a leaf or a tensor autograd never marked). */
static dt_node *node_of(const dt_tensor *t) {
    return dt_ag(t)->node;
}

bool dt_autograd_wants(dt_tensor *const *in, int n) {
    if (!in[0] || dt_autograd_of(ctx_of(in[0]))->no_grad_depth) return false;
    for (int i = 0; i < n; i++)
        if (in[i] && dt_ag(in[i])->requires_grad) return true;
    return false;
}

const dt_grad_slot dt_grad_slot_none;

/* The dtensor layer calls this when a tensor with a slot dies. */
static void slot_free(dt_tensor *t, dt_grad_slot *s) {
    if (s->hooks) s->hooks->detach(s->hooks, t);
    dt_node_release(s->node);
    dt_tensor_release(s->grad);
    free(s);
}

dt_status dt_ag_make(dt_tensor *t, dt_grad_slot **out) {
    if (!t->ag) {
        dt_grad_slot *s = calloc(1, sizeof *s);
        if (!s) return dt_error(DT_ERR_NOMEM, "autograd: out of memory for a tensor's state");
        dt_tensor_slot_hook(slot_free);
        dt_autograd_start(); /* ops record from now on */
        t->ag = s;
    }
    *out = t->ag;
    return DT_OK;
}

static dt_status record(dt_tensor *out, dt_node *node) {
    dt_grad_slot *s = NULL;
    dt_status st = dt_ag_make(out, &s);
    if (st != DT_OK) {
        node->n = node->nsaved = 0; /* nothing retained yet */
        dt_node_release(node);
        return st;
    }
    s->node = node;
    s->requires_grad = true;
    node->module = dt_comm_module_tls;
    for (int i = 0; i < node->n; i++)
        if (node->in[i]) dt_tensor_retain(node->in[i]), node->in_version[i] = node->in[i]->version;
    for (int i = 0; i < node->nsaved; i++)
        dt_tensor_retain(node->saved[i]);
    if (dt_autograd_of(ctx_of(out))->ac_region) dt_ac_note(ctx_of(out), out);
    return DT_OK;
}

int dt_node_op(const dt_tensor *t) {
    return node_of(t) && !node_of(t)->redistribute && !node_of(t)->custom ? (int)node_of(t)->op
                                                                          : -1;
}

bool dt_node_custom(const dt_tensor *t) {
    return node_of(t) && node_of(t)->custom;
}

int dt_node_inputs(const dt_tensor *t, dt_tensor ***in_out, const dt_op_args **args_out) {
    if (!node_of(t)) return 0;
    *in_out = node_of(t)->in;
    *args_out = &node_of(t)->args;
    return node_of(t)->n;
}

int64_t dt_node_saved_bytes(const dt_tensor *t) {
    int64_t b = 0;
    for (int i = 0; node_of(t) && i < node_of(t)->nsaved; i++) {
        const dt_tensor *x = node_of(t)->saved[i];
        if (x && x->owned) b += (int64_t)(x->local_numel * dt_dtype_size(x->dtype));
    }
    return b;
}

bool dt_node_done(const dt_tensor *t) {
    return node_of(t) && node_of(t)->freed;
}

dt_status dt_saved_refill(dt_tensor *t) {
    if (!t || !dt_tensor_storage_dropped(t)) return DT_OK;
    if (!dt_ag(t)->hooks)
        return dt_error(DT_ERR_ARG, "dt_backward: a saved tensor's storage was dropped and "
                                    "nothing can refill it");
    DT_CHECK(dt_ag(t)->hooks->refill(dt_ag(t)->hooks, t));
    if (dt_tensor_storage_dropped(t))
        return dt_error(DT_ERR_ARG, "dt_backward: a dropped saved tensor was not refilled by "
                                    "its owner");
    return DT_OK;
}

static dt_status hook_add(dt_backward_hook **tail, dt_status (*fn)(void *user), void *user) {
    dt_backward_hook *h = malloc(sizeof *h);
    if (!h) return dt_error(DT_ERR_NOMEM, "dt_backward: out of memory for a hook");
    *h = (dt_backward_hook){.fn = fn, .user = user};
    while (*tail)
        tail = &(*tail)->next;
    *tail = h;
    return DT_OK;
}

static void hook_cancel(dt_backward_hook **p, dt_status (*fn)(void *user), void *user) {
    while (*p) {
        dt_backward_hook *h = *p;
        if (h->fn == fn && h->user == user)
            *p = h->next, free(h);
        else
            p = &h->next;
    }
}

/* Runs and frees the hooks of *list, all of them even after a failure (owners clean up
 * there); the first failure is the result. */
static dt_status hooks_run(dt_backward_hook **list, dt_status st) {
    while (*list) {
        dt_backward_hook *h = *list;
        *list = h->next;
        dt_status s2 = h->fn(h->user);
        if (st == DT_OK) st = s2;
        free(h);
    }
    return st;
}

dt_status dt_autograd_at_backward_end(dt_ctx *ctx, dt_status (*fn)(void *user), void *user) {
    return hook_add(&dt_autograd_of(ctx)->backward_end, fn, user);
}

void dt_autograd_cancel_backward_end(dt_ctx *ctx, dt_status (*fn)(void *user), void *user) {
    hook_cancel(&dt_autograd_of(ctx)->backward_end, fn, user);
}

dt_status dt_autograd_at_backward_begin(dt_ctx *ctx, dt_status (*fn)(void *user), void *user) {
    return hook_add(&dt_autograd_of(ctx)->backward_begin, fn, user);
}

void dt_autograd_cancel_backward_begin(dt_ctx *ctx, dt_status (*fn)(void *user), void *user) {
    hook_cancel(&dt_autograd_of(ctx)->backward_begin, fn, user);
}

dt_status dt_autograd_record(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                             dt_tensor *out, dt_tensor *const *saved, int nsaved) {
    DT_ARG(n <= DT_GRAD_MAX_INPUTS, "%s: %d inputs, autograd records at most %d", dt_op_name(op), n,
           DT_GRAD_MAX_INPUTS);
    dt_node *node = calloc(1, sizeof *node);
    if (!node)
        return dt_error(DT_ERR_NOMEM, "%s: out of memory for its autograd node", dt_op_name(op));
    node->op = op, node->n = n;
    if (args) node->args = *args;
    memcpy(node->in, in, sizeof(dt_tensor *) * (size_t)n);
    node->nsaved = nsaved;
    for (int i = 0; i < nsaved; i++)
        node->saved[i] = saved[i];
    return record(out, node);
}

dt_status dt_autograd_record_inplace(dt_op op, dt_tensor *const *in, int n, const dt_op_args *args,
                                     dt_tensor *before) {
    DT_ARG(n <= DT_GRAD_MAX_INPUTS, "%s: %d inputs, autograd records at most %d", dt_op_name(op), n,
           DT_GRAD_MAX_INPUTS);
    dt_tensor *x = in[0];
    dt_grad_slot *old = x->ag;
    dt_node *node = calloc(1, sizeof *node);
    if (!node)
        return dt_error(DT_ERR_NOMEM, "%s: out of memory for its autograd node", dt_op_name(op));
    /* before takes x's history (its node, or nothing); x's new slot is made by record */
    before->ag = old, x->ag = NULL;
    before->version = x->version - 1; /* the values before's node saw */
    node->op = op, node->n = n;
    if (args) node->args = *args;
    memcpy(node->in, in, sizeof(dt_tensor *) * (size_t)n);
    node->in[0] = before;
    dt_status st = record(x, node);
    if (st != DT_OK) x->ag = old, before->ag = NULL; /* as it was */
    return st;
}

dt_status dt_autograd_record_custom(const char *name, dt_tensor *const *in, int n, dt_tensor *out,
                                    dt_custom_backward_fn backward, void *state,
                                    void (*free_state_fn)(void *)) {
    dt_node *node = n <= DT_GRAD_MAX_INPUTS ? calloc(1, sizeof *node) : NULL;
    if (!node) {
        if (free_state_fn) free_state_fn(state);
        return n > DT_GRAD_MAX_INPUTS
                   ? dt_error(DT_ERR_ARG, "%s: %d inputs, autograd records at most %d", name, n,
                              DT_GRAD_MAX_INPUTS)
                   : dt_error(DT_ERR_NOMEM, "%s: out of memory for its autograd node", name);
    }
    node->custom_name = name, node->custom = backward;
    node->state = state, node->free_state = free_state_fn;
    node->n = n;
    memcpy(node->in, in, sizeof(dt_tensor *) * (size_t)n);
    return record(out, node);
}

dt_status dt_autograd_record_redistribute(dt_tensor *in, dt_tensor *out) {
    dt_node *node = calloc(1, sizeof *node);
    if (!node) return dt_error(DT_ERR_NOMEM, "redistribute: out of memory for its autograd node");
    node->redistribute = true, node->n = 1, node->in[0] = in;
    return record(out, node);
}

/* ---- the walk ------------------------------------------------------------------------------ */

typedef struct walk {
    dt_tensor **order; /* post-order: inputs before the tensors made from them */
    int n, cap;
    unsigned mark;
} walk;

static dt_status push(walk *w, dt_tensor *t) {
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        dt_tensor **o = realloc(w->order, sizeof *o * (size_t)cap);
        if (!o) return dt_error(DT_ERR_NOMEM, "dt_backward: out of memory for the graph");
        w->order = o, w->cap = cap;
    }
    dt_tensor_retain(t);
    w->order[w->n++] = t;
    return DT_OK;
}

/* Post-order from t with an explicit stack (graphs of thousands of ops must not overflow the
 * C stack): a tensor is pushed once every input with a node has been. */
static dt_status collect(walk *w, dt_tensor *root) {
    typedef struct frame {
        dt_tensor *t;
        int next;
    } frame;
    int cap = 64, top = 0;
    frame *st = malloc(sizeof *st * (size_t)cap);
    if (!st) return dt_error(DT_ERR_NOMEM, "dt_backward: out of memory for the graph");
    node_of(root)->mark = w->mark;
    st[top++] = (frame){root, 0};
    dt_status s = DT_OK;
    while (top && s == DT_OK) {
        frame *f = &st[top - 1];
        dt_node *node = node_of(f->t);
        if (f->next == node->n) {
            s = push(w, f->t);
            top--;
            continue;
        }
        dt_tensor *in = node->in[f->next++];
        if (!in || !node_of(in) || !dt_ag(in)->requires_grad || node_of(in)->mark == w->mark)
            continue;
        if (node_of(in)->freed) {
            s = dt_error(DT_ERR_ARG,
                         "dt_backward: the graph through %s was freed by an "
                         "earlier backward",
                         node_name(node_of(in)));
            break;
        }
        node_of(in)->mark = w->mark;
        if (top == cap) {
            frame *g = realloc(st, sizeof *st * (size_t)(cap *= 2));
            if (!g) {
                s = dt_error(DT_ERR_NOMEM, "dt_backward: out of memory for the graph");
                break;
            }
            st = g;
        }
        st[top++] = (frame){in, 0};
    }
    free(st);
    return s;
}

/* acc += g (g consumed). */
static dt_status accumulate(dt_tensor **acc, dt_tensor *g) {
    if (!*acc) {
        *acc = g;
        return DT_OK;
    }
    dt_tensor *sum;
    dt_status st = dt_add(*acc, g, &sum);
    dt_tensor_release(g);
    if (st != DT_OK) return st;
    dt_tensor_release(*acc);
    *acc = sum;
    return DT_OK;
}

/* leaf->grad += g (g consumed), in the leaf's gradient dtype: a bf16 parameter whose gradient
 * is kept in f32 widens each contribution first (a Partial stays Partial, so the reduction
 * that places it runs in f32 too). */
static dt_status accumulate_leaf(dt_tensor *leaf, dt_tensor *g) {
    if (dt_ag(leaf)->grad_dtype && g->dtype != (dt_dtype)(dt_ag(leaf)->grad_dtype - 1)) {
        dt_tensor *wide;
        dt_status st = dt_cast(g, (dt_dtype)(dt_ag(leaf)->grad_dtype - 1), &wide);
        dt_tensor_release(g);
        if (st != DT_OK) return st;
        g = wide;
    }
    dt_grad_slot *s = NULL;
    dt_status st = dt_ag_make(leaf, &s);
    if (st != DT_OK) {
        dt_tensor_release(g);
        return st;
    }
    return accumulate(&s->grad, g);
}

/* The gradient of a redistribute's input: the output's gradient moved back to the input's
 * placements, with Replicate where the input was Partial (each part of a sum has the sum's
 * gradient), as PyTorch's redistribute backward does. */
static void unpartial(const dt_placement *p, int n, dt_placement *out) {
    for (int m = 0; m < n; m++)
        out[m] = p[m].kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : p[m];
}

static dt_status redistribute_grad(dt_tensor *in, dt_tensor *made, dt_tensor *g, dt_tensor **out) {
    int mnd = in->mesh->ndim;
    dt_placement want[DT_MESH_MAX_NDIM];
    unpartial(in->placements, mnd, want);
    if (made->mesh == in->mesh) return dt_tensor_redistribute(g, mnd, want, out);
    /* A move across meshes (dt_tensor_redistribute_to) goes back to the input's mesh from the
     * output's placements (Replicate where Partial): every rank of both meshes knows those,
     * while the gradient's own placements are known only where it was computed (a rank outside
     * the output's mesh passes any). */
    int dnd = made->mesh->ndim, same = 1;
    dt_placement from[DT_MESH_MAX_NDIM];
    unpartial(made->placements, dnd, from);
    for (int m = 0; m < dnd; m++)
        same &= dt_placement_equal(g->placements[m], from[m]);
    dt_tensor *placed = g;
    if (!same) DT_CHECK(dt_tensor_redistribute(g, dnd, from, &placed));
    dt_status st = dt_tensor_redistribute_to(placed, in->mesh, mnd, want, out);
    if (placed != g) dt_tensor_release(placed);
    return st;
}

/* Runs t's rule on its accumulated gradient and passes the results on. */
static dt_status step(dt_tensor *t) {
    dt_node *node = node_of(t);
    dt_tensor *g = node->grad;
    node->grad = NULL;
    if (!g) return DT_OK;              /* no path from the root reached it */
    dt_comm_module_tls = node->module; /* its collectives are its module's backward */
    bool need[DT_GRAD_MAX_INPUTS] = {0};
    dt_tensor *gin[DT_GRAD_MAX_INPUTS] = {0};
    int any = 0;
    for (int i = 0; i < node->n; i++)
        any |= need[i] = node->in[i] && dt_ag(node->in[i])->requires_grad;
    dt_status st = DT_OK;
    /* An input overwritten in place since the node recorded it: its values are gone, and its
     * gradient would reach the in-place op's node instead of its own. */
    for (int i = 0; i < node->n && st == DT_OK; i++)
        if (node->in[i] && node->in[i]->version != node->in_version[i])
            st = dt_error(DT_ERR_ARG,
                          "dt_backward: input %d of %s was modified by an in-place "
                          "op after %s recorded it (version %u, recorded at %u); use the "
                          "out-of-place op there",
                          i, node_name(node), node_name(node), node->in[i]->version,
                          node->in_version[i]);
    /* Saved inputs whose storage was dropped after the forward come back first. */
    for (int i = 0; i < node->n && st == DT_OK && any && !node->redistribute; i++)
        st = dt_saved_refill(node->in[i]);
    if (st != DT_OK) {
        dt_tensor_release(g);
        return st;
    }
    /* A gathered parameter's owner reduces the gradient itself (FSDP: all of a unit at once). */
    if (any && node->redistribute && !node_of(node->in[0]) && dt_ag(t)->hooks &&
        dt_ag(t)->hooks->grad_ready && !dt_autograd_of(ctx_of(t))->grad_unsynced)
        return dt_ag(t)->hooks->grad_ready(dt_ag(t)->hooks, t, g);
    /* A leaf's gradient passes a redistribute unmoved: the leaf's own sync (or its absence,
     * for accumulation) places it once, after every use of the leaf has added into it. Not a
     * move across meshes: that gradient must go back to the leaf's mesh. */
    if (any && node->redistribute && !node_of(node->in[0]) && node->in[0]->mesh == t->mesh)
        dt_tensor_retain(gin[0] = g);
    else if (any && node->redistribute)
        st = redistribute_grad(node->in[0], t, g, &gin[0]);
    else if (any && node->custom)
        st = node->custom(node->state, node->in, need, g, gin);
    else if (any) {
        const op_desc *d = dt_op_desc(node->op);
        dt_grad_fn rule = d ? d->backward : NULL;
        dt_grad_call c = {.op = node->op,
                          .args = &node->args,
                          .n = node->n,
                          .in = node->in,
                          .saved = node->saved,
                          .nsaved = node->nsaved,
                          .need = need,
                          .grad = g};
        st = rule ? rule(&c, gin)
                  : dt_error(DT_ERR_UNSUPPORTED,
                             "dt_backward: %s is a registered op: it has no "
                             "backward rule",
                             dt_op_name(node->op));
    }
    dt_tensor_release(g);
    for (int i = 0; i < node->n; i++) {
        if (st != DT_OK || !need[i] || !gin[i]) {
            dt_tensor_release(gin[i]);
            continue;
        }
        dt_tensor *in = node->in[i];
        st = node_of(in) ? accumulate(&node_of(in)->grad, gin[i]) : accumulate_leaf(in, gin[i]);
    }
    return st;
}

/* Frees what t's node holds once its rule ran: its inputs (the saved tensors, which die here
 * unless something else holds them, so activations go as backward passes them) and any
 * gradient left. Leaves that require grad are kept in leaves (retained) for the final sync:
 * their gradients may still arrive (an FSDP unit's reduce_scatter, waited for at the end). */
static void release_node(dt_tensor *t) {
    dt_node *node = node_of(t);
    for (int i = 0; i < node->n; i++)
        dt_tensor_release(node->in[i]), node->in[i] = NULL;
    for (int i = 0; i < node->nsaved; i++)
        dt_tensor_release(node->saved[i]), node->saved[i] = NULL;
    dt_tensor_release(node->grad), node->grad = NULL;
    free_state(node);
    node->n = node->nsaved = 0, node->freed = true;
}

/* The leaves that require grad, in the order the post-order walk first reaches them (the
 * order grad sync buckets them in, the same on every rank), retained in leaves: their
 * gradients may arrive until the end (an FSDP unit's reduce_scatter, waited for there). */
static dt_status collect_leaves(const walk *w, walk *leaves) {
    for (int k = 0; k < w->n; k++) {
        dt_node *node = node_of(w->order[k]);
        for (int i = 0; i < node->n; i++) {
            dt_tensor *in = node->in[i];
            if (!in || node_of(in) || !dt_ag(in)->requires_grad ||
                dt_ag(in)->sync_mark == leaves->mark)
                continue;
            in->ag->sync_mark = leaves->mark; /* requires grad: it has a slot */
            DT_CHECK(push(leaves, in));
        }
    }
    return DT_OK;
}

static dt_status backward(dt_tensor *root, dt_tensor *seed) {
    static _Atomic unsigned marks;
    walk w = {.mark = atomic_fetch_add(&marks, 1) + 1};
    walk leaves = {.mark = w.mark};
    dt_ctx *ctx = ctx_of(root);
    dt_autograd_state *ag = dt_autograd_of(ctx);
    dt_status st = collect(&w, root);
    if (st == DT_OK) st = collect_leaves(&w, &leaves);
    if (st == DT_OK) {
        dt_tensor_retain(seed);
        node_of(root)->grad = seed;
    }
    ag->no_grad_depth++;
    dt_comm_site site = dt_comm_site_get();
    dt_comm_backward_tls = 1;
    st = hooks_run(&ag->backward_begin, st);
    /* From the root down; each node's inputs go as soon as its rule ran. */
    for (int k = w.n - 1; k >= 0; k--) {
        dt_tensor *t = w.order[k];
        if (st == DT_OK) st = step(t);
        release_node(t);
        dt_tensor_release(t);
    }
    /* the units' ends and the leaves' sync: issued for the gradients, by no op */
    dt_comm_site_swap((dt_comm_site){.caller = "grad_sync", .module = "grad_sync", .backward = 1});
    st = hooks_run(&ag->backward_end, st);
    ag->backwards++;
    /* Leaves reached: their inputs' gradients were added to leaf->grad. */
    if (st == DT_OK && !ag->grad_unsynced) st = dt_grad_sync(leaves.order, leaves.n);
    dt_comm_site_swap(site);
    ag->no_grad_depth--;
    for (int k = 0; k < leaves.n; k++)
        dt_tensor_release(leaves.order[k]);
    free(w.order);
    free(leaves.order);
    return st;
}

dt_status dt_backward_with(dt_tensor *t, dt_tensor *grad) {
    DT_TENSOR_ARG(t);
    DT_TENSOR_ARG(grad);
    DT_ARG(dt_ag(t)->requires_grad,
           "dt_backward: the tensor does not require grad (no input of the "
           "ops that made it does)");
    DT_ARG(dt_mesh_equal(grad->mesh, t->mesh),
           "dt_backward_with: grad lives on another mesh than t");
    DT_ARG(grad->ndim == t->ndim && !memcmp(grad->shape, t->shape, sizeof(int64_t) * t->ndim),
           "dt_backward_with: grad's shape differs from t's");
    DT_ARG(grad->dtype == t->dtype, "dt_backward_with: grad is %s, t is %s",
           dt_dtype_name(grad->dtype), dt_dtype_name(t->dtype));
    if (!node_of(t)) { /* a leaf: its gradient is grad */
        dt_tensor_retain(grad);
        DT_CHECK(accumulate_leaf(t, grad));
        return dt_autograd_of(t->mesh->ctx)->grad_unsynced ? DT_OK : dt_grad_sync(&t, 1);
    }
    if (node_of(t)->freed)
        return dt_error(DT_ERR_ARG, "dt_backward: the graph was freed by an earlier backward");
    return backward(t, grad);
}

dt_status dt_backward(dt_tensor *loss) {
    DT_TENSOR_ARG(loss);
    DT_ARG(dt_shape_numel(loss->shape, loss->ndim) == 1,
           "dt_backward: loss has %zu elements; give a gradient with dt_backward_with",
           dt_shape_numel(loss->shape, loss->ndim));
    int mnd = loss->mesh->ndim;
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int m = 0; m < mnd; m++)
        pl[m] =
            loss->placements[m].kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : loss->placements[m];
    dt_tensor *one;
    DT_CHECK(dt_tensor_ones(loss->mesh, loss->dtype, loss->ndim, loss->shape, mnd, pl, &one));
    dt_status st = dt_backward_with(loss, one);
    dt_tensor_release(one);
    return st;
}
