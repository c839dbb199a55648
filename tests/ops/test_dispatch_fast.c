/* The cached dispatch path's shortcuts: the per-op memo in front of the strategy cache tells
 * calls apart by every fact the strategy depends on and forgets entries the cache evicted; a
 * steady-state cached op makes no heap allocation (a malloc counter on the rank's thread); the
 * equal-shape binary kernel matches a naive loop across the serial/pool boundary. */
#include <math.h>
#include <stdlib.h>

#include "core/half.h"
#include "dtensor/tensor_impl.h"
#include "helpers.h"
#include "ops/kernels.h"

/* ---- the memo tells calls apart -------------------------------------------------------- */

/* The values of x as doubles (full tensor, gathered), n of them. */
static dt_status full_of(dt_tensor *x, dt_dtype dt, double *v, size_t n) {
    char buf[8 * 64];
    R_OK(dt_tensor_full_tensor(x, buf, sizeof buf));
    for (size_t i = 0; i < n; i++)
        v[i] = dt == DT_F64   ? ((double *)buf)[i]
               : dt == DT_I32 ? ((int32_t *)buf)[i]
                              : ((float *)buf)[i];
    return DT_OK;
}

/* op(a, b) for a and b of dtype dt, shape (r, c) and placement p on mesh, against the
 * elementwise result of the same data in f64; the output must keep p. */
static dt_status binary_case(dt_mesh *mesh, int mul, dt_dtype dt, int64_t r, int64_t c,
                             dt_placement p) {
    char xa[8 * 64], xb[8 * 64];
    size_t n = (size_t)(r * c);
    t_fill(dt, xa, n, 11);
    t_fill(dt, xb, n, 12);
    int64_t shape[2] = {r, c};
    dt_tensor *a, *b, *o;
    R_OK(dt_tensor_distribute(mesh, xa, dt, 2, shape, 1, &p, DT_ALL_RANKS, &a));
    R_OK(dt_tensor_distribute(mesh, xb, dt, 2, shape, 1, &p, DT_ALL_RANKS, &b));
    R_OK(mul ? dt_mul(a, b, &o) : dt_add(a, b, &o));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(o, &info));
    R_CHECK(info.dtype == dt && info.ndim == 2 && info.shape[0] == r && info.shape[1] == c,
            "%s of (%lld, %lld) %s: output spec is (%lld, %lld) %s", mul ? "mul" : "add",
            (long long)r, (long long)c, dt_dtype_name(dt), (long long)info.shape[0],
            (long long)info.shape[1], dt_dtype_name(info.dtype));
    R_CHECK(dt_placement_equal(info.placements[0], p), "%s (%lld, %lld): placement changed",
            mul ? "mul" : "add", (long long)r, (long long)c);
    /* This rank's block as torch.chunk cuts it (ceil(n / ranks) a rank, the last ones short),
     * in the output's own spec: what its readers (dt_tensor_info, FSDP, cross-mesh moves) see. */
    int ws = dt_mesh_dim_size(mesh, 0), me = dt_mesh_coord(mesh, 0);
    for (int d = 0; d < 2; d++) {
        int64_t n = d == 0 ? r : c, len = n, off = 0;
        if (p.kind == DT_PLACEMENT_SHARD && p.dim == d) {
            int64_t chunk = (n + ws - 1) / ws;
            off = me * chunk < n ? me * chunk : n;
            len = n - off < chunk ? n - off : chunk;
        }
        R_CHECK(info.local_shape[d] == len && info.local_offset[d] == off,
                "%s (%lld, %lld) rank %d dim %d: block %lld at %lld, want %lld at %lld",
                mul ? "mul" : "add", (long long)r, (long long)c, me, d,
                (long long)info.local_shape[d], (long long)info.local_offset[d], (long long)len,
                (long long)off);
    }
    double got[64];
    R_OK(full_of(o, dt, got, n));
    for (size_t i = 0; i < n; i++) {
        double x = t_value(11, i), y = t_value(12, i);
        double want = mul ? x * y : x + y;
        R_CHECK(got[i] == want, "%s (%lld, %lld) %s: element %zu is %g, want %g",
                mul ? "mul" : "add", (long long)r, (long long)c, dt_dtype_name(dt), i, got[i],
                want);
    }
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(o);
    return DT_OK;
}

