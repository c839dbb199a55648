/* One rank of the UCX tests (tests/comm/test_ucx.c runs it under dtrun). Modes:
 *   collectives  every collective on the world and on subgroups: dtypes, ops, uneven and empty
 *                counts, in place, small (direct) and large (ring) sizes; exact results, and
 *                bitwise agreement across ranks (and with the rank-order reference) for
 *                non-integer data
 *   tensor       mesh + distribute + redistribute (sync and async) + full, exact round trips
 *   shm          the shared-memory path's sizes and groups (ucx_shm_checks.c)
 *   fault, hang, peer-exit, mismatch   the failure modes of rank_faults.h ("fault" first says
 *                "fault: shm on/off": whether its all_reduces run over shared memory)
 * Prints "[ok] <mode>" on success; exits 0 on success. Failure modes print "<mode>: failed
 * cleanly ..." and exit 3 when dt_ucx_run failed as expected, else "FAILED BADLY" and exit 1. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dtensor.h>

#include "comm/ucx/hier.h"
#include "core/reduce.h"
#include "rank_faults.h"
#include "ucx_shm_checks.h"

#define FAIL(...) return fail_at(__LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) FAIL(__VA_ARGS__);                                                            \
    } while (0)
#define OK(call)                                                                                   \
    do {                                                                                           \
        dt_status ok_st_ = (call);                                                                 \
        if (ok_st_ != DT_OK)                                                                       \
            FAIL("%s returned %s: %s", #call, dt_status_str(ok_st_), dt_last_error());             \
    } while (0)

static dt_status fail_at(int line, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_error_set(DT_ERR_ARG, "ucx_rank_prog.c:%d: %s", line, msg);
}

static long checks;

/* Whether c's all_reduce must run hierarchically (comm/ucx/hier.c): its members span hosts and
 * some host has more than one, by DT_TEST_HOSTS (the host of each world rank, "0,0,1,1"; unset:
 * all on one) and DT_UCX_HIER (unset: on). */
static int hier_expected(dt_comm *c) {
    const char *h = getenv("DT_TEST_HOSTS"), *on = getenv("DT_UCX_HIER");
    if (!h || (on && !strcmp(on, "0"))) return 0;
    int host[64] = {0}, nw = 0;
    for (const char *p = h; *p && nw < 64; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
        host[nw++] = atoi(p);
    int n = dt_comm_size(c), spans = 0, crowded = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) {
            int a = host[dt_comm_world_rank(c, i)], b = host[dt_comm_world_rank(c, j)];
            spans |= a != b;
            crowded |= a == b;
        }
    return spans && crowded;
}

/* Small integers (|v| <= 16; {-1, 1, 2} for prod): every reduction over <= 8 ranks is exact in
 * every dtype and in any order. */
static double ival(int r, size_t i, uint64_t seed, dt_reduce_op op) {
    uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)r * 0xbf58476d1ce4e5b9ull +
                 i * 0x94d049bb133111ebull;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    if (op == DT_REDUCE_PROD) return (double)((int)(x % 3) - 1 == 0 ? 2 : (int)(x % 3) - 1);
    return (double)(int64_t)(x % 33) - 16.0;
}

static void fill(dt_dtype dt, void *buf, size_t count, int r, uint64_t seed, dt_reduce_op op) {
    size_t es = dt_dtype_size(dt);
    for (size_t i = 0; i < count; i++) {
        double v = ival(r, i, seed, op);
        dt_convert_from_f64(dt, &v, (char *)buf + i * es, 1);
    }
}

static double reduce_expect(dt_reduce_op op, dt_dtype dt, const int *members, int n, size_t i,
                            uint64_t seed) {
    double acc = ival(members[0], i, seed, op);
    for (int k = 1; k < n; k++) {
        double v = ival(members[k], i, seed, op);
        if (op == DT_REDUCE_SUM || op == DT_REDUCE_AVG)
            acc += v;
        else if (op == DT_REDUCE_PROD)
            acc *= v;
        else if (op == DT_REDUCE_MAX)
            acc = fmax(acc, v);
        else
            acc = fmin(acc, v);
    }
    if (op == DT_REDUCE_AVG) acc = (dt == DT_I32 || dt == DT_I64) ? trunc(acc / n) : acc / n;
    return acc;
}

