/* The CPU kernels that share their work out to the intra-op pool give the same bits with 1, 2,
 * 3 and 4 threads (memcmp), and agree with a naive serial loop in f64 within a stated
 * tolerance: pointwise, reductions, softmax, norms, rope, gather / scatter_add, embedding,
 * dropout, the optimizer step, copies and casts. Inputs are large enough to cut into chunks. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/copy.h"
#include "core/fill.h"
#include "core/half.h"
#include "core/pool.h"
#include "ops/kernels.h"

static uint64_t rng = 0x9001u;
static double urand(void) { /* [0, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static float *randf(size_t n, double lo, double hi) {
    float *p = malloc(n * sizeof *p);
    cr_assert(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(lo + (hi - lo) * urand());
    return p;
}

static dt_local loc(dt_dtype dt, void *data, int nd, const int64_t *shape) {
    dt_local t = {.data = data, .dtype = dt, .ndim = nd};
    for (int d = 0; d < nd; d++)
        t.shape[d] = shape[d];
    return t;
}
#define LOC(dt, data, ...)                                                                         \
    loc(dt, data, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                       \
        (const int64_t[]){__VA_ARGS__})

/* Runs `run` with 1..4 threads into a fresh (poisoned) out of `bytes` each time; the result of
 * every count must equal the one-thread bits. Returns the one-thread result (caller frees). */
typedef dt_status (*run_fn)(void *ctx, void *out);

static void *same_bits(const char *what, run_fn run, void *ctx, size_t bytes) {
    void *ref = NULL, *out = malloc(bytes ? bytes : 1);
    cr_assert(out);
    for (int t = 1; t <= 4; t++) {
        cr_assert_eq(dt_pool_set_threads(t), DT_OK);
        memset(out, 0xa5, bytes);
        cr_assert_eq(run(ctx, out), DT_OK, "%s: %s", what, dt_last_error());
        if (t == 1) {
            ref = malloc(bytes ? bytes : 1);
            cr_assert(ref);
            memcpy(ref, out, bytes);
        } else {
            cr_assert(memcmp(ref, out, bytes) == 0, "%s: %d threads give other bits than 1", what,
                      t);
        }
    }
    free(out);
    dt_pool_release();
    return ref;
}

static void near(const char *what, double got, double want, double tol, size_t i) {
    cr_assert(fabs(got - want) <= tol * (1.0 + fabs(want)), "%s[%zu]: %.9g, want %.9g", what, i,
              got, want);
}

/* ---- pointwise ---------------------------------------------------------------------------- */

typedef struct {
    dt_local a, b, c;
    dt_local out;
} ab_ctx;

static dt_status run_silu(void *p, void *out) {
    ab_ctx *c = p;
    c->out.data = out;
    return dt_cpu_unary(DT_UNARY_SILU, 0, &c->a, &c->out);
}

static dt_status run_add(void *p, void *out) {
    ab_ctx *c = p;
    c->out.data = out;
    return dt_cpu_binary(DT_BINARY_ADD, &c->a, &c->b, &c->out);
}

static dt_status run_where(void *p, void *out) {
    ab_ctx *c = p;
    c->out.data = out;
    return dt_cpu_where(&c->c, &c->a, &c->b, &c->out);
}

Test(pool_kernels, pointwise) {
    const size_t n = 300001;
    float *x = randf(n, -6, 6);
    ab_ctx c = {.a = LOC(DT_F32, x, (int64_t)n), .out = LOC(DT_F32, NULL, (int64_t)n)};
    float *y = same_bits("silu", run_silu, &c, n * 4);
    for (size_t i = 0; i < n; i++)
        near("silu", y[i], x[i] / (1.0 + exp(-(double)x[i])), 1e-6, i);
    free(y);
    free(x);

    /* broadcast over rows, and rows longer than a chunk (pieces of one row) */
    const int64_t shapes[2][2] = {{257, 3001}, {3, 100000}};
    for (int s = 0; s < 2; s++) {
        int64_t R = shapes[s][0], C = shapes[s][1];
        float *a = randf((size_t)(R * C), -1, 1), *b = randf((size_t)C, -1, 1);
        float *cond = randf((size_t)C, -1, 1);
        ab_ctx d = {.a = LOC(DT_F32, a, R, C),
                    .b = LOC(DT_F32, b, 1, C),
                    .c = LOC(DT_F32, cond, 1, C),
                    .out = LOC(DT_F32, NULL, R, C)};
        float *o = same_bits("add", run_add, &d, (size_t)(R * C) * 4);
        for (int64_t i = 0; i < R * C; i++)
            cr_assert_eq(o[i], (float)((double)a[i] + (double)b[i % C]), "add[%lld]", (long long)i);
        free(o);
        /* where(cond, a, b) with cond and b broadcast */
        o = same_bits("where", run_where, &d, (size_t)(R * C) * 4);
        for (int64_t i = 0; i < R * C; i++)
            cr_assert_eq(o[i], cond[i % C] != 0 ? a[i] : b[i % C], "where[%lld]", (long long)i);
        free(o);
        free(a), free(b), free(cond);
    }
}

