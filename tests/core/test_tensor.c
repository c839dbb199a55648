/* DTensor basics on real ranks: shard layout against an independent torch.chunk model,
 * distribute (every rank / one source), from_local (inferred and checked), full_tensor with
 * Partial reduced, visualize, and bad input. Data and layouts cover uneven and empty shards. */
#include <stdlib.h>

#include "helpers.h"

/* torch.chunk as PyTorch does it: walk the dim taking ceil(len/n) at a time; fewer than n
 * chunks may come out and DTensor pads with empty ones. Returns the chunk's start and size. */
static void ref_chunk(int64_t len, int n, int i, int64_t *start, int64_t *size) {
    int64_t c = (len + n - 1) / n, pos = 0;
    *start = len;
    *size = 0;
    for (int k = 0; pos < len; k++) {
        int64_t take = len - pos < c ? len - pos : c;
        if (k == i) {
            *start = pos;
            *size = take;
            return;
        }
        pos += take;
    }
}

/* Reference layout: apply the mesh dims that shard each tensor dim, in mesh order. */
static void ref_layout(int mnd, const int *ms, const int *coord, int nd, const int64_t *shape,
                       const dt_placement *pl, int64_t *lshape, int64_t *off) {
    for (int d = 0; d < nd; d++) {
        int64_t start = 0, len = shape[d];
        for (int m = 0; m < mnd; m++) {
            if (pl[m].kind != DT_PLACEMENT_SHARD || (pl[m].dim + nd) % nd != d) continue;
            int64_t s, z;
            ref_chunk(len, ms[m], coord[m], &s, &z);
            start += s;
            len = z;
        }
        lshape[d] = len;
        off[d] = start;
    }
}

static void coord_of(int mnd, const int *ms, int r, int *coord) {
    for (int m = mnd - 1; m >= 0; m--) {
        coord[m] = r % ms[m];
        r /= ms[m];
    }
}

Test(layout, matches_torch_chunk_exhaustively) {
    /* Every placement combination on meshes up to 3-D, tensors up to 3-D, sizes 0..13. */
    const int meshes[][4] = {{1, 4}, {1, 3}, {2, 2, 2}, {2, 3, 2}, {3, 2, 2, 2}, {2, 4, 1}};
    int checked = 0;
    for (size_t mi = 0; mi < sizeof meshes / sizeof meshes[0]; mi++) {
        int mnd = meshes[mi][0];
        const int *ms = &meshes[mi][1];
        int nranks = 1;
        for (int m = 0; m < mnd; m++) nranks *= ms[m];
        for (int nd = 1; nd <= 3; nd++) {
            int nopts = nd + 2; /* R, P(sum), S(0..nd-1) */
            int ncombos = 1;
            for (int m = 0; m < mnd; m++) ncombos *= nopts;
            for (int combo = 0; combo < ncombos; combo++) {
                dt_placement pl[4];
                for (int m = 0, c = combo; m < mnd; m++, c /= nopts) {
                    int o = c % nopts;
                    pl[m] = o == 0 ? dt_replicate() : o == 1 ? dt_partial(DT_REDUCE_SUM)
                                                               : dt_shard(o - 2 - (m % 2) * nd);
                }
                for (int size = 0; size <= 13; size++) {
                    int64_t shape[3] = {size, (size * 7 + 3) % 14, (size * 5 + 1) % 14};
                    for (int r = 0; r < nranks; r++) {
                        int coord[4];
                        int64_t ls[3], off[3], rls[3], roff[3];
                        coord_of(mnd, ms, r, coord);
                        cr_assert_eq(dt_shard_layout(mnd, ms, coord, nd, shape, pl, ls, off), DT_OK,
                                     "%s", dt_last_error());
                        ref_layout(mnd, ms, coord, nd, shape, pl, rls, roff);
                        for (int d = 0; d < nd; d++) {
                            cr_assert_eq(ls[d], rls[d], "mesh %d rank %d dim %d size", (int)mi, r,
                                         d);
                            if (ls[d]) cr_assert_eq(off[d], roff[d], "rank %d dim %d offset", r, d);
                            cr_assert(off[d] >= 0 && off[d] + ls[d] <= shape[d]);
                        }
                        checked++;
                    }
                }
            }
        }
    }
    cr_log_info("%d layouts checked", checked);
}

