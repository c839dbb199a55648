/* Operators on DTensors. Dispatch reads the input placements, enumerates the op's sharding
 * strategies (per mesh dim, combined over the mesh), prices each by the redistribute plans
 * its inputs would need (the planner's cost model), keeps the cheapest in a cache keyed by
 * (op, input specs, arguments), redistributes the inputs and runs the local kernel.
 *
 * Every call here is collective over the inputs' mesh (all ranks call it with the same
 * specs) and blocks. Inputs are not changed (except by the _ variants, in place); the caller
 * owns the output. All inputs must live on the same mesh. */
#ifndef DTENSOR_OPS_H
#define DTENSOR_OPS_H

#include "dtensor/block.h"
#include "dtensor/create.h"
#include "dtensor/redistribute.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in ops. Each value is fixed: a new op is appended with the next value, so no
 * existing op is ever renumbered (an op registered at run time takes a value from DT_OP_COUNT
 * on, dt_op_register). What each op reads and how it is placed is the op list's, internal
 * (src/ops/op_list.h). */
typedef enum dt_op {
    DT_OP_ADD = 0,
    DT_OP_SUB = 1,
    DT_OP_MUL = 2,
    DT_OP_DIV = 3,
    DT_OP_MAXIMUM = 4,
    DT_OP_MINIMUM = 5,
    DT_OP_MM = 6,
    DT_OP_BMM = 7,
    DT_OP_MATMUL = 8,
    DT_OP_EMBEDDING = 9,
    DT_OP_PICK = 10,
    DT_OP_NEG = 11,
    DT_OP_EXP = 12,
    DT_OP_LOG = 13,
    DT_OP_SQRT = 14,
    DT_OP_RSQRT = 15,
    DT_OP_ABS = 16,
    DT_OP_RELU = 17,
    DT_OP_GELU = 18,
    DT_OP_SILU = 19,
    DT_OP_TANH = 20,
    DT_OP_SIGMOID = 21,
    DT_OP_CONTIGUOUS = 22,
    DT_OP_POW_SCALAR = 23,
    DT_OP_ADD_SCALAR = 24,
    DT_OP_MUL_SCALAR = 25,
    DT_OP_SUM = 26,
    DT_OP_MEAN = 27,
    DT_OP_AMAX = 28,
    DT_OP_AMIN = 29,
    DT_OP_MAX = 30,
    DT_OP_MIN = 31,
    DT_OP_VAR = 32,
    DT_OP_STD = 33,
    DT_OP_SOFTMAX = 34,
    DT_OP_LOG_SOFTMAX = 35,
    DT_OP_UNSQUEEZE = 36,
    DT_OP_SQUEEZE = 37,
    DT_OP_WHERE = 38,
    DT_OP_ADDMM = 39,
    DT_OP_LINEAR = 40,
    DT_OP_ARGMAX = 41,
    DT_OP_ARGMIN = 42,
    DT_OP_LAYER_NORM = 43,
    DT_OP_RMS_NORM = 44,
    DT_OP_CROSS_ENTROPY = 45,
    DT_OP_SDPA = 46,
    DT_OP_TRANSPOSE = 47,
    DT_OP_PERMUTE = 48,
    DT_OP_VIEW = 49,
    DT_OP_SLICE = 50,
    DT_OP_EXPAND = 51,
    DT_OP_CAT = 52,
    DT_OP_STACK = 53,
    DT_OP_SWIGLU = 54,
    DT_OP_ROPE = 55,
    DT_OP_DROPOUT = 56,
    DT_OP_SDPA_BACKWARD = 57,
    DT_OP_GATHER = 58,
    DT_OP_ONE_HOT = 59,
    DT_OP_TOPK = 60,
    DT_OP_CUMSUM = 61,
    DT_OP_VECTOR_NORM = 62,
    DT_OP_EQ = 63,
    DT_OP_NE = 64,
    DT_OP_GT = 65,
    DT_OP_GE = 66,
    DT_OP_LT = 67,
    DT_OP_LE = 68,
    DT_OP_SIGN = 69,
    DT_OP_SCATTER_ADD = 70,
    DT_OP_SILU_MUL = 71,
    DT_OP_SILU_MUL_BACKWARD = 72,
    DT_OP_LOG_SOFTMAX_PICK = 73,
    DT_OP_LOG_SOFTMAX_PICK_BACKWARD = 74,
    DT_OP_RMS_NORM_RESIDUAL = 75,
    DT_OP_LAYER_NORM_BACKWARD = 76,
    DT_OP_RMS_NORM_BACKWARD = 77,
    DT_OP_COUNT = 78
} dt_op;