/* ---- reductions --------------------------------------------------------------------------- */

typedef struct {
    dt_reduce_op op;
    unsigned mask;
    dt_local x, out;
} red_ctx;

static dt_status run_reduce(void *p, void *out) {
    red_ctx *c = p;
    c->out.data = out;
    return dt_cpu_reduce(c->op, c->mask, &c->x, &c->out);
}

/* x (A, B) reduced over mask (1: dim 0, 2: dim 1, 3: both), against f64 loops. f64 too: an
 * f32 result rounds the double sum and would hide a change of its last bits. */
static void check_reduce(dt_dtype dt, dt_reduce_op op, unsigned mask, int64_t A, int64_t B) {
    float *xf = randf((size_t)(A * B), -1, 3);
    double *xd = malloc((size_t)(A * B) * sizeof *xd);
    cr_assert(xd);
    for (int64_t i = 0; i < A * B; i++)
        xd[i] = xf[i] * (1 + 1e-9 * (double)(i % 7));
    int64_t nout = (mask & 1 ? 1 : A) * (mask & 2 ? 1 : B);
    size_t es = dt == DT_F64 ? 8 : 4;
    red_ctx c = {.op = op,
                 .mask = mask,
                 .x = LOC(dt, dt == DT_F64 ? (void *)xd : xf, A, B),
                 .out = LOC(dt, NULL, nout)};
    void *o = same_bits("reduce", run_reduce, &c, (size_t)nout * es);
    for (int64_t k = 0; k < nout; k++) {
        int64_t a0 = mask & 1 ? 0 : k / (mask & 2 ? 1 : B), b0 = mask & 2 ? 0 : k % B;
        double acc = op == DT_REDUCE_MAX ? -INFINITY : 0, cnt = 0;
        for (int64_t a = a0; a < (mask & 1 ? A : a0 + 1); a++)
            for (int64_t b = b0; b < (mask & 2 ? B : b0 + 1); b++) {
                double v = dt == DT_F64 ? xd[a * B + b] : xf[a * B + b];
                acc = op == DT_REDUCE_MAX ? fmax(acc, v) : acc + v;
                cnt++;
            }
        if (op == DT_REDUCE_AVG) acc /= cnt;
        double got = dt == DT_F64 ? ((double *)o)[k] : ((float *)o)[k];
        near("reduce", got, acc, dt == DT_F64 ? 1e-12 : 1e-6, (size_t)k);
    }
    free(o);
    free(xf), free(xd);
}

Test(pool_kernels, reductions) {
    for (int f64 = 0; f64 <= 1; f64++) {
        dt_dtype dt = f64 ? DT_F64 : DT_F32;
        check_reduce(dt, DT_REDUCE_SUM, 3, 1024, 1024); /* one output: pieces and partials */
        check_reduce(dt, DT_REDUCE_AVG, 2, 4, 200001);  /* few long rows: pieces */
        check_reduce(dt, DT_REDUCE_MAX, 3, 333, 1001);  /* amax of everything */
        check_reduce(dt, DT_REDUCE_SUM, 2, 3000, 300);  /* many outputs */
        check_reduce(dt, DT_REDUCE_MAX, 1, 600, 700);   /* the inner dim kept: column blocks */
        check_reduce(dt, DT_REDUCE_AVG, 1, 5000, 40);
    }
}