/* sum of a (4, 6) tensor sharded on dim 0 over dims {dim}, against a loop: calls of one op
 * that differ only in their arguments. */
static dt_status sum_case(dt_mesh *mesh, int dim) {
    float x[24];
    t_fill(DT_F32, x, 24, 21);
    int64_t shape[2] = {4, 6};
    dt_placement s0 = dt_shard(0), r = dt_replicate();
    dt_tensor *t, *s, *g;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, &s0, DT_ALL_RANKS, &t));
    R_OK(dt_sum(t, &dim, 1, 0, &s));
    R_OK(dt_tensor_redistribute(s, 1, &r, &g));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(g, &info));
    int64_t want_n = dim == 0 ? 6 : 4;
    R_CHECK(info.ndim == 1 && info.shape[0] == want_n, "sum over dim %d: %d dims, %lld long", dim,
            info.ndim, (long long)info.shape[0]);
    double got[6];
    R_OK(full_of(g, DT_F32, got, (size_t)want_n));
    for (int64_t k = 0; k < want_n; k++) {
        double want = 0;
        for (int64_t j = 0; j < (dim == 0 ? 4 : 6); j++)
            want += dim == 0 ? t_value(21, (size_t)(j * 6 + k)) : t_value(21, (size_t)(k * 6 + j));
        R_CHECK(fabs(got[k] - want) < 1e-5, "sum over dim %d: [%lld] = %g, want %g", dim,
                (long long)k, got[k], want);
    }
    dt_tensor_release(t), dt_tensor_release(s), dt_tensor_release(g);
    return DT_OK;
}

static dt_status apart_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){2}, NULL, &mesh));
    /* Each call differs from the one before it in one fact only, and each fact comes back. */
    for (int round = 0; round < 2; round++) {
        R_OK(binary_case(mesh, 0, DT_F32, 4, 6, dt_shard(0)));
        R_OK(binary_case(mesh, 0, DT_F32, 4, 6, dt_replicate())); /* placements */
        R_OK(binary_case(mesh, 0, DT_F32, 4, 6, dt_shard(1)));    /* shard dim */
        R_OK(binary_case(mesh, 0, DT_F32, 6, 4, dt_shard(1)));    /* shape */
        R_OK(binary_case(mesh, 0, DT_F32, 6, 2, dt_shard(1)));    /* one dim's size */
        R_OK(binary_case(mesh, 0, DT_F64, 6, 2, dt_shard(1)));    /* dtype */
        R_OK(binary_case(mesh, 0, DT_I32, 6, 2, dt_shard(1)));    /* dtype */
        R_OK(binary_case(mesh, 1, DT_I32, 6, 2, dt_shard(1)));    /* op */
        R_OK(binary_case(mesh, 1, DT_I32, 6, 2, dt_shard(1)));    /* the same again */
        R_OK(sum_case(mesh, 0));
        R_OK(sum_case(mesh, 1)); /* arguments */
        R_OK(sum_case(mesh, 1));
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(dispatch_fast, memo_tells_calls_apart) {
    t_run(2, apart_body, NULL);
}

/* ---- the memo forgets what the cache evicted -------------------------------------------- */

#define R_COUNTS(mesh, h, m, e)                                                                    \
    do {                                                                                           \
        dt_cache_stats s_ = {0};                                                                   \
        R_OK(dt_mesh_cache_stats(mesh, DT_CACHE_STRATEGY, &s_));                                   \
        R_CHECK(s_.hits == (h) && s_.misses == (m) && s_.evictions == (e),                         \
                "expected %d hits, %d misses, %d evictions; got %llu, %llu, %llu", (h), (m), (e),  \
                (unsigned long long)s_.hits, (unsigned long long)s_.misses,                        \
                (unsigned long long)s_.evictions);                                                 \
    } while (0)

/* add, mul, add, add of a 4x4 tensor on a fresh mesh whose strategy cache holds cap entries
 * (0: the default). */
static dt_status add_mul_add_add(dt_ctx *ctx, size_t cap, dt_mesh **mesh_out) {
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){dt_ctx_size(ctx)}, NULL, &mesh));
    if (cap) R_OK(dt_mesh_set_cache_capacity(mesh, DT_CACHE_STRATEGY, cap));
    float x[16];
    t_fill(DT_F32, x, 16, 3);
    int64_t shape[2] = {4, 4};
    dt_placement s0 = dt_shard(0);
    dt_tensor *a, *o;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, &s0, DT_ALL_RANKS, &a));
    for (int k = 0; k < 4; k++) {
        R_OK(k == 1 ? dt_mul(a, a, &o) : dt_add(a, a, &o));
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(o, &info));
        float got[16];
        R_OK(dt_tensor_full_tensor(o, got, sizeof got));
        for (int i = 0; i < 16; i++)
            R_CHECK(got[i] == (k == 1 ? x[i] * x[i] : x[i] + x[i]), "call %d: [%d] = %g", k, i,
                    (double)got[i]);
        dt_tensor_release(o);
    }
    dt_tensor_release(a);
    *mesh_out = mesh;
    return DT_OK;
}

