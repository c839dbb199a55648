/* Collectives of the local runtime against values computed independently in the test: every
 * collective, every dtype, every reduce op, on 1, 2, 3, 4, 6 and 8 ranks, on the world and on
 * subgroups, with uneven and empty counts, in place, and with mismatched arguments. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

static const size_t counts[] = {0, 1, 7, 1000, 70001};
#define NCOUNTS (sizeof counts / sizeof counts[0])

/* Values rank r contributes: small integers (|v| <= 16), or {-1, 1, 2} for prod, so every
 * reduction over <= 8 ranks is exact in every dtype. */
static double value(dt_reduce_op op, int r, size_t i) {
    double v = t_value((uint64_t)r * 7919 + 11, i);
    if (op == DT_REDUCE_PROD) return (double)((int64_t)(v + 16) % 3 == 0 ? -1 : (int64_t)(v + 16) % 3);
    return v;
}

static void fill(dt_reduce_op op, int r, dt_dtype dt, void *buf, size_t count) {
    for (size_t i = 0; i < count; i++) {
        double v = value(op, r, i);
        dt_convert_from_f64(dt, &v, (char *)buf + i * dt_dtype_size(dt), 1);
    }
}

/* The reduction of element i over world ranks members[0..n-1], in the dtype's arithmetic. */
static double expected(dt_reduce_op op, dt_dtype dt, const int *members, int n, size_t i) {
    double acc = value(op, members[0], i);
    for (int k = 1; k < n; k++) {
        double v = value(op, members[k], i);
        switch (op) {
        case DT_REDUCE_SUM:
        case DT_REDUCE_AVG: acc += v; break;
        case DT_REDUCE_PROD: acc *= v; break;
        case DT_REDUCE_MAX: acc = fmax(acc, v); break;
        case DT_REDUCE_MIN: acc = fmin(acc, v); break;
        default: break;
        }
    }
    if (op == DT_REDUCE_AVG) acc = (dt == DT_I32 || dt == DT_I64) ? trunc(acc / n) : acc / n;
    return acc;
}

/* Bitwise comparison of buf against the expected values converted to dt. */
static int same_as_expected(dt_reduce_op op, dt_dtype dt, const int *members, int n,
                            const void *buf, size_t lo, size_t count, size_t *bad) {
    size_t es = dt_dtype_size(dt);
    for (size_t i = 0; i < count; i++) {
        char want[8];
        double e = expected(op, dt, members, n, lo + i);
        dt_convert_from_f64(dt, &e, want, 1);
        if (memcmp(want, (const char *)buf + i * es, es) != 0) {
            *bad = lo + i;
            return 0;
        }
    }
    return 1;
}

static int world_members[DT_LOCAL_MAX_RANKS];

static dt_status all_reduce_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    for (int k = 0; k < n; k++) world_members[k] = k;
    for (int dt = 0; dt < T_NUMERIC_DTYPES; dt++)
        for (int op = 0; op < DT_REDUCE_COUNT; op++)
            for (size_t c = 0; c < NCOUNTS; c++) {
                size_t count = counts[c], es = dt_dtype_size((dt_dtype)dt), bad = 0;
                char *send = malloc(count * es + 1), *recv = malloc(count * es + 1);
                fill((dt_reduce_op)op, me, (dt_dtype)dt, send, count);
                R_OK(dt_all_reduce(world, send, recv, count, (dt_dtype)dt, (dt_reduce_op)op));
                int ok = same_as_expected((dt_reduce_op)op, (dt_dtype)dt, world_members, n, recv, 0,
                                          count, &bad);
                /* In place gives the same bits. */
                R_OK(dt_all_reduce(world, send, send, count, (dt_dtype)dt, (dt_reduce_op)op));
                int same = count == 0 || memcmp(send, recv, count * es) == 0;
                free(send);
                free(recv);
                R_CHECK(ok, "all_reduce %s %s count %zu: element %zu differs on rank %d",
                        dt_dtype_name((dt_dtype)dt), dt_reduce_op_name((dt_reduce_op)op), count,
                        bad, me);
                R_CHECK(same, "in-place all_reduce %s %s count %zu differs",
                        dt_dtype_name((dt_dtype)dt), dt_reduce_op_name((dt_reduce_op)op), count);
            }
    return DT_OK;
}

static const int rank_counts[] = {1, 2, 3, 4, 6, 8};