Test(layout, nested_sharding_splits_outer_mesh_dim_first) {
    /* 10 rows on 2x2 as S(0),S(0): outer split 5,5 then inner 3,2 -> 3,2,3,2 (not 3,3,3,1). */
    int ms[2] = {2, 2};
    int64_t shape[1] = {10};
    dt_placement pl[2] = {dt_shard(0), dt_shard(0)};
    int64_t want[4] = {3, 2, 3, 2}, want_off[4] = {0, 3, 5, 8};
    for (int r = 0; r < 4; r++) {
        int coord[2] = {r / 2, r % 2};
        int64_t ls, off;
        cr_assert_eq(dt_shard_layout(2, ms, coord, 1, shape, pl, &ls, &off), DT_OK);
        cr_assert_eq(ls, want[r]);
        cr_assert_eq(off, want_off[r]);
    }
}

Test(layout, bad_arguments) {
    int ms[1] = {4}, coord[1] = {4};
    int64_t shape[1] = {8}, ls, off;
    dt_placement pl[1] = {dt_shard(0)};
    T_ERR(dt_shard_layout(1, ms, coord, 1, shape, pl, &ls, &off), DT_ERR_ARG, "coord[0] = 4");
    coord[0] = 0;
    pl[0] = dt_shard(2);
    T_ERR(dt_shard_layout(1, ms, coord, 1, shape, pl, &ls, &off), DT_ERR_PLACEMENT, "S(2)");
    T_ERR(dt_shard_layout(0, ms, coord, 1, shape, pl, &ls, &off), DT_ERR_ARG, "mesh_ndim");
    T_ERR(dt_shard_layout(1, ms, coord, 9, shape, pl, &ls, &off), DT_ERR_ARG, "ndim = 9");
}

/* One distribute / from_local / full_tensor case on every rank. */
typedef struct spec_case {
    const char *mesh;
    int nd;
    int64_t shape[3];
    const char *placements;
    dt_dtype dtype;
    int src; /* DT_ALL_RANKS or a source mesh rank */
} spec_case;

static dt_status check_local(dt_tensor *t, const spec_case *c, uint64_t seed) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    dt_mesh *mesh = info.mesh;
    int mnd = dt_mesh_ndim(mesh), ms[8], coord[8];
    for (int m = 0; m < mnd; m++) {
        ms[m] = dt_mesh_dim_size(mesh, m);
        coord[m] = dt_mesh_coord(mesh, m);
    }
    int64_t rls[3], roff[3];
    ref_layout(mnd, ms, coord, c->nd, c->shape, info.placements, rls, roff);
    int zeros = 0; /* P(sum) convention: only coordinate 0 holds the value */
    for (int m = 0; m < mnd; m++)
        zeros |= info.placements[m].kind == DT_PLACEMENT_PARTIAL &&
                 info.placements[m].op == DT_REDUCE_SUM && coord[m] != 0;
    size_t n = 1;
    for (int d = 0; d < c->nd; d++) {
        R_CHECK(info.local_shape[d] == rls[d], "%s %s: local dim %d is %lld, want %lld", c->mesh,
                c->placements, d, (long long)info.local_shape[d], (long long)rls[d]);
        n *= (size_t)rls[d];
    }
    R_CHECK(info.local_numel == n, "local_numel %zu, want %zu", info.local_numel, n);
    for (size_t i = 0; i < n; i++) {
        size_t rem = i, g = 0, stride = 1;
        for (int d = c->nd - 1; d >= 0; d--) {
            size_t idx = rem % (size_t)rls[d];
            rem /= (size_t)rls[d];
            g += ((size_t)roff[d] + idx) * stride;
            stride *= (size_t)c->shape[d];
        }
        double want = zeros ? 0.0 : t_value(seed, g);
        double got = t_get(c->dtype, info.local_data, i);
        R_CHECK(got == want, "%s %s %s: local element %zu is %g, want %g (global %zu)", c->mesh,
                c->placements, dt_dtype_name(c->dtype), i, got, want, g);
    }
    return DT_OK;
}

