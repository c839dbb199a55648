/* ucx_rank_prog's "shm" mode: every collective of the UCX runtime's shared-memory path (and,
 * with DT_UCX_SHM=0, the same calls over UCP) at the sizes its chunking meets: nothing, below
 * a chunk, exactly a chunk and a peer's part of one, many chunks, uneven and empty v-counts,
 * four dtypes, on the world and on a 2-D mesh's rows and columns (4 or 6 ranks; else the
 * world reversed). Expected values come from small-integer series (exact in every dtype and
 * order); for float data, all_reduce and reduce_scatter must equal the group-rank-order
 * reduction bit for bit (the local runtime's result) whenever the shm path runs.
 * The box forms of redistribute run on every group too (ucx_shm_boxes.c).
 * dt_comm_stats.shm_calls must count every collective with DT_UCX_SHM=1 and none with 0. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "core/reduce.h"
#include "ucx_shm_checks.h"

#define CHUNK ((size_t)512 << 10) /* SHM_CHUNK in src/comm/ucx/shm.h */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) return shm_fail(__LINE__, __VA_ARGS__);                                       \
    } while (0)
#define OK(call)                                                                                   \
    do {                                                                                           \
        dt_status ok_st_ = (call);                                                                 \
        if (ok_st_ != DT_OK) return shm_fail(__LINE__, "%s: %s", #call, dt_last_error());          \
    } while (0)

__attribute__((format(printf, 2, 3))) static dt_status shm_fail(int line, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_error_set(DT_ERR_ARG, "ucx_shm_checks.c:%d: %s", line, msg);
}

static long ncoll; /* collectives issued, for the shm_calls count */

/* Element i of series s as a small integer (|v| <= 16): exact sums over <= 8 ranks. */
static double sval(uint64_t s, size_t i) {
    uint64_t x = s * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 7;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (double)(int64_t)(x % 33) - 16.0;
}

/* count elements of series s from element from on, in dtype dt (malloc'd; NULL: no memory).
 * add > 1: the element-wise sum of series s, s + 1, ..., s + add - 1 instead. */
static void *series(dt_dtype dt, size_t count, uint64_t s, size_t from, int add) {
    double *v = malloc(sizeof *v * count + 1);
    char *p = malloc(count * dt_dtype_size(dt) + 1);
    for (size_t i = 0; v && p && i < count; i++) {
        v[i] = 0;
        for (int k = 0; k < add; k++)
            v[i] += sval(s + (uint64_t)k, from + i);
    }
    if (v && p) dt_convert_from_f64(dt, v, p, count);
    if (!v) {
        free(p);
        p = NULL;
    }
    free(v);
    return p;
}

static void *fill(dt_dtype dt, size_t count, uint64_t s) {
    return series(dt, count, s, 0, 1);
}

/* buf holds count elements of series(s, from, add)? -1: out of memory. */
static int block_is(dt_dtype dt, const void *buf, size_t count, uint64_t s, size_t from, int add) {
    void *want = series(dt, count, s, from, add);
    if (!want) return -1;
    int same = memcmp(want, buf, count * dt_dtype_size(dt)) == 0;
    free(want);
    return same;
}

/* Per-member counts for one case: base elements each, uneven by case (member 0 empty in
 * case 2, every other member empty in case 3). */
static size_t count_of(size_t base, int kase, int j) {
    if (kase == 1) return base + (size_t)j * 37;
    if (kase == 2) return j == 0 ? 0 : base * (size_t)(j % 3 + 1) / 2;
    if (kase == 3) return j % 2 ? 0 : base;
    return base;
}

static dt_status gather_scatter(dt_comm *c, dt_dtype dt, size_t base, int kase, uint64_t seed) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    size_t es = dt_dtype_size(dt), counts[64], total = 0;
    for (int j = 0; j < n; j++)
        total += counts[j] = count_of(base, kase, j);
    /* all_gatherv: member j contributes series (seed, world rank j) */
    char *in = fill(dt, counts[me], seed * 100 + (uint64_t)dt_comm_world_rank(c, me));
    char *out = malloc(total * es + 1);
    CHECK(in && out, "out of memory");
    OK(dt_all_gatherv(c, in, out, counts, NULL, dt));
    ncoll++;
    size_t off = 0;
    for (int j = 0; j < n; off += counts[j++])
        CHECK(block_is(dt, out + off * es, counts[j],
                       seed * 100 + (uint64_t)dt_comm_world_rank(c, j), 0, 1) == 1,
              "all_gatherv %s base %zu case %d: block %d", dt_dtype_name(dt), base, kase, j);
    free(in);
    free(out);
    /* reduce_scatterv (sum): group rank j passes series (seed + 1) * 100 + j */
    in = fill(dt, total, (seed + 1) * 100 + (uint64_t)me);
    out = malloc(counts[me] * es + 1);
    CHECK(in && out, "out of memory");
    OK(dt_reduce_scatterv(c, in, out, counts, dt, DT_REDUCE_SUM));
    ncoll++;
    size_t lo = 0;
    for (int j = 0; j < me; j++)
        lo += counts[j];
    CHECK(block_is(dt, out, counts[me], (seed + 1) * 100, lo, n) == 1,
          "reduce_scatterv %s base %zu case %d", dt_dtype_name(dt), base, kase);
    free(in);
    free(out);
    /* all_to_allv: me sends counts[(me + j) % n] elements of series (me, j) to j */
    size_t sc[64], rc[64], st = 0, rt = 0;
    for (int j = 0; j < n; j++) {
        st += sc[j] = count_of(base, kase, (me + j) % n);
        rt += rc[j] = count_of(base, kase, (j + me) % n);
    }
    in = malloc(st * es + 1);
    out = malloc(rt * es + 1);
    CHECK(in && out, "out of memory");
    off = 0;
    for (int j = 0; j < n; j++) {
        char *blk = fill(dt, sc[j], seed * 10000 + (uint64_t)me * 100 + (uint64_t)j);
        CHECK(blk, "out of memory");
        memcpy(in + off * es, blk, sc[j] * es);
        off += sc[j];
        free(blk);
    }
    OK(dt_all_to_allv(c, in, sc, NULL, out, rc, NULL, dt));
    ncoll++;
    off = 0;
    for (int j = 0; j < n; off += rc[j++])
        CHECK(block_is(dt, out + off * es, rc[j], seed * 10000 + (uint64_t)j * 100 + (uint64_t)me,
                       0, 1) == 1,
              "all_to_allv %s base %zu case %d: from %d", dt_dtype_name(dt), base, kase, j);
    free(in);
    free(out);
    return DT_OK;
}

