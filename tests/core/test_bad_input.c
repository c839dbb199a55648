/* The bad-input catalogue: distinct invalid calls across the public API, each on every rank of
 * a 2x2 mesh (threads), each asserting the status, a phrase of the message, and that no output
 * was written. Run under ASan/UBSan with leak checks by make test-asan: no call may crash,
 * hang or leak. The calls that need several steps (a tensor released twice, labels out of
 * range) have a helper each; mismatched collectives are in test_collective_checks.c. */
#include <stdlib.h>

#include "helpers.h"

typedef struct fx {
    dt_ctx *ctx;
    dt_mesh *mesh;                     /* dp=2,tp=2 */
    dt_tensor *a, *b, *v, *c3, *logits; /* a, b: [4,4] f32 S(0),R; v: [4]; c3: [2,2,2] */
    dt_tensor *out;                    /* T_SENTINEL(dt_tensor *) before each call */
    dt_placement pl[2], one[1], three[3];
    int64_t shape[2];
    float buf[64];
} fx;

#define TS T_SENTINEL(dt_tensor *)
#define O (&f->out)

/* A tensor of the fixture's spec, made and dropped inside a case. */
static dt_tensor *fresh(fx *f) {
    dt_tensor *t = NULL;
    dt_tensor_zeros(f->mesh, DT_F32, 2, f->shape, 2, f->pl, &t);
    return t;
}

static dt_status release_twice(fx *f) {
    dt_tensor *t = fresh(f);
    dt_tensor_release(t);
    return dt_tensor_release(t);
}

static dt_status retain_released(fx *f) {
    dt_tensor *t = fresh(f);
    dt_tensor_release(t);
    return dt_tensor_retain(t);
}

static dt_status add_released(fx *f) {
    dt_tensor *t = fresh(f);
    dt_tensor_release(t);
    return dt_add(f->a, t, O);
}

static dt_status redistribute_released(fx *f) {
    dt_tensor *t = fresh(f);
    dt_tensor_release(t);
    return dt_tensor_redistribute(t, 2, f->pl, O);
}

static dt_status to_local_released(fx *f) {
    dt_tensor *t = fresh(f);
    dt_tensor_release(t);
    void *p;
    return dt_tensor_to_local(t, &p);
}

static dt_status full_released(fx *f) {
    dt_tensor *t = fresh(f);
    dt_tensor_release(t);
    return dt_tensor_full_tensor(t, f->buf, sizeof f->buf);
}

static dt_status info_released(fx *f) {
    dt_tensor *t = fresh(f);
    dt_tensor_release(t);
    dt_tensor_info info;
    return dt_tensor_info_get(t, &info);
}

/* cross_entropy on the fixture's logits [4,8] (S(0),R) with the labels given, sharded as the
 * logits' rows (the bad one on the second dp rank only: every rank must still fail), or
 * replicated (tiny_llama's targets: each rank checks all of them, no collective). */
static dt_status ce_placed(fx *f, int64_t bad, dt_dtype dtype, int use_ignore, int replicated) {
    int64_t lab[4] = {1, 7, bad, 0}, ts[1] = {4};
    int32_t lab32[4] = {1, 7, (int32_t)bad, 0};
    dt_tensor *t;
    dt_placement s0r[2] = {dt_shard(0), dt_replicate()}, rr[2] = {dt_replicate(), dt_replicate()};
    dt_status st = dt_tensor_distribute(f->mesh, dtype == DT_I32 ? (void *)lab32 : (void *)lab,
                                        dtype, 1, ts, 2, replicated ? rr : s0r, DT_ALL_RANKS, &t);
    if (st != DT_OK) return st;
    dt_tensor *in[2] = {f->logits, t};
    dt_op_args a = {.reduction = DT_REDUCTION_MEAN, .use_ignore_index = use_ignore,
                    .ignore_index = DT_IGNORE_INDEX};
    st = dt_op_call(DT_OP_CROSS_ENTROPY, in, 2, &a, O);
    dt_tensor_release(t);
    return st;
}
static dt_status ce_with(fx *f, int64_t bad, dt_dtype dtype, int use_ignore) {
    return ce_placed(f, bad, dtype, use_ignore, 0);
}
static dt_status ce_label_c(fx *f) { return ce_with(f, 8, DT_I64, 1); }
static dt_status ce_label_replicated(fx *f) { return ce_placed(f, 8, DT_I64, 1, 1); }
static dt_status ce_label_huge(fx *f) { return ce_with(f, 1000000, DT_I64, 1); }
static dt_status ce_label_neg(fx *f) { return ce_with(f, -1, DT_I64, 1); }
static dt_status ce_label_i32(fx *f) { return ce_with(f, 9, DT_I32, 1); }
static dt_status ce_ignore_off(fx *f) { return ce_with(f, DT_IGNORE_INDEX, DT_I64, 0); }
static dt_status ce_partial_target(fx *f) {
    int64_t lab[4] = {1, 2, 3, 0}, ts[1] = {4};
    dt_placement p[2] = {dt_partial(DT_REDUCE_SUM), dt_replicate()};
    dt_tensor *t;
    dt_status st = dt_tensor_distribute(f->mesh, lab, DT_I64, 1, ts, 2, p, DT_ALL_RANKS, &t);
    if (st != DT_OK) return st;
    st = dt_cross_entropy(f->logits, t, 1, O);
    dt_tensor_release(t);
    return st;
}
static dt_status ce_float_target(fx *f) { return dt_cross_entropy(f->logits, f->v, 1, O); }
static dt_status ce_int_logits(fx *f) {
    int64_t s[2] = {4, 4}, ts[1] = {4};
    dt_tensor *l, *t;
    dt_status st = dt_tensor_zeros(f->mesh, DT_I64, 2, s, 2, f->pl, &l);
    if (st == DT_OK) st = dt_tensor_zeros(f->mesh, DT_I64, 1, ts, 2, f->pl, &t);
    if (st != DT_OK) return st;
    st = dt_cross_entropy(l, t, 1, O);
    dt_tensor_release(l), dt_tensor_release(t);
    return st;
}

