/* Coalesced grad sync: leaves of mixed shapes (uneven and empty shards, shards on dim 0 and 1),
 * DDP, FSDP, HSDP and FSDP x TP placements, f32 leaves and bf16 leaves with f32 or bf16
 * gradients, on 2, 3 and 2x2 ranks. Every gradient must be bitwise the per-leaf sync's (bucket
 * cap 0) on every rank, in the leaf's placements and gradient dtype, whatever the bucket cap;
 * and a synced backward must issue one collective per bucket: with the default cap one per
 * (collective, gradient dtype) pair, with a one-byte cap one per leaf and step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

enum { B = 6, MAXL = 10, MAXR = 4, MAXE = 256 };

/* A leaf: its shape, dtype and gradient dtype, stored and compute placements, and the
 * placements of its input x (B, shape...) in forward: loss += sum((x * w)^2). */
typedef struct leaf_spec {
    int ndim;
    int64_t shape[3];
    dt_dtype dtype, grad_dtype;
    const char *stored, *compute, *x;
    int uses; /* terms of the loss using it */
} leaf_spec;

typedef struct suite {
    const char *mesh;
    int n;
    leaf_spec leaves[MAXL];
    /* collectives of the synced backward of the f32 graph and of the bf16 graph:
     * {all_reduce, reduce_scatter} with the default cap, a one-byte cap and a 64-byte cap
     * (buckets are cut on whole gradients' bytes, in the order backward reached the leaves) */
    int want_default[2][2], want_alone[2][2], want_64[2][2];
} suite;

typedef struct grads {
    size_t bytes[MAXR][MAXL];
    unsigned char data[MAXR][MAXL][MAXE * 4];
} grads;

typedef struct sync_run {
    const suite *s;
    size_t cap;       /* SIZE_MAX: the default */
    const grads *ref; /* NULL: record into got */
    grads *got;
    uint64_t calls[2][2];
    int trace;        /* rank 0 counts the synced backwards' collectives in its trace too */
    int traced[2][3]; /* all_reduce, reduce_scatter and grad_sync events per graph */
} sync_run;

/* Counts occurrences of "name":"<name>" in the trace file at path. */
static int count_events(const char *path, const char *name) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char want[64], line[4096];
    snprintf(want, sizeof want, "\"name\":\"%s\"", name);
    int n = 0;
    while (fgets(line, sizeof line, f))
        for (const char *p = line; (p = strstr(p, want)); p += strlen(want))
            n++;
    fclose(f);
    return n;
}

static dt_status traced(dt_ctx *ctx, sync_run *r, int graph) {
    char path[] = "/tmp/test_grad_sync_XXXXXX";
    int fd = mkstemp(path);
    R_CHECK(fd >= 0, "no temporary file for the trace");
    FILE *f = fdopen(fd, "w");
    R_CHECK(f, "no temporary file for the trace");
    fclose(f);
    R_OK(dt_trace_stop(ctx));
    R_OK(dt_trace_write(ctx, path));
    r->traced[graph][0] = count_events(path, "all_reduce");
    r->traced[graph][1] = count_events(path, "reduce_scatter");
    r->traced[graph][2] = count_events(path, "grad_sync");
    remove(path);
    return DT_OK;
}

