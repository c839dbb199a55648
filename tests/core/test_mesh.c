/* Device meshes on 1 to 8 local ranks: shapes, names and coordinates against a row-major
 * reference computed here (never by the library), the communicators of dims, flattened groups
 * and sub-meshes (each checked with real collectives); invalid meshes are test_mesh_errors.c. */
#include <stdbool.h>

#include "helpers.h"

#define MAXR 8 /* most ranks any test here runs */
/* One timeout for every test of the file (a hang becomes a failure): Criterion 2.4.1's runner
 * leaks a timer entry, which LeakSanitizer reports, when tests of one binary differ in it. */
#define TIMEOUT_S 60

/* ---- Reference geometry, written independently of src/mesh -------------------------------- */

/* Row-major: the last dim varies fastest. */
static void ref_coord(int ndim, const int *shape, int r, int *coord) {
    for (int d = ndim - 1; d >= 0; d--) {
        coord[d] = r % shape[d];
        r /= shape[d];
    }
}

static int ref_rank(int ndim, const int *shape, const int *coord) {
    int r = 0;
    for (int d = 0; d < ndim; d++)
        r = r * shape[d] + coord[d];
    return r;
}

/* The group over the dims in mask that holds the rank at coordinate mine: every coordinate
 * that differs from mine only in those dims, enumerated row-major over them (an odometer over
 * the masked dims, not a filter over world ranks as the library does). Returns its size. */
static int ref_group(int ndim, const int *shape, unsigned mask, const int *mine, int *members) {
    int dims[DT_MESH_MAX_NDIM], nd = 0, total = 1;
    for (int d = 0; d < ndim; d++)
        if (mask & (1u << d)) {
            dims[nd++] = d;
            total *= shape[d];
        }
    for (int k = 0; k < total; k++) {
        int c[DT_MESH_MAX_NDIM];
        memcpy(c, mine, sizeof(int) * (size_t)ndim);
        for (int i = nd - 1, x = k; i >= 0; i--) {
            c[dims[i]] = x % shape[dims[i]];
            x /= shape[dims[i]];
        }
        members[k] = ref_rank(ndim, shape, c);
    }
    return total;
}

/* comm must be exactly the group want[0..n-1] (world ranks, in group-rank order) and work:
 * an all_reduce of world ranks gives their sum and an all_gather gives the member list. */
static dt_status check_group(dt_comm *c, const int *want, int n, int me, const char *what) {
    R_CHECK(c != NULL, "%s: NULL communicator", what);
    R_CHECK(dt_comm_size(c) == n, "%s: size %d, want %d", what, dt_comm_size(c), n);
    int self = -1;
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        R_CHECK(dt_comm_world_rank(c, i) == want[i], "%s: group rank %d is world rank %d, want %d",
                what, i, dt_comm_world_rank(c, i), want[i]);
        if (want[i] == me) self = i;
        sum += want[i];
    }
    R_CHECK(self >= 0, "%s: reference group lacks rank %d", what, me);
    R_CHECK(dt_comm_rank(c) == self, "%s: rank %d, want %d", what, dt_comm_rank(c), self);
    R_CHECK(dt_comm_world_rank(c, n) == -1 && dt_comm_world_rank(c, -1) == -1, "%s", what);
    int64_t v = me, got = -1, all[MAXR];
    R_OK(dt_all_reduce(c, &v, &got, 1, DT_I64, DT_REDUCE_SUM));
    R_CHECK(got == sum, "%s: all_reduce gave %lld, want %lld", what, (long long)got,
            (long long)sum);
    R_OK(dt_all_gather(c, &v, all, 1, DT_I64));
    for (int i = 0; i < n; i++)
        R_CHECK(all[i] == want[i], "%s: all_gather[%d] = %lld, want %d", what, i, (long long)all[i],
                want[i]);
    return DT_OK;
}

/* ---- Shapes, names, coordinates and every group of dims ----------------------------------- */

typedef struct mesh_case {
    int ndim;
    int shape[4];
    const char *names[4]; /* names[0] NULL: the mesh uses default names */
} mesh_case;

