/* Device meshes that must be refused: malformed texts, impossible shapes and names, bad
 * arguments to every call, each with a clear error that names the value, and nothing written
 * to the output on failure. */
#include <stdbool.h>

#include "helpers.h"

#define MAXR 8 /* most ranks any test here runs */
/* One timeout for every test of the file (a hang becomes a failure): Criterion 2.4.1's runner
 * leaks a timer entry, which LeakSanitizer reports, when tests of one binary differ in it. */
#define TIMEOUT_S 60

/* ---- Invalid meshes and arguments --------------------------------------------------------- */

/* dt_mesh_create must fail with want, mention needle, and leave mesh_out alone. */
#define R_CREATE_ERR(ctx, ndim, shape, names, want, needle)                                        \
    do {                                                                                           \
        dt_mesh *m_ = T_SENTINEL(dt_mesh *);                                                               \
        R_ERR(dt_mesh_create((ctx), (ndim), (shape), (names), &m_), (want), (needle));             \
        R_CHECK(m_ == T_SENTINEL(dt_mesh *), "mesh_out written on failure");                               \
    } while (0)

#define R_STR_ERR(ctx, text, want, needle)                                                         \
    do {                                                                                           \
        dt_mesh *m_ = T_SENTINEL(dt_mesh *);                                                               \
        R_ERR(dt_mesh_create_str((ctx), (text), &m_), (want), (needle));                           \
        R_CHECK(m_ == T_SENTINEL(dt_mesh *), "mesh_out written on failure (%s)", #text);                   \
    } while (0)

/* Mesh texts that are not "dp=2,tp=2" or "2x2" forms (or have more than 8 dims). */
static const char *const malformed[] = {
    "",    "2x",       "dp=2,3", "x2",   "dp=,tp=2", "2x2x",       "dp=2;tp=2",
    "2,2", "dp=2,tp=", "dp=2x2", "-2x2", "2x-2",     "dp=2,,tp=2", "1x1x1x1x1x1x1x1x4"};

/* Runs on 4 ranks; nothing here is collective, each rank checks every error on its own. */
static dt_status create_errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const char *dpdp[2] = {"dp", "dp"}, *empty[2] = {"", "tp"}, *comma[2] = {"d,p", "tp"};
    const char *nul[2] = {"dp", NULL};
    const char *n31[2] = {"abcdefghijklmnopqrstuvwxyz01234", "tp"};
    const char *n32[2] = {"abcdefghijklmnopqrstuvwxyz012345", "tp"};
    const int ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 4};

    R_CREATE_ERR(ctx, 2, ((int[]){2, 3}), NULL, DT_ERR_MESH, "shape 2x3 has 6 ranks");
    R_MSG("world has 4");
    R_CREATE_ERR(ctx, 1, ((int[]){2}), NULL, DT_ERR_MESH, "shape 2 has 2 ranks");
    R_MSG("world has 4");
    R_CREATE_ERR(ctx, 2, ((int[]){2, 0}), NULL, DT_ERR_MESH, "shape[1] = 0");
    R_CREATE_ERR(ctx, 2, ((int[]){0, 4}), NULL, DT_ERR_MESH, "shape[0] = 0");
    R_CREATE_ERR(ctx, 2, ((int[]){-2, -2}), NULL, DT_ERR_MESH, "shape[0] = -2");
    R_CREATE_ERR(ctx, 0, ones, NULL, DT_ERR_MESH, "ndim = 0");
    R_CREATE_ERR(ctx, -1, ones, NULL, DT_ERR_MESH, "ndim = -1");
    R_CREATE_ERR(ctx, DT_MESH_MAX_NDIM + 1, ones, NULL, DT_ERR_MESH, "ndim = 9");
    R_CREATE_ERR(ctx, 2, ((int[]){2, 2}), dpdp, DT_ERR_MESH, "\"dp\" is used twice");
    R_CREATE_ERR(ctx, 2, ((int[]){2, 2}), empty, DT_ERR_MESH, "names[0] = \"\"");
    R_CREATE_ERR(ctx, 2, ((int[]){2, 2}), comma, DT_ERR_MESH, "\"d,p\"");
    R_CREATE_ERR(ctx, 2, ((int[]){2, 2}), n32, DT_ERR_MESH, n32[0]);
    R_CREATE_ERR(ctx, 2, ((int[]){2, 2}), nul, DT_ERR_ARG, "names[1]");
    R_CREATE_ERR(NULL, 2, ((int[]){2, 2}), NULL, DT_ERR_ARG, "ctx");
    R_CREATE_ERR(ctx, 2, NULL, NULL, DT_ERR_ARG, "shape");
    R_ERR(dt_mesh_create(ctx, 2, (int[]){2, 2}, NULL, NULL), DT_ERR_ARG, "argument out");

    /* DT_MESH_NAME_MAX characters is still a name. Every rank creates it, in the same order. */
    dt_mesh *m = NULL;
    R_OK(dt_mesh_create(ctx, 2, (int[]){2, 2}, n31, &m));
    R_CHECK(strcmp(dt_mesh_dim_name(m, 0), n31[0]) == 0, "31-character name");
    R_OK(dt_mesh_release(m));

    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"%s\"", malformed[i]);
        R_STR_ERR(ctx, malformed[i], DT_ERR_PARSE, quoted);
    }
    /* Longer than DT_MESH_NAME_MAX: rejected by the parser already. */
    R_STR_ERR(ctx, "abcdefghijklmnopqrstuvwxyz012345=4", DT_ERR_PARSE,
              "abcdefghijklmnopqrstuvwxyz");
    R_STR_ERR(ctx, "dp=2,tp=3", DT_ERR_MESH, "shape 2x3 has 6 ranks");
    R_STR_ERR(ctx, "dp=2,dp=2", DT_ERR_MESH, "\"dp\"");
    R_STR_ERR(ctx, "2x0x2", DT_ERR_MESH, "shape[1] = 0");
    R_STR_ERR(NULL, "2x2", DT_ERR_ARG, "ctx");
    R_STR_ERR(ctx, NULL, DT_ERR_ARG, "text");
    R_ERR(dt_mesh_create_str(ctx, "2x2", NULL), DT_ERR_ARG, "argument out");
    return DT_OK;
}