static int64_t numel(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

static dt_status make_leaf(dt_mesh *mesh, const leaf_spec *l, int i, dt_tensor **out) {
    size_t n = (size_t)numel(l->shape, l->ndim);
    double v[MAXE];
    uint16_t h[MAXE];
    for (size_t k = 0; k < n; k++)
        v[k] = t_value(100 + (uint64_t)i, k) / 2;
    dt_placement pl[DT_MESH_MAX_NDIM];
    int np;
    R_OK(dt_placements_parse(l->stored, pl, DT_MESH_MAX_NDIM, &np));
    if (l->dtype == DT_BF16) R_OK(dt_convert_from_f64(DT_BF16, v, h, n));
    float f[MAXE];
    for (size_t k = 0; k < n; k++)
        f[k] = (float)v[k];
    R_OK(dt_tensor_distribute(mesh, l->dtype == DT_BF16 ? (void *)h : (void *)f, l->dtype, l->ndim,
                              l->shape, np, pl, DT_ALL_RANKS, out));
    R_OK(dt_tensor_set_requires_grad(*out, 1));
    if (l->grad_dtype != l->dtype) R_OK(dt_tensor_set_grad_dtype(*out, l->grad_dtype));
    return DT_OK;
}

/* sum((x * w)^2) for use u of leaf i, added to *loss. */
static dt_status term(dt_mesh *mesh, const leaf_spec *l, int i, int u, dt_tensor *w,
                      dt_tensor **loss) {
    int64_t xs[4] = {B};
    memcpy(xs + 1, l->shape, sizeof(int64_t) * (size_t)l->ndim);
    size_t n = (size_t)numel(xs, l->ndim + 1);
    double *v = malloc(n * sizeof *v);
    void *buf = malloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++)
        v[k] = t_value(200 + 16 * (uint64_t)i + (uint64_t)u, k) / 4;
    if (l->dtype == DT_BF16)
        R_OK(dt_convert_from_f64(DT_BF16, v, buf, n));
    else
        for (size_t k = 0; k < n; k++)
            ((float *)buf)[k] = (float)v[k];
    dt_placement px[DT_MESH_MAX_NDIM], pc[DT_MESH_MAX_NDIM];
    int np;
    R_OK(dt_placements_parse(l->x, px, DT_MESH_MAX_NDIM, &np));
    dt_tensor *x, *wc = w, *y, *y2, *s, *sum;
    R_OK(dt_tensor_distribute(mesh, buf, l->dtype, l->ndim + 1, xs, np, px, DT_ALL_RANKS, &x));
    free(v), free(buf);
    if (l->compute) {
        R_OK(dt_placements_parse(l->compute, pc, DT_MESH_MAX_NDIM, &np));
        R_OK(dt_tensor_redistribute(w, np, pc, &wc)); /* FSDP's gather, recorded */
    }
    R_OK(dt_mul(x, wc, &y));
    R_OK(dt_mul(y, y, &y2));
    R_OK(dt_sum(y2, NULL, 0, 0, &s));
    if (*loss) {
        R_OK(dt_add(*loss, s, &sum));
        dt_tensor_release(*loss), dt_tensor_release(s);
        *loss = sum;
    } else {
        *loss = s;
    }
    if (wc != w) dt_tensor_release(wc);
    dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(y2);
    return DT_OK;
}

/* The loss over the leaves of one graph (f32: 0, bf16: 1). */
static dt_status loss_of(dt_mesh *mesh, const suite *s, dt_tensor **leaves, int graph,
                         dt_tensor **out) {
    *out = NULL;
    for (int i = 0; i < MAXL && s->leaves[i].ndim; i++)
        if ((s->leaves[i].dtype == DT_BF16) == graph)
            for (int u = 0; u < s->leaves[i].uses; u++)
                R_OK(term(mesh, &s->leaves[i], i, u, leaves[i], out));
    return DT_OK;
}

