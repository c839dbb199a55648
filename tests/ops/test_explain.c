/* dt_op_choose and dt_op_explain (dtensor/explain.h): dispatch's choice from specs alone, for
 * any mesh size; the same as dispatch's on real ranks over a sweep of ops and placements; bad
 * input; and the op plugin of examples/explain_plugin.c loaded through its entry symbol. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

static dt_spec spec(int ndim, const int64_t *shape, int mnd, const char *placements) {
    dt_spec s = {.dtype = DT_F32, .ndim = ndim, .nplacements = mnd};
    memcpy(s.shape, shape, sizeof(int64_t) * (size_t)ndim);
    int n;
    cr_assert_eq(dt_placements_parse(placements, s.placements, DT_MESH_MAX_NDIM, &n), DT_OK);
    cr_assert_eq(n, mnd, "%s: %d placements for a %d-D mesh", placements, n, mnd);
    return s;
}

static void assert_placements(const dt_placement *p, int mnd, const char *want, const char *what) {
    char got[128];
    dt_placements_format(p, mnd, got, sizeof got);
    cr_assert_str_eq(got, want, "%s: got %s, expected %s", what, got, want);
}

Test(explain, keeps_what_needs_no_move) {
    int64_t a[2] = {12, 8}, b[2] = {8, 16};
    int mesh[1] = {4};
    dt_spec x = spec(2, a, 1, "S(0)"), w = spec(2, b, 1, "R");
    const dt_spec *in[2] = {&x, &w};
    dt_op_choice c;
    cr_assert_eq(dt_op_choose(DT_OP_MM, 1, mesh, in, 2, NULL, NULL, &c), DT_OK, "%s",
                 dt_last_error());
    assert_placements(c.inputs[0], 1, "S(0)", "input 0");
    assert_placements(c.inputs[1], 1, "R", "input 1");
    assert_placements(c.output, 1, "S(0)", "output");
    cr_assert(c.nchanged == 0 && !c.changed[0] && !c.changed[1] && c.cost_us == 0);
    cr_assert(c.out_ndim == 2 && c.out_shape[0] == 12 && c.out_shape[1] == 16 &&
              c.out_dtype == DT_F32);
}

/* S(1) x S(1): moving w (8x16) to S(0) is one all_to_all on 4 ranks; each rank keeps 32 of
 * its elements' new home and receives 3/4 of its new 2x16 block: 24 f32 = 96 B, so the
 * default model prices it 5 us + 1 us * log2(4) + 96 B / 10 GB/s. The output is P(sum). */
Test(explain, prices_the_move_as_the_planner_does) {
    int64_t a[2] = {12, 8}, b[2] = {8, 16};
    int mesh[1] = {4};
    dt_spec x = spec(2, a, 1, "S(1)"), w = spec(2, b, 1, "S(1)");
    const dt_spec *in[2] = {&x, &w};
    dt_op_choice c;
    cr_assert_eq(dt_op_choose(DT_OP_MM, 1, mesh, in, 2, NULL, NULL, &c), DT_OK, "%s",
                 dt_last_error());
    assert_placements(c.inputs[0], 1, "S(1)", "input 0");
    assert_placements(c.inputs[1], 1, "S(0)", "input 1");
    assert_placements(c.output, 1, "P(sum)", "output");
    cr_assert(c.nchanged == 1 && !c.changed[0] && c.changed[1]);
    cr_assert(fabs(c.cost_us - (5 + 2 + 96 / 1e4)) < 1e-9, "cost %.6f us", c.cost_us);
    /* A slower network: still one all_to_all, priced with the model given. */
    dt_cost_model slow = {.latency_us = 50, .step_us = 0, .bandwidth_gbps = 1};
    cr_assert_eq(dt_op_choose(DT_OP_MM, 1, mesh, in, 2, NULL, &slow, &c), DT_OK);
    cr_assert(fabs(c.cost_us - (50 + 96 / 1e3)) < 1e-9, "cost %.6f us", c.cost_us);
}