static const mesh_case cases[] = {
    {1, {1}, {NULL}},
    {1, {1}, {"dp"}},
    {1, {2}, {NULL}},
    {2, {1, 2}, {"dp", "tp"}},
    {2, {2, 1}, {NULL}},
    {1, {3}, {"tp"}},
    {3, {1, 3, 1}, {NULL}},
    {1, {4}, {NULL}},
    {2, {2, 2}, {"dp", "tp"}},
    {3, {1, 2, 2}, {"pp", "cp", "tp"}},
    {4, {2, 1, 2, 1}, {NULL}},
    {2, {2, 3}, {"dp", "tp"}},
    {2, {3, 2}, {NULL}},
    {3, {3, 1, 2}, {"a", "b_1", "C2"}},
    {4, {1, 2, 3, 1}, {NULL}},
    {1, {8}, {NULL}},
    {2, {2, 4}, {"dp", "tp"}},
    {2, {4, 2}, {NULL}},
    {3, {2, 2, 2}, {"dp", "cp", "tp"}},
    {4, {2, 1, 2, 2}, {"dp", "pp", "cp", "tp"}},
    {4, {2, 1, 2, 2}, {NULL}},
};

enum { MODE_CREATE, MODE_STR, MODE_DEFAULT_NAMES };

typedef struct mesh_arg {
    const mesh_case *mc;
    int mode;
    char text[96]; /* "dp=2,tp=2" or "2x2": the create_str input, and the case's label */
} mesh_arg;

static dt_status shape_body(dt_ctx *ctx, void *arg) {
    const mesh_arg *a = arg;
    const mesh_case *mc = a->mc;
    const int nd = mc->ndim, me = dt_ctx_rank(ctx);
    const bool named = mc->names[0] && a->mode != MODE_DEFAULT_NAMES;
    dt_mesh *m = NULL;
    if (a->mode == MODE_STR)
        R_OK(dt_mesh_create_str(ctx, a->text, &m));
    else
        R_OK(dt_mesh_create(ctx, nd, mc->shape, named ? mc->names : NULL, &m));

    int world = 1, mine[DT_MESH_MAX_NDIM], c[DT_MESH_MAX_NDIM], r;
    for (int d = 0; d < nd; d++)
        world *= mc->shape[d];
    ref_coord(nd, mc->shape, me, mine);
    R_CHECK(dt_mesh_ndim(m) == nd, "[%s] ndim %d", a->text, dt_mesh_ndim(m));
    R_CHECK(dt_mesh_nranks(m) == world, "[%s] nranks %d", a->text, dt_mesh_nranks(m));
    R_CHECK(dt_mesh_rank(m) == me, "[%s] mesh rank %d, world rank %d", a->text, dt_mesh_rank(m),
            me);
    R_CHECK(dt_mesh_ctx(m) == ctx, "[%s] ctx", a->text);
    for (int d = 0; d < nd; d++) {
        char dflt[16];
        snprintf(dflt, sizeof dflt, "d%d", d);
        const char *want = named ? mc->names[d] : dflt;
        const char *got = dt_mesh_dim_name(m, d);
        R_CHECK(got && strcmp(got, want) == 0, "[%s] name of dim %d is %s, want %s", a->text, d,
                got ? got : "NULL", want);
        R_CHECK(dt_mesh_dim_size(m, d) == mc->shape[d], "[%s] dim %d", a->text, d);
        R_CHECK(dt_mesh_coord(m, d) == mine[d], "[%s] rank %d: coord[%d] = %d, want %d", a->text,
                me, d, dt_mesh_coord(m, d), mine[d]);
        int idx = -1;
        R_OK(dt_mesh_dim_index(m, want, &idx));
        R_CHECK(idx == d, "[%s] dim_index(%s) = %d", a->text, want, idx);
    }
    for (int mr = 0; mr < world; mr++) {
        int want[DT_MESH_MAX_NDIM];
        ref_coord(nd, mc->shape, mr, want);
        R_OK(dt_mesh_coord_of(m, mr, c));
        R_CHECK(memcmp(c, want, sizeof(int) * (size_t)nd) == 0, "[%s] coord_of(%d)", a->text, mr);
        R_OK(dt_mesh_rank_of(m, c, &r));
        R_CHECK(r == mr, "[%s] rank_of(coord_of(%d)) = %d", a->text, mr, r);
        R_OK(dt_mesh_world_rank(m, mr, &r));
        R_CHECK(r == mr, "[%s] world_rank(%d) = %d", a->text, mr, r);
    }
    /* Each dim's communicator: the ranks whose coordinate differs only there. */
    for (int d = 0; d < nd; d++) {
        int members[MAXR], n = 0;
        for (int i = 0; i < mc->shape[d]; i++) {
            memcpy(c, mine, sizeof c);
            c[d] = i;
            members[n++] = ref_rank(nd, mc->shape, c);
        }
        dt_comm *dc = NULL;
        R_OK(dt_mesh_dim_comm(m, d, &dc));
        R_CHECK(dt_comm_rank(dc) == mine[d], "[%s] dim %d comm rank", a->text, d);
        R_OK(check_group(dc, members, n, me, a->text));
    }
    /* Every set of dims flattened. All ranks visit the masks in the same order, so the
     * collectives on overlapping groups cannot deadlock. */
    for (unsigned mask = 0; mask < (1u << nd); mask++) {
        int members[MAXR];
        int n = ref_group(nd, mc->shape, mask, mine, members);
        dt_comm *gc = NULL;
        R_OK(dt_mesh_mask_comm(m, mask, &gc));
        R_OK(check_group(gc, members, n, me, a->text));
    }
    R_OK(dt_mesh_release(m));
    return DT_OK;
}