/* one_hot of an index [4, 2] sharded by rows over dp (S(0),R), with a class out of range at
 * local [1, 0] of each dp shard: global [1, 0] on dp rank 0 and [3, 0] on dp rank 1. The
 * message must name the global one (it named the shard-local flat index 2 on both); one
 * with another position is replaced by a message without the catalogue's phrase. */
static dt_status one_hot_global(fx *f) {
    int64_t ix[8] = {0, 1, 9, 2, 3, 4, 9, 5}, shape[2] = {4, 2};
    dt_tensor *t;
    dt_status st = dt_tensor_distribute(f->mesh, ix, DT_I64, 2, shape, 2, f->pl, DT_ALL_RANKS, &t);
    if (st != DT_OK) return st;
    st = dt_one_hot(t, 8, O);
    char want[64];
    snprintf(want, sizeof want, "index element at [%d, 0] (global) = 9",
             1 + 2 * dt_mesh_coord(f->mesh, 0));
    if (st != DT_OK && !strstr(dt_last_error(), want))
        dt_error_set(st, "one_hot's message does not name the position %s", want);
    dt_tensor_release(t);
    return st;
}

static dt_status in_place_broadcast(fx *f) { return dt_add_(f->v, f->a); }
static dt_status split_sizes(fx *f) {
    int64_t sizes[2] = {1, 2};
    dt_tensor *outs[2];
    return dt_split(f->a, 0, sizes, 2, outs);
}
static dt_status cat_mismatch(fx *f) {
    dt_tensor *xs[2] = {f->a, f->c3};
    return dt_cat(xs, 2, 0, O);
}
static dt_status cat_none(fx *f) { return dt_cat(&f->a, 0, 0, O); }
static dt_status view_overflow(fx *f) {
    int64_t s[2] = {(1ll << 62) + 4, 4};
    return dt_view(f->a, 2, s, O);
}
static dt_status view_two_infer(fx *f) {
    int64_t s[2] = {-1, -1};
    return dt_view(f->a, 2, s, O);
}
static dt_status view_negative(fx *f) {
    int64_t s[2] = {-2, 8};
    return dt_view(f->a, 2, s, O);
}
static dt_status view_mismatch(fx *f) {
    int64_t s[2] = {5, 3};
    return dt_view(f->a, 2, s, O);
}
static dt_status view_infer_empty(fx *f) {
    int64_t e[2] = {0, 4}, s[2] = {-1, 0};
    dt_tensor *t;
    dt_status st = dt_tensor_zeros(f->mesh, DT_F32, 2, e, 2, f->pl, &t);
    if (st != DT_OK) return st;
    st = dt_view(t, 2, s, O);
    dt_tensor_release(t);
    return st;
}
static dt_status reduce_op(fx *f, dt_op op, int nd, int d0, int d1) {
    int dims[2] = {d0, d1};
    return dt_reduce(op, f->a, dims, nd, 0, O);
}
static dt_status permute_repeat(fx *f) {
    dt_op_args a = {.ndims = 2, .dims = {0, 0}};
    return dt_op_call(DT_OP_PERMUTE, &f->a, 1, &a, O);
}
static dt_status slice_past(fx *f) {
    dt_op_args a = {.dim = 0, .start = 2, .end = 9};
    return dt_op_call(DT_OP_SLICE, &f->a, 1, &a, O);
}
static dt_status unsqueeze_far(fx *f) {
    dt_op_args a = {.dim = 5};
    return dt_op_call(DT_OP_UNSQUEEZE, &f->a, 1, &a, O);
}
static dt_status op_null_input(fx *f) {
    dt_tensor *in[2] = {f->a, NULL};
    return dt_op_call(DT_OP_ADD, in, 2, NULL, O);
}
static dt_status mm_inner(fx *f) { return dt_mm(f->logits, f->a, O); }
static dt_status sdpa_mismatch(fx *f) { return dt_sdpa(f->c3, f->a, f->c3, 0, O); }
static dt_status embedding_float_ids(fx *f) { return dt_embedding(f->a, f->b, O); }
static dt_status dtype_mix(fx *f) {
    dt_tensor *d;
    dt_status st = dt_tensor_zeros(f->mesh, DT_F64, 2, f->shape, 2, f->pl, &d);
    if (st != DT_OK) return st;
    st = dt_add(f->a, d, O);
    dt_tensor_release(d);
    return st;
}
static dt_status parse_cap(fx *f) {
    int n;
    return dt_placements_parse("S(0),R,R", f->three, 2, &n);
}
static dt_status parse_text(fx *f, const char *text) {
    int n;
    return dt_placements_parse(text, f->three, 3, &n);
}
static dt_status format_small(fx *f) {
    char b[4];
    return dt_placements_format(f->pl, 2, b, sizeof b);
}
static dt_status mesh_shape(fx *f, int ndim, int s0, int s1) {
    int s[2] = {s0, s1};
    dt_mesh *m = NULL;
    dt_status st = dt_mesh_create(f->ctx, ndim, s, NULL, &m);
    dt_mesh_release(m);
    return st;
}
static dt_status mesh_names(fx *f, const char *n0, const char *n1) {
    int s[2] = {2, 2};
    const char *names[2] = {n0, n1};
    dt_mesh *m = NULL;
    dt_status st = dt_mesh_create(f->ctx, 2, s, names, &m);
    dt_mesh_release(m);
    return st;
}
static dt_status mesh_text(fx *f, const char *text) {
    dt_mesh *m = NULL;
    dt_status st = dt_mesh_create_str(f->ctx, text, &m);
    dt_mesh_release(m);
    return st;
}
static dt_status coord_far(fx *f) {
    int c[2] = {0, 2}, r;
    return dt_mesh_rank_of(f->mesh, c, &r);
}
static dt_status layout(fx *f, int mshape, int coord) {
    int ms[1] = {mshape}, c[1] = {coord};
    int64_t s[1] = {8}, ls[1], off[1];
    return dt_shard_layout(1, ms, c, 1, s, f->one, ls, off);
}
static dt_status plan_with(fx *f, int64_t s0, const dt_cost_model *model) {
    int ms[2] = {2, 2};
    int64_t s[2] = {s0, 1ll << 40};
    dt_plan *p = NULL;
    dt_status st = dt_plan_create(2, ms, 2, s, DT_F32, f->pl, f->pl, model, &p);
    dt_plan_release(p);
    return st;
}
static dt_status plan_step_far(fx *f) {
    const dt_plan *p;
    dt_placement r[2] = {dt_replicate(), dt_replicate()};
    dt_status st = dt_tensor_redistribute_plan(f->a, 2, r, &p);
    if (st != DT_OK) return st;
    dt_plan_step step;
    return dt_plan_step_get(p, 7, &step);
}
static dt_status visualize_3d(fx *f) {
    char b[64];
    return dt_tensor_visualize(f->c3, b, sizeof b, NULL);
}
static dt_status from_local_overflow(fx *f) {
    int64_t ls[2] = {2, 4}, gs[2] = {1ll << 40, 1ll << 40};
    return dt_tensor_from_local(f->mesh, f->buf, DT_F32, 2, ls, 2, f->pl, gs, 0, O);
}
static dt_status from_local_count(fx *f) {
    int64_t ls[2] = {2, 4};
    return dt_tensor_from_local(f->mesh, f->buf, DT_F32, 2, ls, 1, f->pl, NULL, 0, O);
}
static dt_status async_count(fx *f) {
    dt_request *r = T_SENTINEL(dt_request *);
    dt_status st = dt_tensor_redistribute_async(f->a, 0, f->pl, &r);
    return r == T_SENTINEL(dt_request *) ? st : DT_ERR_SIZE;
}
static dt_status set_device(fx *f, int kind) {
    dt_device d = {(dt_device_kind)kind, 0};
    return dt_ctx_set_device(f->ctx, d);
}
static dt_status local_to_host_small(fx *f) {
    return dt_tensor_local_to_host(f->a, f->buf, 4);
}
static dt_status dtype_parse(fx *f) {
    (void)f;
    dt_dtype d;
    return dt_dtype_parse("f33", &d);
}
static dt_status s1d(fx *f) {
    int64_t s[1] = {1ll << 62};
    return dt_tensor_zeros(f->mesh, DT_F32, 1, s, 2, f->pl, O);
}
static dt_status zeros_pl(fx *f, int n, dt_placement p0) {
    dt_placement p[3] = {p0, dt_replicate(), dt_replicate()};
    return dt_tensor_zeros(f->mesh, DT_F32, 2, f->shape, n, p, O);
}

