/* Local CPU kernels: dense row-major arrays in, dense row-major arrays out. A kernel knows
 * nothing of meshes, placements or ranks; dispatch hands it this rank's blocks. bf16 and f16
 * are stored as uint16_t and computed in f32 (src/core/half.h); f32 math in f32, f64 in f64;
 * integer types where noted. Every kernel returns DT_OK or a DT_ERR_* with dt_error_set. The
 * caller allocates outputs with the documented shapes (and checks shapes and dtypes: kernels
 * may assume valid arguments). Shapes of up to DT_MAX_NDIM dims. */
#ifndef DT_OPS_KERNELS_H
#define DT_OPS_KERNELS_H

#include <stdint.h>

#include "dtensor/block.h"

typedef dt_block dt_local;

/* ---- pointwise ------------------------------------------------------------------------- */

typedef enum dt_unary {
    DT_UNARY_NEG, DT_UNARY_EXP, DT_UNARY_LOG, DT_UNARY_SQRT, DT_UNARY_RSQRT, DT_UNARY_ABS,
    DT_UNARY_RELU, DT_UNARY_GELU /* tanh approximation, as GPT-2 */, DT_UNARY_SILU,
    DT_UNARY_TANH, DT_UNARY_SIGMOID,
    DT_UNARY_POW_SCALAR, /* x ** s */
    DT_UNARY_ADD_SCALAR, /* x + s */
    DT_UNARY_MUL_SCALAR, /* x * s */
    DT_UNARY_SIGN,       /* -1, 0, 1; NaN for NaN */
    DT_UNARY_COUNT
} dt_unary;

/* out = f(x) element-wise; out has x's shape and dtype (out may alias x: in place). Integer
 * dtypes support NEG, ABS, RELU, SIGN, ADD_SCALAR and MUL_SCALAR (scalar truncated toward
 * zero); others return DT_ERR_DTYPE. */
dt_status dt_cpu_unary(dt_unary f, double scalar, const dt_local *x, dt_local *out);

typedef enum dt_binary {
    DT_BINARY_ADD, DT_BINARY_SUB, DT_BINARY_MUL, DT_BINARY_DIV, DT_BINARY_MAX, DT_BINARY_MIN,
    /* comparisons: 1 where a (op) b holds, else 0, in the operands' dtype (NaN: false, but NE) */
    DT_BINARY_EQ, DT_BINARY_NE, DT_BINARY_GT, DT_BINARY_GE, DT_BINARY_LT, DT_BINARY_LE,
    DT_BINARY_COUNT
} dt_binary;

/* out = a (op) b with NumPy broadcasting: shapes align from the right, size-1 dims (and
 * missing leading dims) broadcast. out has the broadcast shape, a's dtype (a and b have the
 * same dtype). out may alias a or b when it has that input's shape. All dtypes (integer DIV
 * truncates toward zero; integer division by zero gives 0). */
dt_status dt_cpu_binary(dt_binary f, const dt_local *a, const dt_local *b, dt_local *out);

/* out = cond ? a : b with broadcasting; cond is any dtype (non-zero = true). */
dt_status dt_cpu_where(const dt_local *cond, const dt_local *a, const dt_local *b, dt_local *out);

/* ---- matmul ----------------------------------------------------------------------------- */

/* out (..., M, N) = a (..., M, K) @ b (..., K, N), batch dims broadcast (NumPy matmul rules;
 * a or b may be 2-D while the other has batch dims). trans: DT_MM_TRANS_B, b is given as
 * (..., N, K); DT_MM_TRANS_A, a as (..., K, M) (ops/kernel_args.h); both read in place.
 * Float dtypes only (bf16/f16: f32 accumulation). Uses OpenBLAS sgemm/dgemm when built with
 * it (DT_HAVE_OPENBLAS in dt_config.h), else a cache-blocked loop. */
dt_status dt_cpu_matmul(const dt_local *a, const dt_local *b, int trans, dt_local *out);

/* Grouped GEMM over G = groups blocks of rows (a MoE layer's experts: one call, not one per
 * expert). Group g has rows[g] rows, the blocks packed in group order; f64, row-major.
 *   NN: c rows (rows[g], N) = a rows (rows[g], K) @ b_g (K, N), b packed (G, K, N)
 *   NT: c rows (rows[g], N) = a rows (rows[g], K) @ b_g^T, b_g (N, K), b packed (G, N, K)
 *   TN: c_g (K, N) = (a rows (rows[g], K))^T @ b rows (rows[g], N), c packed (G, K, N); an
 *       empty group's c_g is zero
 * Uses OpenBLAS dgemm per group when built with it. */