static int same_elem(dt_dtype dt, const void *buf, size_t i, double want) {
    char w[8];
    size_t es = dt_dtype_size(dt);
    dt_convert_from_f64(dt, &want, w, 1);
    return memcmp(w, (const char *)buf + i * es, es) == 0;
}

static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_I64};
#define NDT 6
static const size_t sizes[] = {0, 1, 7, 1000, 70001};
#define NSIZES 5

/* all_reduce for every dtype, op and size, out of place and in place. */
static dt_status check_all_reduce(dt_comm *c, uint64_t seed) {
    int n = dt_comm_size(c), me = dt_comm_rank(c), members[64];
    for (int j = 0; j < n; j++)
        members[j] = dt_comm_world_rank(c, j);
    for (int d = 0; d < NDT; d++) {
        dt_dtype dt = dtypes[d];
        size_t es = dt_dtype_size(dt);
        for (int op = 0; op < DT_REDUCE_COUNT; op++) {
            for (int s = 0; s < NSIZES; s++) {
                size_t cnt = sizes[s];
                if (cnt == 70001 && op != DT_REDUCE_SUM && op != DT_REDUCE_MAX && d > 1) continue;
                char *in = malloc(cnt * es + 1), *out = malloc(cnt * es + 1);
                CHECK(in && out, "out of memory");
                fill(dt, in, cnt, members[me], seed + (uint64_t)s, (dt_reduce_op)op);
                int inplace = (s + op) % 2;
                if (inplace) memcpy(out, in, cnt * es);
                OK(dt_all_reduce(c, inplace ? out : in, out, cnt, dt, (dt_reduce_op)op));
                for (size_t i = 0; i < cnt; i++) {
                    double e =
                        reduce_expect((dt_reduce_op)op, dt, members, n, i, seed + (uint64_t)s);
                    if (!same_elem(dt, out, i, e)) {
                        free(in);
                        free(out);
                        FAIL("all_reduce %s %s count %zu group of %d: element %zu wrong",
                             dt_dtype_name(dt), dt_reduce_op_name((dt_reduce_op)op), cnt, n, i);
                    }
                }
                free(in);
                free(out);
                checks++;
            }
        }
    }
    return DT_OK;
}

/* Non-integer data: every rank must get the same bits; small messages (direct exchange) must
 * equal the rank-order reduction bit for bit, rings must be within rounding of it. */
static dt_status check_bits(dt_comm *c, uint64_t seed) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    const size_t cnts[] = {100, 50000};
    const dt_dtype dts[] = {DT_F32, DT_BF16};
    for (int d = 0; d < 2; d++) {
        for (int s = 0; s < 2; s++) {
            size_t cnt = cnts[s], es = dt_dtype_size(dts[d]);
            char *all = malloc((size_t)n * cnt * es), *out = malloc(cnt * es),
                 *ref = malloc(cnt * es), *r0 = malloc(cnt * es);
            const void **srcs = malloc(sizeof *srcs * (size_t)n);
            CHECK(all && out && ref && r0 && srcs, "out of memory");
            for (int j = 0; j < n; j++) {
                for (size_t i = 0; i < cnt; i++) {
                    double v = sin((double)(i * 7 + (size_t)j * 13 + seed)) * 3.3;
                    dt_convert_from_f64(dts[d], &v, all + ((size_t)j * cnt + i) * es, 1);
                }
                srcs[j] = all + (size_t)j * cnt * es;
            }
            dt_reduce_n(dts[d], DT_REDUCE_SUM, ref, srcs, n, cnt);
            long h0 = dt_ucx_hier_runs(c);
            OK(dt_all_reduce(c, srcs[me], out, cnt, dts[d], DT_REDUCE_SUM));
            CHECK((dt_ucx_hier_runs(c) > h0) == hier_expected(c),
                  "all_reduce on %d ranks ran %s, expected %s", n,
                  dt_ucx_hier_runs(c) > h0 ? "hierarchically" : "flat",
                  hier_expected(c) ? "hierarchically" : "flat");
            memcpy(r0, out, cnt * es);
            OK(dt_broadcast(c, r0, cnt, dts[d], 0));
            CHECK(memcmp(r0, out, cnt * es) == 0,
                  "all_reduce %s count %zu: ranks got different bits", dt_dtype_name(dts[d]), cnt);
            const char *rm = getenv("DT_UCX_RING_MIN_BYTES");
            int exact = !hier_expected(c) && (cnt * es < (rm ? strtoull(rm, NULL, 10) : 65536) ||
                                              n <= 2);
            for (size_t i = 0; i < cnt; i++) {
                double a, b;
                dt_convert_to_f64(dts[d], out + i * es, &a, 1);
                dt_convert_to_f64(dts[d], ref + i * es, &b, 1);
                double tol = exact ? 0 : (dts[d] == DT_BF16 ? 0.1 : 1e-5) * (1 + fabs(b));
                CHECK(fabs(a - b) <= tol,
                      "all_reduce %s count %zu: element %zu is %g, rank-order "
                      "reference %g",
                      dt_dtype_name(dts[d]), cnt, i, a, b);
            }
            if (exact)
                CHECK(memcmp(out, ref, cnt * es) == 0, "small all_reduce not bitwise the "
                                                       "rank-order result");
            free(all);
            free(out);
            free(ref);
            free(r0);
            free(srcs);
            checks++;
        }
    }
    return DT_OK;
}