/* name, status, phrase of the message, call (f is the fixture). */
/* An optimizer's groups: none given for one group, or a negative count. */
static dt_status optim_groups(fx *f, int ngroups) {
    dt_optim *opt = T_SENTINEL(dt_optim *);
    dt_status st = dt_optim_sgd_create(&(dt_sgd_options){.lr = 0.1}, NULL, ngroups, &opt);
    if (st == DT_OK) dt_optim_destroy(opt);
    if (opt != T_SENTINEL(dt_optim *)) f->out = NULL; /* written on failure: flagged */
    return st;
}
/* AdamW over a registry that holds no parameter: torch refuses an empty parameter list. */
static dt_status adamw_empty_registry(fx *f) {
    dt_params *p;
    dt_status st = dt_params_create(f->mesh, DT_F32, &p);
    if (st != DT_OK) return st;
    dt_optim *opt = T_SENTINEL(dt_optim *);
    st = dt_optim_adamw_create_params(&(dt_adamw_options){.lr = 0.1}, p, &opt);
    if (st == DT_OK) dt_optim_destroy(opt);
    if (opt != T_SENTINEL(dt_optim *)) f->out = NULL;
    dt_params_destroy(p);
    return st;
}
/* dt_cp_position returns -1 for an argument out of range; the message names it. */
static dt_status cp_position(fx *f, int64_t T, int cp, int64_t i) {
    (void)f;
    return dt_cp_position(T, cp, i) < 0 ? DT_ERR_ARG : DT_OK;
}