/* No ranks: meshes no test world could hold. */
Test(explain, any_mesh_size) {
    int64_t a[2] = {4096, 2048}, b[2] = {2048, 8192};
    int big[1] = {1024}, cube[3] = {8, 16, 8};
    dt_spec x = spec(2, a, 1, "S(0)"), w = spec(2, b, 1, "R");
    const dt_spec *in[2] = {&x, &w};
    dt_op_choice c;
    cr_assert_eq(dt_op_choose(DT_OP_MM, 1, big, in, 2, NULL, NULL, &c), DT_OK, "%s",
                 dt_last_error());
    assert_placements(c.output, 1, "S(0)", "1024 ranks");
    dt_spec x3 = spec(2, a, 3, "S(0),R,R"), w3 = spec(2, b, 3, "R,S(1),R");
    const dt_spec *in3[2] = {&x3, &w3};
    cr_assert_eq(dt_op_choose(DT_OP_MM, 3, cube, in3, 2, NULL, NULL, &c), DT_OK, "%s",
                 dt_last_error());
    assert_placements(c.output, 3, "S(0),S(1),R", "8x16x8");
    cr_assert_eq(c.nchanged, 0);
    /* Negative shard dims are read as PyTorch reads them. */
    dt_spec xn = spec(2, a, 1, "S(-2)");
    const dt_spec *inn[2] = {&xn, &w};
    cr_assert_eq(dt_op_choose(DT_OP_MM, 1, big, inn, 2, NULL, NULL, &c), DT_OK);
    assert_placements(c.inputs[0], 1, "S(0)", "S(-2)");
    cr_assert_eq(c.nchanged, 0);
}

/* An absent optional input (layer_norm without a weight) is skipped, as dt_op_call skips it. */
Test(explain, absent_optional_input) {
    int64_t a[2] = {4, 8}, b[1] = {8};
    int mesh[1] = {4};
    dt_spec x = spec(2, a, 1, "S(1)"), bias = spec(1, b, 1, "S(0)");
    const dt_spec *in[3] = {&x, NULL, &bias};
    dt_op_choice c;
    cr_assert_eq(dt_op_choose(DT_OP_LAYER_NORM, 1, mesh, in, 3, NULL, NULL, &c), DT_OK, "%s",
                 dt_last_error());
    /* The normalised dim must be whole: x gathers it (or moves to rows), the bias gathers. */
    cr_assert(c.changed[0] && !c.changed[1] && c.changed[2] && c.nchanged == 2);
    assert_placements(c.inputs[1], 1, "R", "absent weight");
    assert_placements(c.inputs[2], 1, "R", "bias");
    char buf[4096];
    cr_assert_eq(
        dt_op_explain(DT_OP_LAYER_NORM, 1, mesh, NULL, in, 3, NULL, NULL, buf, sizeof buf, NULL),
        DT_OK, "%s", dt_last_error());
    cr_assert(strstr(buf, "  input 1: none\n") && strstr(buf, " | - | R -> "), "%s", buf);
}

Test(explain, text) {
    int64_t a[2] = {12, 8}, b[2] = {8, 16};
    int mesh[2] = {2, 2};
    const char *names[2] = {"dp", "tp"};
    dt_spec x = spec(2, a, 2, "S(0),S(1)"), w = spec(2, b, 2, "R,S(1)");
    const dt_spec *in[2] = {&x, &w};
    size_t len = 0;
    T_ERR(dt_op_explain(DT_OP_MM, 2, mesh, names, in, 2, NULL, NULL, NULL, 0, &len), DT_ERR_SIZE,
          "bytes");
    char *buf = malloc(len);
    cr_assert_eq(dt_op_explain(DT_OP_MM, 2, mesh, names, in, 2, NULL, NULL, buf, len, NULL), DT_OK,
                 "%s", dt_last_error());
    cr_assert_eq(strlen(buf) + 1, len);
    cr_log_info("\n%s", buf);
    cr_assert(strstr(buf, "mm on mesh dp=2 x tp=2\n"), "%s", buf);
    cr_assert(strstr(buf, "  input 0: f32[12,8] S(0),S(1)\n"), "%s", buf);
    /* On tp, gathering x's contracted dim receives its 6x4 other half (96 B); moving w to
     * S(0) instead would receive a 4x8 block (128 B) and leave a Partial. */
    cr_assert(strstr(buf, "strategy: S(0),R | R,S(1) -> S(0),S(1)\n"), "%s", buf);
    cr_assert(strstr(buf, "  output: f32[12,16] S(0),S(1)\n"), "%s", buf);
    cr_assert(strstr(buf, "  input 0 is redistributed to S(0),R:\n"), "%s", buf);
    cr_assert(strstr(buf, "all_gather     tp         group 2     send 96 B, recv 96 B"), "%s", buf);
    cr_assert(strstr(buf, "  input 1 stays R,S(1)\n"), "%s", buf);
    cr_assert(strstr(buf, "total: 1 input redistributed"), "%s", buf);
    /* Too small: what fits, NUL-terminated, and the size needed. */
    char small[16];
    size_t need = 0;
    T_ERR(dt_op_explain(DT_OP_MM, 2, mesh, names, in, 2, NULL, NULL, small, sizeof small, &need),
          DT_ERR_SIZE, "dt_op_explain");
    cr_assert(need == len && strlen(small) == sizeof small - 1);
    free(buf);
}

