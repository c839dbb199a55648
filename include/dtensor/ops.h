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

#include "dtensor/redistribute.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op list: enum value, name. */
#define DT_OP_LIST(X)                                                                              \
    X(ADD, "add") X(SUB, "sub") X(MUL, "mul") X(DIV, "div") X(MAXIMUM, "maximum")                 \
    X(MINIMUM, "minimum") X(WHERE, "where")                                                        \
    X(NEG, "neg") X(EXP, "exp") X(LOG, "log") X(SQRT, "sqrt") X(RSQRT, "rsqrt") X(ABS, "abs")     \
    X(RELU, "relu") X(GELU, "gelu") X(SILU, "silu") X(TANH, "tanh") X(SIGMOID, "sigmoid")         \
    X(POW_SCALAR, "pow_scalar") X(ADD_SCALAR, "add_scalar") X(MUL_SCALAR, "mul_scalar")            \
    X(MM, "mm") X(BMM, "bmm") X(MATMUL, "matmul") X(ADDMM, "addmm") X(LINEAR, "linear")            \
    X(SUM, "sum") X(MEAN, "mean") X(AMAX, "amax") X(AMIN, "amin") X(MAX, "max") X(MIN, "min")     \
    X(ARGMAX, "argmax")                                                                            \
    X(ARGMIN, "argmin") X(VAR, "var") X(STD, "std")                                                \
    X(SOFTMAX, "softmax") X(LOG_SOFTMAX, "log_softmax") X(LAYER_NORM, "layer_norm")                \
    X(RMS_NORM, "rms_norm") X(EMBEDDING, "embedding") X(PICK, "pick")                              \
    X(CROSS_ENTROPY, "cross_entropy") X(SDPA, "scaled_dot_product_attention")                      \
    X(TRANSPOSE, "transpose") X(PERMUTE, "permute") X(VIEW, "view") X(SLICE, "slice")              \
    X(UNSQUEEZE, "unsqueeze") X(SQUEEZE, "squeeze") X(CONTIGUOUS, "contiguous")                   \
    X(EXPAND, "expand") X(CAT, "cat")

typedef enum dt_op {
#define DT_OP_ENUM(e, name) DT_OP_##e,
    DT_OP_LIST(DT_OP_ENUM)
#undef DT_OP_ENUM
    DT_OP_COUNT
} dt_op;

/* "add", "mm", ...; "?" for an unknown op. */
const char *dt_op_name(dt_op op);

/* Static arguments. Zero-initialise and set what the op reads. */
typedef struct dt_op_args {
    double scalar;            /* pow/add/mul_scalar; eps for norms (0 = 1e-5); scale for sdpa (0 = 1/sqrt(D)) */
    int dims[DT_MAX_NDIM];    /* reductions: dims to reduce (negative from the end); permute: the order */
    int ndims;                /* reductions: 0 = all dims */
    int keepdim;              /* reductions */
    int dim, dim2;            /* softmax, argmax, slice, (un)squeeze: dim; transpose: dim and dim2 */
    int64_t start, end;       /* slice [start, end) along dim */
    int64_t shape[DT_MAX_NDIM];
    int shape_ndim;           /* view: the new shape (one entry may be -1); expand: the target */
    int correction;           /* var/std: 1 = unbiased (torch's default), 0 = biased */
    int causal;               /* sdpa */
    int reduction_mean;       /* cross_entropy: 1 = mean over samples, 0 = none */
    int use_ignore_index;     /* cross_entropy: 1 = rows labelled ignore_index are skipped */
    int64_t ignore_index;     /* (loss 0, not counted in the mean); other labels outside
                                 [0, C) are DT_ERR_ARG */
} dt_op_args;

/* PyTorch's default ignore_index for cross_entropy. */
#define DT_IGNORE_INDEX (-100)

/* A dense row-major block of this rank's data, as local kernels see it. */
typedef struct dt_block {
    void *data;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_device device; /* where data lives: for CUDA, data is device memory */
} dt_block;

/* Registering an op (like PyTorch's register_sharding): its single-mesh-dim strategies as
 * rows of placements (ninputs inputs, then the output), how its output spec follows from the
 * inputs', and its local kernel. Dispatch combines the rows over mesh dims, prices them and
 * redistributes inputs like for built-in ops. */
