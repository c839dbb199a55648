/* A transformer block forward on a 2x2 ("dp","tp") mesh, Megatron style: batch sharded over
 * dp; over tp, attention with heads sharded, the MLP column- then row-parallel, and the norms
 * and residuals sequence-parallel. The same block runs again on replicated tensors (each rank
 * computes it whole) as the reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "block.h"

enum { B = 2, T = 8, C = 16, H = 4, D = C / H, F = 4 * C };

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) {                                                                        \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, #call, dt_status_str(st_),     \
                    dt_last_error());                                                              \
            return st_;                                                                            \
        }                                                                                          \
    } while (0)

typedef struct weights {
    dt_tensor *g1, *b1, *wq, *wk, *wv, *wo, *g2, *b2, *w1, *w2;
} weights;

static void fill(float *x, size_t n, unsigned seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = ((float)((seed >> 16) & 0x7fff) / 32768.0f - 0.5f) * scale;
    }
}

static dt_status param(dt_mesh *mesh, int rank, int ndim, const int64_t *shape, const char *pl,
                       unsigned seed, float scale, dt_tensor **out) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    float *x = malloc(n * sizeof *x);
    if (!x) return dt_error_set(DT_ERR_NOMEM, "demo: out of memory");
    fill(x, n, seed, scale);
    if (scale == 0) /* norm gains: 1 */
        for (size_t i = 0; i < n; i++) x[i] = 1;
    dt_placement p[2];
    int np;
    dt_status st = dt_placements_parse(pl, p, 2, &np);
    if (st == DT_OK)
        st = dt_tensor_distribute(mesh, x, DT_F32, ndim, shape, DT_COUNT_OF(p), p, DT_ALL_RANKS,
                                  out);
    free(x);
    (void)rank;
    return st;
}

/* Parameters: sharded for the tensor-parallel block, or all replicated. */
static dt_status make_weights(dt_mesh *mesh, int rank, int sharded, weights *w) {
    int64_t vc[1] = {C}, cc[2] = {C, C}, fc[2] = {F, C}, cf[2] = {C, F};
    const char *rep = "R,R", *col = sharded ? "R,S(0)" : rep, *row = sharded ? "R,S(1)" : rep;
    TRY(param(mesh, rank, 1, vc, rep, 1, 0, &w->g1));
    TRY(param(mesh, rank, 1, vc, rep, 2, 0.2f, &w->b1));
    TRY(param(mesh, rank, 2, cc, col, 3, 0.5f, &w->wq));
    TRY(param(mesh, rank, 2, cc, col, 4, 0.5f, &w->wk));
    TRY(param(mesh, rank, 2, cc, col, 5, 0.5f, &w->wv));
    TRY(param(mesh, rank, 2, cc, row, 6, 0.5f, &w->wo));
    TRY(param(mesh, rank, 1, vc, rep, 7, 0, &w->g2));
    TRY(param(mesh, rank, 1, vc, rep, 8, 0.2f, &w->b2));
    TRY(param(mesh, rank, 2, fc, col, 9, 0.5f, &w->w1));
    TRY(param(mesh, rank, 2, cf, row, 10, 0.25f, &w->w2));
    return DT_OK;
}