typedef enum dt_grouped_mm { DT_GROUPED_NN, DT_GROUPED_NT, DT_GROUPED_TN } dt_grouped_mm;
void dt_cpu_grouped_mm(dt_grouped_mm mode, int64_t groups, const int64_t *rows, int64_t K,
                       int64_t N, const double *a, const double *b, double *c);

/* ---- reductions ------------------------------------------------------------------------- */

/* Reduces x over the dims in mask (bit d = dim d) with op sum, avg (mean), max or min. out
 * has x's shape with reduced dims set to 1 (keepdim form; the caller may drop them).
 * Integer sum/max/min allowed; mean of integers truncates toward zero. */
dt_status dt_cpu_reduce(dt_reduce_op op, unsigned mask, const dt_local *x, dt_local *out);

/* Index (i64) of the max (is_max) or min along dim; out has x's shape with dim set to 1,
 * dtype DT_I64. Ties take the first index. values (nullable) receives the max/min values in
 * x's dtype, same shape as out. offset is added to every index (a shard's global offset). */
dt_status dt_cpu_arg_reduce(int is_max, int dim, int64_t offset, const dt_local *x,
                            dt_local *out, dt_local *values);

/* The ord-norm of x over the dims in mask (torch.linalg.vector_norm): max |x| for ord = inf,
 * min |x| for -inf, the count of non-zeros for 0, (sum |x|^ord)^(1/ord) otherwise (negative
 * ord included). out has x's shape with reduced dims set to 1. Float dtypes (f64 math; bf16
 * and f16 stored once rounded). An empty reduction gives 0 (ord > 0, inf, 0) or inf (ord < 0,
 * -inf): the identity of the combination, so a rank's empty shard leaves a pending norm exact. */
dt_status dt_cpu_vector_norm(double ord, unsigned mask, const dt_local *x, dt_local *out);

/* ---- normalisation and softmax ---------------------------------------------------------- */

/* Softmax (log_softmax when log) along dim; out has x's shape and dtype. */
dt_status dt_cpu_softmax(int log, int dim, const dt_local *x, dt_local *out);

/* Layer norm over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, biased var.
 * weight and bias (nullable) are 1-D of the last dim's size. rms: x / sqrt(mean(x^2) + eps)
 * * weight (bias ignored). */
dt_status dt_cpu_layer_norm(int rms, double eps, const dt_local *x, const dt_local *weight,
                            const dt_local *bias, dt_local *out);

/* The gradients of dt_cpu_layer_norm (of its RMS norm when rms) at grad (x's shape) in one pass
 * per row, rstd recomputed from x with the forward's arithmetic. With xhat the normalised x and
 * h = grad weight (grad when weight is NULL): gx (x's shape) = rstd ((h - xhat mean(h xhat)) -
 * mean(h)) (no mean(h) for rms), the means over the last dim. gw (nullable) = the sum over the
 * rows of grad xhat and gb (nullable, ignored for rms) = the sum of grad, 1-D of the last dim's
 * size: a rank's share of the weight's and bias's gradients. The row sums add in double over
 * fixed blocks of DT_NORM_BWD_BLOCK rows, then the blocks in order, rounded once, so the bits
 * do not depend on the thread count; no rows give zeros. Float dtypes, the compute type as the
 * forward's. */
#define DT_NORM_BWD_BLOCK 32
dt_status dt_cpu_layer_norm_backward(int rms, double eps, const dt_local *x, const dt_local *weight,
                                     const dt_local *grad, dt_local *gx, dt_local *gw,
                                     dt_local *gb);

/* ---- indexing --------------------------------------------------------------------------- */

/* out (..., H) = table (V, H) rows at indices (...) (i32 or i64). Rows outside
 * [row_offset, row_offset + V) give zeros (a row-sharded table's masked lookup: the shard
 * holds global rows row_offset .. row_offset+V-1). */
dt_status dt_cpu_embedding(const dt_local *table, int64_t row_offset, const dt_local *indices,
                           dt_local *out);