typedef struct {
    double ord;
    unsigned mask;
    dt_local x, out;
} vn_ctx;

static dt_status run_vnorm(void *p, void *out) {
    vn_ctx *c = p;
    c->out.data = out;
    return dt_cpu_vector_norm(c->ord, c->mask, &c->x, &c->out);
}

/* A gradient norm: one output over everything (pieces and partials), and per-row norms. */
Test(pool_kernels, vector_norm) {
    const int64_t A = 700, B = 1500;
    double *x = malloc((size_t)(A * B) * sizeof *x);
    for (int64_t i = 0; i < A * B; i++)
        x[i] = urand() * 2 - 1;
    const double ords[] = {2, 1, INFINITY};
    for (int k = 0; k < 3; k++)
        for (unsigned mask = 2; mask <= 3; mask++) {
            int64_t nout = mask == 3 ? 1 : A;
            vn_ctx c = {.ord = ords[k],
                        .mask = mask,
                        .x = LOC(DT_F64, x, A, B),
                        .out = LOC(DT_F64, NULL, nout)};
            double *y = same_bits("vector_norm", run_vnorm, &c, (size_t)nout * 8);
            for (int64_t o = 0; o < nout; o++) {
                double acc = 0;
                for (int64_t i = o * (A * B / nout); i < (o + 1) * (A * B / nout); i++)
                    acc = ords[k] == INFINITY ? fmax(acc, fabs(x[i]))
                                              : acc + (ords[k] == 2 ? x[i] * x[i] : fabs(x[i]));
                near("vector_norm", y[o], ords[k] == 2 ? sqrt(acc) : acc, 1e-12, (size_t)o);
            }
            free(y);
        }
    free(x);
}

/* ---- softmax, norms, rope ----------------------------------------------------------------- */

typedef struct {
    int flag, dim;
    dt_local x, w, b, c, s, out;
} row_ctx;

static dt_status run_softmax(void *p, void *out) {
    row_ctx *c = p;
    c->out.data = out;
    return dt_cpu_softmax(c->flag, c->dim, &c->x, &c->out);
}

static void check_softmax(int lg, int64_t O, int64_t N, int64_t I) {
    float *x = randf((size_t)(O * N * I), -8, 8);
    row_ctx c = {
        .flag = lg, .dim = 1, .x = LOC(DT_F32, x, O, N, I), .out = LOC(DT_F32, NULL, O, N, I)};
    float *y = same_bits("softmax", run_softmax, &c, (size_t)(O * N * I) * 4);
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t t = 0; t < N; t++)
                mx = fmax(mx, x[(o * N + t) * I + i]);
            for (int64_t t = 0; t < N; t++)
                sum += exp(x[(o * N + t) * I + i] - mx);
            for (int64_t t = 0; t < N; t++) {
                size_t k = (size_t)((o * N + t) * I + i);
                double v = x[k] - mx;
                near("softmax", y[k], lg ? v - log(sum) : exp(v) / sum, 1e-5, k);
            }
        }
    free(y);
    free(x);
}

Test(pool_kernels, softmax) {
    check_softmax(0, 1000, 1000, 1);
    check_softmax(1, 700, 333, 1);
    check_softmax(0, 64, 300, 8); /* along a middle dim */
}

static dt_status run_norm(void *p, void *out) {
    row_ctx *c = p;
    c->out.data = out;
    return dt_cpu_layer_norm(c->flag, 1e-5, &c->x, &c->w, c->flag ? NULL : &c->b, &c->out);
}

Test(pool_kernels, norms) {
    const int64_t R = 2048, H = 384;
    float *x = randf((size_t)(R * H), -2, 3), *w = randf((size_t)H, 0.5, 1.5);
    float *b = randf((size_t)H, -1, 1);
    for (int rms = 0; rms <= 1; rms++) {
        row_ctx c = {.flag = rms,
                     .x = LOC(DT_F32, x, R, H),
                     .w = LOC(DT_F32, w, H),
                     .b = LOC(DT_F32, b, H),
                     .out = LOC(DT_F32, NULL, R, H)};
        float *y = same_bits(rms ? "rms_norm" : "layer_norm", run_norm, &c, (size_t)(R * H) * 4);
        for (int64_t r = 0; r < R; r++) {
            double mean = 0, var = 0;
            for (int64_t j = 0; j < H; j++)
                mean += x[r * H + j];
            mean = rms ? 0 : mean / (double)H;
            for (int64_t j = 0; j < H; j++)
                var += (x[r * H + j] - mean) * (x[r * H + j] - mean);
            double rstd = 1 / sqrt(var / (double)H + 1e-5);
            for (int64_t j = 0; j < H; j++) {
                size_t k = (size_t)(r * H + j);
                near("norm", y[k], (x[k] - mean) * rstd * w[j] + (rms ? 0 : b[j]), 1e-5, k);
            }
        }
        free(y);
    }
    free(x), free(w), free(b);
}