Test(collectives, all_reduce_every_dtype_op_and_size) {
    for (size_t i = 0; i < sizeof rank_counts / sizeof rank_counts[0]; i++)
        t_run(rank_counts[i], all_reduce_body, NULL);
}

/* Rank j contributes (j * 3 + 1) % 5 elements: uneven, with some ranks sending nothing. */
static size_t vcount(int j, size_t scale) { return (size_t)((j * 3 + 1) % 5) * scale; }

static dt_status gather_scatter_body(dt_ctx *ctx, void *arg) {
    size_t scale = *(size_t *)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    size_t *rc = malloc(sizeof(size_t) * (size_t)n), total = 0;
    for (int j = 0; j < n; j++) total += rc[j] = vcount(j, scale);
    for (int dt = 0; dt < T_NUMERIC_DTYPES; dt++) {
        size_t es = dt_dtype_size((dt_dtype)dt);
        char *send = malloc(total * es + 1), *recv = malloc(total * es + 1);
        /* all_gatherv: block j is rank j's data. */
        fill(DT_REDUCE_SUM, me, (dt_dtype)dt, send, rc[me]);
        R_OK(dt_all_gatherv(world, send, recv, rc, NULL, (dt_dtype)dt));
        size_t off = 0, bad;
        for (int j = 0; j < n; j++) {
            R_CHECK(same_as_expected(DT_REDUCE_SUM, (dt_dtype)dt, &j, 1, recv + off * es, 0, rc[j],
                                     &bad),
                    "all_gatherv %s: block of rank %d wrong at %zu", dt_dtype_name((dt_dtype)dt),
                    j, bad);
            off += rc[j];
        }
        /* all_gather in place: this rank's block already sits in recv. */
        size_t eq = scale * 3;
        char *g = malloc((size_t)n * eq * es + 1);
        fill(DT_REDUCE_SUM, me, (dt_dtype)dt, g + (size_t)me * eq * es, eq);
        R_OK(dt_all_gather(world, g + (size_t)me * eq * es, g, eq, (dt_dtype)dt));
        for (int j = 0; j < n; j++)
            R_CHECK(same_as_expected(DT_REDUCE_SUM, (dt_dtype)dt, &j, 1, g + (size_t)j * eq * es,
                                     0, eq, &bad),
                    "in-place all_gather %s: block %d wrong", dt_dtype_name((dt_dtype)dt), j);
        free(g);
        /* reduce_scatterv: rank me gets block me of the element-wise reduction. */
        for (int op = 0; op < DT_REDUCE_COUNT; op++) {
            fill((dt_reduce_op)op, me, (dt_dtype)dt, send, total);
            R_OK(dt_reduce_scatterv(world, send, recv, rc, (dt_dtype)dt, (dt_reduce_op)op));
            size_t lo = 0;
            for (int j = 0; j < me; j++) lo += rc[j];
            R_CHECK(same_as_expected((dt_reduce_op)op, (dt_dtype)dt, world_members, n, recv, lo,
                                     rc[me], &bad),
                    "reduce_scatterv %s %s wrong at %zu on rank %d", dt_dtype_name((dt_dtype)dt),
                    dt_reduce_op_name((dt_reduce_op)op), bad, me);
        }
        free(send);
        free(recv);
    }
    free(rc);
    return DT_OK;
}

Test(collectives, gather_and_reduce_scatter_uneven) {
    for (int k = 0; k < 8; k++) world_members[k] = k;
    size_t scales[] = {1, 5000};
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < sizeof rank_counts / sizeof rank_counts[0]; i++)
            t_run(rank_counts[i], gather_scatter_body, &scales[s]);
}

/* Rank r sends (r + 2j) % 4 * scale elements to rank j; element i of that message is
 * value(r * 64 + j, i), so the receiver knows what to expect from whom. */