#define BAD_CALLS(X)                                                                               \
    X(zeros_ndim_negative, DT_ERR_SHAPE, "ndim = -1",                                              \
      dt_tensor_zeros(f->mesh, DT_F32, -1, f->shape, 2, f->pl, O))                                 \
    X(zeros_ndim_too_many, DT_ERR_SHAPE, "ndim = 9",                                               \
      dt_tensor_zeros(f->mesh, DT_F32, 9, f->shape, 2, f->pl, O))                                  \
    X(zeros_shape_null, DT_ERR_ARG, "shape is NULL",                                               \
      dt_tensor_zeros(f->mesh, DT_F32, 2, NULL, 2, f->pl, O))                                      \
    X(zeros_shape_negative, DT_ERR_SHAPE, "negative",                                              \
      dt_tensor_zeros(f->mesh, DT_F32, 2, (int64_t[]){4, -3}, 2, f->pl, O))                        \
    X(zeros_bytes_overflow, DT_ERR_SHAPE, "[4611686018427387904]", s1d(f))                         \
    X(zeros_numel_overflow, DT_ERR_SHAPE, "[1099511627776,1099511627776]",                         \
      dt_tensor_zeros(f->mesh, DT_F32, 2, (int64_t[]){1ll << 40, 1ll << 40}, 2, f->pl, O))         \
    X(distribute_numel_overflow, DT_ERR_SHAPE, "int64",                                            \
      dt_tensor_distribute(f->mesh, NULL, DT_F32, 2, (int64_t[]){1ll << 40, 1ll << 40}, 2, f->pl,  \
                           DT_ALL_RANKS, O))                                                       \
    X(from_local_global_overflow, DT_ERR_SHAPE, "int64", from_local_overflow(f))                   \
    X(view_overflow, DT_ERR_SHAPE, "more elements than an int64", view_overflow(f))                \
    X(view_two_inferred, DT_ERR_SHAPE, "only one dim may be -1", view_two_infer(f))                \
    X(view_negative, DT_ERR_SHAPE, "shape[0] = -2 is negative", view_negative(f))                  \
    X(view_mismatch, DT_ERR_SHAPE, "16 elements do not fit shape [5,3]", view_mismatch(f))         \
    X(view_infer_empty, DT_ERR_SHAPE, "cannot be inferred", view_infer_empty(f))                   \
    X(view_ndim, DT_ERR_ARG, "ndim = 9 is not in [0, 8]", dt_view(f->a, 9, f->shape, O))           \
    X(view_shape_null, DT_ERR_ARG, "shape is NULL", dt_view(f->a, 2, NULL, O))                     \
    X(plan_overflow, DT_ERR_SHAPE, "int64", plan_with(f, 1ll << 40, NULL))                         \
    X(plan_bad_model, DT_ERR_ARG, "cost model",                                                    \
      plan_with(f, 2, &(dt_cost_model){.latency_us = -1, .bandwidth_gbps = 1}))                    \
    X(layout_mesh_zero, DT_ERR_MESH, "mesh_shape[0] = 0 must be at least 1", layout(f, 0, 0))      \
    X(layout_coord_far, DT_ERR_ARG, "coord[0] = 3", layout(f, 2, 3))                               \
    X(zeros_dtype_unknown, DT_ERR_DTYPE, "dtype",                                                  \
      dt_tensor_zeros(f->mesh, (dt_dtype)99, 2, f->shape, 2, f->pl, O))                            \
    X(distribute_dtype_negative, DT_ERR_DTYPE, "dtype",                                            \
      dt_tensor_distribute(f->mesh, f->buf, (dt_dtype)-1, 2, f->shape, 2, f->pl, DT_ALL_RANKS, O)) \
    X(add_dtype_mix, DT_ERR_DTYPE, "f64", dtype_mix(f))                                            \
    X(dtype_parse, DT_ERR_PARSE, "f33", dtype_parse(f))                                            \
    X(zeros_one_placement_2d, DT_ERR_PLACEMENT, "1 placements given for a 2-D mesh",               \
      zeros_pl(f, 1, dt_shard(0)))                                                                 \
    X(zeros_three_placements_2d, DT_ERR_PLACEMENT, "3 placements", zeros_pl(f, 3, dt_shard(0)))    \
    X(zeros_placements_null, DT_ERR_ARG, "placements is NULL",                                     \
      dt_tensor_zeros(f->mesh, DT_F32, 2, f->shape, 2, NULL, O))                                   \
    X(zeros_shard_dim_far, DT_ERR_PLACEMENT, "S(2)", zeros_pl(f, 2, dt_shard(2)))                  \
    X(zeros_shard_dim_negative, DT_ERR_PLACEMENT, "S(-3)", zeros_pl(f, 2, dt_shard(-3)))           \
    X(zeros_partial_prod, DT_ERR_PLACEMENT, "P(prod)", zeros_pl(f, 2, dt_partial(DT_REDUCE_PROD))) \
    X(zeros_kind_unknown, DT_ERR_PLACEMENT, "unknown kind 7",                                      \
      zeros_pl(f, 2, (dt_placement){(dt_placement_kind)7, 0, DT_REDUCE_SUM}))                      \
    X(redistribute_one_placement, DT_ERR_PLACEMENT, "1 dst placements",                            \
      dt_tensor_redistribute(f->a, 1, f->pl, O))                                                   \
    X(redistribute_async_none, DT_ERR_PLACEMENT, "0 dst placements", async_count(f))               \
    X(redistribute_plan_three, DT_ERR_PLACEMENT, "3 dst placements",                               \
      dt_tensor_redistribute_plan(f->a, 3, f->three, (const dt_plan **)O))                         \
    X(redistribute_dst_null, DT_ERR_ARG, "dst placements is NULL",                                 \
      dt_tensor_redistribute(f->a, 2, NULL, O))                                                    \
    X(redistribute_shard_far, DT_ERR_PLACEMENT, "S(5) is out of range",                            \
      dt_tensor_redistribute(f->a, 2, (dt_placement[]){dt_shard(5), dt_replicate()}, O))           \
    X(from_local_count, DT_ERR_PLACEMENT, "1 placements", from_local_count(f))                     \
    X(distribute_count, DT_ERR_PLACEMENT, "1 placements",                                          \
      dt_tensor_distribute(f->mesh, f->buf, DT_F32, 2, f->shape, 1, f->pl, DT_ALL_RANKS, O))       \
    X(placements_parse_bad_dim, DT_ERR_PARSE, "expected a tensor dimension at offset 2",           \
      parse_text(f, "S(x)"))                                                                       \
    X(placements_parse_unknown, DT_ERR_PARSE, "R, P(op) or NormP(p)", parse_text(f, "Q"))     \
    X(placements_parse_cap, DT_ERR_SIZE, "has 3 placements but cap is 2", parse_cap(f))            \
    X(placements_format_small, DT_ERR_SIZE, "needs 7 bytes, cap is 4", format_small(f))            \
    X(mesh_ndim_zero, DT_ERR_MESH, "ndim = 0", mesh_shape(f, 0, 2, 2))                             \
    X(mesh_dim_zero, DT_ERR_MESH, "shape[1] = 0 must be at least 1", mesh_shape(f, 2, 4, 0))       \
    X(mesh_product, DT_ERR_MESH, "has 6 ranks but the world has 4", mesh_shape(f, 2, 2, 3))        \
    X(mesh_names_twice, DT_ERR_MESH, "used twice", mesh_names(f, "tp", "tp"))                      \
    X(mesh_name_chars, DT_ERR_MESH, "letters, digits", mesh_names(f, "d-p", "tp"))                 \
    X(mesh_name_long, DT_ERR_MESH, "characters",                                                   \
      mesh_names(f, "a_very_long_mesh_dimension_name_indeed_longer_than_allowed", "tp"))           \
    X(mesh_text_xx, DT_ERR_PARSE, "expected a size", mesh_text(f, "2xx2"))                         \
    X(mesh_text_mixed, DT_ERR_PARSE, "name every dim", mesh_text(f, "dp=2,2"))                     \
    X(mesh_text_long_number, DT_ERR_PARSE, "is larger than", mesh_text(f, "99999999999999999999")) \
    X(mesh_text_empty, DT_ERR_PARSE, "expected a size", mesh_text(f, ""))                          \
    X(mesh_text_null, DT_ERR_ARG, "text", mesh_text(f, NULL))                                      \
    X(mesh_ctx_null, DT_ERR_ARG, "ctx", dt_mesh_create(NULL, 1, (int[]){4}, NULL, NULL))           \
    X(mesh_dim_comm_far, DT_ERR_ARG, "dim = 5", dt_mesh_dim_comm(f->mesh, 5, (dt_comm **)O))       \
    X(mesh_rank_of_far, DT_ERR_ARG, "coord[1] = 2", coord_far(f))                                  \
    X(mesh_coord_of_far, DT_ERR_ARG, "mesh_rank = 9",                                              \
      dt_mesh_coord_of(f->mesh, 9, (int[2]){0, 0}))                                                \
    X(release_twice, DT_ERR_ARG, "dt_tensor_release: argument tensor", release_twice(f))           \
    X(retain_released, DT_ERR_ARG, "dt_tensor_retain: argument tensor", retain_released(f))        \
    X(add_released, DT_ERR_ARG, "add: input 1", add_released(f))                                   \
    X(redistribute_released, DT_ERR_ARG, "released tensor", redistribute_released(f))              \
    X(to_local_released, DT_ERR_ARG, "dt_tensor_to_local", to_local_released(f))                   \
    X(full_released, DT_ERR_ARG, "dt_tensor_full_tensor", full_released(f))                        \
    X(info_released, DT_ERR_ARG, "dt_tensor_info_get", info_released(f))                           \
    X(argmax_no_dim, DT_ERR_ARG, "exactly one dim", reduce_op(f, DT_OP_ARGMAX, 0, 0, 0))           \
    X(argmin_two_dims, DT_ERR_ARG, "exactly one dim", reduce_op(f, DT_OP_ARGMIN, 2, 0, 1))         \
    X(argmax_dim_far, DT_ERR_ARG, "dim = 4", reduce_op(f, DT_OP_ARGMAX, 1, 4, 0))                  \
    X(sum_repeated_dims, DT_ERR_ARG, "repeats dim 0", reduce_op(f, DT_OP_SUM, 2, 0, 0))            \
    X(mean_repeated_negative, DT_ERR_ARG, "repeats dim 1", reduce_op(f, DT_OP_MEAN, 2, 1, -1))     \
    X(sum_dim_far, DT_ERR_ARG, "out of range", reduce_op(f, DT_OP_SUM, 1, 5, 0))                   \
    X(reduce_ndims, DT_ERR_ARG, "ndims = 9 is not in [0, 8]",                                      \
      dt_reduce(DT_OP_SUM, f->a, (int[9]){0}, 9, 0, O))                                            \
    X(reduce_dims_null, DT_ERR_ARG, "dims is NULL", dt_reduce(DT_OP_SUM, f->a, NULL, 1, 0, O))     \
    X(softmax_dim_far, DT_ERR_ARG, "dim = 3 is out of range", dt_softmax(f->a, 3, O))              \
    X(transpose_far, DT_ERR_ARG, "out of range", dt_transpose(f->a, 0, 2, O))                      \
    X(t_of_3d, DT_ERR_ARG, "at most 2 dims", dt_t(f->c3, O))                                       \
    X(permute_repeated, DT_ERR_ARG, "repeated", permute_repeat(f))                                 \
    X(slice_past_end, DT_ERR_ARG, "does not fit", slice_past(f))                                   \
    X(unsqueeze_far, DT_ERR_ARG, "dim = 5 out of range", unsqueeze_far(f))                         \
    X(cat_mismatch, DT_ERR_SHAPE, "input 1 differs from input 0", cat_mismatch(f))                 \
    X(cat_none, DT_ERR_ARG, "got 0", cat_none(f))                                                  \
    X(split_sizes, DT_ERR_SHAPE, "sizes add up to 3", split_sizes(f))                              \
    X(mm_inner_mismatch, DT_ERR_SHAPE, "contracted sizes differ: 8 and 4", mm_inner(f))            \
    X(add_not_broadcastable, DT_ERR_SHAPE, "broadcast", dt_add(f->a, f->c3, O))                    \
    X(embedding_float_ids, DT_ERR_DTYPE, "indices must be i32 or i64", embedding_float_ids(f))     \
    X(unary_not_unary, DT_ERR_ARG, "not a unary op", dt_unary_op(DT_OP_ADD, f->a, O))              \
    X(scalar_not_scalar, DT_ERR_ARG, "not a scalar op", dt_scalar_op(DT_OP_EXP, f->a, 2, O))       \
    X(op_unknown, DT_ERR_ARG, "unknown value 999", dt_op_call((dt_op)999, &f->a, 1, NULL, O))      \
    X(op_no_inputs, DT_ERR_ARG, "got 0", dt_op_call(DT_OP_ADD, &f->a, 0, NULL, O))                 \
    X(op_null_input, DT_ERR_ARG, "input 1 is NULL", op_null_input(f))                              \
    X(op_out_null, DT_ERR_ARG, "out is NULL", dt_add(f->a, f->b, NULL))                            \
    X(add_in_place_broadcast, DT_ERR_SHAPE, "broadcasts", in_place_broadcast(f))                   \
    X(sdpa_mismatch, DT_ERR_SHAPE, "same number of dims", sdpa_mismatch(f))                        \
    X(one_hot_global_position, DT_ERR_ARG, "(global) = 9 is outside [0, 8)", one_hot_global(f)) \
    X(ce_label_equals_classes, DT_ERR_ARG, "element 2 (flat, row-major) = 8", ce_label_c(f))       \
    X(ce_label_huge, DT_ERR_ARG, "= 1000000 is not a class in [0, 8)", ce_label_huge(f))           \
    X(ce_label_replicated, DT_ERR_ARG, "element 2 (flat, row-major) = 8",                          \
      ce_label_replicated(f))                                                                      \
    X(ce_label_negative, DT_ERR_ARG, "= -1 is not a class", ce_label_neg(f))                       \
    X(ce_label_i32, DT_ERR_ARG, "= 9", ce_label_i32(f))                                            \
    X(ce_ignore_disabled, DT_ERR_ARG, "= -100 is not a class", ce_ignore_off(f))                   \
    X(ce_partial_target, DT_ERR_PLACEMENT, "target is Partial on mesh dim 0",                      \
      ce_partial_target(f))                                                                        \
    X(ce_float_target, DT_ERR_DTYPE, "target must be i64 or i32", ce_float_target(f))              \
    X(ce_int_logits, DT_ERR_DTYPE, "logits must be f32 or f64", ce_int_logits(f))                  \
    X(ce_logits_1d, DT_ERR_SHAPE, "expected", dt_cross_entropy(f->v, f->v, 1, O))                  \
    X(set_device_kind, DT_ERR_ARG, "device.kind = 9", set_device(f, 9))                            \
    X(local_to_host_small, DT_ERR_SIZE, "out_bytes = 4", local_to_host_small(f))                   \
    X(full_small, DT_ERR_SIZE, "out_bytes = 8", dt_tensor_full_tensor(f->a, f->buf, 8))            \
    X(distribute_src_rank, DT_ERR_ARG, "src_rank = 4",                                             \
      dt_tensor_distribute(f->mesh, f->buf, DT_F32, 2, f->shape, 2, f->pl, 4, O))                  \
    X(distribute_full_null, DT_ERR_ARG, "full is NULL",                                            \
      dt_tensor_distribute(f->mesh, NULL, DT_F32, 2, f->shape, 2, f->pl, DT_ALL_RANKS, O))         \
    X(from_local_flags, DT_ERR_ARG, "flags",                                                       \
      dt_tensor_from_local(f->mesh, f->buf, DT_F32, 2, (int64_t[]){2, 4}, 2, f->pl, NULL, 8u, O))  \
    X(redistribute_mode, DT_ERR_ARG, "mode",                                                       \
      dt_ctx_set_redistribute_mode(f->ctx, (dt_redistribute_mode)7))                               \
    X(plan_step_far, DT_ERR_ARG, "i = 7", plan_step_far(f))                                        \
    X(visualize_3d, DT_ERR_UNSUPPORTED, "3-D", visualize_3d(f))                                    \
    X(all_reduce_null, DT_ERR_ARG, "comm is NULL",                                                 \
      dt_all_reduce(NULL, f->buf, f->buf, 4, DT_F32, DT_REDUCE_SUM))                              \
    X(optim_groups_null, DT_ERR_ARG, "groups is NULL with ngroups = 1", optim_groups(f, 1))        \
    X(optim_ngroups_negative, DT_ERR_ARG, "ngroups = -1 is negative", optim_groups(f, -1))         \
    X(adamw_empty_registry, DT_ERR_ARG, "holds no parameters", adamw_empty_registry(f))            \
    X(cp_position_t_negative, DT_ERR_ARG, "T = -1 is negative", cp_position(f, -1, 2, 0))          \
    X(cp_position_cp_zero, DT_ERR_ARG, "cp = 0 is not positive", cp_position(f, 8, 0, 0))          \
    X(cp_position_i_far, DT_ERR_ARG, "i = 8 is not in [0, 8)", cp_position(f, 8, 2, 8))