/* out (...) = logits (..., C)[..., target - class_offset] where the target class (i32/i64,
 * shape (...)) falls in [class_offset, class_offset + C), else 0: the local part of picking
 * the target logit when the class dim is sharded. out has logits' dtype. */
dt_status dt_cpu_pick(const dt_local *logits, int64_t class_offset, const dt_local *target,
                      dt_local *out);

/* out = x broadcast to out->shape (NumPy rules: x's dims align from the right). */
dt_status dt_cpu_expand(const dt_local *x, dt_local *out);

/* Copies the box of x starting at start[] with extent out->shape into out. */
dt_status dt_cpu_slice(const dt_local *x, const int64_t *start, dt_local *out);

/* out = x with dims permuted: out dim i is x dim perm[i]. */
dt_status dt_cpu_permute(const dt_local *x, const int *perm, dt_local *out);

/* out (index's shape) = x gathered along dim: out[i] = x[j] with j_d = i_d + shift[d] on every
 * dim but dim (shift places out's block in x's) and j_dim = index[i] - dim_offset (x's block
 * holds global rows dim_offset .. along dim). index is i32/i64 with x's ndim. An index value
 * outside [0, dim_size) is DT_ERR_ARG naming its position and value; one inside it but outside
 * x's block gives 0 (the masked gather of a dim-sharded x). Every dtype. */
dt_status dt_cpu_gather(const dt_local *x, int dim, const int64_t *shift, int64_t dim_offset,
                        int64_t dim_size, const dt_local *index, dt_local *out);

/* The adjoint of gather: out = 0, then out[j] += src[i] for every element i of src with
 * j_d = i_d + shift[d] on every dim but dim (shift places src's block in out's) and
 * j_dim = index[i] - dim_offset (out's block holds global rows dim_offset .. along dim). index
 * has src's ndim and shape, except that it may have size 1 on a dim other than dim (broadcast:
 * one index for the whole line). Contributions whose j falls outside out's block are dropped
 * (the masked scatter of a sharded out). Each out element adds its contributions in increasing
 * order along dim (they share all other coordinates), in the dtype's compute type, rounding
 * after each add. An index value outside [0, dim_size) is DT_ERR_ARG naming its position and
 * value. Float dtypes. */
dt_status dt_cpu_scatter_add(const dt_local *src, int dim, const int64_t *shift,
                             int64_t dim_offset, int64_t dim_size, const dt_local *index,
                             dt_local *out);

/* out (..., C) i64 = (index[...] == class_offset + c) for c in [0, C), C out's last dim: the
 * classes class_offset .. of one_hot(index, num_classes). index is i32/i64, the block of the
 * global index that starts at index_offset; a value outside [0, num_classes) is DT_ERR_ARG
 * naming its global position. */
dt_status dt_cpu_one_hot(const dt_local *index, const int64_t *index_offset, int64_t num_classes,
                         int64_t class_offset, dt_local *out);

/* out (x's shape, dim of size k) i64 = the indices along dim of the k largest (smallest)
 * elements of x, sorted, ties taking the lower index, NaN above every number. Every dtype;
 * k <= x's size along dim (DT_ERR_ARG otherwise). */
dt_status dt_cpu_topk(const dt_local *x, int64_t k, int dim, int smallest, dt_local *out);

/* out = inclusive cumulative sum of x along dim, x's shape and dtype (out may alias x). Floats
 * accumulate in double and round each output once; integers accumulate in i64. */
dt_status dt_cpu_cumsum(const dt_local *x, int dim, dt_local *out);

/* ---- attention -------------------------------------------------------------------------- */

/* Which query heads an attention block holds when q is split by heads but k and v are whole
 * (tensor-parallel grouped-query attention whose kv heads do not split as q's do): heads
 * [offset, offset + the block's count) of total, k and v holding all Hkv kv heads; query head
 * h reads kv head (offset + h) / (total / Hkv). total 0: the block holds q's heads itself
 * (offset 0), as in every unsharded call. */
typedef struct dt_sdpa_heads {
    int64_t offset, total;
} dt_sdpa_heads;
#ifdef __cplusplus
#define DT_SDPA_ALL_HEADS (dt_sdpa_heads{0, 0})
#else
#define DT_SDPA_ALL_HEADS ((dt_sdpa_heads){0, 0})
#endif