static dt_status evict_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    /* Room for both entries: the repeated adds hit (through the memo or the cache alike). */
    R_OK(add_mul_add_add(ctx, 0, &mesh));
    R_COUNTS(mesh, 2, 2, 0);
    dt_mesh_release(mesh);
    /* Room for one: mul evicts add's entry, so the next add must miss (its memo still names
     * the freed entry) and evict mul's; the last add hits. */
    R_OK(add_mul_add_add(ctx, 1, &mesh));
    R_COUNTS(mesh, 1, 3, 2);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(dispatch_fast, memo_forgets_evicted_entries) {
    t_run(1, evict_body, NULL);
    t_run(2, evict_body, NULL);
}

/* ---- the one-pass input check still names every fault ------------------------------------ */

static dt_status faults_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh, *other;
    R_OK(dt_mesh_create(ctx, 1, (int[]){2}, NULL, &mesh));
    R_OK(dt_mesh_create(ctx, 2, (int[]){1, 2}, NULL, &other));
    float x[16];
    t_fill(DT_F32, x, 16, 9);
    int64_t shape[2] = {4, 4};
    dt_placement s0 = dt_shard(0), ps[2] = {dt_replicate(), dt_shard(0)};
    dt_tensor *a, *b, *elsewhere, *gone, *o;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, &s0, DT_ALL_RANKS, &a));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, &s0, DT_ALL_RANKS, &b));
    R_OK(dt_tensor_distribute(other, x, DT_F32, 2, shape, 2, ps, DT_ALL_RANKS, &elsewhere));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, &s0, DT_ALL_RANKS, &gone));
    R_OK(dt_tensor_release(gone));
    for (int warm = 0; warm < 2; warm++) { /* cold, then with add's strategy cached */
        R_ERR(dt_add(a, NULL, &o), DT_ERR_ARG, "input 1 is NULL");
        R_ERR(dt_add(a, gone, &o), DT_ERR_ARG, "input 1");
        R_MSG("released tensor");
        R_ERR(dt_add(a, elsewhere, &o), DT_ERR_MESH, "another mesh");
        dt_tensor_storage_drop(b);
        R_ERR(dt_add(a, b, &o), DT_ERR_ARG, "dropped");
        R_OK(dt_tensor_storage_alloc(b));
        R_ERR(dt_add(a, b, NULL), DT_ERR_ARG, "out");
        R_OK(dt_add(a, b, &o));
        dt_tensor_release(o);
    }
    dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(elsewhere);
    dt_mesh_release(mesh), dt_mesh_release(other);
    return DT_OK;
}