/* "add", "mm", ...; "?" for an unknown op. */
DT_API const char *dt_op_name(dt_op op);

/* How cross_entropy reduces the per-sample losses (torch's reduction=). */
typedef enum dt_reduction {
    DT_REDUCTION_NONE = 0,
    DT_REDUCTION_MEAN, /* over the samples not ignored */
    DT_REDUCTION_SUM,
} dt_reduction;

/* Static arguments of dt_op_call. Zero-initialise and set what the op reads: each op reads
 * only the fields its entry in the op list (src/ops/op_list.h) names (ARG_* in brackets below), and
 * only those key dispatch's cache. */
typedef struct dt_op_args {
    double scalar;         /* [SCALAR] pow/add/mul_scalar: s; norms: eps (0 = 1e-5); sdpa:
                              scale (0 = 1/sqrt(D)); dropout: p; vector_norm: ord */
    int dims[DT_MAX_NDIM]; /* [DIMS] reductions: dims to reduce (negative from the end);
                              permute: the order */
    int ndims;             /* [DIMS] reductions: 0 = all dims; layer_norm, rms_norm: the
                              normalised trailing dims (0: the weight's ndim, else 1) */
    int keepdim;           /* [KEEPDIM] reductions */
    int dim, dim2;         /* [DIM] softmax, argmax, slice, (un)squeeze, cat: dim;
                              [DIM2] transpose: dim and dim2 */
    int64_t start, end;    /* [RANGE] slice [start, end) along dim */
    int64_t shape[DT_MAX_NDIM];
    int shape_ndim;         /* [SHAPE] view: the new shape (one entry may be -1); expand: the
                               target */
    int correction;         /* [CORRECTION] var/std: 1 = unbiased (torch's default), 0 = biased */
    int causal;             /* [CAUSAL] sdpa */
    int seq_first;          /* [SEQ_FIRST] sdpa: 1 = q, k, v, out (..., T, H, D) and lse
                               (..., Tq, Hq), the projections' own layout; 0 = heads first */
    dt_reduction reduction; /* [REDUCTION] cross_entropy */
    int use_ignore_index;   /* [IGNORE] cross_entropy: 1 = rows labelled ignore_index are
                               skipped (loss 0, not counted in the mean); other labels */
    int64_t ignore_index;   /* outside [0, C) are DT_ERR_ARG */
    double label_smoothing; /* [LABEL_SMOOTHING] cross_entropy, in [0, 1] */
    int64_t k;              /* [K] topk: k; one_hot: the number of classes */
    int smallest;           /* [SMALLEST] topk: 1 = the k smallest (torch's largest=False) */
    int trans_a, trans_b;   /* [TRANS] mm, bmm, matmul: 1 = a is given as (..., K, M), b as
                               (..., N, K) (the last two dims swapped); the product reads it in
                               place, with no transposed copy */
    uint64_t seed, offset;  /* [SEED] dropout: the generator's key and counter; read by the
                               kernel only, never keyed */
} dt_op_args;

/* PyTorch's default ignore_index for cross_entropy. */
#define DT_IGNORE_INDEX (-100)

/* Registering an op (like PyTorch's register_sharding): its single-mesh-dim strategies as
 * rows of placements (ninputs inputs, then the output), how its output spec follows from the
 * inputs', and its local kernel. Dispatch combines the rows over mesh dims, prices them and
 * redistributes inputs like for built-in ops. */