/* Scaled dot-product attention per (batch..., head): q (..., Tq, D), k (..., Tk, D),
 * v (..., Tk, Dv) -> out (..., Tq, Dv) = softmax(q k^T * scale [+ causal mask]) v. Causal masks
 * key j > query i (top-left aligned). Float dtypes. Grouped-query: k and v may have fewer
 * heads (dim ndim - 3) than q, a divisor Hkv of q's Hq; query head h reads kv head
 * h / (Hq / Hkv) (torch's enable_gqa). lse: NULL, or (..., Tq) of dt_sdpa_lse_dtype(q's
 * dtype) receiving each row's log-sum-exp of its scaled, masked scores (-inf for a row with
 * no key): what the backward needs to rebuild the probabilities. seq_first: q, k, v, out are
 * (..., T, H, D) and lse (..., Tq, Hq) instead (the same sums, other addresses). heads: q
 * holds a range of a larger call's heads (dt_sdpa_heads), which must either be whole groups
 * of kv heads from a group's start or lie in one group. */
dt_status dt_cpu_sdpa(const dt_local *q, const dt_local *k, const dt_local *v, int causal,
                      int seq_first, dt_sdpa_heads heads, double scale, dt_local *out,
                      dt_local *lse);
/* Its gradients from the saved lse, without a softmax pass: per kv head P = exp(q k^T *
 * scale - lse) (masked), dP = g v^T, dS = P (dP - rowsum(P dP)), then dq = scale dS k,
 * dk = scale dS^T q and dv = P^T g, each kv head's summed over the query heads that read it.
 * g and dq have out's and q's shapes, dk and dv k's and v's; all of q's dtype. With heads
 * set, dk and dv are this block's share: zero in the kv heads no query head of q reads. */
dt_status dt_cpu_sdpa_backward(const dt_local *g, const dt_local *q, const dt_local *k,
                               const dt_local *v, const dt_local *lse, int causal, int seq_first,
                               dt_sdpa_heads heads, double scale, dt_local *dq, dt_local *dk,
                               dt_local *dv);

/* ---- model ops -------------------------------------------------------------------------- */

/* Rotary embedding with interleaved pairs: x (B, T, H, D), D even, cos and sin (T, D/2) of
 * x's dtype; out (x's shape, may alias x): out[..t, h, 2i] = x0 c - x1 s, out[.., 2i+1] =
 * x0 s + x1 c with x0, x1 = x[b, t, h, 2i], x[b, t, h, 2i+1] and c, s = cos[t, i], sin[t, i].
 * Float dtypes, computed in f32 (f64 for f64), each product and sum rounded (no FMA). */
dt_status dt_cpu_rope(const dt_local *x, const dt_local *cos, const dt_local *sin,
                      dt_local *out);

/* Dropout of a box of a global tensor: x is the box (x->ndim dims) starting at box_offset in a
 * global tensor of global_shape. Global element i (row-major flat index) is kept, times
 * 1 / (1 - p), iff the uniform dt_tensor_rand draws for element i of a tensor of x's dtype from
 * the Philox stream (seed, offset) is >= p (core/fill.h: dt_fill_unit); else 0. out has x's
 * shape (may alias x). Float dtypes. */
dt_status dt_cpu_dropout(double p, uint64_t seed, uint64_t offset, const int64_t *global_shape,
                         const int64_t *box_offset, const dt_local *x, dt_local *out);

/* ---- fused (ops/cpu/fused.c; f32 rows on ops/cpu/simd.h's run-time SIMD paths) ---------- */

/* SwiGLU in one pass: out = silu(gate) * up, the bits of silu then mul; gate, up and out share
 * shape and dtype (float dtypes; out may alias an input). */
dt_status dt_cpu_silu_mul(const dt_local *gate, const dt_local *up, dt_local *out);

/* Its gradients from grad (out's shape) in one pass, with s = sigmoid(gate):
 * dgate = grad up s (1 + gate (1 - s)) and dup = grad silu(gate); all five share a shape. */
dt_status dt_cpu_silu_mul_backward(const dt_local *gate, const dt_local *up,
                                   const dt_local *grad, dt_local *dgate, dt_local *dup);