typedef struct bad_call {
    const char *name;
    dt_status want;
    const char *needle;
    dt_status (*call)(fx *f);
} bad_call;

#define DEFINE_CASE(id, st, needle, ...)                                                           \
    static dt_status case_##id(fx *f) {                                                            \
        (void)f;                                                                                   \
        return __VA_ARGS__;                                                                        \
    }
BAD_CALLS(DEFINE_CASE)
#define LIST_CASE(id, st, needle, ...) {#id, st, needle, case_##id},
static const bad_call bad_calls[] = {BAD_CALLS(LIST_CASE)};
#define NCALLS (sizeof bad_calls / sizeof bad_calls[0])

static dt_status catalogue_body(dt_ctx *ctx, void *arg) {
    int *checked = arg;
    fx f = {.ctx = ctx, .shape = {4, 4}};
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &f.mesh));
    f.pl[0] = dt_shard(0), f.pl[1] = dt_replicate();
    f.one[0] = dt_shard(0);
    for (int i = 0; i < 3; i++) f.three[i] = dt_replicate();
    float x[32];
    t_fill(DT_F32, x, 32, 5);
    R_OK(dt_tensor_distribute(f.mesh, x, DT_F32, 2, f.shape, 2, f.pl, DT_ALL_RANKS, &f.a));
    R_OK(dt_tensor_distribute(f.mesh, x, DT_F32, 2, f.shape, 2, f.pl, DT_ALL_RANKS, &f.b));
    R_OK(dt_tensor_distribute(f.mesh, x, DT_F32, 1, (int64_t[]){4}, 2, f.pl, DT_ALL_RANKS, &f.v));
    R_OK(dt_tensor_distribute(f.mesh, x, DT_F32, 3, (int64_t[]){2, 2, 2}, 2, f.pl, DT_ALL_RANKS,
                              &f.c3));
    R_OK(dt_tensor_distribute(f.mesh, x, DT_F32, 2, (int64_t[]){4, 8}, 2, f.pl, DT_ALL_RANKS,
                              &f.logits));
    int failed = 0;
    for (size_t i = 0; i < NCALLS; i++) { /* every failure is printed, then the first fails */
        const bad_call *c = &bad_calls[i];
        f.out = TS;
        dt_status st = c->call(&f);
        const char *why = st != c->want                      ? "wrong status"
                          : !strstr(dt_last_error(), c->needle) ? "message lacks the phrase"
                          : f.out != TS                          ? "output written on failure"
                                                                 : NULL;
        if (getenv("DT_BAD_INPUT_VERBOSE") && dt_ctx_rank(ctx) == 0)
            fprintf(stderr, "%-28s %s: %s\n", c->name, dt_status_str(st), dt_last_error());
        if (why && dt_ctx_rank(ctx) == 0)
            fprintf(stderr, "bad_input %s: %s: %s (%s), expected %s with \"%s\"\n", c->name, why,
                    dt_status_str(st), dt_last_error(), dt_status_str(c->want), c->needle);
        failed += why != NULL;
    }
    R_CHECK(failed == 0, "%d of %d calls misbehaved (listed above)", failed, (int)NCALLS);
    dt_tensor *all[] = {f.a, f.b, f.v, f.c3, f.logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) R_OK(dt_tensor_release(all[i]));
    R_OK(dt_mesh_release(f.mesh));
    if (dt_ctx_rank(ctx) == 0) *checked = (int)NCALLS;
    return DT_OK;
}

Test(bad_input, every_call_in_the_catalogue_fails_cleanly) {
    int checked = 0;
    t_run(4, catalogue_body, &checked);
    cr_assert_geq(checked, 100, "the catalogue has %d calls, fewer than 100", checked);
    cr_log_info("%d invalid calls on 4 ranks: clear errors, no output written", checked);
}