static dt_status check_full(dt_tensor *t, const spec_case *c, uint64_t seed, size_t numel) {
    size_t es = dt_dtype_size(c->dtype);
    char *back = malloc(numel * es + 1);
    R_OK(dt_tensor_full_tensor(t, back, numel * es));
    for (size_t i = 0; i < numel; i++) {
        double got = t_get(c->dtype, back, i);
        if (got != t_value(seed, i)) {
            free(back);
            return t_fail(__FILE__, __LINE__, "%s %s %s: full element %zu is %g, want %g", c->mesh,
                          c->placements, dt_dtype_name(c->dtype), i, got, t_value(seed, i));
        }
    }
    free(back);
    return DT_OK;
}

static dt_status run_case(dt_ctx *ctx, const spec_case *c, uint64_t seed) {
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, c->mesh, &mesh));
    dt_placement pl[8];
    int np;
    R_OK(dt_placements_parse(c->placements, pl, 8, &np));
    size_t numel = 1, es = dt_dtype_size(c->dtype);
    for (int d = 0; d < c->nd; d++) numel *= (size_t)c->shape[d];
    char *full = malloc(numel * es + 1);
    t_fill(c->dtype, full, numel, seed);
    int src_has = c->src == DT_ALL_RANKS || c->src == dt_mesh_rank(mesh);
    dt_tensor *t = NULL, *u = NULL;
    R_OK(dt_tensor_distribute(mesh, src_has ? full : NULL, c->dtype, c->nd, c->shape, np, pl,
                              c->src, &t));
    free(full);
    dt_status st = check_local(t, c, seed);
    if (st == DT_OK) st = check_full(t, c, seed, numel);
    if (st == DT_OK) { /* rebuild from the shards, inferring the global shape */
        dt_tensor_info info;
        dt_tensor_info_get(t, &info);
        st = dt_tensor_from_local(mesh, info.local_data, c->dtype, c->nd, info.local_shape, np, pl,
                                  NULL, 0, &u);
        if (st != DT_OK) st = t_fail(__FILE__, __LINE__, "from_local: %s", dt_last_error());
    }
    if (st == DT_OK) {
        dt_tensor_info info;
        dt_tensor_info_get(u, &info);
        for (int d = 0; d < c->nd && st == DT_OK; d++)
            if (info.shape[d] != c->shape[d])
                st = t_fail(__FILE__, __LINE__, "%s %s: inferred dim %d = %lld, want %lld", c->mesh,
                            c->placements, d, (long long)info.shape[d], (long long)c->shape[d]);
        if (st == DT_OK) st = check_full(u, c, seed, numel);
    }
    dt_tensor_release(u);
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return st;
}

typedef struct sweep {
    const char *mesh;
    int nranks;
    int count; /* cases run, for the log */
} sweep;

/* Every placement combination (R, P(sum), P(max), S(d)) for a set of shapes and dtypes. */
static dt_status sweep_body(dt_ctx *ctx, void *arg) {
    sweep *s = arg;
    int mnd = 1;
    for (const char *p = s->mesh; *p; p++) mnd += *p == 'x';
    const int64_t shapes[][4] = {{1, 0}, {1, 1}, {1, 7}, {1, 13}, {2, 5, 3}, {2, 1, 7},
                                 {2, 0, 4}, {2, 8, 8}, {3, 3, 4, 5}, {3, 2, 1, 9}};
    int cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int nd = (int)shapes[si][0];
        int nopts = nd + 3, ncombos = 1;
        for (int m = 0; m < mnd; m++) ncombos *= nopts;
        for (int combo = 0; combo < ncombos; combo++) {
            char text[64] = "";
            for (int m = 0, c = combo; m < mnd; m++, c /= nopts) {
                int o = c % nopts;
                char one[16];
                if (o == 0) snprintf(one, sizeof one, "R");
                else if (o == 1) snprintf(one, sizeof one, "P(sum)");
                else if (o == 2) snprintf(one, sizeof one, "P(max)");
                else snprintf(one, sizeof one, "S(%d)", o - 3);
                strcat(text, m ? "," : "");
                strcat(text, one);
            }
            spec_case c = {.mesh = s->mesh, .nd = nd, .placements = text,
                           .dtype = (dt_dtype)((combo + si) % T_NUMERIC_DTYPES),
                           .src = (combo % 3 == 0) ? DT_ALL_RANKS : combo % s->nranks};
            for (int d = 0; d < nd; d++) c.shape[d] = shapes[si][d + 1];
            dt_status st = run_case(ctx, &c, (uint64_t)(combo * 31 + si));
            if (st != DT_OK) return st;
            cases++;
        }
    }
    if (dt_ctx_rank(ctx) == 0) s->count = cases;
    return DT_OK;
}