/* all_reduce and reduce_scatter of float data against the group-rank-order reduction (bitwise
 * when the shm path runs), broadcast from every root. */
static dt_status reduce_bits(dt_comm *c, dt_dtype dt, size_t count, int shm, uint64_t seed) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    size_t es = dt_dtype_size(dt);
    char *all = malloc((size_t)n * count * es + 1), *out = malloc(count * es + 1),
         *ref = malloc(count * es + 1);
    const void *srcs[64];
    CHECK(all && out && ref, "out of memory");
    double *v = malloc(sizeof *v * count + 1);
    CHECK(v, "out of memory");
    for (int j = 0; j < n; j++) {
        for (size_t i = 0; i < count; i++)
            v[i] = sval(seed * 31 + (uint64_t)j, i) / 7.0 + sval(seed, i + 1) / 1024.0;
        dt_convert_from_f64(dt, v, all + (size_t)j * count * es, count);
        srcs[j] = all + (size_t)j * count * es;
    }
    free(v);
    dt_reduce_n(dt, DT_REDUCE_SUM, ref, srcs, n, count);
    OK(dt_all_reduce(c, srcs[me], out, count, dt, DT_REDUCE_SUM));
    ncoll++;
    for (size_t i = 0; i < count; i++) {
        double a, b;
        dt_convert_to_f64(dt, out + i * es, &a, 1);
        dt_convert_to_f64(dt, ref + i * es, &b, 1);
        CHECK(fabs(a - b) <= (dt == DT_BF16 ? 0.1 : 1e-5) * (1 + fabs(b)),
              "all_reduce %s count %zu: element %zu is %g, expected %g", dt_dtype_name(dt), count,
              i, a, b);
    }
    CHECK(!shm || !memcmp(out, ref, count * es),
          "all_reduce %s count %zu over shm: not the rank-order bits", dt_dtype_name(dt), count);
    /* in place, and equal bits on every member */
    memcpy(out, srcs[me], count * es);
    OK(dt_all_reduce(c, out, out, count, dt, DT_REDUCE_SUM));
    ncoll++;
    CHECK(!shm || !memcmp(out, ref, count * es), "in-place all_reduce %s count %zu over shm",
          dt_dtype_name(dt), count);
    size_t per = count / (size_t)n;
    if (per) {
        /* reduce_scatter: member j's block of n * per elements is block j of ref's prefix */
        for (int j = 0; j < n; j++)
            srcs[j] = all + (size_t)j * count * es;
        dt_reduce_n(dt, DT_REDUCE_SUM, ref, srcs, n, per * (size_t)n);
        OK(dt_reduce_scatter(c, srcs[me], out, per, dt, DT_REDUCE_SUM));
        ncoll++;
        CHECK(!shm || !memcmp(out, ref + (size_t)me * per * es, per * es),
              "reduce_scatter %s per %zu over shm: not the rank-order bits", dt_dtype_name(dt),
              per);
    }
    for (int root = 0; root < n; root++) {
        memcpy(out, me == root ? srcs[root] : (const void *)ref, count * es);
        OK(dt_broadcast(c, out, count, dt, root));
        ncoll++;
        CHECK(!memcmp(out, srcs[root], count * es), "broadcast %s count %zu root %d",
              dt_dtype_name(dt), count, root);
    }
    OK(dt_barrier(c));
    ncoll++;
    free(all);
    free(out);
    free(ref);
    return DT_OK;
}