/* Errors on a valid dp x cp x tp mesh (8 ranks): bad names, dims, ranks and coordinates. */
static dt_status use_errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *m = NULL, *sub = T_SENTINEL(dt_mesh *);
    dt_comm *c = T_SENTINEL(dt_comm *);
    int out = -7, coord[3] = {-7, -7, -7};
    R_OK(dt_mesh_create_str(ctx, "dp=2,cp=2,tp=2", &m));

    R_ERR(dt_mesh_dim_index(m, "pp", &out), DT_ERR_MESH, "\"pp\"");
    R_MSG("dp,cp,tp");
    R_ERR(dt_mesh_dim_index(m, NULL, &out), DT_ERR_ARG, "name");
    R_ERR(dt_mesh_dim_index(m, "dp", NULL), DT_ERR_ARG, "argument out");
    R_ERR(dt_mesh_dim_index(NULL, "dp", &out), DT_ERR_ARG, "mesh");
    R_ERR(dt_mesh_coord_of(m, 8, coord), DT_ERR_ARG, "mesh_rank = 8");
    R_ERR(dt_mesh_coord_of(m, -1, coord), DT_ERR_ARG, "mesh_rank = -1");
    R_ERR(dt_mesh_rank_of(m, (int[]){0, 2, 0}, &out), DT_ERR_ARG, "coord[1] = 2");
    R_ERR(dt_mesh_rank_of(m, (int[]){0, 0, -1}, &out), DT_ERR_ARG, "coord[2] = -1");
    R_ERR(dt_mesh_world_rank(m, 8, &out), DT_ERR_ARG, "mesh_rank = 8");
    R_CHECK(out == -7 && coord[0] == -7 && coord[1] == -7 && coord[2] == -7,
            "int out-parameters written on failure");

    /* Getters with a bad dim or mesh give -1 / NULL and say why. */
    R_CHECK(dt_mesh_dim_size(m, 3) == -1, "dim_size(3)");
    R_MSG("dim = 3");
    R_CHECK(dt_mesh_dim_size(m, -1) == -1, "dim_size(-1)");
    R_MSG("dim = -1");
    R_CHECK(dt_mesh_coord(m, 3) == -1, "coord(3)");
    R_MSG("dim = 3");
    R_CHECK(dt_mesh_dim_name(m, 3) == NULL, "dim_name(3)");
    R_CHECK(dt_mesh_ndim(NULL) == -1 && dt_mesh_nranks(NULL) == -1 && dt_mesh_rank(NULL) == -1 &&
                dt_mesh_coord(NULL, 0) == -1 && dt_mesh_dim_size(NULL, 0) == -1 &&
                dt_mesh_dim_name(NULL, 0) == NULL && dt_mesh_ctx(NULL) == NULL,
            "getters on a NULL mesh");
    R_MSG("mesh");

    R_ERR(dt_mesh_dim_comm(m, 3, &c), DT_ERR_ARG, "dim = 3");
    R_ERR(dt_mesh_dim_comm(m, -1, &c), DT_ERR_ARG, "dim = -1");
    R_ERR(dt_mesh_mask_comm(m, 0x8, &c), DT_ERR_ARG, "0x8");
    R_ERR(dt_mesh_group_comm(m, (const char *[]){"tp", "dp"}, 2, &c), DT_ERR_MESH, "\"dp\"");
    R_MSG("order");
    R_ERR(dt_mesh_group_comm(m, (const char *[]){"dp", "dp"}, 2, &c), DT_ERR_MESH, "repeated");
    R_ERR(dt_mesh_group_comm(m, (const char *[]){"dp", "xx"}, 2, &c), DT_ERR_MESH, "\"xx\"");
    R_ERR(dt_mesh_group_comm(m, (const char *[]){"dp", "cp", "tp", "dp"}, 4, &c), DT_ERR_ARG,
          "n = 4");
    R_ERR(dt_mesh_group_comm(m, NULL, 1, &c), DT_ERR_ARG, "names");
    R_ERR(dt_mesh_group_comm(m, (const char *[]){NULL}, 1, &c), DT_ERR_ARG, "names[0]");
    R_ERR(dt_mesh_dim_comm(NULL, 0, &c), DT_ERR_ARG, "mesh");
    R_CHECK(c == T_SENTINEL(dt_comm *), "comm_out written on failure");
    R_ERR(dt_mesh_dim_comm(m, 0, NULL), DT_ERR_ARG, "argument out");

    R_ERR(dt_mesh_submesh(m, (const char *[]){"tp", "cp"}, 2, &sub), DT_ERR_MESH, "\"cp\"");
    R_ERR(dt_mesh_submesh(m, (const char *[]){"cp", "cp"}, 2, &sub), DT_ERR_MESH, "repeated");
    R_ERR(dt_mesh_submesh(m, (const char *[]){"pp"}, 1, &sub), DT_ERR_MESH, "\"pp\"");
    R_ERR(dt_mesh_submesh(m, (const char *[]){"dp"}, 0, &sub), DT_ERR_ARG, "n = 0");
    R_ERR(dt_mesh_submesh(m, (const char *[]){"dp"}, -1, &sub), DT_ERR_ARG, "n = -1");
    R_ERR(dt_mesh_submesh(NULL, (const char *[]){"dp"}, 1, &sub), DT_ERR_ARG, "mesh");
    R_CHECK(sub == T_SENTINEL(dt_mesh *), "submesh_out written on failure");
    R_ERR(dt_mesh_submesh(m, (const char *[]){"dp"}, 1, NULL), DT_ERR_ARG, "argument out");
    R_ERR(dt_mesh_retain(NULL), DT_ERR_ARG, "mesh");
    R_OK(dt_mesh_release(NULL));

    /* After all that, the mesh still works. */
    dt_comm *tp = NULL;
    int64_t one = 1, sum = 0;
    R_OK(dt_mesh_dim_comm(m, 2, &tp));
    R_OK(dt_all_reduce(tp, &one, &sum, 1, DT_I64, DT_REDUCE_SUM));
    R_CHECK(sum == 2, "tp sum %lld", (long long)sum);
    R_OK(dt_mesh_release(m));
    return DT_OK;
}