static dt_status run_rope(void *p, void *out) {
    row_ctx *c = p;
    c->out.data = out;
    return dt_cpu_rope(&c->x, &c->c, &c->s, &c->out);
}

Test(pool_kernels, rope) {
    const int64_t B = 2, T = 96, H = 6, P = 32;
    float *x = randf((size_t)(B * T * H * 2 * P), -1, 1);
    float *cs = randf((size_t)(T * P), -1, 1), *sn = randf((size_t)(T * P), -1, 1);
    row_ctx c = {.x = LOC(DT_F32, x, B, T, H, 2 * P),
                 .c = LOC(DT_F32, cs, T, P),
                 .s = LOC(DT_F32, sn, T, P),
                 .out = LOC(DT_F32, NULL, B, T, H, 2 * P)};
    float *y = same_bits("rope", run_rope, &c, (size_t)(B * T * H * 2 * P) * 4);
    for (int64_t u = 0; u < B * T * H; u++) {
        int64_t t = u / H % T;
        for (int64_t i = 0; i < P; i++) {
            size_t k = (size_t)(u * 2 * P + 2 * i);
            double x0 = x[k], x1 = x[k + 1], co = cs[t * P + i], si = sn[t * P + i];
            near("rope", y[k], x0 * co - x1 * si, 1e-6, k);
            near("rope", y[k + 1], x0 * si + x1 * co, 1e-6, k + 1);
        }
    }
    free(y), free(x), free(cs), free(sn);
}

/* ---- gather, scatter_add, embedding, dropout -------------------------------------------- */

typedef struct {
    int dim;
    int64_t dim_size, shift[DT_MAX_NDIM];
    dt_local x, ix, out;
    double p;
} ix_ctx;

static dt_status run_gather(void *p, void *out) {
    ix_ctx *c = p;
    c->out.data = out;
    return dt_cpu_gather(&c->x, c->dim, c->shift, 0, c->dim_size, &c->ix, &c->out);
}

static dt_status run_scatter(void *p, void *out) {
    ix_ctx *c = p;
    c->out.data = out;
    return dt_cpu_scatter_add(&c->x, c->dim, c->shift, 0, c->dim_size, &c->ix, &c->out);
}

static dt_status run_embedding(void *p, void *out) {
    ix_ctx *c = p;
    c->out.data = out;
    return dt_cpu_embedding(&c->x, 0, &c->ix, &c->out);
}

static int64_t *randix(size_t n, int64_t lo, int64_t hi) {
    int64_t *p = malloc(n * sizeof *p);
    cr_assert(p);
    for (size_t i = 0; i < n; i++)
        p[i] = lo + (int64_t)(urand() * (double)(hi - lo));
    return p;
}

Test(pool_kernels, gather) {
    const int64_t R = 2000, C = 64;
    float *x = randf((size_t)(R * C), -1, 1);
    int64_t *ix = randix((size_t)(R * C), 0, C);
    ix_ctx c = {.dim = 1,
                .dim_size = C,
                .x = LOC(DT_F32, x, R, C),
                .ix = LOC(DT_I64, ix, R, C),
                .out = LOC(DT_F32, NULL, R, C)};
    float *y = same_bits("gather", run_gather, &c, (size_t)(R * C) * 4);
    for (int64_t i = 0; i < R * C; i++)
        cr_assert_eq(y[i], x[i / C * C + ix[i]], "gather[%lld]", (long long)i);
    free(y), free(x), free(ix);
}