Test(mesh, shapes_names_coords_and_groups_on_1_to_8_ranks, .timeout = TIMEOUT_S) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mesh_case *mc = &cases[i];
        int world = 1;
        for (int d = 0; d < mc->ndim; d++)
            world *= mc->shape[d];
        for (int mode = MODE_CREATE; mode <= MODE_DEFAULT_NAMES; mode++) {
            if (mode == MODE_DEFAULT_NAMES && !mc->names[0]) continue;
            mesh_arg a = {.mc = mc, .mode = mode};
            for (int d = 0, o = 0; d < mc->ndim; d++) {
                if (mc->names[0])
                    o += snprintf(a.text + o, sizeof a.text - (size_t)o, "%s%s=%d", d ? "," : "",
                                  mc->names[d], mc->shape[d]);
                else
                    o += snprintf(a.text + o, sizeof a.text - (size_t)o, d ? "x%d" : "%d",
                                  mc->shape[d]);
            }
            t_run(world, shape_body, &a);
        }
    }
}

/* ---- Flattened groups by name ------------------------------------------------------------- */

static dt_status group_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int shape[4] = {2, 1, 2, 2}, me = dt_ctx_rank(ctx);
    const char *names[4] = {"dp", "pp", "cp", "tp"};
    int mine[4], members[MAXR], n;
    ref_coord(4, shape, me, mine);
    dt_mesh *m = NULL;
    R_OK(dt_mesh_create(ctx, 4, shape, names, &m));

    dt_comm *byname = NULL, *bymask = NULL;
    R_OK(dt_mesh_group_comm(m, (const char *[]){"dp", "tp"}, 2, &byname));
    R_OK(dt_mesh_mask_comm(m, 0x9, &bymask));
    n = ref_group(4, shape, 0x9, mine, members);
    R_CHECK(n == 4, "dp x tp has %d ranks", n);
    R_OK(check_group(byname, members, n, me, "group (dp,tp)"));
    R_OK(check_group(bymask, members, n, me, "mask 0x9"));

    dt_comm *all = NULL, *cp = NULL, *one = NULL;
    R_OK(dt_mesh_group_comm(m, names, 4, &all));
    n = ref_group(4, shape, 0xf, mine, members);
    R_OK(check_group(all, members, n, me, "group (dp,pp,cp,tp)"));
    R_OK(dt_mesh_group_comm(m, (const char *[]){"cp"}, 1, &cp));
    n = ref_group(4, shape, 0x4, mine, members);
    R_OK(check_group(cp, members, n, me, "group (cp)"));
    /* The empty set of dims is a group of one: collectives on it are local copies. */
    R_OK(dt_mesh_mask_comm(m, 0, &one));
    R_OK(check_group(one, &me, 1, me, "mask 0"));
    R_OK(dt_barrier(one));
    R_OK(dt_mesh_release(m));
    return DT_OK;
}