/* Cross entropy's target log-probability in one pass over the logits: logits (N, C, d...)
 * f32/f64 with the class dim 1, target (N, d...) i32/i64; out (N, d...) of the logits' dtype
 * = log_softmax(logits, dim 1) at the target class, 0 where the target is outside [0, C) (an
 * ignored label). stats (nullable, (N, d..., 2) of the logits' dtype) gets each row's max and
 * 1 / sum exp(x - max): all the backward needs, instead of a logits-sized log_softmax. The
 * arithmetic is dt_cpu_softmax's (log_softmax for out, softmax's sum for stats), so out and the
 * backward are the bits of log_softmax, pick and their backward rules. */
dt_status dt_cpu_log_softmax_pick(const dt_local *logits, const dt_local *target, dt_local *out,
                                  dt_local *stats);

/* Its gradient written straight into out (logits' shape): out = onehot(target) grad[row] -
 * exp(logits - max) / sum grad[row] along the class dim (log_softmax's rule with the softmax
 * rebuilt from stats), rows whose target is outside [0, C) zero. */
dt_status dt_cpu_log_softmax_pick_backward(const dt_local *logits, const dt_local *target,
                                           const dt_local *stats, const dt_local *grad,
                                           dt_local *out);

/* RMS norm with the residual add fused, over the last dim: sum = x + residual, out =
 * sum / sqrt(mean(sum^2) + eps) * weight, the arithmetic of add then rms_norm (sum rounded to
 * its dtype first; mean in double). x, residual, out and sum share shape and dtype (float
 * dtypes); weight is 1-D of the last dim's size. One read of x and residual per row. */
dt_status dt_cpu_rms_norm_residual(double eps, const dt_local *x, const dt_local *residual,
                                   const dt_local *weight, dt_local *out, dt_local *sum);

/* ---- optimizers ------------------------------------------------------------------------- */

typedef enum dt_optim_rule { DT_OPTIM_RULE_SGD, DT_OPTIM_RULE_ADAMW } dt_optim_rule;

/* One parameter's local shard for a fused optimizer step (ops/cpu/optim_math.h has the
 * per-element update). numel elements each of param, grad and the state buffers. The update
 * reads param (param_dtype) or, when master is not NULL, the f32 master copy, which it updates
 * and then writes rounded into param. grad has grad_dtype (param_dtype or f32); state[0] and
 * state[1] (SGD: the momentum buffer, NULL when momentum is 0; AdamW: exp_avg, exp_avg_sq) have
 * state_dtype. The math runs in f64 when state_dtype is f64, else in f32, each stored value
 * rounded once. Scalars are the host's, per parameter: */
typedef struct dt_optim_item {
    void *param;
    const void *grad;
    void *master;
    void *state[2];
    uint64_t numel;
    dt_dtype param_dtype, grad_dtype, state_dtype;
    double lr, weight_decay;
    int first;                /* SGD: this step starts the momentum buffer (buf = g) */
    double step_size, bc2_sqrt; /* AdamW: lr / (1 - beta1^t), sqrt(1 - beta2^t) */
} dt_optim_item;

/* The rule's hyperparameters shared by every item. */
typedef struct dt_optim_hyper {
    dt_optim_rule rule;
    double momentum, dampening; /* SGD */
    int nesterov;
    double beta1, beta2, eps; /* AdamW */
} dt_optim_hyper;

/* One fused step over n items, in place (no item aliases another). Item arrays are host
 * memory; the data pointers live on the table's device. */
dt_status dt_cpu_optim_step(const dt_optim_hyper *h, const dt_optim_item *items, int n);

/* ---- one table per device ------------------------------------------------------------- */

/* The kernels above as a table, so op families run on whichever device their inputs live on:
 * dt_kernels_cpu is the dt_cpu_* functions, the CUDA table (ops/cuda/cuda_kernels.h) has the
 * same contracts. */
/* Every kernel slot, once: its name and parameters (each returns dt_status). The table below,
 * the CPU table (kernels.c, of the dt_cpu_<slot> functions declared above, which the table
 * type-checks) and the CUDA prototypes and table (ops/cuda/) come from it: a new slot is one
 * line here, its CPU function with its contract above, and its CUDA function. */