Test(tensor, distribute_from_local_full_every_placement) {
    sweep sweeps[] = {{"1", 1, 0},   {"2", 2, 0},     {"3", 3, 0},   {"4", 4, 0},
                      {"6", 6, 0},   {"8", 8, 0},     {"2x2", 4, 0}, {"2x3", 6, 0},
                      {"3x2", 6, 0}, {"2x4", 8, 0},   {"2x2x2", 8, 0}, {"3x1x2", 6, 0}};
    for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++) {
        t_run(sweeps[i].nranks, sweep_body, &sweeps[i]);
        cr_log_info("mesh %s: %d cases", sweeps[i].mesh, sweeps[i].count);
    }
}

/* from_local: shards that do not follow torch.chunk are rejected, naming the rank; CHECK
 * catches ranks that disagree; BORROW keeps the caller's pointer. */
static dt_status from_local_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int me = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "4", &mesh));
    dt_placement s0[1] = {dt_shard(0)};
    float data[8] = {0};
    /* Shards of 3,3,2,2 rows add up to 10, but torch.chunk splits 10 rows as 3,3,3,1. */
    int64_t rows_bad[4] = {3, 3, 2, 2}, ls[2] = {rows_bad[me], 2};
    dt_tensor *t = NULL;
    R_ERR(dt_tensor_from_local(mesh, data, DT_F32, 2, ls, DT_COUNT_OF(s0), s0, NULL, 0, &t),
          DT_ERR_SHAPE, "mesh rank 2");
    R_CHECK(t == NULL, "tensor_out written on failure");
    /* The even split PyTorch would assume (4 rows each) is not what the shards say. */
    int64_t rows[4] = {3, 3, 3, 1}, global[2] = {16, 2};
    ls[0] = rows[me];
    R_ERR(dt_tensor_from_local(mesh, data, DT_F32, 2, ls, DT_COUNT_OF(s0), s0, global, 0, &t),
          DT_ERR_SHAPE, "local_shape");
    global[0] = 10;
    R_OK(dt_tensor_from_local(mesh, data, DT_F32, 2, ls, DT_COUNT_OF(s0), s0, global,
                              DT_FROM_LOCAL_BORROW, &t));
    void *local;
    R_OK(dt_tensor_to_local(t, &local));
    R_CHECK(local == data, "BORROW copied the data");
    dt_tensor_release(t);
    R_OK(dt_tensor_from_local(mesh, data, DT_F32, 2, ls, DT_COUNT_OF(s0), s0, global,
                              DT_FROM_LOCAL_CHECK, &t));
    R_OK(dt_tensor_to_local(t, &local));
    R_CHECK(local != data, "without BORROW the data is copied");
    dt_tensor_release(t);
    /* Ranks that disagree on dtype or placements fail on every rank under CHECK. */
    dt_placement mixed[1] = {me == 2 ? dt_replicate() : dt_shard(0)};
    int64_t ls2[2] = {me == 2 ? 10 : rows[me], 2};
    R_ERR(dt_tensor_from_local(mesh, data, DT_F32, 2, ls2, DT_COUNT_OF(mixed), mixed, global,
                               DT_FROM_LOCAL_CHECK, &t),
          DT_ERR_COMM, "different");
    R_ERR(dt_tensor_from_local(mesh, data, me == 1 ? DT_I32 : DT_F32, 2, ls, DT_COUNT_OF(s0), s0,
                               NULL, 0, &t),
          DT_ERR_COMM, "different");
    R_ERR(dt_tensor_from_local(mesh, data, DT_F32, 2, ls, DT_COUNT_OF(s0), s0, global, 8u, &t),
          DT_ERR_ARG, "flags");
    R_ERR(dt_tensor_from_local(mesh, NULL, DT_F32, 2, ls, DT_COUNT_OF(s0), s0, global, 0, &t),
          DT_ERR_ARG, "local");
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(tensor, from_local_checks) { t_run(4, from_local_body, NULL); }