#define DT_OP_MAX_USER_INPUTS 4
typedef struct dt_op_def {
    const char *name; /* copied */
    int ninputs;      /* 1 .. DT_OP_MAX_USER_INPUTS */
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
dt_status dt_op_register(const dt_op_def *def, dt_op *op_out);

/* The generic entry point: runs op on inputs with args. */
dt_status dt_op_call(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                     dt_tensor **out);

/* Typed wrappers (same semantics as PyTorch; broadcasting follows NumPy). */
dt_status dt_add(dt_tensor *a, dt_tensor *b, dt_tensor **out);
dt_status dt_sub(dt_tensor *a, dt_tensor *b, dt_tensor **out);
dt_status dt_mul(dt_tensor *a, dt_tensor *b, dt_tensor **out);
dt_status dt_div(dt_tensor *a, dt_tensor *b, dt_tensor **out);
dt_status dt_unary_op(dt_op op, dt_tensor *x, dt_tensor **out); /* neg, exp, ..., sigmoid */
dt_status dt_scalar_op(dt_op op, dt_tensor *x, double s, dt_tensor **out); /* pow/add/mul_scalar */
dt_status dt_mm(dt_tensor *a, dt_tensor *b, dt_tensor **out);
dt_status dt_matmul(dt_tensor *a, dt_tensor *b, dt_tensor **out);
/* x @ w^T + b (b nullable): x (..., in), w (out, in), b (out). */
dt_status dt_linear(dt_tensor *x, dt_tensor *w, dt_tensor *b, dt_tensor **out);
dt_status dt_reduce(dt_op op, dt_tensor *x, const int *dims, int ndims, int keepdim,
                    dt_tensor **out); /* sum, mean, amax, amin, max, min, var, std (max and
                                         min give the values, as amax and amin; argmax and
                                         argmin the indices) */
dt_status dt_softmax(dt_tensor *x, int dim, dt_tensor **out);
dt_status dt_layer_norm(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, double eps,
                        dt_tensor **out);
dt_status dt_rms_norm(dt_tensor *x, dt_tensor *weight, double eps, dt_tensor **out);
dt_status dt_embedding(dt_tensor *table, dt_tensor *indices, dt_tensor **out);
/* logits (N, C, ...) f32/f64, target (N, ...) i64/i32 class ids. Rows labelled
 * DT_IGNORE_INDEX (-100, as PyTorch) are skipped: their loss is 0 and the mean is over the
 * others. Any other label outside [0, C) is DT_ERR_ARG naming its position and value, on
 * every rank. */
dt_status dt_cross_entropy(dt_tensor *logits, dt_tensor *target, int mean, dt_tensor **out);
/* The same with another ignore_index. */
dt_status dt_cross_entropy_ignore(dt_tensor *logits, dt_tensor *target, int mean,
                                  int64_t ignore_index, dt_tensor **out);
dt_status dt_sdpa(dt_tensor *q, dt_tensor *k, dt_tensor *v, int causal, dt_tensor **out);
dt_status dt_transpose(dt_tensor *x, int dim0, int dim1, dt_tensor **out);
/* torch's t(): transposes a 2-D tensor; a 0-D or 1-D one is returned as is (one more
 * reference to x, as torch returns a view). */
dt_status dt_t(dt_tensor *x, dt_tensor **out);
dt_status dt_view(dt_tensor *x, int ndim, const int64_t *shape, dt_tensor **out);
/* Concatenates 1 to 4 tensors along dim. */
dt_status dt_cat(dt_tensor *const *xs, int n, int dim, dt_tensor **out);
/* Splits x along dim into n pieces of the given sizes (summing to the dim's size); outs gets
 * n new tensors. On failure none is returned. */
dt_status dt_split(dt_tensor *x, int dim, const int64_t *sizes, int n, dt_tensor **outs);

/* In place: the result replaces x's local data (x must own its data); x keeps its placements
 * (the result is redistributed to them when dispatch placed it otherwise). */
dt_status dt_add_(dt_tensor *x, dt_tensor *other);
dt_status dt_mul_(dt_tensor *x, dt_tensor *other);

/* What dispatch does about inputs whose placements differ from the chosen strategy's. */
typedef enum dt_redistribute_mode {
    DT_REDISTRIBUTE_IMPLICIT = 0, /* redistribute them (the default) */
    DT_REDISTRIBUTE_LOG,          /* redistribute them and print each one to stderr */
    DT_REDISTRIBUTE_EXPLICIT,     /* fail with DT_ERR_PLACEMENT naming the op and the input */
} dt_redistribute_mode;

dt_status dt_ctx_set_redistribute_mode(dt_ctx *ctx, dt_redistribute_mode mode);

/* The strategy dispatch picks for op on these inputs, without running it: the placements
 * each input is redistributed to (ninputs x mesh ndim, row-major) and the output's. */
dt_status dt_op_strategy(dt_op op, dt_tensor *const *inputs, int ninputs, const dt_op_args *args,
                         dt_placement *input_placements_out, dt_placement *output_placements_out);

#ifdef __cplusplus
}
#endif
#endif