Test(explain, lookup) {
    dt_op op = DT_OP_COUNT;
    cr_assert_eq(dt_op_lookup("mm", &op), DT_OK);
    cr_assert_eq(op, DT_OP_MM);
    cr_assert_eq(dt_op_lookup("scaled_dot_product_attention", &op), DT_OK);
    cr_assert_eq(op, DT_OP_SDPA);
    for (int k = 0; k < DT_OP_COUNT; k++) {
        cr_assert_eq(dt_op_lookup(dt_op_name((dt_op)k), &op), DT_OK);
        cr_assert_eq(op, (dt_op)k);
    }
    op = DT_OP_COUNT;
    T_ERR(dt_op_lookup("no_such_op", &op), DT_ERR_ARG, "\"no_such_op\"");
    cr_assert_eq(op, DT_OP_COUNT, "nothing written on failure");
    T_ERR(dt_op_lookup(NULL, &op), DT_ERR_ARG, "name");
    T_ERR(dt_op_lookup("mm", NULL), DT_ERR_ARG, "argument out");
}

Test(explain, bad_input) {
    int64_t a[2] = {12, 8}, b[2] = {8, 16}, huge[2] = {INT64_MAX / 2, 4};
    int mesh[1] = {4}, zero[1] = {0}, mesh2[2] = {2, 2};
    dt_spec x = spec(2, a, 1, "S(0)"), w = spec(2, b, 1, "R");
    const dt_spec *in[2] = {&x, &w}, *none[2] = {&x, NULL};
    dt_op_choice c, before;
    memset(&c, 0x5a, sizeof c);
    before = c;
    T_ERR(dt_op_choose(DT_OP_MM, 1, mesh, in, 2, NULL, NULL, NULL), DT_ERR_ARG, "argument out");
    T_ERR(dt_op_choose(DT_OP_MM, 0, mesh, in, 2, NULL, NULL, &c), DT_ERR_ARG, "mesh_ndim = 0");
    T_ERR(dt_op_choose(DT_OP_MM, 1, NULL, in, 2, NULL, NULL, &c), DT_ERR_ARG, "mesh_shape");
    T_ERR(dt_op_choose(DT_OP_MM, 1, zero, in, 2, NULL, NULL, &c), DT_ERR_MESH, "mesh_shape[0] = 0");
    T_ERR(dt_op_choose(DT_OP_MM, 2, mesh2, in, 2, NULL, NULL, &c), DT_ERR_PLACEMENT,
          "1 input 0's placements given for a 2-D mesh");
    T_ERR(dt_op_choose(DT_OP_MM, 1, mesh, in, 1, NULL, NULL, &c), DT_ERR_ARG, "got 1");
    T_ERR(dt_op_choose(DT_OP_MM, 1, mesh, none, 2, NULL, NULL, &c), DT_ERR_ARG, "input 1 is NULL");
    T_ERR(dt_op_choose(DT_OP_MM, 1, mesh, NULL, 2, NULL, NULL, &c), DT_ERR_ARG, "inputs");
    T_ERR(dt_op_choose((dt_op)9999, 1, mesh, in, 2, NULL, NULL, &c), DT_ERR_ARG, "9999");
    dt_cost_model bad = {.latency_us = 1, .bandwidth_gbps = 0};
    T_ERR(dt_op_choose(DT_OP_MM, 1, mesh, in, 2, NULL, &bad, &c), DT_ERR_ARG, "bandwidth");
    dt_spec out_of_range = spec(2, a, 1, "S(2)");
    const dt_spec *oor[2] = {&out_of_range, &w};
    T_ERR(dt_op_choose(DT_OP_MM, 1, mesh, oor, 2, NULL, NULL, &c), DT_ERR_PLACEMENT, "input 0");
    dt_spec big = spec(2, huge, 1, "R"), big2 = spec(2, huge, 1, "R");
    const dt_spec *bigs[2] = {&big, &big2};
    T_ERR(dt_op_choose(DT_OP_MUL, 1, mesh, bigs, 2, NULL, NULL, &c), DT_ERR_SHAPE, "mul");
    dt_spec wrong = spec(2, a, 1, "R");
    const dt_spec *mismatch[2] = {&x, &wrong};
    T_ERR(dt_op_choose(DT_OP_MM, 1, mesh, mismatch, 2, NULL, NULL, &c), DT_ERR_SHAPE, "mm");
    const dt_spec *labels[2] = {&x, &w};
    T_ERR(dt_op_choose(DT_OP_CROSS_ENTROPY, 1, mesh, labels, 2, NULL, NULL, &c), DT_ERR_UNSUPPORTED,
          "built from other ops");
    cr_assert(!memcmp(&c, &before, sizeof c), "a failed call wrote its output");
    T_ERR(dt_op_explain(DT_OP_MM, 1, mesh, NULL, in, 2, NULL, NULL, NULL, 8, NULL), DT_ERR_ARG,
          "buf");
}

