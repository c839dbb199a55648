/* The public op entry points: typed wrappers over dt_op_call (which records through the
 * autograd layer's recorder once one is set). The in-place variants are autograd's. */
#include <string.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"
#include "redistribute/redistribute_impl.h"

static dt_status two(dt_op op, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
    dt_tensor *in[2] = {a, b};
    return dt_op_call(op, in, 2, NULL, out);
}

/* The wrappers of the generated groups (ops/op_list.h; declared one by one in dtensor/ops.h). */
#define DEFINE_BINARY(e, n, f, lo, hi, k, args, wrapper, g)                                        \
    dt_status wrapper(dt_tensor *a, dt_tensor *b, dt_tensor **out) {                              \
        return two(DT_OP_##e, a, b, out);                                                          \
    }
#define DEFINE_UNARY(e, n, f, lo, hi, k, args, wrapper, g)                                         \
    dt_status wrapper(dt_tensor *x, dt_tensor **out) { return dt_op_call(DT_OP_##e, &x, 1, NULL, out); }
#define DEFINE_SCALAR(e, n, f, lo, hi, k, args, wrapper, g)                                        \
    dt_status wrapper(dt_tensor *x, double s, dt_tensor **out) {                                  \
        return dt_scalar_op(DT_OP_##e, x, s, out);                                                 \
    }
#define DEFINE_REDUCE(e, n, f, lo, hi, k, args, wrapper, g)                                        \
    dt_status wrapper(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out) {   \
        return dt_reduce(DT_OP_##e, x, dims, ndims, keepdim, out);                                 \
    }
#define DEFINE_DIM(e, n, f, lo, hi, k, args, wrapper, g)                                           \
    dt_status wrapper(dt_tensor *x, int dim, dt_tensor **out) {                                   \
        dt_op_args a = {.dim = dim};                                                               \
        return dt_op_call(DT_OP_##e, &x, 1, &a, out);                                              \
    }
DT_OP_BINARY_LIST(DEFINE_BINARY)
DT_OP_UNARY_LIST(DEFINE_UNARY)
DT_OP_SCALAR_LIST(DEFINE_SCALAR)
DT_OP_REDUCE_LIST(DEFINE_REDUCE)
DT_OP_DIM_LIST(DEFINE_DIM)
DT_OP_COMPARE_LIST(DEFINE_BINARY)
DT_OP_SIGN_LIST(DEFINE_UNARY)

/* Whether op is in the group whose wrappers wrapper_form makes. */
#define IS_OF(e, n, f, lo, hi, k, args, wrapper, g) || op == DT_OP_##e

dt_status dt_unary_op(dt_op op, dt_tensor *x, dt_tensor **out) {
    DT_ARG(0 DT_OP_UNARY_LIST(IS_OF) DT_OP_SIGN_LIST(IS_OF), "dt_unary_op: %s is not a unary op",
           dt_op_name(op));
    return dt_op_call(op, &x, 1, NULL, out);
}

dt_status dt_scalar_op(dt_op op, dt_tensor *x, double s, dt_tensor **out) {
    DT_ARG(0 DT_OP_SCALAR_LIST(IS_OF), "dt_scalar_op: %s is not a scalar op", dt_op_name(op));
    dt_op_args a = {.scalar = s};
    return dt_op_call(op, &x, 1, &a, out);
}

dt_status dt_where(dt_tensor *cond, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
    dt_tensor *in[3] = {cond, a, b};
    return dt_op_call(DT_OP_WHERE, in, 3, NULL, out);
}

dt_status dt_addmm(dt_tensor *bias, dt_tensor *a, dt_tensor *b, dt_tensor **out) {
    dt_tensor *in[3] = {bias, a, b};
    return dt_op_call(DT_OP_ADDMM, in, 3, NULL, out);
}

dt_status dt_linear(dt_tensor *x, dt_tensor *w, dt_tensor *b, dt_tensor **out) {
    dt_tensor *in[3] = {x, w, b};
    return dt_op_call(DT_OP_LINEAR, in, b ? 3 : 2, NULL, out);
}

dt_status dt_reduce(dt_op op, dt_tensor *x, const int *dims, int ndims, int keepdim,
                    dt_tensor **out) {
    DT_ARG(ndims >= 0 && ndims <= DT_MAX_NDIM, "dt_reduce: argument ndims = %d is not in [0, %d]",
           ndims, DT_MAX_NDIM);
    DT_ARG(dims != NULL || ndims == 0, "dt_reduce: argument dims is NULL");
    DT_ARG(0 DT_OP_REDUCE_LIST(IS_OF) || op == DT_OP_ARGMAX || op == DT_OP_ARGMIN,
           "dt_reduce: %s is not a reduction", dt_op_name(op));
    dt_op_args a = {.ndims = ndims, .keepdim = keepdim, .correction = 1};
    if (ndims) memcpy(a.dims, dims, sizeof(int) * (size_t)ndims);
    if (op == DT_OP_ARGMAX || op == DT_OP_ARGMIN) {
        /* The index ops reduce one dim, which their kernels read from args.dim. */
        DT_ARG(ndims == 1, "dt_reduce: %s takes exactly one dim, got ndims = %d",
               dt_op_name(op), ndims);
        a.dim = dims[0], a.ndims = 0;
    }
    return dt_op_call(op, &x, 1, &a, out);
}

dt_status dt_argmax(dt_tensor *x, int dim, int keepdim, dt_tensor **out) {
    return dt_reduce(DT_OP_ARGMAX, x, &dim, 1, keepdim, out);
}

dt_status dt_argmin(dt_tensor *x, int dim, int keepdim, dt_tensor **out) {
    return dt_reduce(DT_OP_ARGMIN, x, &dim, 1, keepdim, out);
}

dt_status dt_layer_norm(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, double eps,
                        dt_tensor **out) {
    dt_tensor *in[3] = {x, weight, bias};
    dt_op_args a = {.scalar = eps};
    return dt_op_call(DT_OP_LAYER_NORM, in, 3, &a, out);
}

dt_status dt_vector_norm(dt_tensor *x, double ord, const int *dims, int ndims, int keepdim,
                         dt_tensor **out) {
    DT_ARG(ndims >= 0 && ndims <= DT_MAX_NDIM, "dt_vector_norm: argument ndims = %d is not in "
                                               "[0, %d]", ndims, DT_MAX_NDIM);
    DT_ARG(dims != NULL || ndims == 0, "dt_vector_norm: argument dims is NULL");
    dt_op_args a = {.scalar = ord, .ndims = ndims, .keepdim = keepdim};
    for (int i = 0; i < ndims; i++) a.dims[i] = dims[i];
    return dt_op_call(DT_OP_VECTOR_NORM, &x, 1, &a, out);
}

dt_status dt_rms_norm(dt_tensor *x, dt_tensor *weight, double eps, dt_tensor **out) {
    dt_tensor *in[2] = {x, weight};
    dt_op_args a = {.scalar = eps};
    return dt_op_call(DT_OP_RMS_NORM, in, 2, &a, out);
}

dt_status dt_cross_entropy_ignore(dt_tensor *logits, dt_tensor *target, dt_reduction reduction,
                                  int64_t ignore_index, dt_tensor **out) {
    dt_tensor *in[2] = {logits, target};
    dt_op_args a = {.reduction = reduction, .use_ignore_index = 1, .ignore_index = ignore_index};
    return dt_op_call(DT_OP_CROSS_ENTROPY, in, 2, &a, out);
}

dt_status dt_cross_entropy(dt_tensor *logits, dt_tensor *target, dt_reduction reduction,
                           dt_tensor **out) {
    return dt_cross_entropy_ignore(logits, target, reduction, DT_IGNORE_INDEX, out);
}

dt_status dt_sdpa(dt_tensor *q, dt_tensor *k, dt_tensor *v, int causal, dt_tensor **out) {
    dt_tensor *in[3] = {q, k, v};
    dt_op_args a = {.causal = causal};
    return dt_op_call(DT_OP_SDPA, in, 3, &a, out);
}

dt_status dt_sdpa_seq_first(dt_tensor *q, dt_tensor *k, dt_tensor *v, int causal, dt_tensor **out) {
    dt_tensor *in[3] = {q, k, v};
    dt_op_args a = {.causal = causal, .seq_first = 1};
    return dt_op_call(DT_OP_SDPA, in, 3, &a, out);
}

dt_status dt_sdpa_lse(dt_tensor *q, dt_tensor *k, dt_tensor *v, int causal, dt_tensor **out,
                      dt_tensor **lse) {
    dt_tensor *in[3] = {q, k, v};
    dt_op_args a = {.causal = causal};
    DT_ARG_NOT_NULL(lse);
    return dt_op_call_aux(DT_OP_SDPA, in, 3, &a, out, lse, 1);
}

dt_status dt_sdpa_backward(dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *grad_out,
                           dt_tensor *lse, int causal, dt_tensor **dq, dt_tensor **dk,
                           dt_tensor **dv) {
    DT_ARG_NOT_NULL(dk);
    DT_ARG_NOT_NULL(dv);
    dt_tensor *in[5] = {q, k, v, grad_out, lse}, *aux[2];
    dt_op_args a = {.causal = causal};
    DT_CHECK(dt_op_call_aux(DT_OP_SDPA_BACKWARD, in, 5, &a, dq, aux, 2));
    *dk = aux[0], *dv = aux[1];
    return DT_OK;
}

dt_status dt_t(dt_tensor *x, dt_tensor **out) {
    DT_ARG_NOT_NULL(x);
    DT_ARG_NOT_NULL(out);
    DT_ARG(x->ndim <= 2, "dt_t: expects a tensor of at most 2 dims, got %d-D", x->ndim);
    if (x->ndim == 2) return dt_transpose(x, 0, 1, out);
    DT_CHECK(dt_tensor_retain(x)); /* 0-D and 1-D: the identity, as torch's t() */
    *out = x;
    return DT_OK;
}

dt_status dt_transpose(dt_tensor *x, int dim0, int dim1, dt_tensor **out) {
    dt_op_args a = {.dim = dim0, .dim2 = dim1};
    return dt_op_call(DT_OP_TRANSPOSE, &x, 1, &a, out);
}

dt_status dt_permute(dt_tensor *x, int ndims, const int *dims, dt_tensor **out) {
    DT_ARG(ndims >= 0 && ndims <= DT_MAX_NDIM, "dt_permute: argument ndims = %d is not in [0, %d]",
           ndims, DT_MAX_NDIM);
    DT_ARG(dims != NULL || ndims == 0, "dt_permute: argument dims is NULL");
    dt_op_args a = {.ndims = ndims};
    if (ndims) memcpy(a.dims, dims, sizeof(int) * (size_t)ndims);
    return dt_op_call(DT_OP_PERMUTE, &x, 1, &a, out);
}

dt_status dt_slice(dt_tensor *x, int dim, int64_t start, int64_t end, dt_tensor **out) {
    DT_ARG_NOT_NULL(x);
    int d = dt_norm_dim(dim, x->ndim);
    DT_ARG(d >= 0, "dt_slice: dim = %d is out of range for a %d-D tensor", dim, x->ndim);
    int64_t size = x->shape[d]; /* Python's rules: negative counts from the end, then clamped */
    if (start < 0) start += size;
    if (end < 0) end += size;
    start = start < 0 ? 0 : start > size ? size : start;
    end = end < start ? start : end > size ? size : end;
    dt_op_args a = {.dim = d, .start = start, .end = end};
    return dt_op_call(DT_OP_SLICE, &x, 1, &a, out);
}

dt_status dt_expand(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out) {
    DT_ARG(ndim >= 0 && ndim <= DT_MAX_NDIM, "dt_expand: argument ndim = %d is not in [0, %d]",
           ndim, DT_MAX_NDIM);
    DT_ARG(shape != NULL || ndim == 0, "dt_expand: argument shape is NULL");
    dt_op_args a = {.shape_ndim = ndim};
    if (ndim) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return dt_op_call(DT_OP_EXPAND, &x, 1, &a, out);
}

dt_status dt_view(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out) {
    DT_ARG(ndim >= 0 && ndim <= DT_MAX_NDIM, "dt_view: argument ndim = %d is not in [0, %d]", ndim,
           DT_MAX_NDIM);
    DT_ARG(shape != NULL || ndim == 0, "dt_view: argument shape is NULL");
    dt_op_args a = {.shape_ndim = ndim};
    if (ndim) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return dt_op_call(DT_OP_VIEW, &x, 1, &a, out);
}

dt_status dt_cat(dt_tensor *const *xs, int n, int dim, dt_tensor **out) {
    dt_op_args a = {.dim = dim};
    return dt_op_call(DT_OP_CAT, xs, n, &a, out);
}

static dt_status place_for(dt_op op, dt_tensor *x, const dt_op_args *a, dt_tensor **out);

dt_status dt_split(dt_tensor *x, int dim, const int64_t *sizes, int n, dt_tensor **outs) {
    DT_ARG_NOT_NULL(x);
    DT_ARG(sizes != NULL && outs != NULL && n >= 1, "dt_split: sizes or outs is NULL, or n = %d",
           n);
    int d = dt_norm_dim(dim, x->ndim);
    DT_ARG(d >= 0, "dt_split: dim = %d is out of range for a %d-D tensor", dim, x->ndim);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    if (total != x->shape[d])
        return dt_error(DT_ERR_SHAPE, "dt_split: sizes add up to %lld, dim %d has %lld",
                        (long long)total, d, (long long)x->shape[d]);
    /* Place x once for slicing it, as dt_unbind does: each piece would move it again. */
    dt_op_args a = {.dim = d, .end = sizes[0]};
    dt_tensor *src;
    DT_CHECK(place_for(DT_OP_SLICE, x, &a, &src));
    dt_status st = DT_OK;
    int made = 0;
    for (; made < n && st == DT_OK; made++) {
        a.end = a.start + sizes[made];
        st = dt_op_call(DT_OP_SLICE, &src, 1, &a, &outs[made]);
        a.start = a.end;
    }
    dt_tensor_release(src);
    if (st != DT_OK)
        for (int i = 0; i < made - 1; i++) dt_tensor_release(outs[i]);
    return st;
}

/* x where op's strategy wants it (x itself, one more reference, when it is there already or
 * when the mode is not implicit: dispatch then logs or refuses the move), so that several ops
 * on it move it once. */
static dt_status place_for(dt_op op, dt_tensor *x, const dt_op_args *a, dt_tensor **out) {
    dt_placement want[DT_MESH_MAX_NDIM], outp[DT_MESH_MAX_NDIM];
    int same = 1;
    if (dt_redistribute_mode_of(x->mesh->ctx) == DT_REDISTRIBUTE_IMPLICIT) {
        DT_CHECK(dt_op_strategy(op, &x, 1, a, want, outp));
        for (int m = 0; m < x->mesh->ndim; m++)
            same &= dt_placement_equal(want[m], x->placements[m]);
    }
    if (!same) return dt_ops_move(x, want, out);
    DT_CHECK(dt_tensor_retain(x));
    *out = x;
    return DT_OK;
}

dt_status dt_stack(dt_tensor *const *xs, int n, int dim, dt_tensor **out) {
    dt_op_args a = {.dim = dim};
    return dt_op_call(DT_OP_STACK, xs, n, &a, out);
}

dt_status dt_unbind(dt_tensor *x, int dim, int n, dt_tensor **outs) {
    DT_TENSOR_ARG(x);
    DT_ARG(outs != NULL, "dt_unbind: argument outs is NULL");
    int d = dt_norm_dim(dim, x->ndim);
    DT_ARG(d >= 0, "dt_unbind: dim = %d is out of range for a %d-D tensor", dim, x->ndim);
    DT_ARG(n == x->shape[d], "dt_unbind: n = %d, but dim %d has size %lld", n, d,
           (long long)x->shape[d]);
    /* Place x once for slicing it (a sharded dim cannot be sliced in place); every slice then
     * finds its input as it wants it. */
    dt_op_args a = {.dim = d, .start = 0, .end = n ? 1 : 0}, sq = {.dim = d};
    dt_tensor *src;
    DT_CHECK(place_for(DT_OP_SLICE, x, &a, &src));
    dt_status st = DT_OK;
    int made = 0;
    for (; made < n && st == DT_OK; made++) {
        dt_tensor *piece = NULL;
        a.start = made, a.end = made + 1;
        st = dt_op_call(DT_OP_SLICE, &src, 1, &a, &piece);
        if (st == DT_OK) st = dt_op_call(DT_OP_SQUEEZE, &piece, 1, &sq, &outs[made]);
        dt_tensor_release(piece);
    }
    dt_tensor_release(src);
    if (st != DT_OK)
        for (int i = 0; i < made - 1; i++) dt_tensor_release(outs[i]);
    return st;
}

dt_status dt_reshape(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out) {
    return dt_view(x, ndim, shape, out);
}

dt_status dt_swiglu(dt_tensor *gate, dt_tensor *up, dt_tensor **out) {
    return two(DT_OP_SWIGLU, gate, up, out);
}

dt_status dt_cross_entropy_ex(dt_tensor *logits, dt_tensor *target, const dt_xent_opts *opts,
                              dt_tensor **out) {
    dt_xent_opts o = opts ? *opts : DT_XENT_DEFAULTS;
    DT_ARG(o.label_smoothing >= 0 && o.label_smoothing <= 1,
           "dt_cross_entropy_ex: opts->label_smoothing = %g is not in [0, 1]", o.label_smoothing);
    DT_ARG((unsigned)o.reduction <= DT_REDUCTION_SUM,
           "dt_cross_entropy_ex: opts->reduction = %d is not a dt_reduction", (int)o.reduction);
    dt_tensor *in[2] = {logits, target};
    dt_op_args a = {.reduction = o.reduction, .use_ignore_index = o.use_ignore_index != 0,
                    .ignore_index = o.ignore_index, .label_smoothing = o.label_smoothing};
    return dt_op_call(DT_OP_CROSS_ENTROPY, in, 2, &a, out);
}

/* ---- indexing, selection and scans (DT_OP_INDEX_LIST) ------------------------------------ */

dt_status dt_gather(dt_tensor *x, int dim, dt_tensor *index, dt_tensor **out) {
    dt_tensor *in[2] = {x, index};
    dt_op_args a = {.dim = dim};
    return dt_op_call(DT_OP_GATHER, in, 2, &a, out);
}

dt_status dt_scatter_add(dt_tensor *src, int dim, dt_tensor *index, int ndim,
                         const int64_t *shape, dt_tensor **out) {
    if (ndim < 0 || ndim > DT_MAX_NDIM || (ndim && !shape))
        return dt_error(DT_ERR_ARG, "dt_scatter_add: ndim = %d (0 .. %d, shape not NULL)", ndim,
                        DT_MAX_NDIM);
    dt_tensor *in[2] = {src, index};
    dt_op_args a = {.dim = dim, .shape_ndim = ndim};
    for (int d = 0; d < ndim; d++) a.shape[d] = shape[d];
    return dt_op_call(DT_OP_SCATTER_ADD, in, 2, &a, out);
}

dt_status dt_one_hot(dt_tensor *index, int64_t num_classes, dt_tensor **out) {
    dt_op_args a = {.k = num_classes};
    return dt_op_call(DT_OP_ONE_HOT, &index, 1, &a, out);
}

dt_status dt_cumsum(dt_tensor *x, int dim, dt_tensor **out) {
    dt_op_args a = {.dim = dim};
    return dt_op_call(DT_OP_CUMSUM, &x, 1, &a, out);
}

/* The indices op, then the values gathered with them. x goes where topk's strategy wants it
 * first, so the gather finds x and the indices sharded alike and moves nothing; in the log and
 * explicit modes dispatch moves (and reports) it instead. */
dt_status dt_topk(dt_tensor *x, int64_t k, int dim, int largest, dt_tensor **values_out,
                  dt_tensor **indices_out) {
    DT_ARG(values_out != NULL && indices_out != NULL, "topk: argument values_out or indices_out "
                                                      "is NULL");
    DT_CHECK(dt_tensor_check("dt_topk", "x", x)); /* before reading its mesh */
    dt_op_args a = {.k = k, .dim = dim, .smallest = !largest};
    dt_tensor *use, *ix = NULL, *vals = NULL;
    DT_CHECK(place_for(DT_OP_TOPK, x, &a, &use));
    dt_status st = dt_op_call(DT_OP_TOPK, &use, 1, &a, &ix);
    if (st == DT_OK) st = dt_gather(use, dim, ix, &vals);
    dt_tensor_release(use);
    if (st != DT_OK) {
        dt_tensor_release(ix);
        return st;
    }
    *values_out = vals, *indices_out = ix;
    return DT_OK;
}