static dt_status all_to_all_body(dt_ctx *ctx, void *arg) {
    size_t scale = *(size_t *)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    size_t *sc = malloc(sizeof(size_t) * (size_t)n), *rcn = malloc(sizeof(size_t) * (size_t)n);
    size_t st = 0, rt = 0;
    for (int j = 0; j < n; j++) {
        st += sc[j] = (size_t)((me + 2 * j) % 4) * scale;
        rt += rcn[j] = (size_t)((j + 2 * me) % 4) * scale;
    }
    for (int dt = 0; dt < T_NUMERIC_DTYPES; dt++) {
        size_t es = dt_dtype_size((dt_dtype)dt), off = 0, bad;
        char *send = malloc(st * es + 1), *recv = malloc(rt * es + 1);
        for (int j = 0; j < n; j++) {
            fill(DT_REDUCE_SUM, me * 64 + j, (dt_dtype)dt, send + off * es, sc[j]);
            off += sc[j];
        }
        R_OK(dt_all_to_allv(world, send, sc, NULL, recv, rcn, NULL, (dt_dtype)dt));
        off = 0;
        for (int j = 0; j < n; j++) {
            int src = j * 64 + me;
            R_CHECK(same_as_expected(DT_REDUCE_SUM, (dt_dtype)dt, &src, 1, recv + off * es, 0,
                                     rcn[j], &bad),
                    "all_to_allv %s: message from %d wrong at %zu", dt_dtype_name((dt_dtype)dt),
                    j, bad);
            off += rcn[j];
        }
        /* Equal counts. */
        size_t eq = scale + 1;
        char *s2 = malloc((size_t)n * eq * es), *r2 = malloc((size_t)n * eq * es);
        for (int j = 0; j < n; j++) fill(DT_REDUCE_SUM, me * 64 + j, (dt_dtype)dt, s2 + (size_t)j * eq * es, eq);
        R_OK(dt_all_to_all(world, s2, r2, eq, (dt_dtype)dt));
        for (int j = 0; j < n; j++) {
            int src = j * 64 + me;
            R_CHECK(same_as_expected(DT_REDUCE_SUM, (dt_dtype)dt, &src, 1, r2 + (size_t)j * eq * es,
                                     0, eq, &bad),
                    "all_to_all %s: block from %d wrong", dt_dtype_name((dt_dtype)dt), j);
        }
        free(s2);
        free(r2);
        free(send);
        free(recv);
    }
    free(sc);
    free(rcn);
    return DT_OK;
}

Test(collectives, all_to_allv_uneven) {
    size_t scales[] = {1, 3000};
    for (size_t s = 0; s < 2; s++)
        for (size_t i = 0; i < sizeof rank_counts / sizeof rank_counts[0]; i++)
            t_run(rank_counts[i], all_to_all_body, &scales[s]);
}

static dt_status broadcast_p2p_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    size_t count = 40000, bad;
    for (int dt = 0; dt < T_NUMERIC_DTYPES; dt++) {
        size_t es = dt_dtype_size((dt_dtype)dt);
        char *buf = malloc(count * es), *in = malloc(count * es);
        for (int root = 0; root < n; root++) {
            if (me == root) fill(DT_REDUCE_SUM, root, (dt_dtype)dt, buf, count);
            else memset(buf, 0x5a, count * es);
            R_OK(dt_broadcast(world, buf, count, (dt_dtype)dt, root));
            R_CHECK(same_as_expected(DT_REDUCE_SUM, (dt_dtype)dt, &root, 1, buf, 0, count, &bad),
                    "broadcast %s from %d wrong at %zu", dt_dtype_name((dt_dtype)dt), root, bad);
        }
        if (n > 1) { /* ring: even ranks send first, odd ranks receive first */
            int next = (me + 1) % n, prev = (me + n - 1) % n;
            fill(DT_REDUCE_SUM, 100 + me, (dt_dtype)dt, buf, count);
            if (me % 2 == 0) {
                R_OK(dt_send(world, buf, count, (dt_dtype)dt, next));
                R_OK(dt_recv(world, in, count, (dt_dtype)dt, prev));
            } else {
                R_OK(dt_recv(world, in, count, (dt_dtype)dt, prev));
                R_OK(dt_send(world, buf, count, (dt_dtype)dt, next));
            }
            int src = 100 + prev;
            R_CHECK(same_as_expected(DT_REDUCE_SUM, (dt_dtype)dt, &src, 1, in, 0, count, &bad),
                    "recv %s from %d wrong at %zu", dt_dtype_name((dt_dtype)dt), prev, bad);
        }
        free(buf);
        free(in);
    }
    /* Large messages: split between both threads on two ranks. */
    size_t big = (1u << 19) + 3;
    float *bb = malloc(big * sizeof *bb), *bin = malloc(big * sizeof *bin);
    for (size_t i = 0; i < big; i++) bb[i] = me == 0 ? (float)(i % 1000) : -1.0f;
    R_OK(dt_broadcast(world, bb, big, DT_F32, 0));
    for (size_t i = 0; i < big; i++) R_CHECK(bb[i] == (float)(i % 1000), "big broadcast %zu", i);
    if (n > 1 && me < 2) {
        if (me == 0) R_OK(dt_send(world, bb, big, DT_F32, 1));
        else R_OK(dt_recv(world, bin, big, DT_F32, 0));
        for (size_t i = 0; me == 1 && i < big; i++)
            R_CHECK(bin[i] == (float)(i % 1000), "big recv %zu", i);
    }
    free(bb);
    free(bin);
    /* Several messages between one pair arrive in order. */
    if (n > 1 && me < 2) {
        for (int64_t k = 0; k < 50; k++) {
            int64_t v = k * 3 + 1, got = -1;
            if (me == 0) R_OK(dt_send(world, &v, 1, DT_I64, 1));
            else {
                R_OK(dt_recv(world, &got, 1, DT_I64, 0));
                R_CHECK(got == v, "message %lld arrived as %lld", (long long)v, (long long)got);
            }
        }
    }
    R_OK(dt_barrier(world));
    return DT_OK;
}