/* ---- the same choice as dispatch on real ranks ----------------------------------------------- */

typedef struct sweep_case {
    const char *op; /* op text as dt_op_lookup reads it */
    dt_op_args args;
    int n;
    int ndim[3];
    int64_t shape[3][3];
    dt_dtype dtype[3];
    int meshes; /* 1: mesh "4" only; 3: "4" and "2x2" */
} sweep_case;

static const sweep_case cases[] = {
    {"add", {0}, 2, {2, 2}, {{8, 6}, {8, 6}}, {DT_F32, DT_F32}, 3},
    {"add", {0}, 2, {2, 1}, {{8, 6}, {6}}, {DT_F32, DT_F32}, 3},
    {"mul", {0}, 2, {2, 2}, {{5, 3}, {5, 3}}, {DT_F32, DT_F32}, 3},
    {"maximum", {0}, 2, {2, 2}, {{4, 4}, {4, 4}}, {DT_F32, DT_F32}, 3},
    {"relu", {0}, 1, {2}, {{8, 6}}, {DT_F32}, 3},
    {"mm", {0}, 2, {2, 2}, {{12, 8}, {8, 16}}, {DT_F32, DT_F32}, 3},
    {"bmm", {0}, 2, {3, 3}, {{4, 8, 4}, {4, 4, 8}}, {DT_F32, DT_F32}, 3},
    {"matmul", {0}, 2, {3, 2}, {{2, 8, 4}, {4, 6}}, {DT_F32, DT_F32}, 3},
    {"sum", {.dims = {1}, .ndims = 1}, 1, {2}, {{8, 6}}, {DT_F32}, 3},
    {"mean", {.dims = {0}, .ndims = 1}, 1, {2}, {{5, 6}}, {DT_F32}, 3},
    {"argmax", {.dim = 1}, 1, {2}, {{8, 6}}, {DT_F32}, 3},
    {"softmax", {.dim = 1}, 1, {2}, {{8, 6}}, {DT_F32}, 3},
    {"transpose", {.dim = 0, .dim2 = 1}, 1, {2}, {{8, 6}}, {DT_F32}, 3},
    {"view", {.shape = {48}, .shape_ndim = 1}, 1, {2}, {{8, 6}}, {DT_F32}, 3},
    {"slice", {.dim = 1, .start = 2, .end = 5}, 1, {2}, {{8, 6}}, {DT_F32}, 3},
    {"embedding", {0}, 2, {2, 1}, {{10, 4}, {6}}, {DT_F32, DT_I64}, 3},
    {"addmm", {0}, 3, {1, 2, 2}, {{4}, {12, 8}, {8, 4}}, {DT_F32, DT_F32, DT_F32}, 1},
    {"linear", {0}, 3, {2, 2, 1}, {{2, 8}, {4, 8}, {4}}, {DT_F32, DT_F32, DT_F32}, 1},
    {"layer_norm", {0}, 3, {2, 1, 1}, {{4, 8}, {8}, {8}}, {DT_F32, DT_F32, DT_F32}, 1},
    {"scale_rows", {0}, 2, {2, 1}, {{8, 6}, {8}}, {DT_F32, DT_F32}, 3}, /* the plugin's */
    {"softsign", {0}, 1, {2}, {{5, 3}}, {DT_F32}, 3},
};