static dt_status bad_input_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    float full[12] = {0}, out[12];
    int64_t shape[2] = {3, 4}, neg[2] = {3, -1};
    dt_placement pl[2] = {dt_shard(0), dt_replicate()};
    dt_placement far[2] = {dt_shard(2), dt_replicate()};
    dt_placement prod[2] = {dt_partial(DT_REDUCE_PROD), dt_replicate()};
    dt_tensor *t = NULL;
    R_ERR(dt_tensor_distribute(NULL, full, DT_F32, 2, shape, DT_COUNT_OF(pl), pl, DT_ALL_RANKS, &t),
          DT_ERR_ARG, "mesh");
    R_ERR(dt_tensor_distribute(mesh, full, (dt_dtype)9, 2, shape, DT_COUNT_OF(pl), pl, DT_ALL_RANKS,
                               &t),
          DT_ERR_DTYPE, "dtype");
    R_ERR(dt_tensor_distribute(mesh, full, DT_F32, 9, shape, DT_COUNT_OF(pl), pl, DT_ALL_RANKS, &t),
          DT_ERR_SHAPE, "ndim = 9");
    R_ERR(dt_tensor_distribute(mesh, full, DT_F32, 2, neg, DT_COUNT_OF(pl), pl, DT_ALL_RANKS, &t),
          DT_ERR_SHAPE, "shape[1] = -1");
    R_ERR(
        dt_tensor_distribute(mesh, full, DT_F32, 2, shape, DT_COUNT_OF(far), far, DT_ALL_RANKS, &t),
        DT_ERR_PLACEMENT, "S(2)");
    R_ERR(dt_tensor_distribute(mesh, full, DT_F32, 2, shape, DT_COUNT_OF(prod), prod, DT_ALL_RANKS,
                               &t),
          DT_ERR_PLACEMENT, "P(prod)");
    R_ERR(dt_tensor_distribute(mesh, full, DT_F32, 2, shape, DT_COUNT_OF(pl), pl, 4, &t),
          DT_ERR_ARG, "src_rank = 4");
    R_ERR(dt_tensor_distribute(mesh, NULL, DT_F32, 2, shape, DT_COUNT_OF(pl), pl, DT_ALL_RANKS, &t),
          DT_ERR_ARG, "full");
    R_ERR(
        dt_tensor_distribute(mesh, full, DT_F32, 2, shape, DT_COUNT_OF(pl), pl, DT_ALL_RANKS, NULL),
        DT_ERR_ARG, "argument out");
    R_CHECK(t == NULL, "tensor_out written on failure");
    R_OK(dt_tensor_distribute(mesh, full, DT_F32, 2, shape, DT_COUNT_OF(pl), pl, DT_ALL_RANKS, &t));
    R_ERR(dt_tensor_full_tensor(t, out, sizeof out - 1), DT_ERR_SIZE, "out_bytes = 47");
    R_ERR(dt_tensor_full_tensor(t, NULL, sizeof out), DT_ERR_ARG, "out");
    R_ERR(dt_tensor_full_tensor(NULL, out, sizeof out), DT_ERR_ARG, "tensor");
    R_ERR(dt_tensor_info_get(NULL, &(dt_tensor_info){0}), DT_ERR_ARG, "tensor");
    R_ERR(dt_tensor_to_local(t, NULL), DT_ERR_ARG, "argument out");
    /* A full tensor of the right size still works after the failures. */
    R_OK(dt_tensor_full_tensor(t, out, sizeof out));
    /* Reference counting: the tensor outlives one release after a retain. */
    R_OK(dt_tensor_retain(t));
    R_OK(dt_tensor_release(t));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    R_CHECK(info.numel == 12 && info.ndim == 2, "info after retain/release");
    R_OK(dt_tensor_release(t));
    R_OK(dt_tensor_release(NULL));
    /* zeros: local storage of the right size, all zero; a 0-D tensor has one element. */
    R_OK(dt_tensor_zeros(mesh, DT_I64, 2, shape, DT_COUNT_OF(pl), pl, &t));
    R_OK(dt_tensor_info_get(t, &info));
    int64_t want_rows = dt_mesh_coord(mesh, 0) == 0 ? 2 : 1;
    R_CHECK(info.local_shape[0] == want_rows && info.local_shape[1] == 4, "zeros local shape");
    for (size_t i = 0; i < info.local_numel; i++)
        R_CHECK(((int64_t *)info.local_data)[i] == 0, "zeros element %zu", i);
    dt_tensor_release(t);
    dt_placement rr[2] = {dt_replicate(), dt_partial(DT_REDUCE_SUM)};
    double scalar = 2.5, back = 0;
    R_OK(dt_tensor_distribute(mesh, &scalar, DT_F64, 0, NULL, DT_COUNT_OF(rr), rr, 0, &t));
    R_OK(dt_tensor_full_tensor(t, &back, sizeof back));
    R_CHECK(back == 2.5, "0-D P(sum) full = %g", back);
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(tensor, bad_input_is_a_clear_error) { t_run(4, bad_input_body, NULL); }