Test(mesh, group_comm_by_names_and_mask, .timeout = TIMEOUT_S) {
    t_run(8, group_body, NULL);
}

/* ---- Sub-meshes --------------------------------------------------------------------------- */

/* sub must be the sub-mesh of the dims in mask of a mesh (pndim, pshape, pnames) that holds
 * this rank; checks its geometry, members, and that its dim comms agree with the parent's. */
static dt_status check_submesh(dt_mesh *sub, dt_mesh *parent, int pndim, const int *pshape,
                               const char *const *pnames, unsigned mask, int me) {
    int mine[DT_MESH_MAX_NDIM], dims[DT_MESH_MAX_NDIM], nd = 0, sshape[DT_MESH_MAX_NDIM];
    int scoord[DT_MESH_MAX_NDIM], members[MAXR], c[DT_MESH_MAX_NDIM], r;
    ref_coord(pndim, pshape, me, mine);
    for (int d = 0; d < pndim; d++)
        if (mask & (1u << d)) {
            sshape[nd] = pshape[d];
            scoord[nd] = mine[d];
            dims[nd++] = d;
        }
    int n = ref_group(pndim, pshape, mask, mine, members);
    R_CHECK(dt_mesh_ndim(sub) == nd, "sub-mesh ndim %d, want %d", dt_mesh_ndim(sub), nd);
    R_CHECK(dt_mesh_nranks(sub) == n, "sub-mesh nranks %d, want %d", dt_mesh_nranks(sub), n);
    R_CHECK(dt_mesh_rank(sub) == ref_rank(nd, sshape, scoord), "sub-mesh rank %d",
            dt_mesh_rank(sub));
    for (int i = 0; i < nd; i++) {
        const char *name = dt_mesh_dim_name(sub, i);
        R_CHECK(name && strcmp(name, pnames[dims[i]]) == 0, "sub-mesh dim %d is %s", i,
                name ? name : "NULL");
        R_CHECK(dt_mesh_dim_size(sub, i) == sshape[i], "sub-mesh dim %d size", i);
        R_CHECK(dt_mesh_coord(sub, i) == scoord[i], "sub-mesh coord[%d] = %d, want %d", i,
                dt_mesh_coord(sub, i), scoord[i]);
    }
    /* Mesh rank k of the sub-mesh is the k-th member of the parent's group over those dims. */
    for (int k = 0; k < n; k++) {
        R_OK(dt_mesh_world_rank(sub, k, &r));
        R_CHECK(r == members[k], "sub-mesh rank %d is world rank %d, want %d", k, r, members[k]);
        R_OK(dt_mesh_coord_of(sub, k, c));
        R_OK(dt_mesh_rank_of(sub, c, &r));
        R_CHECK(r == k, "sub-mesh rank_of(coord_of(%d)) = %d", k, r);
    }
    for (int i = 0; i < nd; i++) {
        dt_comm *sc = NULL, *pc = NULL;
        int dm[MAXR], dn = ref_group(pndim, pshape, 1u << dims[i], mine, dm);
        R_OK(dt_mesh_dim_comm(sub, i, &sc));
        R_OK(check_group(sc, dm, dn, me, "sub-mesh dim comm"));
        int64_t v = (int64_t)me * me + 1, via_sub = 0, via_parent = 0;
        R_OK(dt_all_reduce(sc, &v, &via_sub, 1, DT_I64, DT_REDUCE_SUM));
        if (parent) {
            R_OK(dt_mesh_dim_comm(parent, dims[i], &pc));
            R_OK(dt_all_reduce(pc, &v, &via_parent, 1, DT_I64, DT_REDUCE_SUM));
            R_CHECK(via_sub == via_parent, "dim %s: sub-mesh sum %lld, parent sum %lld",
                    pnames[dims[i]], (long long)via_sub, (long long)via_parent);
        }
    }
    R_CHECK(dt_mesh_ctx(sub) != NULL, "sub-mesh ctx");
    return DT_OK;
}