static const char *const choices[] = {"R", "S(0)", "S(1)", "P(sum)"};

typedef struct sweep {
    const char *mesh;
    int compared, skipped;
} sweep;

/* Every placement of every input from choices, per mesh dim. */
static dt_status sweep_body(dt_ctx *ctx, void *arg) {
    sweep *sw = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, sw->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh), ms[DT_MESH_MAX_NDIM];
    for (int m = 0; m < mnd; m++)
        ms[m] = dt_mesh_dim_size(mesh, m);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const sweep_case *cs = &cases[k];
        dt_op op;
        if ((mnd == 2 && cs->meshes != 3) || dt_op_lookup(cs->op, &op) != DT_OK) continue;
        int per = 1, combos = 1;
        for (int m = 0; m < mnd; m++)
            per *= 4;
        for (int i = 0; i < cs->n; i++)
            combos *= per;
        for (int combo = 0; combo < combos; combo++) {
            dt_tensor *in[3] = {0};
            dt_spec specs[3];
            const dt_spec *sp[3];
            char text[3][64];
            int ok = 1;
            for (int i = 0, rest = combo; i < cs->n; i++) {
                specs[i] =
                    (dt_spec){.dtype = cs->dtype[i], .ndim = cs->ndim[i], .nplacements = mnd};
                memcpy(specs[i].shape, cs->shape[i], sizeof specs[i].shape[0] * 3);
                for (int m = 0; m < mnd; m++, rest /= 4)
                    R_OK(dt_placements_parse(choices[rest % 4], &specs[i].placements[m], 1,
                                             &(int){0}));
                dt_placements_format(specs[i].placements, mnd, text[i], sizeof text[i]);
                sp[i] = &specs[i];
                /* Placements a tensor cannot have (S(1) of a vector) are skipped alike. */
                if (ok && dt_tensor_zeros(mesh, specs[i].dtype, specs[i].ndim, specs[i].shape, mnd,
                                          specs[i].placements, &in[i]) != DT_OK)
                    ok = 0;
            }
            if (ok) {
                dt_placement want[3 * DT_MESH_MAX_NDIM], out[DT_MESH_MAX_NDIM];
                dt_op_choice c;
                dt_status s1 = dt_op_strategy(op, in, cs->n, &cs->args, want, out);
                char m1[256];
                snprintf(m1, sizeof m1, "%s", dt_last_error());
                dt_status s2 = dt_op_choose(op, mnd, ms, sp, cs->n, &cs->args, NULL, &c);
                R_CHECK(s1 == s2,
                        "%s on %s with %s | %s | %s: dispatch %s (%s), dt_op_choose %s "
                        "(%s)",
                        cs->op, sw->mesh, text[0], cs->n > 1 ? text[1] : "-",
                        cs->n > 2 ? text[2] : "-", dt_status_str(s1), m1, dt_status_str(s2),
                        dt_last_error());
                for (int m = 0; s1 == DT_OK && m < mnd; m++) {
                    R_CHECK(dt_placement_equal(out[m], c.output[m]),
                            "%s on %s with %s | %s: "
                            "outputs differ on mesh dim %d",
                            cs->op, sw->mesh, text[0], cs->n > 1 ? text[1] : "-", m);
                    for (int i = 0; i < cs->n; i++)
                        R_CHECK(dt_placement_equal(want[i * mnd + m], c.inputs[i][m]),
                                "%s on %s "
                                "with %s | %s: input %d differs on mesh dim %d",
                                cs->op, sw->mesh, text[0], cs->n > 1 ? text[1] : "-", i, m);
                }
                if (dt_ctx_rank(ctx) == 0) sw->compared++;
            } else if (dt_ctx_rank(ctx) == 0) {
                sw->skipped++;
            }
            for (int i = 0; i < cs->n; i++)
                dt_tensor_release(in[i]);
        }
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