#define DT_OP_MAX_USER_INPUTS 5
typedef struct dt_op_def {
    const char *name;                                      /* copied */
    int ninputs;                                           /* 1 .. DT_OP_MAX_USER_INPUTS */
    const dt_placement (*rows)[DT_OP_MAX_USER_INPUTS + 1]; /* copied; R -> R is always added */
    int nrows;
    /* Output dims, shape and dtype from the inputs' global specs (blocks with data NULL). */
    dt_status (*infer)(const dt_block *inputs, int n, dt_block *out, void *user);
    /* out = f(inputs) on this rank's blocks; out is allocated with the layout's shape, on the
     * inputs' device. On CUDA blocks the kernel queues its work on dt_cuda_current_stream()
     * (the rank's compute stream, which orders it with every other op) and may return before
     * it has run. */
    dt_status (*kernel)(const dt_block *inputs, int n, dt_block *out, void *user);
    void *user;
} dt_op_def;

#define DT_OP_MAX_REGISTERED 64
/* Registers def and returns its op id (>= DT_OP_COUNT) for dt_op_call. Not collective, but
 * every rank must register the same ops in the same order. Thread-safe. */
DT_API dt_status dt_op_register(const dt_op_def *def, dt_op *out);

/* The generic entry point: runs op on inputs with args. */
DT_API dt_status dt_op_call(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                            dt_tensor **out);
/* op with its output written over inputs[0] (PyTorch's op_ forms; ops that allow it: rope):
 * *out is inputs[0] with a new reference, its values replaced, its spec unchanged (the
 * strategy must keep inputs[0] where it is: else DT_ERR_PLACEMENT, nothing written). Under
 * autograd the call is recorded in place; a node that recorded inputs[0] before fails
 * dt_backward with a named error (its values are gone). Where autograd must keep the old
 * values itself (an activation-checkpoint region that replays from them, an input whose
 * gradient reads them), *out is a new tensor as dt_op_call gives. inputs[0] must not be a
 * leaf that requires grad (DT_ERR_ARG). */
DT_API dt_status dt_op_call_inplace(dt_op op, dt_tensor *const *inputs, int ninputs,
                                    const dt_op_args *args, dt_tensor **out);
/* The same for an op with outputs besides the first (scaled_dot_product_attention's
 * log-sum-exp; its backward's dk and dv): aux[0..naux) receives them, in out's placements.
 * DT_ERR_ARG when naux is not the op's count. */
DT_API dt_status dt_op_call_aux(dt_op op, dt_tensor *const *inputs, int ninputs,
                                const dt_op_args *args, dt_tensor **out, dt_tensor **aux, int naux);

/* Typed wrappers (same semantics as PyTorch; broadcasting follows NumPy). max and min give the
 * values, as amax and amin; var and std are unbiased; the reductions' ndims 0 reduces every
 * dim. pick(logits (..., C), target (...)) is logits[..., target], the target logit of each
 * row. */