/* all_gatherv, reduce_scatterv, all_to_allv with uneven (and empty) counts. */
static dt_status check_v(dt_comm *c, uint64_t seed) {
    int n = dt_comm_size(c), me = dt_comm_rank(c), members[64];
    for (int j = 0; j < n; j++)
        members[j] = dt_comm_world_rank(c, j);
    const size_t scales[] = {1, 3000};
    for (int sc = 0; sc < 2; sc++) {
        for (int d = 0; d < NDT; d += 2) {
            dt_dtype dt = dtypes[d];
            size_t es = dt_dtype_size(dt), counts[64], total = 0;
            for (int j = 0; j < n; j++) {
                counts[j] = (size_t)((j * 5 + 3) % 4) * scales[sc] + (size_t)j;
                total += counts[j];
            }
            /* all_gatherv: rank j contributes counts[j] elements of its own series */
            char *in = malloc(counts[me] * es + 1), *out = malloc(total * es + 1);
            CHECK(in && out, "out of memory");
            fill(dt, in, counts[me], members[me], seed, DT_REDUCE_SUM);
            OK(dt_all_gatherv(c, in, out, counts, NULL, dt));
            size_t off = 0;
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < counts[j]; i++, off++)
                    CHECK(same_elem(dt, out, off, ival(members[j], i, seed, DT_REDUCE_SUM)),
                          "all_gatherv %s: block %d element %zu wrong", dt_dtype_name(dt), j, i);
            free(in);
            free(out);
            /* reduce_scatterv: everyone passes total elements; rank i gets block i reduced */
            for (int op = 0; op < DT_REDUCE_COUNT; op += 2) {
                in = malloc(total * es + 1);
                out = malloc(counts[me] * es + 1);
                CHECK(in && out, "out of memory");
                fill(dt, in, total, members[me], seed + 1, (dt_reduce_op)op);
                OK(dt_reduce_scatterv(c, in, out, counts, dt, (dt_reduce_op)op));
                size_t lo = 0;
                for (int j = 0; j < me; j++)
                    lo += counts[j];
                for (size_t i = 0; i < counts[me]; i++)
                    CHECK(same_elem(
                              dt, out, i,
                              reduce_expect((dt_reduce_op)op, dt, members, n, lo + i, seed + 1)),
                          "reduce_scatterv %s %s: element %zu wrong", dt_dtype_name(dt),
                          dt_reduce_op_name((dt_reduce_op)op), i);
                free(in);
                free(out);
                checks++;
            }
            /* all_to_allv: me sends (me*3 + j*5) % 4 * scale + 1 elements to j, value = ival
             * of series (me, j) */
            size_t sc_[64], rc_[64], st = 0, rt = 0;
            for (int j = 0; j < n; j++) {
                sc_[j] = (size_t)((me * 3 + j * 5) % 4) * scales[sc] + (j == me ? 0 : 1);
                rc_[j] = (size_t)((j * 3 + me * 5) % 4) * scales[sc] + (j == me ? 0 : 1);
                st += sc_[j];
                rt += rc_[j];
            }
            in = malloc(st * es + 1);
            out = malloc(rt * es + 1);
            CHECK(in && out, "out of memory");
            off = 0;
            for (int j = 0; j < n; j++) {
                fill(dt, in + off * es, sc_[j], members[me] * 100 + members[j], seed,
                     DT_REDUCE_SUM);
                off += sc_[j];
            }
            OK(dt_all_to_allv(c, in, sc_, NULL, out, rc_, NULL, dt));
            off = 0;
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < rc_[j]; i++, off++)
                    CHECK(same_elem(dt, out, off,
                                    ival(members[j] * 100 + members[me], i, seed, DT_REDUCE_SUM)),
                          "all_to_allv %s: from %d element %zu wrong", dt_dtype_name(dt), j, i);
            free(in);
            free(out);
            checks += 2;
        }
    }
    return DT_OK;
}