/* big: also a chunk and several chunks per member (else up to a peer's part of a chunk). */
static dt_status check_group(dt_comm *c, int shm, uint64_t seed, int big) {
    static const dt_dtype dts[] = {DT_F32, DT_BF16, DT_F64, DT_I32};
    int n = dt_comm_size(c);
    /* element counts per member: below a part of a chunk, a peer's part exactly, a chunk
     * exactly, several chunks */
    for (int d = 0; d < (big ? 4 : 2); d++) {
        size_t es = dt_dtype_size(dts[d]), part = (CHUNK / (size_t)n) & ~(size_t)63;
        size_t bases[] = {0, 100, part / es, CHUNK / es, 3 * CHUNK / es + 5};
        for (int b = 0; b < 5; b++) {
            if (b >= 3 && (!big || d > 1 || (b == 4 && d > 0))) continue;
            for (int kase = 0; kase < 4; kase++) {
                if (b == 4 && kase > 1) break;
                dt_status st = gather_scatter(c, dts[d], bases[b], kase, seed + (uint64_t)b);
                if (st != DT_OK) return st;
            }
            if (d < 2) {
                dt_status st = reduce_bits(c, dts[d], bases[b] * (size_t)n + (size_t)b, shm,
                                           seed + (uint64_t)b);
                if (st != DT_OK) return st;
            }
        }
    }
    return DT_OK;
}

static uint64_t shm_calls(dt_ctx *ctx) {
    dt_comm_stats s;
    return dt_comm_stats_get(ctx, &s) == DT_OK ? s.shm_calls : UINT64_MAX;
}

/* check_group on c, adding the collectives over shared memory that it ran to *got. */
static dt_status counted(dt_ctx *ctx, dt_comm *c, int shm, uint64_t seed, int big, uint64_t *got) {
    uint64_t before = shm_calls(ctx);
    dt_status st = check_group(c, shm, seed, big);
    if (st == DT_OK) st = ucx_shm_boxes(c, shm, seed, &ncoll);
    *got += shm_calls(ctx) - before;
    return st;
}

dt_status ucx_shm_checks(dt_ctx *ctx) {
    const char *v = getenv("DT_UCX_SHM");
    int shm = !(v && !strcmp(v, "0")), me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    dt_comm *world, *c;
    uint64_t got = 0;
    OK(dt_ctx_world_comm(ctx, &world));
    ncoll = 0;
    dt_status st = counted(ctx, world, shm, 1, 1, &got);
    if (st != DT_OK) return st;
    if (n != 4 && n != 6) { /* the world reversed: group rank != world rank */
        int rev[64];
        for (int j = 0; j < n; j++)
            rev[j] = n - 1 - j;
        OK(dt_comm_create(ctx, rev, n, &c));
        st = counted(ctx, c, shm, 2, 0, &got);
        dt_comm_destroy(c);
        if (st != DT_OK) return st;
    } else { /* a 2-D mesh: its rows and columns (group rank != world rank) */
        dt_mesh *mesh;
        OK(dt_mesh_create_str(ctx, n == 4 ? "r=2,c=2" : "r=2,c=3", &mesh));
        for (int dim = 0; dim < 2 && st == DT_OK; dim++) {
            OK(dt_mesh_dim_comm(mesh, dim, &c));
            st = counted(ctx, c, shm, 3 + (uint64_t)dim, 0, &got);
        }
        dt_mesh_release(mesh);
        if (st != DT_OK) return st;
    }
    CHECK(got == (uint64_t)(shm ? ncoll : 0),
          "%llu collectives over shared memory of %ld, "
          "DT_UCX_SHM=%s",
          (unsigned long long)got, ncoll, v ? v : "(unset)");
    printf("[ok] shm: %ld collectives, %llu over shared memory, on rank %d of %d\n", ncoll,
           (unsigned long long)got, me, n);
    return DT_OK;
}