DT_API dt_status dt_add(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_sub(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_mul(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_div(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_maximum(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_minimum(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_mm(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_bmm(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_matmul(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_embedding(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_pick(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_neg(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_exp(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_log(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_sqrt(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_rsqrt(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_abs(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_relu(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_gelu(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_silu(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_tanh(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_sigmoid(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_contiguous(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_pow_scalar(dt_tensor *x, double s, dt_tensor **out);
DT_API dt_status dt_add_scalar(dt_tensor *x, double s, dt_tensor **out);
DT_API dt_status dt_mul_scalar(dt_tensor *x, double s, dt_tensor **out);
DT_API dt_status dt_sum(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_mean(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_amax(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_amin(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_max(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_min(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_var(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_std(dt_tensor *x, const int *dims, int ndims, int keepdim, dt_tensor **out);
DT_API dt_status dt_softmax(dt_tensor *x, int dim, dt_tensor **out);
DT_API dt_status dt_log_softmax(dt_tensor *x, int dim, dt_tensor **out);
DT_API dt_status dt_unsqueeze(dt_tensor *x, int dim, dt_tensor **out);
DT_API dt_status dt_squeeze(dt_tensor *x, int dim, dt_tensor **out);
/* 1 where a (op) b, else 0, in the inputs' dtype; sign: -1, 0, 1 (NaN for NaN). */
DT_API dt_status dt_eq(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_ne(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_gt(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_ge(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_lt(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_le(dt_tensor *a, dt_tensor *b, dt_tensor **out);
DT_API dt_status dt_sign(dt_tensor *x, dt_tensor **out);

/* The same by op value: dt_unary_op for the unary group and sign, dt_scalar_op for the scalar
 * group, dt_reduce for the reduce group and argmax/argmin (which take exactly one dim). */
DT_API dt_status dt_unary_op(dt_op op, dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_scalar_op(dt_op op, dt_tensor *x, double s, dt_tensor **out);
DT_API dt_status dt_reduce(dt_op op, dt_tensor *x, const int *dims, int ndims, int keepdim,
                           dt_tensor **out);

/* cond ? a : b element-wise with broadcasting; cond of any dtype (non-zero = true). */
DT_API dt_status dt_where(dt_tensor *cond, dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* bias + a @ b: a (M, K), b (K, N), bias broadcast to (M, N). */
DT_API dt_status dt_addmm(dt_tensor *bias, dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* x @ w^T + b (b nullable): x (..., in), w (out, in), b (out). */
DT_API dt_status dt_linear(dt_tensor *x, dt_tensor *w, dt_tensor *b, dt_tensor **out);
/* The index (i64) of the largest / smallest element along dim; ties take the first. */
DT_API dt_status dt_argmax(dt_tensor *x, int dim, int keepdim, dt_tensor **out);
DT_API dt_status dt_argmin(dt_tensor *x, int dim, int keepdim, dt_tensor **out);
DT_API dt_status dt_layer_norm(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, double eps,
                               dt_tensor **out);
DT_API dt_status dt_rms_norm(dt_tensor *x, dt_tensor *weight, double eps, dt_tensor **out);
/* torch.linalg.vector_norm(x, ord, dims, keepdim): max |x| for ord = INFINITY, min |x| for
 * -INFINITY, the count of non-zeros for 0, (sum |x|^ord)^(1/ord) otherwise; over dims (ndims
 * 0: every dim). Float dtypes. Where a reduced dim is sharded the result is a pending norm,
 * NormP(ord) (dtensor/placement.h), on that mesh dim: no communication until it is
 * redistributed (one all_reduce to R). A Partial input is reduced first. */
DT_API dt_status dt_vector_norm(dt_tensor *x, double ord, const int *dims, int ndims, int keepdim,
                                dt_tensor **out);

/* The ord-norm of all elements of tensors[0..n) together (torch.nn.utils.get_total_norm):
 * *out, the same double on every rank. The tensors share one mesh and may have any
 * placements and float dtypes; Partial ones are reduced first (as dispatch reduces them for
 * dt_vector_norm). Collective over the mesh; blocks. Beyond those reductions it issues at most
 * one all_reduce, of one double, over the mesh dims that shard some tensor (none when every
 * tensor is replicated); the parts are combined in double. n = 0 gives 0. */
DT_API dt_status dt_total_norm(dt_tensor *const *tensors, int n, double ord, double *out);

/* torch.nn.utils.clip_grad_norm_: the total norm as dt_total_norm, then every tensor scaled in
 * place by max_norm / (total + 1e-6) when that is below 1 (by NaN when total is NaN, as torch;
 * local, no communication: scaling commutes with every placement). *total_out (nullable) =
 * the total before clipping. Collective over the mesh; blocks. */
DT_API dt_status dt_clip_grad_norm_(dt_tensor *const *tensors, int n, double max_norm, double ord,
                                    double *total_out);
/* logits (N, C, ...) f32/f64, target (N, ...) i64/i32 class ids. Rows labelled
 * DT_IGNORE_INDEX (-100, as PyTorch) are skipped: their loss is 0 and the mean is over the
 * others. Any other label outside [0, C) is DT_ERR_ARG naming its position and value, on
 * every rank. A replicated target is checked by every rank alone; a sharded one costs one
 * small all_gather (each rank's summary of its labels: the first bad one, the ignored count),
 * so training loops that hold the whole batch anyway pass the target replicated. */
DT_API dt_status dt_cross_entropy(dt_tensor *logits, dt_tensor *target, dt_reduction reduction,
                                  dt_tensor **out);
/* The same with another ignore_index. */
DT_API dt_status dt_cross_entropy_ignore(dt_tensor *logits, dt_tensor *target,
                                         dt_reduction reduction, int64_t ignore_index,
                                         dt_tensor **out);
/* softmax(q k^T / sqrt(D) [causal]) v: q (..., Hq, Tq, D), k (..., Hkv, Tk, D), v (..., Hkv,
 * Tk, Dv). Hkv may divide Hq (grouped-query attention, torch's enable_gqa): query head h
 * reads kv head h / (Hq / Hkv). */
DT_API dt_status dt_sdpa(dt_tensor *q, dt_tensor *k, dt_tensor *v, int causal, dt_tensor **out);
/* dt_sdpa on the projections' layout: q (..., Tq, Hq, D), k (..., Tk, Hkv, D), v (..., Tk, Hkv,
 * Dv) -> out (..., Tq, Hq, Dv), the same values (bit for bit) as dt_sdpa on the heads-first
 * transposes, transposed back, without those copies; the view to (..., T, H * Dv) is free.
 * Shards the batch dims and the heads (dim -2), never the sequence. */
DT_API dt_status dt_sdpa_seq_first(dt_tensor *q, dt_tensor *k, dt_tensor *v, int causal,
                                   dt_tensor **out);
/* dt_sdpa that also returns each query row's log-sum-exp of its scaled, masked scores: lse
 * (..., Hq, Tq), f64 for f64 inputs and f32 for the others, -inf for a row without keys
 * (torch's _scaled_dot_product_flash_attention). The state dt_sdpa_backward starts from; the
 * autograd node of dt_sdpa saves it by itself. */
DT_API dt_status dt_sdpa_lse(dt_tensor *q, dt_tensor *k, dt_tensor *v, int causal,
                             dt_tensor **out, dt_tensor **lse);
/* dt_sdpa's gradients at grad_out (the output's shape) from the forward's lse, without a
 * softmax pass: P = exp(q k^T / sqrt(D) - lse) per head, then dq, dk, dv of q's, k's and v's
 * shapes (dk and dv summed over the query heads of each kv head). Sharded as the forward. */
DT_API dt_status dt_sdpa_backward(dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *grad_out,
                                  dt_tensor *lse, int causal, dt_tensor **dq, dt_tensor **dk,
                                  dt_tensor **dv);
DT_API dt_status dt_transpose(dt_tensor *x, int dim0, int dim1, dt_tensor **out);
/* out dim i is x dim dims[i] (ndims == x's dims). */
DT_API dt_status dt_permute(dt_tensor *x, int ndims, const int *dims, dt_tensor **out);
/* torch's t(): transposes a 2-D tensor; a 0-D or 1-D one is returned as is (one more
 * reference to x, as torch returns a view). */
DT_API dt_status dt_t(dt_tensor *x, dt_tensor **out);
DT_API dt_status dt_view(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out);
/* x[..., start:end, ...] along dim (negative start/end count from the end, as Python). */
DT_API dt_status dt_slice(dt_tensor *x, int dim, int64_t start, int64_t end, dt_tensor **out);
/* x broadcast to shape (NumPy rules; x's dims align from the right). */
DT_API dt_status dt_expand(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out);
/* Concatenates 1 to 4 tensors along dim. */
DT_API dt_status dt_cat(dt_tensor *const *xs, int n, int dim, dt_tensor **out);
/* Splits x along dim into n pieces of the given sizes (summing to the dim's size); outs gets
 * n new tensors. On failure none is returned. */
DT_API dt_status dt_split(dt_tensor *x, int dim, const int64_t *sizes, int n, dt_tensor **outs);

/* Stacks 1 to 4 tensors of one shape along a new dim (in [-ndim - 1, ndim]), as torch.stack:
 * (A, B) x n at dim 1 -> (A, n, B). The inputs' shards move to the dims they become; a copy,
 * no kernel. */
DT_API dt_status dt_stack(dt_tensor *const *xs, int n, int dim, dt_tensor **out);
/* torch.unbind: x's dim removed, one tensor per index along it; n must be x's size along dim
 * and outs must hold n. When dim is sharded, x is redistributed once (as dispatch decides
 * for slicing it), not once per piece. On failure none is returned. */
DT_API dt_status dt_unbind(dt_tensor *x, int dim, int n, dt_tensor **outs);
/* torch.reshape: our tensors are contiguous, so it is dt_view (the shards follow the view
 * rules of dt_view). */
DT_API dt_status dt_reshape(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out);
/* silu(gate) * up (SwiGLU's gating, gate and up broadcast as mul): one fused dt_silu_mul when
 * gate and up have one shape, else silu and mul, each placed on its own. */
DT_API dt_status dt_swiglu(dt_tensor *gate, dt_tensor *up, dt_tensor **out);
/* silu(gate) * up in one kernel pass, gate and up of one shape and float dtype, sharded alike
 * on any dim (or replicated); its backward is one dt_silu_mul_backward. Collective over the
 * mesh as any op; the caller owns *out. */
DT_API dt_status dt_silu_mul(dt_tensor *gate, dt_tensor *up, dt_tensor **out);
/* dt_silu_mul's gradients at grad (the output's shape) in one pass: dgate = grad up s (1 +
 * gate (1 - s)) with s = sigmoid(gate), dup = grad silu(gate). The caller owns both. */
DT_API dt_status dt_silu_mul_backward(dt_tensor *gate, dt_tensor *up, dt_tensor *grad,
                                      dt_tensor **dgate, dt_tensor **dup);
/* log_softmax(logits, dim 1) at the target class in one pass over the logits, the bits of
 * dt_log_softmax then picking: logits (N, C, d...) f32/f64, target (N, d...) i32/i64 class ids;
 * out (N, d...), 0 where a target is outside [0, C). stats (nullable): (N, d..., 2), each row's
 * max and 1 / sum exp(x - max). The class dim must be whole on each rank (dispatch gathers it;
 * cross_entropy keeps its loss-parallel route for a sharded class dim); the other dims shard.
 * Its backward is one dt_log_softmax_pick_backward from the saved stats. The caller owns *out
 * and *stats. */
DT_API dt_status dt_log_softmax_pick(dt_tensor *logits, dt_tensor *target, dt_tensor **out,
                                     dt_tensor **stats);
/* Its gradient at grad ((N, d...)) from stats, written in one pass: grad onehot(target) -
 * softmax(logits) grad along dim 1, of the logits' shape; rows with a target outside [0, C) get
 * zero. The caller owns *out. */
DT_API dt_status dt_log_softmax_pick_backward(dt_tensor *logits, dt_tensor *target,
                                              dt_tensor *stats, dt_tensor *grad, dt_tensor **out);
/* The residual add and the RMS norm that follows it in one pass (a transformer block's
 * x + attention(...) then ffn_norm): *sum = x + residual, *out = rms_norm(*sum, weight, eps)
 * over the last dim (weight 1-D of its size, eps > 0). The values are those of dt_add then
 * dt_rms_norm; autograd records it as those two ops, so both outputs carry gradients. x and
 * residual share shape and float dtype; they shard alike on any dim but the last (dispatch
 * moves them otherwise). Collective as any op; the caller owns *out and *sum. */
DT_API dt_status dt_rms_norm_residual(dt_tensor *x, dt_tensor *residual, dt_tensor *weight,
                                      double eps, dt_tensor **out, dt_tensor **sum);
/* dt_layer_norm's gradients at grad (x's shape) in one pass, rstd recomputed from x: *gx (x's
 * shape), *gw = the sum over the leading dims of grad xhat and *gb = that of grad (the
 * normalised dims' shape; computed whether or not the forward had a weight or bias). x is
 * normalised over its last ndims dims (0: weight's ndim, else 1); weight is nullable, eps 0
 * means 1e-5. x and grad shard alike on a leading dim (dispatch moves them otherwise); gw and gb
 * are then Partial(sum) on that mesh dim, as a sum over a sharded dim is. Not differentiable
 * (no double backward). Collective as any op; the caller owns *gx, *gw and *gb. */
DT_API dt_status dt_layer_norm_backward(dt_tensor *x, dt_tensor *weight, dt_tensor *grad,
                                        double eps, int ndims, dt_tensor **gx, dt_tensor **gw,
                                        dt_tensor **gb);
/* dt_rms_norm's gradients likewise: *gx and *gw (no mean is subtracted, no bias). */
DT_API dt_status dt_rms_norm_backward(dt_tensor *x, dt_tensor *weight, dt_tensor *grad,
                                      double eps, int ndims, dt_tensor **gx, dt_tensor **gw);

/* cross_entropy's options (torch's keywords); DT_XENT_DEFAULTS are torch's defaults. */
typedef struct dt_xent_opts {
    dt_reduction reduction;
    int use_ignore_index;   /* 1: rows labelled ignore_index are skipped (loss 0, not counted */
    int64_t ignore_index;   /*    in the mean) */
    double label_smoothing; /* in [0, 1]: loss = (1 - eps) * nll + eps * the mean over classes
                               of -log_softmax */
} dt_xent_opts;
#define DT_XENT_DEFAULTS                                                                           \
    ((dt_xent_opts){                                                                               \
        .reduction = DT_REDUCTION_MEAN, .use_ignore_index = 1, .ignore_index = DT_IGNORE_INDEX})
/* dt_cross_entropy with every option; opts NULL is DT_XENT_DEFAULTS. A label_smoothing outside
 * [0, 1] (or NaN) or an unknown reduction is DT_ERR_ARG. Loss parallel (class dim sharded)
 * works as in dt_cross_entropy: the logits are not gathered. */
DT_API dt_status dt_cross_entropy_ex(dt_tensor *logits, dt_tensor *target, const dt_xent_opts *opts,
                                     dt_tensor **out);

/* Rotary position embedding (torchtitan's apply_rotary_emb, interleaved pairs): x (B, T, H, D)
 * with D even, cos and sin (T, D/2) of x's dtype; pair i of position t is rotated by the
 * angle whose cos and sin are cos[t, i], sin[t, i]: out[2i] = x[2i] c - x[2i+1] s,
 * out[2i+1] = x[2i] s + x[2i+1] c. An odd D is DT_ERR_SHAPE. */
DT_API dt_status dt_rope(dt_tensor *x, dt_tensor *cos, dt_tensor *sin, dt_tensor **out);
/* dt_rope written over x (dt_op_call_inplace): *out is x, rotated, with no new storage; its
 * backward is the rotation by -theta and needs nothing saved. */
DT_API dt_status dt_rope_(dt_tensor *x, dt_tensor *cos, dt_tensor *sin, dt_tensor **out);

/* The rope tables for positions 0 .. T-1 and head size D (even) as torchtitan's
 * precompute_freqs_cis: angle(t, i) = t * theta^(-2i/D), computed in f64 and rounded once to
 * dtype. Both (T, D/2) on mesh with the given placements. Collective (every rank of mesh calls
 * it; no communication). On failure neither is returned. */
DT_API dt_status dt_rope_tables(dt_mesh *mesh, dt_dtype dtype, int64_t T, int64_t D, double theta,
                                int nplacements, const dt_placement *placements,
                                dt_tensor **cos_out, dt_tensor **sin_out);

/* torch's dropout: training and p > 0 zero each element with probability p and scale the rest
 * by 1 / (1 - p). Element i (flat index in the global tensor) is kept iff the uniform that
 * dt_tensor_rand would draw for it from gen's state (same seed, offset and dtype) is >= p, so
 * the mask is (rand(x.shape) >= p) whatever the placements; gen's offset then advances as
 * dt_tensor_rand's does. training 0 or p 0: *out is x with one more reference (gen untouched);
 * p 1: zeros. p outside [0, 1] is DT_ERR_ARG. Float dtypes. */
DT_API dt_status dt_dropout(dt_tensor *x, double p, int training, dt_generator *gen,
                            dt_tensor **out);
/* torch.gather: out (index's shape) = x at index along dim, out[..i..] = x[..index[..i..]..].
 * index is i32/i64 with x's ndim, its sizes <= x's on every dim but dim. An index outside
 * [0, x's size along dim) is DT_ERR_ARG naming its position and value on the CPU ranks whose
 * shard of index holds it (every rank when index is replicated); CUDA ranks give 0 for it. */
DT_API dt_status dt_gather(dt_tensor *x, int dim, dt_tensor *index, dt_tensor **out);
/* index (...) i32/i64 -> (..., num_classes) i64 of 0/1; num_classes > 0 (no -1 inference). An
 * index outside [0, num_classes) is DT_ERR_ARG on the CPU ranks that hold it (CUDA: a zero row). */
DT_API dt_status dt_one_hot(dt_tensor *index, int64_t num_classes, dt_tensor **out);
/* The k largest (smallest when largest is 0) elements of x along dim, sorted, ties taking the
 * lower index, NaN above every number (as torch). values (x's dtype) and indices (i64) have x's
 * shape with dim of size k; 0 <= k <= x's size along dim. The caller owns both; on failure
 * neither is returned. x is redistributed at most once (the topk dim must be whole). */
DT_API dt_status dt_topk(dt_tensor *x, int64_t k, int dim, int largest, dt_tensor **values_out,
                         dt_tensor **indices_out);
/* torch.zeros(shape).scatter_add_(dim, index, src): out (ndim dims, shape; src's dtype) is zero
 * but where src's elements land, each added at out[..i..] with i's coordinate along dim
 * replaced by index[..i..]. src is a float tensor of ndim dims, its sizes <= shape's on every
 * dim but dim; index is i32/i64 of src's shape, except that it may have size 1 on a dim other
 * than dim (broadcast: embedding's gradient scatters (N, E) rows with an (N, 1) index). The adjoint of dt_gather: the gradient of
 * gather and of embedding. An index outside [0, shape[dim]) is DT_ERR_ARG naming its position
 * and value on the CPU ranks whose shard of index holds it; CUDA ranks skip it. Where out is
 * sharded each rank adds only what lands in its shard, so a sharded result is never whole on
 * one rank; whole inputs give out sharded along dim (each rank its rows). */
DT_API dt_status dt_scatter_add(dt_tensor *src, int dim, dt_tensor *index, int ndim,
                                const int64_t *shape, dt_tensor **out);
/* Inclusive cumulative sum along dim; x's shape and dtype (floats accumulate in f64, integers
 * in i64). */
DT_API dt_status dt_cumsum(dt_tensor *x, int dim, dt_tensor **out);

/* In place: the result replaces x's local data (x must own its data); x keeps its placements
 * (the result is redistributed to them when dispatch placed it otherwise). */
DT_API dt_status dt_add_(dt_tensor *x, dt_tensor *other);
DT_API dt_status dt_mul_(dt_tensor *x, dt_tensor *other);

/* The strategy dispatch picks for op on these inputs, without running it: the placements
 * each input is redistributed to (ninputs x mesh ndim, row-major) and the output's. */
DT_API dt_status dt_op_strategy(dt_op op, dt_tensor *const *inputs, int ninputs,
                                const dt_op_args *args, dt_placement *input_placements_out,
                                dt_placement *output_placements_out);

#ifdef __cplusplus
}
#endif
#endif