#define DT_KERNEL_SLOTS(X)                                                                         \
    X(unary, (dt_unary f, double scalar, const dt_local *x, dt_local *out))                        \
    X(binary, (dt_binary f, const dt_local *a, const dt_local *b, dt_local *out))                  \
    X(where, (const dt_local *cond, const dt_local *a, const dt_local *b, dt_local *out))          \
    X(matmul, (const dt_local *a, const dt_local *b, int trans, dt_local *out))                    \
    X(reduce, (dt_reduce_op op, unsigned mask, const dt_local *x, dt_local *out))                  \
    X(arg_reduce,                                                                                  \
      (int is_max, int dim, int64_t offset, const dt_local *x, dt_local *out, dt_local *values))   \
    X(softmax, (int log, int dim, const dt_local *x, dt_local *out))                               \
    X(layer_norm, (int rms, double eps, const dt_local *x, const dt_local *weight,                 \
                   const dt_local *bias, dt_local *out))                                           \
    X(layer_norm_backward, (int rms, double eps, const dt_local *x, const dt_local *weight,        \
                            const dt_local *grad, dt_local *gx, dt_local *gw, dt_local *gb))       \
    X(embedding,                                                                                   \
      (const dt_local *table, int64_t row_offset, const dt_local *indices, dt_local *out))         \
    X(pick, (const dt_local *logits, int64_t class_offset, const dt_local *target, dt_local *out)) \
    X(expand, (const dt_local *x, dt_local *out))                                                  \
    X(slice, (const dt_local *x, const int64_t *start, dt_local *out))                             \
    X(permute, (const dt_local *x, const int *perm, dt_local *out))                                \
    X(sdpa, (const dt_local *q, const dt_local *k, const dt_local *v, int causal, int seq_first,   \
             dt_sdpa_heads heads, double scale, dt_local *out, dt_local *lse))                     \
    X(sdpa_backward, (const dt_local *g, const dt_local *q, const dt_local *k, const dt_local *v,  \
                      const dt_local *lse, int causal, int seq_first, dt_sdpa_heads heads,         \
                      double scale, dt_local *dq, dt_local *dk, dt_local *dv))                     \
    X(rope, (const dt_local *x, const dt_local *cos, const dt_local *sin, dt_local *out))          \
    X(dropout, (double p, uint64_t seed, uint64_t offset, const int64_t *global_shape,             \
                const int64_t *box_offset, const dt_local *x, dt_local *out))                      \
    X(gather, (const dt_local *x, int dim, const int64_t *shift, int64_t dim_offset,               \
               int64_t dim_size, const dt_local *index, dt_local *out))                            \
    X(one_hot, (const dt_local *index, const int64_t *index_offset, int64_t num_classes,           \
                int64_t class_offset, dt_local *out))                                              \
    X(topk, (const dt_local *x, int64_t k, int dim, int smallest, dt_local *out))                  \
    X(cumsum, (const dt_local *x, int dim, dt_local *out))                                         \
    X(vector_norm, (double ord, unsigned mask, const dt_local *x, dt_local *out))                  \
    X(optim_step, (const dt_optim_hyper *h, const dt_optim_item *items, int n))                    \
    X(scatter_add, (const dt_local *src, int dim, const int64_t *shift, int64_t dim_offset,        \
                    int64_t dim_size, const dt_local *index, dt_local *out))                       \
    X(silu_mul, (const dt_local *gate, const dt_local *up, dt_local *out))                         \
    X(silu_mul_backward, (const dt_local *gate, const dt_local *up, const dt_local *grad,          \
                          dt_local *dgate, dt_local *dup))                                         \
    X(log_softmax_pick,                                                                            \
      (const dt_local *logits, const dt_local *target, dt_local *out, dt_local *stats))            \
    X(log_softmax_pick_backward, (const dt_local *logits, const dt_local *target,                  \
                                  const dt_local *stats, const dt_local *grad, dt_local *out))     \
    X(rms_norm_residual, (double eps, const dt_local *x, const dt_local *residual,                 \
                          const dt_local *weight, dt_local *out, dt_local *sum))

typedef struct dt_kernels {
    const char *name;
#define DT_KERNEL_FIELD(slot, params) dt_status(*slot) params;
    DT_KERNEL_SLOTS(DT_KERNEL_FIELD)
#undef DT_KERNEL_FIELD
} dt_kernels;

extern const dt_kernels dt_kernels_cpu;

/* Per device kind (CPU, CUDA); the CUDA entry is NULL in builds without it. */
extern const dt_kernels *const dt_kernel_tables[2];

/* The table of a device kind; NULL for CUDA in builds without it. */
static inline const dt_kernels *dt_kernels_of(dt_device_kind kind) {
    return (unsigned)kind < 2 ? dt_kernel_tables[kind] : NULL;
}

#endif