Test(collectives, broadcast_send_recv) {
    for (size_t i = 0; i < sizeof rank_counts / sizeof rank_counts[0]; i++)
        t_run(rank_counts[i], broadcast_p2p_body, NULL);
}

/* Two disjoint subgroups (even and odd ranks) and one in reverse order, used interleaved. */
static dt_status subgroup_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    int half[DT_LOCAL_MAX_RANKS], nh = 0, rev[DT_LOCAL_MAX_RANKS];
    for (int r = me % 2; r < n; r += 2) half[nh++] = r;
    for (int r = 0; r < n; r++) rev[r] = n - 1 - r;
    dt_comm *parity, *reversed;
    R_OK(dt_comm_create(ctx, half, nh, &parity));
    R_OK(dt_comm_create(ctx, rev, n, &reversed));
    R_CHECK(dt_comm_rank(reversed) == n - 1 - me, "reversed group rank %d", dt_comm_rank(reversed));
    for (int dt = 0; dt < T_NUMERIC_DTYPES; dt++) {
        size_t count = 3001, es = dt_dtype_size((dt_dtype)dt), bad;
        char *s = malloc(count * es), *r = malloc(count * es), *g = malloc((size_t)n * count * es);
        fill(DT_REDUCE_MAX, me, (dt_dtype)dt, s, count);
        R_OK(dt_all_reduce(parity, s, r, count, (dt_dtype)dt, DT_REDUCE_MAX));
        R_CHECK(same_as_expected(DT_REDUCE_MAX, (dt_dtype)dt, half, nh, r, 0, count, &bad),
                "subgroup all_reduce %s wrong at %zu", dt_dtype_name((dt_dtype)dt), bad);
        R_OK(dt_all_gather(reversed, s, g, count, (dt_dtype)dt));
        for (int j = 0; j < n; j++)
            R_CHECK(same_as_expected(DT_REDUCE_SUM, (dt_dtype)dt, &rev[j], 1, g + (size_t)j * count * es,
                                     0, count, &bad),
                    "reversed all_gather block %d should come from rank %d", j, rev[j]);
        free(s);
        free(r);
        free(g);
    }
    R_OK(dt_comm_destroy(parity));
    R_OK(dt_comm_destroy(reversed));
    return DT_OK;
}

Test(collectives, subgroups) {
    for (size_t i = 0; i < sizeof rank_counts / sizeof rank_counts[0]; i++)
        t_run(rank_counts[i], subgroup_body, NULL);
}

/* Ranks that disagree on a collective's arguments all get DT_ERR_COMM, and the group stays
 * usable afterwards. */