static dt_status submesh_2d_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int shape[2] = {2, 2}, me = dt_ctx_rank(ctx);
    const char *names[2] = {"dp", "tp"};
    dt_mesh *m = NULL, *tp = NULL, *dp = NULL, *both = NULL;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &m));
    R_OK(dt_mesh_submesh(m, (const char *[]){"tp"}, 1, &tp));
    R_OK(dt_mesh_submesh(m, (const char *[]){"dp"}, 1, &dp));
    R_OK(dt_mesh_submesh(m, names, 2, &both));
    R_CHECK(dt_mesh_ctx(tp) == ctx, "sub-mesh ctx");
    R_OK(check_submesh(tp, m, 2, shape, names, 0x2, me));
    R_OK(check_submesh(dp, m, 2, shape, names, 0x1, me));
    R_OK(check_submesh(both, m, 2, shape, names, 0x3, me));
    R_OK(dt_mesh_release(both));
    R_OK(dt_mesh_release(dp));
    R_OK(dt_mesh_release(tp));
    R_OK(dt_mesh_release(m));
    return DT_OK;
}

/* 3-D dp x cp x tp: sub-meshes (dp,cp) and (dp,tp), sub-meshes of those, and parents
 * released before their sub-meshes (which must keep them alive). */
static dt_status submesh_3d_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int shape[3] = {2, 2, 2}, me = dt_ctx_rank(ctx);
    const char *names[3] = {"dp", "cp", "tp"};
    dt_mesh *m = NULL, *dpcp = NULL, *dptp = NULL, *cp = NULL, *tp = NULL;
    R_OK(dt_mesh_create(ctx, 3, shape, names, &m));
    R_OK(dt_mesh_submesh(m, (const char *[]){"dp", "cp"}, 2, &dpcp));
    R_OK(dt_mesh_submesh(m, (const char *[]){"dp", "tp"}, 2, &dptp));
    R_OK(check_submesh(dpcp, m, 3, shape, names, 0x3, me));
    R_OK(check_submesh(dptp, m, 3, shape, names, 0x5, me));
    R_OK(dt_mesh_submesh(dpcp, (const char *[]){"cp"}, 1, &cp));
    R_OK(check_submesh(cp, m, 3, shape, names, 0x2, me));
    dt_comm *flat = NULL;
    int members[MAXR], mine[3];
    ref_coord(3, shape, me, mine);
    int n = ref_group(3, shape, 0x3, mine, members);
    R_OK(dt_mesh_group_comm(dpcp, (const char *[]){"dp", "cp"}, 2, &flat));
    R_OK(check_group(flat, members, n, me, "sub-mesh group (dp,cp)"));

    R_OK(dt_mesh_release(m)); /* the sub-meshes still hold it */
    R_OK(check_submesh(dptp, NULL, 3, shape, names, 0x5, me));
    R_OK(dt_mesh_submesh(dptp, (const char *[]){"tp"}, 1, &tp));
    R_OK(dt_mesh_release(dptp));
    R_OK(dt_mesh_release(dpcp));
    R_OK(check_submesh(cp, NULL, 3, shape, names, 0x2, me));
    R_OK(check_submesh(tp, NULL, 3, shape, names, 0x4, me));
    R_OK(dt_mesh_release(cp));
    R_OK(dt_mesh_release(tp));
    return DT_OK;
}

