/* The op cases of the sharded-vs-unsharded suite, without Criterion: test_ops runs them on
 * CPU ranks and gpu_check on ranks of one GPU, each against the unsharded result computed on
 * one CPU rank. */
#ifndef DT_TEST_OP_CASES_H
#define DT_TEST_OP_CASES_H

#include "rank_helpers.h"

#define OP_CASE_MAX_IN 5 /* inputs of a case */

typedef struct op_case {
    const char *name;
    dt_op op;
    dt_op_args args;
    int n;
    int nd[OP_CASE_MAX_IN];
    int64_t shape[OP_CASE_MAX_IN][4];
    dt_dtype dtype[OP_CASE_MAX_IN];
    int positive; /* inputs > 0 (log, sqrt, rsqrt, pow) */
    int64_t index_range; /* integer inputs in [0, range) */
} op_case;


extern const op_case op_cases[];
extern const size_t op_ncases;

/* One run of a case: its mesh ("4", "2x2") and input placements in; the full result out. */
typedef struct op_run {
    const op_case *c;
    const char *mesh;
    dt_placement pl[OP_CASE_MAX_IN][2];
    int cuda;       /* ranks compute on the GPU (dt_ctx_set_device) */
    double *result; /* out on rank 0: full result, as doubles (free it) */
    size_t result_n;
    int64_t result_shape[DT_MAX_NDIM];
    int result_nd;
} op_run;

/* SPMD body: distributes the inputs, runs the op, gathers the result (arg: op_run). */
dt_status op_body(dt_ctx *ctx, void *arg);

/* Ranks of a mesh text ("2x2" -> 4). */
int op_mesh_ranks(const char *mesh);
/* How many placement patterns case c tries on mesh (all when few, else 24 drawn), and the
 * placements of try t: a pure function of (case index, mesh, t). */
int op_case_tries(const op_case *c, const char *mesh);
void op_case_placements(const op_case *c, size_t ci, const char *mesh, int t,
                        dt_placement pl[OP_CASE_MAX_IN][2]);
/* The placements of r's inputs as text: "S(0) | R | ...". */
void op_run_placements(const op_run *r, char *buf, size_t cap);
/* Whether r's result equals ref's within the case's tolerance; msg says where not. */
int op_result_matches(const op_run *ref, const op_run *r, char *msg, size_t cap);
double tolerance(const op_case *c);

/* Megatron MLP on a tp mesh of 4: x (T, C) @ W1^T (column parallel), gelu, @ W2^T (row
 * parallel), against the same computed unsharded in double. Without sequence parallelism the
 * forward issues exactly one all_reduce; with it (x and the output sharded on the sequence
 * dim) exactly one all_gather and one reduce_scatter. Weights are divided by wscale. */
typedef struct mlp_run {
    int cuda, sequence_parallel;
    int T, C, H;
    float wscale;
} mlp_run;
dt_status mlp_body(dt_ctx *ctx, void *arg); /* arg: mlp_run */

/* dt_dropout of a (5, 7, 3) tensor of dtype placed as pl on mesh, gen (seed 42, offset 3):
 * checks on rank 0 that the gathered result is (rand >= p ? x / (1 - p) : 0) bit for bit,
 * rand drawn by dt_tensor_rand with the same placements from the same generator state, and
 * that both generators advanced alike; out gets the result's bytes (free it). Also the
 * shortcuts: training 0 and p 0 return x itself, p 1 gives zeros, p outside [0, 1] is
 * DT_ERR_ARG. */
typedef struct dropout_run {
    const char *mesh;
    dt_placement pl[2];
    dt_dtype dtype;
    double p;
    int cuda;
    unsigned char *out; /* rank 0 */
    size_t bytes;
} dropout_run;
dt_status dropout_body(dt_ctx *ctx, void *arg);

#endif