/* Rows (an embedding's gradient: index broadcast along the row) and single elements. */
Test(pool_kernels, scatter_add) {
    const int64_t N = 20000, H = 64, V = 500;
    float *src = randf((size_t)(N * H), -1, 1);
    int64_t *ix = randix((size_t)N, 0, V);
    ix_ctx c = {.dim = 0,
                .dim_size = V,
                .x = LOC(DT_F32, src, N, H),
                .ix = LOC(DT_I64, ix, N, 1),
                .out = LOC(DT_F32, NULL, V, H)};
    float *y = same_bits("scatter_add rows", run_scatter, &c, (size_t)(V * H) * 4);
    double *want = calloc((size_t)(V * H), sizeof *want);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < H; j++)
            want[ix[i] * H + j] += src[i * H + j];
    for (int64_t k = 0; k < V * H; k++)
        near("scatter_add rows", y[k], want[k], 1e-5, (size_t)k);
    free(y), free(want), free(ix);

    const int64_t R = 64, L = 4000, K = 100;
    ix = randix((size_t)(R * L), 0, K);
    ix_ctx e = {.dim = 1,
                .dim_size = K,
                .x = LOC(DT_F32, src, R, L),
                .ix = LOC(DT_I64, ix, R, L),
                .out = LOC(DT_F32, NULL, R, K)};
    y = same_bits("scatter_add elements", run_scatter, &e, (size_t)(R * K) * 4);
    want = calloc((size_t)(R * K), sizeof *want);
    for (int64_t r = 0; r < R; r++)
        for (int64_t t = 0; t < L; t++)
            want[r * K + ix[r * L + t]] += src[r * L + t];
    for (int64_t k = 0; k < R * K; k++)
        near("scatter_add", y[k], want[k], 1e-5, (size_t)k);
    /* a bad index is named, whatever thread meets it first: the first in src's order */
    ix[5 * L + 7] = K + 3;
    ix[40 * L + 1] = -1;
    float *tmp = malloc((size_t)(R * K) * 4);
    for (int t = 1; t <= 4; t++) {
        cr_assert_eq(dt_pool_set_threads(t), DT_OK);
        cr_assert_eq(run_scatter(&e, tmp), DT_ERR_ARG);
        cr_assert(strstr(dt_last_error(), "index[5,7] = 103"), "%s", dt_last_error());
    }
    dt_pool_release();
    free(tmp), free(y), free(want), free(ix), free(src);
}

Test(pool_kernels, embedding) {
    const int64_t V = 1000, H = 96, N = 30000;
    float *table = randf((size_t)(V * H), -1, 1);
    int32_t *ix = malloc((size_t)N * sizeof *ix);
    for (int64_t i = 0; i < N; i++)
        ix[i] = (int32_t)(urand() * (double)(V + 10)) - 5;
    ix_ctx c = {
        .x = LOC(DT_F32, table, V, H), .ix = LOC(DT_I32, ix, N), .out = LOC(DT_F32, NULL, N, H)};
    float *y = same_bits("embedding", run_embedding, &c, (size_t)(N * H) * 4);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < H; j++)
            cr_assert_eq(y[i * H + j], ix[i] >= 0 && ix[i] < V ? table[ix[i] * H + j] : 0.0f);
    free(y), free(table), free(ix);
}

static dt_status run_dropout(void *p, void *out) {
    ix_ctx *c = p;
    c->out.data = out;
    int64_t zero[DT_MAX_NDIM] = {0};
    return dt_cpu_dropout(c->p, 1234, 0, c->x.shape, zero, &c->x, &c->out);
}

Test(pool_kernels, dropout) {
    const int64_t n = 400000;
    float *x = randf((size_t)n, 0.5, 1.5);
    ix_ctx c = {.p = 0.3, .x = LOC(DT_F32, x, n), .out = LOC(DT_F32, NULL, n)};
    float *y = same_bits("dropout", run_dropout, &c, (size_t)n * 4);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        cr_assert(y[i] == 0.0f || y[i] == x[i] * (float)(1.0 / 0.7), "dropout[%lld]", (long long)i);
        kept += y[i] != 0.0f;
    }
    cr_assert(fabs((double)kept / (double)n - 0.7) < 0.01, "kept %lld of %lld", (long long)kept,
              (long long)n);
    free(y), free(x);
}

/* ---- optimizer step ------------------------------------------------------------------------ */