static dt_status visualize_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    int64_t shape[2] = {5, 6}, vec[1] = {3}, cube[3] = {2, 2, 2};
    dt_placement grid[2] = {dt_shard(0), dt_shard(1)};
    dt_placement rep[2] = {dt_replicate(), dt_shard(0)};
    dt_placement part[2] = {dt_partial(DT_REDUCE_SUM), dt_shard(1)};
    dt_tensor *t;
    char buf[1024];
    size_t len;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, DT_COUNT_OF(grid), grid, &t));
    R_OK(dt_tensor_visualize(t, buf, sizeof buf, &len));
    R_CHECK(len == strlen(buf) + 1, "len_out %zu for %zu chars", len, strlen(buf));
    R_CHECK(strstr(buf, "S(0),S(1)") && strstr(buf, "dp=2, tp=2"), "header:\n%s", buf);
    /* Rows [0:3) and [3:5), cols [0:3) and [3:6): four cells, one rank each. */
    R_CHECK(strstr(buf, "[0:3)") && strstr(buf, "[3:5)") && strstr(buf, "[3:6)"), "cuts:\n%s", buf);
    const char *row2 = strstr(buf, "\n[3:5)");
    R_CHECK(row2 && strstr(row2, "r2") && strstr(row2, "r3") && !strstr(row2, "r0"),
            "second row should hold r2 and r3:\n%s", buf);
    char tiny[8];
    R_ERR(dt_tensor_visualize(t, tiny, sizeof tiny, &len), DT_ERR_SIZE, "bytes");
    R_CHECK(len > sizeof tiny, "len_out on DT_ERR_SIZE");
    dt_tensor_release(t);
    /* 3 elements sharded over tp=2 and replicated over dp: cells list the replicas. */
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, vec, DT_COUNT_OF(rep), rep, &t));
    R_OK(dt_tensor_visualize(t, buf, sizeof buf, NULL));
    R_CHECK(strstr(buf, "r0 r2") && strstr(buf, "r1 r3") && strstr(buf, "[2:3)"), "1-D:\n%s", buf);
    dt_tensor_release(t);
    /* Partial is named, and a dim smaller than the mesh shows the empty shards. */
    int64_t narrow[2] = {2, 1};
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, narrow, DT_COUNT_OF(part), part, &t));
    R_OK(dt_tensor_visualize(t, buf, sizeof buf, NULL));
    R_CHECK(strstr(buf, "P(sum) on dp") && strstr(buf, "empty shards: r1 r3"), "partial:\n%s", buf);
    dt_tensor_release(t);
    R_OK(dt_tensor_zeros(mesh, DT_F32, 3, cube, DT_COUNT_OF(grid), grid, &t));
    R_ERR(dt_tensor_visualize(t, buf, sizeof buf, NULL), DT_ERR_UNSUPPORTED, "3-D");
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(tensor, visualize) { t_run(4, visualize_body, NULL); }