/* The plugin's ops, registered through its entry symbol as dtensor-explain does. */
static void load_plugin(void) {
    const char *path = getenv("DT_EXPLAIN_PLUGIN");
    cr_assert(path, "DT_EXPLAIN_PLUGIN is not set (meson sets it)");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "dlopen %s: %s", path, dlerror());
    dt_plugin_register_fn entry;
    *(void **)&entry = dlsym(h, DT_PLUGIN_ENTRY);
    cr_assert(entry, "%s has no %s", path, DT_PLUGIN_ENTRY);
    cr_assert_eq(entry(), DT_OK, "%s", dt_last_error());
    cr_assert_eq(entry(), DT_OK, "a second load registers nothing twice: %s", dt_last_error());
}

Test(explain, same_choice_as_dispatch) {
    load_plugin();
    sweep one = {.mesh = "4"}, two = {.mesh = "2x2"};
    t_run(4, sweep_body, &one);
    t_run(4, sweep_body, &two);
    cr_log_info("compared %d choices on mesh 4 and %d on 2x2 (%d and %d placements skipped)",
                one.compared, two.compared, one.skipped, two.skipped);
    int total[2] = {0, 0}; /* combinations on each mesh: 4^(mesh dims * inputs) per case */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int mnd = 1; mnd <= 2; mnd++)
            if (mnd == 1 || cases[k].meshes == 3) total[mnd - 1] += 1 << (2 * mnd * cases[k].n);
    cr_assert_eq(one.compared + one.skipped, total[0]);
    cr_assert_eq(two.compared + two.skipped, total[1]);
    cr_assert(4 * one.compared >= 3 * total[0] && 4 * two.compared >= 3 * total[1],
              "too many placements skipped");
}

/* ---- the plugin's ops: explained without ranks, and right on ranks ------------------------- */

static dt_status plugin_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    dt_op scale_rows, softsign;
    R_OK(dt_op_lookup("scale_rows", &scale_rows));
    R_OK(dt_op_lookup("softsign", &softsign));
    int64_t xs[2] = {7, 5}, ss[1] = {7};
    float x[35], s[7], got[35];
    t_fill(DT_F32, x, 35, 3);
    t_fill(DT_F32, s, 7, 4);
    dt_placement s1[1] = {dt_shard(1)}, s0[1] = {dt_shard(0)},
                 psum[1] = {dt_partial(DT_REDUCE_SUM)};
    dt_tensor *tx, *ts, *tp, *o;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, 1, s1, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, s, DT_F32, 1, ss, 1, s0, DT_ALL_RANKS, &ts));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, 1, psum, DT_ALL_RANKS, &tp));
    dt_tensor *in[2] = {tx, ts};
    R_OK(dt_op_call(scale_rows, in, 2, NULL, &o));
    R_OK(dt_tensor_full_tensor(o, got, sizeof got));
    for (int i = 0; i < 35; i++)
        R_CHECK(got[i] == x[i] * s[i / 5], "scale_rows element %d", i);
    dt_tensor_release(o);
    R_OK(dt_op_call(softsign, &tp, 1, NULL, &o));
    R_OK(dt_tensor_full_tensor(o, got, sizeof got));
    for (int i = 0; i < 35; i++)
        R_CHECK(fabsf(got[i] - x[i] / (1 + fabsf(x[i]))) <= 1e-6f, "softsign element %d", i);
    dt_tensor_release(o);
    dt_tensor_release(tx), dt_tensor_release(ts), dt_tensor_release(tp);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(explain, plugin_ops) {
    load_plugin();
    dt_op op;
    cr_assert_eq(dt_op_lookup("scale_rows", &op), DT_OK, "%s", dt_last_error());
    cr_assert_geq(op, DT_OP_COUNT);
    int64_t a[2] = {8, 6}, b[1] = {8};
    int mesh[1] = {4};
    dt_spec x = spec(2, a, 1, "S(1)"), s = spec(1, b, 1, "S(0)");
    const dt_spec *in[2] = {&x, &s};
    dt_op_choice c;
    cr_assert_eq(dt_op_choose(op, 1, mesh, in, 2, NULL, NULL, &c), DT_OK, "%s", dt_last_error());
    assert_placements(c.inputs[1], 1, "R", "s gathered");
    assert_placements(c.output, 1, "S(1)", "output");
    char buf[2048];
    cr_assert_eq(dt_op_explain(op, 1, mesh, NULL, in, 2, NULL, NULL, buf, sizeof buf, NULL), DT_OK);
    cr_assert(strstr(buf, "scale_rows on mesh 4\n") && strstr(buf, "all_gather"), "%s", buf);
    t_run(4, plugin_body, NULL);
}