static dt_status check_misc(dt_comm *c, uint64_t seed) {
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    const size_t cnts[] = {0, 5, 100000};
    for (int s = 0; s < 3; s++) {
        size_t cnt = cnts[s];
        float *buf = malloc(cnt * 4 + 4);
        CHECK(buf, "out of memory");
        for (int root = 0; root < n; root++) {
            for (size_t i = 0; i < cnt; i++)
                buf[i] = me == root ? (float)(i % 1000 + root) : -1.f;
            OK(dt_broadcast(c, buf, cnt, DT_F32, root));
            for (size_t i = 0; i < cnt; i++)
                CHECK(buf[i] == (float)(i % 1000 + root),
                      "broadcast root %d count %zu: element "
                      "%zu is %g",
                      root, cnt, i, buf[i]);
            checks++;
        }
        /* equal-count forms */
        float *all = malloc(cnt * 4 * (size_t)n + 4), *one = malloc(cnt * 4 + 4);
        CHECK(all && one, "out of memory");
        for (size_t i = 0; i < cnt; i++)
            one[i] = (float)(me * 10 + (int)(i % 7));
        OK(dt_all_gather(c, one, all, cnt, DT_F32));
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < cnt; i++)
                CHECK(all[(size_t)j * cnt + i] == (float)(j * 10 + (int)(i % 7)),
                      "all_gather: rank %d element %zu", j, i);
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < cnt; i++)
                all[(size_t)j * cnt + i] = (float)(me * 100 + j);
        float *got = malloc(cnt * 4 * (size_t)n + 4);
        CHECK(got, "out of memory");
        OK(dt_all_to_all(c, all, got, cnt, DT_F32));
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < cnt; i++)
                CHECK(got[(size_t)j * cnt + i] == (float)(j * 100 + me), "all_to_all from %d", j);
        free(got);
        OK(dt_reduce_scatter(c, all, one, cnt, DT_F32, DT_REDUCE_SUM));
        float want = 0;
        for (int j = 0; j < n; j++)
            want += (float)(j * 100 + me);
        for (size_t i = 0; i < cnt; i++)
            CHECK(one[i] == want, "reduce_scatter element %zu", i);
        free(all);
        free(one);
        free(buf);
        checks += 3;
    }
    /* send/recv around the ring, even ranks first; several messages per pair stay in order */
    if (n > 1) {
        int right = (me + 1) % n, left = (me - 1 + n) % n;
        for (int k = 0; k < 3; k++) {
            int64_t v = me * 1000 + k, got = -1;
            if (me % 2 == 0) {
                OK(dt_send(c, &v, 1, DT_I64, right));
                OK(dt_recv(c, &got, 1, DT_I64, left));
            } else {
                OK(dt_recv(c, &got, 1, DT_I64, left));
                OK(dt_send(c, &v, 1, DT_I64, right));
            }
            CHECK(got == (int64_t)left * 1000 + k, "recv from %d: got %lld", left, (long long)got);
        }
        checks++;
    }
    (void)seed;
    OK(dt_barrier(c));
    return DT_OK;
}

static dt_status check_comm(dt_comm *c, uint64_t seed) {
    dt_status st;
    if ((st = check_all_reduce(c, seed)) != DT_OK) return st;
    if ((st = check_bits(c, seed)) != DT_OK) return st;
    if ((st = check_v(c, seed)) != DT_OK) return st;
    return check_misc(c, seed);
}