Test(mesh_errors, invalid_meshes_and_arguments, .timeout = TIMEOUT_S) {
    t_run(4, create_errors_body, NULL);
    t_run(8, use_errors_body, NULL);
}

/* dt_mesh_parse needs no ranks; sizes are only numbers to it (dt_mesh_create checks them). */
Test(mesh_errors, parse_without_ranks) {
    int shape[DT_MESH_MAX_NDIM], nd = -1;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    cr_assert_eq(dt_mesh_parse("dp=2,pp=1,cp=3,tp=4", shape, names, &nd), DT_OK, "%s",
                 dt_last_error());
    cr_assert(nd == 4 && shape[0] == 2 && shape[1] == 1 && shape[2] == 3 && shape[3] == 4);
    cr_assert(!strcmp(names[0], "dp") && !strcmp(names[1], "pp") && !strcmp(names[2], "cp") &&
              !strcmp(names[3], "tp"));
    cr_assert_eq(dt_mesh_parse("2x0x3", shape, names, &nd), DT_OK, "%s", dt_last_error());
    cr_assert(nd == 3 && shape[0] == 2 && shape[1] == 0 && shape[2] == 3);
    cr_assert(!strcmp(names[0], "d0") && !strcmp(names[2], "d2"));
    cr_assert_eq(dt_mesh_parse("7", shape, NULL, &nd), DT_OK, "%s", dt_last_error());
    cr_assert(nd == 1 && shape[0] == 7);
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"%s\"", malformed[i]);
        nd = -1;
        T_ERR(dt_mesh_parse(malformed[i], shape, names, &nd), DT_ERR_PARSE, quoted);
        cr_assert_eq(nd, -1, "ndim_out written for \"%s\"", malformed[i]);
    }
    T_ERR(dt_mesh_parse(NULL, shape, names, &nd), DT_ERR_ARG, "text");
    T_ERR(dt_mesh_parse("2x2", NULL, names, &nd), DT_ERR_ARG, "shape_out");
    T_ERR(dt_mesh_parse("2x2", shape, names, NULL), DT_ERR_ARG, "ndim_out");
}

/* The world-size message must count every dim, also when an early dim already exceeds the
 * world, and a size below 1 must be reported as such wherever it sits. */
static dt_status product_message_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    R_CREATE_ERR(ctx, 2, ((int[]){8, 2}), NULL, DT_ERR_MESH, "shape 8x2 has 16 ranks");
    R_CREATE_ERR(ctx, 2, ((int[]){8, 0}), NULL, DT_ERR_MESH, "shape[1] = 0");
    R_CREATE_ERR(ctx, 3, ((int[]){8, 2, -1}), NULL, DT_ERR_MESH, "shape[2] = -1");
    return DT_OK;
}

Test(mesh_errors, product_message_counts_every_dim) {
    t_run(4, product_message_body, NULL);
}