Test(dispatch_fast, input_faults_still_named) {
    t_run(2, faults_body, NULL);
}

/* ---- a cached op allocates nothing ------------------------------------------------------ */

/* malloc and friends, counted on threads that ask for it (the rank's, around its loop), then
 * handed to glibc. Under AddressSanitizer its own malloc is in the way: the test skips. */
#if defined(__SANITIZE_ADDRESS__)
#define T_COUNT_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_COUNT_MALLOC 0
#endif
#endif
#ifndef T_COUNT_MALLOC
#define T_COUNT_MALLOC 1
#endif

#if T_COUNT_MALLOC
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static _Thread_local int counting;
static _Thread_local long allocations;

void *malloc(size_t n) {
    allocations += counting;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
    allocations += counting;
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
    allocations += counting;
    return __libc_realloc(p, n);
}
int posix_memalign(void **p, size_t align, size_t n) {
    allocations += counting;
    *p = __libc_memalign(align, n);
    return *p ? 0 : 12; /* ENOMEM */
}
#endif

typedef struct alloc_case {
    long got[8]; /* per rank: allocations over the measured calls */
} alloc_case;

enum { WARM = 100, CALLS = 1000 };

static dt_status allocs_body(dt_ctx *ctx, void *arg) {
    alloc_case *c = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){dt_ctx_size(ctx)}, NULL, &mesh));
    float x[64];
    t_fill(DT_F32, x, 64, 5);
    int64_t shape[2] = {4 * (int64_t)dt_ctx_size(ctx), 4}, ws[2] = {4, 4};
    dt_placement s0 = dt_shard(0), r = dt_replicate();
    dt_tensor *a, *w, *o;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, 1, &s0, DT_ALL_RANKS, &a));
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, ws, 1, &r, DT_ALL_RANKS, &w));
    for (int i = 0; i < WARM + CALLS; i++) {
#if T_COUNT_MALLOC
        counting = i >= WARM;
#endif
        dt_status st = dt_add(a, a, &o);
        if (st == DT_OK) dt_tensor_release(o), st = dt_mul(a, a, &o);
        if (st == DT_OK) dt_tensor_release(o), st = dt_mm(a, w, &o);
        if (st == DT_OK) dt_tensor_release(o);
#if T_COUNT_MALLOC
        counting = 0;
#endif
        R_OK(st);
    }
#if T_COUNT_MALLOC
    c->got[dt_ctx_rank(ctx)] = allocations;
#else
    (void)c;
#endif
    dt_tensor_release(a), dt_tensor_release(w);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* Cached add, mul and mm after warm-up: the output's shell and storage come from the rank's
 * arena, the strategy from the memo or the cache; a heap allocation per call would be a
 * regression of the cached path. */
Test(dispatch_fast, cached_ops_allocate_nothing) {
    if (!T_COUNT_MALLOC) cr_skip_test("malloc is AddressSanitizer's here");
    if (getenv("DT_HOST_ARENA") && getenv("DT_HOST_ARENA")[0] == '0')
        cr_skip_test("DT_HOST_ARENA=0: small blocks come from malloc by design");
    for (int ranks = 1; ranks <= 2; ranks++) {
        alloc_case c = {{0}};
        t_run(ranks, allocs_body, &c);
        for (int r = 0; r < ranks; r++)
            cr_expect_eq(c.got[r], 0,
                         "%d rank(s), rank %d: %ld heap allocations in %d cached "
                         "add+mul+mm rounds",
                         ranks, r, c.got[r], CALLS);
    }
}