static dt_status mode_collectives(dt_ctx *ctx) {
    int me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    dt_comm *world, *c;
    OK(dt_ctx_world_comm(ctx, &world));
    dt_status st = check_comm(world, 1);
    if (st != DT_OK) return st;
    /* reversed order: group rank != world rank */
    int rev[64];
    for (int j = 0; j < n; j++)
        rev[j] = n - 1 - j;
    OK(dt_comm_create(ctx, rev, n, &c));
    st = check_comm(c, 2);
    dt_comm_destroy(c);
    if (st != DT_OK) return st;
    /* halves by parity (pairs on 4 ranks) and a group of three */
    if (n >= 4) {
        int half[32], k = 0;
        for (int j = me % 2; j < n; j += 2)
            half[k++] = j;
        OK(dt_comm_create(ctx, half, k, &c));
        st = check_comm(c, 3);
        dt_comm_destroy(c);
        if (st != DT_OK) return st;
        if (me < 3) {
            int three[3] = {2, 0, 1};
            OK(dt_comm_create(ctx, three, 3, &c));
            st = check_comm(c, 4);
            dt_comm_destroy(c);
            if (st != DT_OK) return st;
        }
    }
    int self = me;
    OK(dt_comm_create(ctx, &self, 1, &c));
    st = check_comm(c, 5);
    dt_comm_destroy(c);
    if (st != DT_OK) return st;
    OK(dt_barrier(world));
    printf("[ok] collectives: %ld checks on %d ranks, %ld hierarchical all_reduces\n", checks,
           n, dt_ucx_hier_runs(world));
    checks = 0;
    return DT_OK;
}

/* Distribute a full tensor, redistribute through a chain of placements (and once async), and
 * gather it back after each step: every result must equal the original exactly. */
static dt_status tensor_roundtrip(dt_ctx *ctx, const char *mesh_text, const char *const *chain,
                                  int nchain, int64_t d0, int64_t d1) {
    dt_mesh *mesh;
    OK(dt_mesh_create_str(ctx, mesh_text, &mesh));
    int mesh_ndim = dt_mesh_ndim(mesh);
    int64_t shape[2] = {d0, d1};
    size_t numel = (size_t)(d0 * d1);
    float *full = malloc(numel * 4), *back = malloc(numel * 4);
    CHECK(full && back, "out of memory");
    for (size_t i = 0; i < numel; i++)
        full[i] = (float)((int)(i * 37 % 201) - 100);
    dt_placement pl[8];
    int np;
    OK(dt_placements_parse(chain[0], pl, 8, &np));
    CHECK(np == mesh_ndim, "placements %s for a %d-D mesh", chain[0], mesh_ndim);
    dt_tensor *t;
    OK(dt_tensor_distribute(mesh, dt_mesh_rank(mesh) == 0 ? full : NULL, DT_F32, 2, shape, np, pl, 0,
                            &t));
    for (int k = 1; k <= nchain; k++) {
        const char *to = chain[k % nchain];
        OK(dt_placements_parse(to, pl, 8, &np));
        dt_tensor *u;
        if (k == 2) {
            dt_request *req;
            OK(dt_tensor_redistribute_async(t, np, pl, &req));
            OK(dt_request_wait(req, &u));
        } else {
            OK(dt_tensor_redistribute(t, np, pl, &u));
        }
        dt_tensor_release(t);
        t = u;
        memset(back, 0, numel * 4);
        OK(dt_tensor_full_tensor(t, back, numel * 4));
        for (size_t i = 0; i < numel; i++)
            CHECK(back[i] == full[i], "mesh %s, %s -> %s: element %zu is %g, expected %g",
                  mesh_text, chain[k - 1], to, i, back[i], full[i]);
        checks++;
    }
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    free(full);
    free(back);
    return DT_OK;
}