static dt_status mismatch_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    float buf[64] = {0}, out[64 * 8];
    /* The fingerprints differ (the same pair is named whatever the order of arrival)... */
    R_ERR(dt_all_reduce(world, buf, out, me == 1 ? 5 : 4, DT_F32, DT_REDUCE_SUM), DT_ERR_COMM,
          "ranks disagree on its arguments: rank 0 is in all_reduce #1 (4 x f32, sum), rank 1 in "
          "all_reduce #1 (5 x f32, sum)");
    size_t rc[8];
    for (int j = 0; j < n; j++) rc[j] = (size_t)j + (me == 0 && j == 1);
    R_ERR(dt_all_gatherv(world, buf, out, rc, NULL, DT_F32), DT_ERR_COMM,
          "rank 0 is in all_gather #2 (4 x f32), rank 1 in all_gather #2 (3 x f32)");
    R_ERR(dt_reduce_scatterv(world, buf, out, rc, DT_F32, DT_REDUCE_SUM), DT_ERR_COMM,
          "rank 0 is in reduce_scatter #3 (4 x f32, sum), rank 1 in reduce_scatter #3 (3 x f32");
    R_ERR(dt_broadcast(world, buf, me == 0 ? 3 : 2, DT_F32, 0), DT_ERR_COMM,
          "rank 0 is in broadcast #4 (3 x f32, root 0), rank 1 in broadcast #4 (2 x f32, root 0)");
    R_ERR(dt_broadcast(world, buf, 2, DT_F32, me == 2 ? 1 : 0), DT_ERR_COMM,
          "rank 2 in broadcast #5 (2 x f32, root 1)");
    /* ... or only the per-rank counts do. */
    for (int j = 0; j < n; j++) rc[j] = (size_t)j;
    if (me == 0) rc[1] = 2, rc[2] = 1;
    R_ERR(dt_all_gatherv(world, buf, out, rc, NULL, DT_F32), DT_ERR_COMM, "recvcounts[1]");
    R_ERR(dt_reduce_scatterv(world, buf, out, rc, DT_F32, DT_REDUCE_SUM), DT_ERR_COMM,
          "recvcounts[1]");
    size_t sc[8], rcv[8];
    for (int j = 0; j < n; j++) sc[j] = rcv[j] = 1;
    if (me == 1) rcv[0] = 2;
    R_ERR(dt_all_to_allv(world, buf, sc, NULL, out, rcv, NULL, DT_F32), DT_ERR_COMM, "expects");
    if (me == 0) R_ERR(dt_send(world, buf, 3, DT_F32, 1), DT_ERR_COMM, "expects");
    if (me == 1) R_ERR(dt_recv(world, buf, 2, DT_F32, 0), DT_ERR_COMM, "expects");
    float one = 1, sum = 0;
    R_OK(dt_all_reduce(world, &one, &sum, 1, DT_F32, DT_REDUCE_SUM));
    R_CHECK(sum == (float)n, "group unusable after errors: sum %g", sum);
    return DT_OK;
}

Test(collectives, mismatched_arguments_fail_on_every_rank) { t_run(3, mismatch_body, NULL); }

static dt_status bad_args_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    float b[4];
    size_t c[2] = {1, 1};
    R_ERR(dt_all_reduce(NULL, b, b, 1, DT_F32, DT_REDUCE_SUM), DT_ERR_ARG, "comm");
    R_ERR(dt_all_reduce(world, b, b, 1, (dt_dtype)17, DT_REDUCE_SUM), DT_ERR_ARG, "dtype");
    R_ERR(dt_all_reduce(world, b, b, 1, DT_F32, (dt_reduce_op)9), DT_ERR_ARG, "op");
    R_ERR(dt_all_reduce(world, NULL, b, 1, DT_F32, DT_REDUCE_SUM), DT_ERR_ARG, "send");
    R_ERR(dt_all_gather(world, b, NULL, 1, DT_F32), DT_ERR_ARG, "recv");
    R_ERR(dt_all_gatherv(world, b, b, NULL, NULL, DT_F32), DT_ERR_ARG, "recvcounts");
    R_ERR(dt_reduce_scatterv(world, NULL, b, c, DT_F32, DT_REDUCE_SUM), DT_ERR_ARG, "send");
    R_ERR(dt_all_to_allv(world, b, NULL, NULL, b, c, NULL, DT_F32), DT_ERR_ARG, "sendcounts");
    R_ERR(dt_broadcast(world, b, 1, DT_F32, 2), DT_ERR_ARG, "root = 2");
    R_ERR(dt_broadcast(world, b, 1, DT_F32, -1), DT_ERR_ARG, "root = -1");
    R_ERR(dt_send(world, b, 1, DT_F32, dt_ctx_rank(ctx)), DT_ERR_ARG, "peer");
    R_ERR(dt_recv(world, b, 1, DT_F32, 5), DT_ERR_ARG, "peer = 5");
    R_ERR(dt_barrier(NULL), DT_ERR_ARG, "comm");
    R_ERR(dt_ctx_world_comm(NULL, &world), DT_ERR_ARG, "ctx");
    R_CHECK(dt_comm_rank(NULL) == -1 && dt_comm_size(NULL) == -1, "getters on NULL");
    R_CHECK(dt_comm_world_rank(world, 2) == -1, "world_rank out of range");
    /* Zero-count collectives with NULL buffers are fine. */
    R_OK(dt_all_reduce(world, NULL, NULL, 0, DT_F32, DT_REDUCE_SUM));
    return DT_OK;
}