static dt_status sync_body(dt_ctx *ctx, void *arg) {
    sync_run *r = arg;
    const suite *s = r->s;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, s->mesh, &mesh));
    if (r->cap != SIZE_MAX) R_OK(dt_ctx_set_grad_bucket_bytes(ctx, r->cap));
    dt_tensor *leaves[MAXL] = {0};
    int nl = 0;
    for (; nl < MAXL && s->leaves[nl].ndim; nl++)
        R_OK(make_leaf(mesh, &s->leaves[nl], nl, &leaves[nl]));
    for (int graph = 0; graph < 2; graph++) {
        /* f32: a micro-batch without sync first (its gradients stay Partial), then one with */
        for (int k = graph ? 1 : 0; k < 2; k++) {
            dt_tensor *loss;
            R_OK(loss_of(mesh, s, leaves, graph, &loss));
            R_OK(dt_ctx_set_grad_sync(ctx, k == 1));
            R_OK(dt_comm_stats_reset(ctx));
            int trace = r->trace && k == 1 && dt_ctx_rank(ctx) == 0;
            if (trace) R_OK(dt_trace_start(ctx));
            R_OK(dt_backward(loss));
            if (trace) R_OK(traced(ctx, r, graph));
            dt_comm_stats cs;
            R_OK(dt_comm_stats_get(ctx, &cs));
            uint64_t all = t_issued_total(ctx);
            if (k == 0)
                R_CHECK(all == 0, "backward without sync: %llu collectives",
                        (unsigned long long)all);
            r->calls[graph][0] = cs.calls[DT_COLL_ALL_REDUCE];
            r->calls[graph][1] = cs.calls[DT_COLL_REDUCE_SCATTER];
            R_CHECK(all == r->calls[graph][0] + r->calls[graph][1],
                    "graph %d: %llu collectives besides all_reduce and reduce_scatter", graph,
                    (unsigned long long)(all - r->calls[graph][0] - r->calls[graph][1]));
            dt_tensor_release(loss);
        }
    }
    int me = dt_ctx_rank(ctx);
    for (int i = 0; i < nl; i++) {
        const leaf_spec *l = &s->leaves[i];
        dt_tensor *g = dt_tensor_grad(leaves[i]);
        R_CHECK(g, "leaf %d has no gradient", i);
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(g, &info));
        dt_placement want[DT_MESH_MAX_NDIM];
        int np;
        R_OK(dt_placements_parse(l->stored, want, DT_MESH_MAX_NDIM, &np));
        for (int m = 0; m < np; m++)
            R_CHECK(dt_placement_equal(info.placements[m], want[m]),
                    "leaf %d: the gradient is not in %s", i, l->stored);
        R_CHECK(info.dtype == l->grad_dtype, "leaf %d: the gradient is %s", i,
                dt_dtype_name(info.dtype));
        R_CHECK(info.local_bytes <= sizeof r->got->data[0][0], "leaf %d: too big", i);
        unsigned char host[MAXE * 4];
        R_OK(dt_tensor_local_to_host(g, host, info.local_bytes));
        if (!r->ref) {
            r->got->bytes[me][i] = info.local_bytes;
            memcpy(r->got->data[me][i], host, info.local_bytes);
            continue;
        }
        R_CHECK(r->ref->bytes[me][i] == info.local_bytes &&
                    !memcmp(r->ref->data[me][i], host, info.local_bytes),
                "cap %zu rank %d leaf %d (%s): the gradient differs from the per-leaf sync's",
                r->cap, me, i, l->stored);
    }
    for (int i = 0; i < nl; i++)
        dt_tensor_release(leaves[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

static void check(const suite *s) {
    static grads ref, got;
    memset(&ref, 0, sizeof ref);
    sync_run r0 = {.s = s, .cap = 0, .got = &ref};
    t_run(s->n, sync_body, &r0);
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 2; k++)
            cr_expect(r0.calls[g][k] == (uint64_t)s->want_alone[g][k],
                      "%s per leaf, graph %d: %llu %s, want %d", s->mesh, g,
                      (unsigned long long)r0.calls[g][k], k ? "reduce_scatter" : "all_reduce",
                      s->want_alone[g][k]);
    /* the default cap, one byte (a bucket per leaf, through the coalescing path) and 64 bytes */
    const size_t caps[3] = {SIZE_MAX, 1, 64};
    for (int c = 0; c < 3; c++) {
        sync_run r = {.s = s, .cap = caps[c], .ref = &ref, .got = &got, .trace = c == 0};
        t_run(s->n, sync_body, &r);
        for (int g = 0; c == 0 && g < 2; g++) /* the trace shows each bucket's collective */
            cr_expect(r.traced[g][0] == s->want_default[g][0] &&
                          r.traced[g][1] == s->want_default[g][1] && r.traced[g][2] == 1,
                      "%s graph %d: the trace holds %d all_reduce, %d reduce_scatter and %d "
                      "grad_sync events, want %d, %d and 1",
                      s->mesh, g, r.traced[g][0], r.traced[g][1], r.traced[g][2],
                      s->want_default[g][0], s->want_default[g][1]);
        for (int g = 0; g < 2; g++)
            for (int k = 0; k < 2; k++) {
                uint64_t have = r.calls[g][k];
                int want = c == 0   ? s->want_default[g][k]
                           : c == 1 ? s->want_alone[g][k]
                                    : s->want_64[g][k];
                cr_expect(have == (uint64_t)want, "%s cap %s, graph %d: %llu %s, want %d", s->mesh,
                          c == 0   ? "default"
                          : c == 1 ? "1 byte"
                                   : "64 bytes",
                          g, (unsigned long long)have, k ? "reduce_scatter" : "all_reduce", want);
            }
    }
}

#define F32 DT_F32
#define BF  DT_BF16

/* On n ranks of one dim: FSDP leaves (S(0) uneven or empty, S(1)) and DDP leaves. f32 graph:
 * 3 FSDP leaves -> 1 reduce_scatter, 2 DDP leaves (one used twice) -> 1 all_reduce. bf16
 * graph: reduce_scatters of f32 gradients (2 leaves) and of bf16 ones (1), all_reduces of an
 * f32 gradient and a bf16 one. Under a 64-byte cap the FSDP gradients of 140, 240 and 16
 * bytes go one by one (3) while the DDP ones of 12 and 48 bytes share one; in the bf16 graph
 * the f32 FSDP gradients of 40 and 24 bytes fill one bucket exactly. */
#define ONE_DIM(m, nr)                                                                             \
    {                                                                                              \
        .mesh = m, .n = nr, .leaves = {{2, {7, 5}, F32, F32, "S(0)", "R", "S(0)", 1},              \
                                       {1, {3}, F32, F32, "R", NULL, "S(0)", 2},                   \
                                       {3, {4, 3, 5}, F32, F32, "S(1)", "R", "S(0)", 1},           \
                                       {2, {1, 4}, F32, F32, "S(0)", "R", "S(0)", 1},              \
                                       {2, {6, 2}, F32, F32, "R", NULL, "S(0)", 1},                \
                                       {2, {5, 2}, BF, F32, "S(0)", "R", "S(0)", 1},               \
                                       {1, {6}, BF, F32, "R", NULL, "S(0)", 1},                    \
                                       {1, {9}, BF, BF, "R", NULL, "S(0)", 1},                     \
                                       {2, {3, 4}, BF, BF, "S(0)", "R", "S(0)", 1},                \
                                       {2, {2, 3}, BF, F32, "S(1)", "R", "S(0)", 1}},              \
        .want_default = {{1, 1}, {2, 2}}, .want_alone = {{2, 3}, {2, 3}}, .want_64 = {             \
            {1, 3},                                                                                \
            {2, 2}                                                                                 \
        }                                                                                          \
    }

Test(grad_sync, bucket_cap_needs_a_context) {
    T_ERR(dt_ctx_set_grad_bucket_bytes(NULL, 1 << 20), DT_ERR_ARG, "ctx");
}

Test(grad_sync, one_dim_two_ranks) {
    static const suite s = ONE_DIM("2", 2);
    check(&s);
}

Test(grad_sync, one_dim_three_ranks_uneven) {
    static const suite s = ONE_DIM("3", 3);
    check(&s);
}

/* On 2x2, batch over both dims: HSDP leaves (one used twice) (replicated over d0, sharded over d1),
 * DDP over both dims and over d0 only (x replicated over d1), FSDP x TP (S(0) over d0, S(1) over d1
 * as the input is). */
Test(grad_sync, two_dims) {
    static const suite s = {
        .mesh = "2x2",
        .n = 4,
        .leaves = {{2, {6, 4}, F32, F32, "R,S(0)", "R,R", "S(0),S(0)", 1},
                   {2, {5, 3}, F32, F32, "R,R", NULL, "S(0),S(0)", 1},
                   {2, {4, 6}, F32, F32, "S(0),S(1)", "R,S(1)", "S(0),S(2)", 1},
                   {1, {7}, F32, F32, "R,S(0)", "R,R", "S(0),S(0)", 2},
                   {1, {5}, F32, F32, "R,R", NULL, "S(0),R", 1},
                   {2, {3, 5}, BF, F32, "R,S(0)", "R,R", "S(0),S(0)", 1},
                   {2, {4, 3}, BF, BF, "R,S(0)", "R,R", "S(0),S(0)", 1},
                   {2, {2, 2}, BF, F32, "R,R", NULL, "S(0),S(0)", 1}},
        /* per leaf: HSDP is a reduce_scatter over d1 then an all_reduce over d0, DDP over both
         * one all_reduce over the flattened group, FSDP x TP one reduce_scatter over d0. The
         * two f32 HSDP leaves share their two collectives, and their all_reduce over d0 is the
         * one of the leaf replicated over d1; the f32 and bf16 HSDP gradients of the bf16 graph
         * share none. */
        .want_default = {{2, 2}, {3, 2}},
        .want_alone = {{4, 3}, {3, 2}},
        /* 64 bytes, f32 graph: leaf 0 (96 B) goes alone in both its steps, leaves 3 (28 B) and
         * 4 (20 B) share the all_reduce over d0: 3 all_reduces, 3 reduce_scatters */
        .want_64 = {{3, 3}, {3, 2}}};
    check(&s);
}

/* A gradient the caller still holds (dt_backward_with on a leaf passes it as the leaf's
 * gradient), or whose storage it lends: the sync reduces a copy, never the caller's tensor or
 * array, and the leaf's gradient is the sum over the ranks, computed here. */
static dt_status held_body(dt_ctx *ctx, void *arg) {
    const int borrow = *(const int *)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2", &mesh));
    const int me = dt_ctx_rank(ctx);
    const int64_t shape[1] = {5};
    dt_placement r[1] = {dt_replicate()}, p[1] = {dt_partial(DT_REDUCE_SUM)};
    float w0[5] = {1, 2, 3, 4, 5}, mine[5], was[5];
    for (int i = 0; i < 5; i++)
        mine[i] = was[i] = 0.1f * (float)(i + 1) + (float)(me * 7);
    dt_tensor *w, *g;
    R_OK(dt_tensor_from_local(mesh, w0, DT_F32, 1, shape, 1, r, shape, 0, &w));
    R_OK(dt_tensor_set_requires_grad(w, 1));
    R_OK(dt_tensor_from_local(mesh, mine, DT_F32, 1, shape, 1, p, shape,
                              borrow ? DT_FROM_LOCAL_BORROW : 0, &g));
    R_OK(dt_backward_with(w, g));
    float got[5], held[5];
    R_OK(dt_tensor_local_to_host(dt_tensor_grad(w), got, sizeof got));
    R_OK(dt_tensor_local_to_host(g, held, sizeof held));
    for (int i = 0; i < 5; i++) {
        float want = (0.1f * (float)(i + 1) + 0.0f) + (0.1f * (float)(i + 1) + 7.0f);
        R_CHECK(got[i] == want, "rank %d: grad[%d] = %.9g, want %.9g", me, i, got[i], want);
        R_CHECK(held[i] == was[i] && mine[i] == was[i],
                "rank %d: the caller's gradient changed at %d: %.9g (array %.9g), was %.9g", me, i,
                held[i], mine[i], was[i]);
    }
    dt_tensor_release(g);
    dt_tensor_release(w);
    return dt_mesh_release(mesh);
}

Test(grad_sync, a_held_gradient_is_not_reduced_in_place) {
    int borrow = 0;
    t_run(2, held_body, &borrow);
    borrow = 1;
    t_run(2, held_body, &borrow);
}