static dt_status mode_tensor(dt_ctx *ctx) {
    int n = dt_ctx_size(ctx);
    checks = 0;
    static const char *const chain1[] = {"S(0)",   "R", "S(1)",   "P(sum)", "S(0)",
                                         "P(max)", "R", "P(avg)", "S(1)"};
    char text[32];
    snprintf(text, sizeof text, "x=%d", n);
    dt_status st = tensor_roundtrip(ctx, text, chain1, 9, 7, 10);
    if (st == DT_OK) st = tensor_roundtrip(ctx, text, chain1, 9, 301, 257); /* ring sizes */
    if (st != DT_OK) return st;
    if (n == 4) {
        static const char *const chain2[] = {"S(0),S(1)",   "S(1),S(0)", "R,R",       "S(0),S(0)",
                                             "P(sum),S(1)", "R,P(sum)",  "S(1),S(1)", "R,S(0)"};
        st = tensor_roundtrip(ctx, "dp=2,tp=2", chain2, 8, 9, 6);
        if (st == DT_OK) st = tensor_roundtrip(ctx, "dp=2,tp=2", chain2, 8, 203, 129);
        if (st != DT_OK) return st;
    }
    printf("[ok] tensor: %ld round trips on %d ranks\n", checks, n);
    return DT_OK;
}

/* Ops over UCX: a tensor-parallel MLP issues exactly one all_reduce and matches the
 * unsharded computation; the same ops on sharded inputs equal them on replicated ones; and
 * non-blocking collectives keep their order of issue. */
static dt_status mode_ops(dt_ctx *ctx) {
    int n = dt_ctx_size(ctx);
    dt_mesh *mesh;
    char text[32];
    snprintf(text, sizeof text, "tp=%d", n);
    OK(dt_mesh_create_str(ctx, text, &mesh));
    int64_t xs[2] = {6, 8}, w1s[2] = {4 * n, 8}, w2s[2] = {8, 4 * n};
    float x[48], w1[64 * 8], w2[8 * 64], got[48], want[48];
    for (int i = 0; i < 48; i++) x[i] = (float)((i * 7) % 11 - 5) / 4;
    for (int i = 0; i < 4 * n * 8; i++) w1[i] = (float)((i * 5) % 9 - 4) / 8, w2[i] = (float)((i * 3) % 7 - 3) / 8;
    dt_placement col[1] = {dt_shard(0)}, row[1] = {dt_shard(1)}, rep[1] = {dt_replicate()};
    dt_tensor *tx, *a1, *a2, *r1, *r2, *h, *g, *o, *out;
    OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, DT_COUNT_OF(rep), rep, DT_ALL_RANKS, &tx));
    OK(dt_tensor_distribute(mesh, w1, DT_F32, 2, w1s, DT_COUNT_OF(col), col, DT_ALL_RANKS, &a1));
    OK(dt_tensor_distribute(mesh, w2, DT_F32, 2, w2s, DT_COUNT_OF(row), row, DT_ALL_RANKS, &a2));
    OK(dt_tensor_distribute(mesh, w1, DT_F32, 2, w1s, DT_COUNT_OF(rep), rep, DT_ALL_RANKS, &r1));
    OK(dt_tensor_distribute(mesh, w2, DT_F32, 2, w2s, DT_COUNT_OF(rep), rep, DT_ALL_RANKS, &r2));
    OK(dt_comm_stats_reset(ctx));
    OK(dt_linear(tx, a1, NULL, &h));
    OK(dt_unary_op(DT_OP_GELU, h, &g));
    OK(dt_linear(g, a2, NULL, &o));
    OK(dt_tensor_redistribute(o, DT_COUNT_OF(rep), rep, &out));
    dt_comm_stats st;
    OK(dt_comm_stats_get(ctx, &st));
    uint64_t total = 0;
    for (int k = 0; k < DT_COLL_KIND_COUNT; k++) total += st.calls[k];
    CHECK(st.calls[DT_COLL_ALL_REDUCE] == 1 && total == 1, "MLP forward: %llu collectives",
          (unsigned long long)total);
    OK(dt_tensor_full_tensor(out, got, sizeof got));
    dt_tensor *all[] = {h, g, o, out};
    for (int i = 0; i < 4; i++) dt_tensor_release(all[i]);
    OK(dt_linear(tx, r1, NULL, &h));
    OK(dt_unary_op(DT_OP_GELU, h, &g));
    OK(dt_linear(g, r2, NULL, &o));
    OK(dt_tensor_full_tensor(o, want, sizeof want));
    for (int i = 0; i < 48; i++)
        CHECK(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])), "MLP element %d: %g vs %g",
              i, got[i], want[i]);
    dt_tensor_release(h), dt_tensor_release(g), dt_tensor_release(o);
    /* softmax on a sharded dim and a sum over it: redistributed or Partial, same result */
    dt_tensor *sx, *sm, *rm, *ss, *rs;
    dt_placement s1[1] = {dt_shard(1)};
    OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, DT_COUNT_OF(s1), s1, DT_ALL_RANKS, &sx));
    OK(dt_softmax(sx, 1, &sm));
    OK(dt_softmax(tx, 1, &rm));
    int dims[1] = {1};
    OK(dt_reduce(DT_OP_SUM, sx, dims, 1, 0, &ss));
    OK(dt_reduce(DT_OP_SUM, tx, dims, 1, 0, &rs));
    OK(dt_tensor_full_tensor(sm, got, sizeof got));
    OK(dt_tensor_full_tensor(rm, want, sizeof want));
    for (int i = 0; i < 48; i++) CHECK(fabsf(got[i] - want[i]) <= 1e-6f, "softmax element %d", i);
    OK(dt_tensor_full_tensor(ss, got, 6 * sizeof(float)));
    OK(dt_tensor_full_tensor(rs, want, 6 * sizeof(float)));
    for (int i = 0; i < 6; i++) CHECK(fabsf(got[i] - want[i]) <= 1e-5f, "sum element %d", i);
    dt_tensor *more[] = {sx, sm, rm, ss, rs, tx, a1, a2, r1, r2};
    for (int i = 0; i < 10; i++) dt_tensor_release(more[i]);
    /* non-blocking collectives, then a blocking one on the same communicator */
    dt_comm *world;
    OK(dt_ctx_world_comm(ctx, &world));
    float one = 1, sum = 0, gathered[64], mx = 0;
    dt_request *q1, *q2;
    OK(dt_all_reduce_start(world, &one, &sum, 1, DT_F32, DT_REDUCE_SUM, &q1));
    OK(dt_all_gather_start(world, &one, gathered, 1, DT_F32, &q2));
    float mine = (float)dt_ctx_rank(ctx);
    OK(dt_all_reduce(world, &mine, &mx, 1, DT_F32, DT_REDUCE_MAX));
    CHECK(dt_request_test(q1) == 1, "a blocking collective overtook a request issued before it");
    OK(dt_request_wait(q1, NULL));
    OK(dt_request_wait(q2, NULL));
    CHECK(sum == (float)n && mx == (float)(n - 1) && gathered[n - 1] == 1, "non-blocking results");
    dt_mesh_release(mesh);
    printf("[ok] ops on %d ranks\n", n);
    return DT_OK;
}