Test(collectives, bad_arguments) { t_run(2, bad_args_body, NULL); }

/* Non-blocking collectives overlap local work and keep the order of issue per communicator,
 * blocking calls included. */
static dt_status async_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    const size_t count = 5000;
    float *s = malloc(count * n * sizeof *s), *ar = malloc(count * sizeof *ar);
    float *ag = malloc(count * n * sizeof *ag), *rs = malloc(count * sizeof *rs);
    float *a2a = malloc(count * n * sizeof *a2a), *sync = malloc(count * sizeof *sync);
    for (size_t i = 0; i < count * (size_t)n; i++) s[i] = (float)((int)(i % 17) + me);
    dt_request *r1, *r2, *r3, *r4;
    R_OK(dt_all_reduce_start(world, s, ar, count, DT_F32, DT_REDUCE_SUM, &r1));
    R_OK(dt_all_gather_start(world, s, ag, count, DT_F32, &r2));
    R_OK(dt_reduce_scatter_start(world, s, rs, count, DT_F32, DT_REDUCE_MAX, &r3));
    R_OK(dt_all_to_all_start(world, s, a2a, count, DT_F32, &r4));
    /* A blocking call while requests are pending waits its turn. */
    R_OK(dt_all_reduce(world, s, sync, count, DT_F32, DT_REDUCE_MIN));
    R_CHECK(dt_request_test(r1) == 1, "the blocking call ran before the request issued earlier");
    R_OK(dt_request_wait(r4, NULL));
    R_OK(dt_request_wait(r2, NULL));
    R_OK(dt_request_wait(r1, NULL));
    R_OK(dt_request_wait(r3, NULL));
    for (size_t i = 0; i < count; i++) {
        float base = (float)(int)(i % 17);
        R_CHECK(ar[i] == n * base + (float)(n * (n - 1) / 2), "all_reduce %zu", i);
        R_CHECK(sync[i] == base, "blocking min %zu", i);
        float rbase = (float)(int)((me * count + i) % 17);
        R_CHECK(rs[i] == rbase + (float)(n - 1), "reduce_scatter max %zu", i);
    }
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < count; i++) {
            R_CHECK(ag[j * count + i] == (float)((int)(i % 17) + j), "all_gather block %d", j);
            R_CHECK(a2a[j * count + i] == (float)((int)((me * count + i) % 17) + j),
                    "all_to_all block %d", j);
        }
    /* A failing request reports at the wait. */
    dt_request *bad;
    R_OK(dt_all_reduce_start(world, s, ar, me == 0 && n > 1 ? 3 : 4, DT_F32, DT_REDUCE_SUM, &bad));
    dt_status st = dt_request_wait(bad, NULL);
    R_CHECK(n == 1 ? st == DT_OK : st == DT_ERR_COMM, "mismatched request: %s", dt_status_str(st));
    R_ERR(dt_all_reduce_start(NULL, s, ar, 1, DT_F32, DT_REDUCE_SUM, &bad), DT_ERR_ARG, "comm");
    R_ERR(dt_all_gather_start(world, s, ag, 1, DT_F32, NULL), DT_ERR_ARG, "argument out");
    R_ERR(dt_request_wait(NULL, NULL), DT_ERR_ARG, "request");
    R_CHECK(dt_request_test(NULL) == -1, "test of NULL");
    free(s), free(ar), free(ag), free(rs), free(a2a), free(sync);
    return DT_OK;
}

Test(collectives, non_blocking_requests_keep_order) {
    for (size_t i = 0; i < 4; i++) t_run(rank_counts[i], async_body, NULL);
}