/* Retain/release counting: two extra references on a sub-mesh, dropped in any order. */
static dt_status submesh_refs_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int shape[2] = {3, 2}, me = dt_ctx_rank(ctx);
    const char *names[2] = {"d0", "d1"};
    dt_mesh *m = NULL, *s = NULL;
    R_OK(dt_mesh_create_str(ctx, "3x2", &m));
    R_OK(dt_mesh_submesh(m, (const char *[]){"d0"}, 1, &s));
    R_OK(dt_mesh_retain(s));
    R_OK(dt_mesh_retain(m));
    R_OK(dt_mesh_release(m));
    R_OK(dt_mesh_release(m));
    R_OK(dt_mesh_release(s));
    R_OK(check_submesh(s, NULL, 2, shape, names, 0x1, me));
    R_OK(dt_mesh_release(s));
    return DT_OK;
}

Test(mesh, submeshes, .timeout = TIMEOUT_S) {
    t_run(4, submesh_2d_body, NULL);
    t_run(8, submesh_3d_body, NULL);
    t_run(6, submesh_refs_body, NULL);
}

/* ---- Meshes made and dropped over and over ------------------------------------------------ */

/* Communicators are matched across ranks by mesh creation order. 50 rounds of create, use and
 * release, one mesh kept alive into the next round, each rank making its communicators in its
 * own order (collectives still run in one order) must never cross two meshes' groups. */
static dt_status churn_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    static const char *texts[] = {"dp=2,tp=4", "4x2", "8", "dp=2,cp=2,tp=2", "2x1x2x2"};
    static const int shapes[][4] = {{2, 4}, {4, 2}, {8}, {2, 2, 2}, {2, 1, 2, 2}};
    static const int ndims[] = {2, 2, 1, 3, 4};
    const int me = dt_ctx_rank(ctx);
    dt_mesh *prev = NULL;
    int prev_kind = 0;
    for (int it = 0; it < 50; it++) {
        const int kind = it % 5, nd = ndims[kind];
        dt_mesh *m = NULL;
        R_OK(dt_mesh_create_str(ctx, texts[kind], &m));
        dt_comm *dc[4];
        /* Lazy creation in a rank-dependent order. */
        for (int i = 0; i < nd; i++) {
            int d = (me + it + i) % nd;
            R_OK(dt_mesh_dim_comm(m, d, &dc[d]));
        }
        int mine[4];
        ref_coord(nd, shapes[kind], me, mine);
        for (int d = 0; d < nd; d++) {
            int members[MAXR], n = ref_group(nd, shapes[kind], 1u << d, mine, members);
            R_OK(check_group(dc[d], members, n, me, texts[kind]));
        }
        if (prev) { /* the previous round's mesh still answers with its own groups */
            int pmine[4], members[MAXR];
            const int pnd = ndims[prev_kind];
            ref_coord(pnd, shapes[prev_kind], me, pmine);
            dt_comm *pc = NULL;
            R_OK(dt_mesh_dim_comm(prev, pnd - 1, &pc));
            int n = ref_group(pnd, shapes[prev_kind], 1u << (pnd - 1), pmine, members);
            R_OK(check_group(pc, members, n, me, "previous mesh"));
            R_OK(dt_mesh_release(prev));
        }
        prev = m;
        prev_kind = kind;
        if (it % 7 == 3) { /* now and then a sub-mesh instead, released after its parent */
            dt_mesh *s = NULL;
            const char *last = dt_mesh_dim_name(m, nd - 1);
            R_OK(dt_mesh_submesh(m, &last, 1, &s));
            R_OK(dt_mesh_release(m));
            dt_comm *sc = NULL;
            int members[MAXR], n = ref_group(nd, shapes[kind], 1u << (nd - 1), mine, members);
            R_OK(dt_mesh_dim_comm(s, 0, &sc));
            R_OK(check_group(sc, members, n, me, "sub-mesh in churn"));
            R_OK(dt_mesh_release(s));
            prev = NULL;
        }
    }
    R_OK(dt_mesh_release(prev));
    return DT_OK;
}

Test(mesh, create_use_release_50_times, .timeout = TIMEOUT_S) {
    t_run(8, churn_body, NULL);
}