#define NITEMS 3
static const uint64_t item_n[NITEMS] = {100003, 5, 33331};

typedef struct {
    float *p0[NITEMS], *g[NITEMS], *m0[NITEMS], *v0[NITEMS];
} opt_ctx;

/* out: every item's param, m and v, end to end (the step is in place: start from copies). */
static dt_status run_adamw(void *p, void *out) {
    opt_ctx *c = p;
    dt_optim_hyper h = {.rule = DT_OPTIM_RULE_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    dt_optim_item it[NITEMS];
    float *o = out;
    for (int k = 0; k < NITEMS; k++) {
        size_t n = item_n[k];
        memcpy(o, c->p0[k], n * 4), memcpy(o + n, c->m0[k], n * 4);
        memcpy(o + 2 * n, c->v0[k], n * 4);
        it[k] = (dt_optim_item){.param = o,
                                .grad = c->g[k],
                                .state = {o + n, o + 2 * n},
                                .numel = n,
                                .param_dtype = DT_F32,
                                .grad_dtype = DT_F32,
                                .state_dtype = DT_F32,
                                .lr = 1e-3,
                                .weight_decay = 0.1,
                                .step_size = 1e-3 / (1 - pow(0.9, 3)),
                                .bc2_sqrt = sqrt(1 - pow(0.95, 3))};
        o += 3 * n;
    }
    return dt_cpu_optim_step(&h, it, NITEMS);
}

Test(pool_kernels, adamw_step) {
    opt_ctx c;
    size_t total = 0;
    for (int k = 0; k < NITEMS; k++) {
        c.p0[k] = randf(item_n[k], -1, 1), c.g[k] = randf(item_n[k], -1, 1);
        c.m0[k] = randf(item_n[k], -0.1, 0.1), c.v0[k] = randf(item_n[k], 0, 0.01);
        total += 3 * item_n[k];
    }
    float *y = same_bits("adamw", run_adamw, &c, total * 4), *o = y;
    const double sz = 1e-3 / (1 - pow(0.9, 3)), bc2 = sqrt(1 - pow(0.95, 3));
    for (int k = 0; k < NITEMS; k++) {
        size_t n = item_n[k];
        for (size_t i = 0; i < n; i++) {
            double g = c.g[k][i], m = c.m0[k][i] + 0.1 * (g - c.m0[k][i]);
            double v = 0.95 * c.v0[k][i] + 0.05 * g * g;
            double p = c.p0[k][i] * (1 - 1e-4) - sz * (m / (sqrt(v) / bc2 + 1e-8));
            near("adamw param", o[i], p, 1e-5, i);
            near("adamw m", o[n + i], m, 1e-5, i);
            near("adamw v", o[2 * n + i], v, 1e-5, i);
        }
        o += 3 * n;
        free(c.p0[k]), free(c.g[k]), free(c.m0[k]), free(c.v0[k]);
    }
    free(y);
}

/* ---- copies and casts -------------------------------------------------------------------- */

typedef struct {
    const void *src;
    size_t n;
} copy_ctx;

static dt_status run_copy(void *p, void *out) {
    copy_ctx *c = p;
    dt_copy_large(out, c->src, c->n);
    return DT_OK;
}

static dt_status run_cast(void *p, void *out) {
    copy_ctx *c = p;
    return dt_fill_ops_of(DT_DEVICE_CPU)->cast(DT_BF16, out, DT_F32, c->src, c->n);
}

Test(pool_kernels, copy_and_cast) {
    const size_t bytes = (size_t)24 << 20 | 13; /* not a whole number of pieces */
    unsigned char *src = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        src[i] = (unsigned char)(i * 2654435761u >> 13);
    copy_ctx c = {src, bytes};
    unsigned char *y = same_bits("copy", run_copy, &c, bytes);
    cr_assert(memcmp(y, src, bytes) == 0);
    free(y), free(src);

    const size_t n = 1000003;
    float *x = randf(n, -1e4, 1e4);
    copy_ctx k = {x, n};
    uint16_t *h = same_bits("cast", run_cast, &k, n * 2);
    for (size_t i = 0; i < n; i++)
        near("cast", dt_bf16_to_f32(h[i]), x[i], 1.0 / 256, i);
    free(h), free(x);
}