static void free_weights(weights *w) {
    dt_tensor *all[] = {w->g1, w->b1, w->wq, w->wk, w->wv, w->wo, w->g2, w->b2, w->w1, w->w2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
}

/* Prints "  step            placements" on rank 0 when verbose. */
static void show(int verbose, const char *step, dt_tensor *t) {
    if (!verbose) return;
    dt_tensor_info info;
    char pl[64];
    dt_tensor_info_get(t, &info);
    dt_placements_format(info.placements, info.mesh_ndim, pl, sizeof pl);
    printf("  %-34s [", step);
    for (int d = 0; d < info.ndim; d++) printf(d ? ",%lld" : "%lld", (long long)info.shape[d]);
    printf("] %s\n", pl);
}

/* q, k or v: x (B,T,C) @ w^T, split into heads: (B,T,C) -> (B,T,H,D) -> (B,H,T,D). */
static dt_status heads(int rank, dt_tensor *x, dt_tensor *w, dt_tensor **out) {
    dt_tensor *p, *v;
    int64_t s4[4] = {B, T, H, D};
    TRY(dt_linear(x, w, NULL, &p));
    dt_status st = dt_view(p, 4, s4, &v);
    dt_tensor_release(p);
    if (st != DT_OK) return st;
    st = dt_transpose(v, 1, 2, out);
    dt_tensor_release(v);
    return st;
}

/* Runs call, keeps its result t for release, and shows it. */
#define STEP(call, t, label)                                                                       \
    do {                                                                                           \
        TRY(call);                                                                                 \
        tmp[ntmp++] = (t);                                                                         \
        show(verbose, label, t);                                                                   \
    } while (0)

dt_status dt_demo_block(dt_ctx *ctx, dt_mesh *mesh, int sharded, int verbose, dt_tensor *x,
                        dt_tensor **out) {
    int rank = dt_ctx_rank(ctx);
    weights w;
    TRY(make_weights(mesh, rank, sharded, &w));
    dt_tensor *tmp[32];
    int ntmp = 0;
    /* Sequence parallel: gather the sequence (tp) before the column-parallel projections. */
    dt_placement gathered[2] = {dt_shard(0), dt_replicate()};
    dt_tensor *n1, *n1g = NULL, *q, *k, *v, *y, *yt, *yc, *a, *h, *n2, *n2g = NULL, *f1, *g, *m;
    int64_t s3[3] = {B, T, C};
    show(verbose, "x (batch on dp, sequence on tp)", x);
    STEP(dt_layer_norm(x, w.g1, w.b1, 1e-5, &n1), n1, "layer_norm (sequence parallel)");
    if (sharded)
        STEP(dt_tensor_redistribute(n1, DT_COUNT_OF(gathered), gathered, &n1g), n1g,
             "all_gather the sequence");
    else n1g = n1;
    STEP(heads(rank, n1g, w.wq, &q), q, "q = x Wq^T, heads split");
    STEP(heads(rank, n1g, w.wk, &k), k, "k");
    STEP(heads(rank, n1g, w.wv, &v), v, "v");
    STEP(dt_sdpa(q, k, v, 1, &y), y, "causal attention (heads sharded)");
    STEP(dt_transpose(y, 1, 2, &yt), yt, "heads back");
    STEP(dt_view(yt, 3, s3, &yc), yc, "heads merged");
    STEP(dt_linear(yc, w.wo, NULL, &a), a, "out projection (row parallel)");
    STEP(dt_add(x, a, &h), h, "residual (reduce_scatter)");
    STEP(dt_layer_norm(h, w.g2, w.b2, 1e-5, &n2), n2, "layer_norm (sequence parallel)");
    if (sharded)
        STEP(dt_tensor_redistribute(n2, DT_COUNT_OF(gathered), gathered, &n2g), n2g,
             "all_gather the sequence");
    else n2g = n2;
    STEP(dt_linear(n2g, w.w1, NULL, &f1), f1, "fc1 (column parallel)");
    STEP(dt_unary_op(DT_OP_GELU, f1, &g), g, "gelu");
    STEP(dt_linear(g, w.w2, NULL, &m), m, "fc2 (row parallel)");
    TRY(dt_add(h, m, out));
    show(verbose, "residual (reduce_scatter)", *out);
    for (int i = 0; i < ntmp; i++) dt_tensor_release(tmp[i]);
    free_weights(&w);
    return DT_OK;
}

dt_status dt_demo_input(dt_mesh *mesh, const char *placements, dt_tensor **out) {
    int64_t s[3] = {B, T, C};
    float x[B * T * C];
    fill(x, B * T * C, 42, 2.0f);
    dt_placement p[2];
    int np;
    dt_status st = dt_placements_parse(placements, p, 2, &np);
    if (st != DT_OK) return st;
    return dt_tensor_distribute(mesh, x, DT_F32, 3, s, DT_COUNT_OF(p), p, DT_ALL_RANKS, out);
}