dt_status ucx_host_pids(dt_ctx *ctx); /* ucx_host_pids.c */

static dt_status body(dt_ctx *ctx, void *arg) {
    const char *mode = arg;
    dt_status st;
    if (!strcmp(mode, "collectives")) return mode_collectives(ctx);
    if (!strcmp(mode, "tensor")) return mode_tensor(ctx);
    if (!strcmp(mode, "ops")) return mode_ops(ctx);
    if (!strcmp(mode, "all")) {
        if ((st = mode_collectives(ctx)) != DT_OK) return st;
        if ((st = mode_tensor(ctx)) != DT_OK) return st;
        return mode_ops(ctx);
    }
    if (!strcmp(mode, "shm")) return ucx_shm_checks(ctx);
    if (!strcmp(mode, "pids")) return ucx_host_pids(ctx);
    if (!strcmp(mode, "fault")) { /* the path the all_reduces that the kill interrupts take */
        dt_comm *world;
        dt_comm_stats s;
        float x = 1, y;
        OK(dt_ctx_world_comm(ctx, &world));
        OK(dt_all_reduce(world, &x, &y, 1, DT_F32, DT_REDUCE_SUM));
        OK(dt_comm_stats_get(ctx, &s));
        printf("fault: shm %s\n", s.shm_calls ? "on" : "off");
    }
    if (rank_fault_mode(mode)) return rank_fault_run(ctx, mode, NULL);
    FAIL("unknown mode %s", mode);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "all";
    dt_status st = dt_ucx_run(body, (void *)mode);
    if (rank_fault_mode(mode)) return rank_fault_judge(mode, st);
    if (st == DT_OK) return 0;
    fprintf(stderr, "dt_ucx_run: %s: %s\n", dt_status_str(st), dt_last_error());
    return 1;
}
