/* The local runtime: dt_local_run's arguments and results, rank identity, user-made
 * communicators, and a barrier stress run. Failing and early-returning ranks are
 * test_runtime_faults.c, meshes test_mesh.c. */
#include <stdatomic.h>
#include <time.h>

#include "comm/flight.h"
#include "helpers.h"

#define MAXR 8 /* most ranks any test here runs */
/* One timeout for every test of the file (a hang becomes a failure): Criterion 2.4.1's runner
 * leaks a timer entry, which LeakSanitizer reports, when tests of one binary differ in it. */
#define TIMEOUT_S 60

/* ---- dt_local_run itself ------------------------------------------------------------------ */

static dt_status noop_body(dt_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return DT_OK;
}

Test(runtime, local_run_argument_errors) {
    dt_status st[2] = {(dt_status)99, (dt_status)99};
    T_ERR(dt_local_run(0, noop_body, NULL, st), DT_ERR_ARG, "nranks = 0");
    T_ERR(dt_local_run(-1, noop_body, NULL, st), DT_ERR_ARG, "nranks = -1");
    T_ERR(dt_local_run(DT_LOCAL_MAX_RANKS + 1, noop_body, NULL, st), DT_ERR_ARG, "nranks = 1025");
    T_ERR(dt_local_run(2, NULL, NULL, st), DT_ERR_ARG, "fn");
    cr_assert(st[0] == 99 && st[1] == 99, "rank_status_out written on failure");
    cr_assert_eq(dt_ctx_rank(NULL), -1);
    cr_assert_eq(dt_ctx_size(NULL), -1);
}

typedef struct ident_arg {
    int n;
    atomic_int seen[MAXR];
    t_rank_msgs m;
} ident_arg;

static dt_status ident_inner(dt_ctx *ctx, ident_arg *a) {
    const int me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    R_CHECK(n == a->n, "size %d, want %d", n, a->n);
    R_CHECK(me >= 0 && me < n, "rank %d", me);
    atomic_fetch_add(&a->seen[me], 1);
    dt_comm *w = T_SENTINEL(dt_comm *);
    R_ERR(dt_ctx_world_comm(NULL, &w), DT_ERR_ARG, "ctx");
    R_ERR(dt_ctx_world_comm(ctx, NULL), DT_ERR_ARG, "argument out");
    R_CHECK(w == T_SENTINEL(dt_comm *), "comm_out written on failure");
    R_OK(dt_ctx_world_comm(ctx, &w));
    R_CHECK(dt_comm_rank(w) == me && dt_comm_size(w) == n, "world comm %d/%d", dt_comm_rank(w),
            dt_comm_size(w));
    for (int i = 0; i < n; i++)
        R_CHECK(dt_comm_world_rank(w, i) == i, "world rank of %d", i);
    R_CHECK(dt_comm_world_rank(w, n) == -1, "world_rank(size)");
    int32_t v = me * 7, all[MAXR];
    R_OK(dt_barrier(w));
    R_OK(dt_all_gather(w, &v, all, 1, DT_I32));
    for (int i = 0; i < n; i++)
        R_CHECK(all[i] == i * 7, "all_gather[%d] = %d", i, all[i]);
    return DT_OK;
}

static dt_status ident_body(dt_ctx *ctx, void *arg) {
    return t_keep_msg(&((ident_arg *)arg)->m, ctx, ident_inner(ctx, arg));
}

Test(runtime, rank_and_size_on_1_to_8_ranks) {
    const int sizes[] = {1, 2, 3, 4, 6, 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        ident_arg a = {.n = sizes[k]};
        dt_status st[MAXR];
        for (int i = 0; i < MAXR; i++)
            st[i] = (dt_status)99;
        cr_assert_eq(dt_local_run(a.n, ident_body, &a, st), DT_OK, "%d ranks: %s", a.n,
                     dt_last_error());
        for (int i = 0; i < a.n; i++) {
            cr_assert_eq(st[i], DT_OK, "%d ranks, rank %d: %s", a.n, i, a.m.msg[i]);
            cr_assert_eq(atomic_load(&a.seen[i]), 1, "rank %d ran %d times", i,
                         atomic_load(&a.seen[i]));
        }
        for (int i = a.n; i < MAXR; i++)
            cr_assert_eq(st[i], 99, "rank_status_out[%d] written", i);
    }
}

static dt_status max_ranks_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_comm *w = NULL;
    R_OK(dt_ctx_world_comm(ctx, &w));
    R_CHECK(dt_ctx_size(ctx) == DT_LOCAL_MAX_RANKS, "size %d", dt_ctx_size(ctx));
    R_OK(dt_barrier(w));
    int64_t v = dt_ctx_rank(ctx), sum = 0;
    R_OK(dt_all_reduce(w, &v, &sum, 1, DT_I64, DT_REDUCE_SUM));
    R_CHECK(sum == (int64_t)DT_LOCAL_MAX_RANKS * (DT_LOCAL_MAX_RANKS - 1) / 2, "sum %lld",
            (long long)sum);
    return DT_OK;
}

Test(runtime, max_ranks, .timeout = TIMEOUT_S) {
    t_run(DT_LOCAL_MAX_RANKS, max_ranks_body, NULL);
}

/* Ranks 1, 4 fail with DT_ERR_SHAPE, 2, 5 with DT_ERR_DTYPE (no collectives, no aborts). */
static dt_status mixed_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int me = dt_ctx_rank(ctx);
    if (me % 3 == 1) return dt_error_set(DT_ERR_SHAPE, "shape trouble on %d", me);
    if (me % 3 == 2) return dt_error_set(DT_ERR_DTYPE, "dtype trouble on %d", me);
    return DT_OK;
}

/* A rank that fails without setting a message still gets one. */
static dt_status silent_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    return dt_ctx_rank(ctx) == 1 ? DT_ERR_DTYPE : DT_OK;
}

Test(runtime, rank_status_out_and_first_failure) {
    dt_status st[6];
    dt_status got = dt_local_run(6, mixed_body, NULL, st);
    for (int i = 0; i < 6; i++) {
        dt_status want = i % 3 == 1 ? DT_ERR_SHAPE : i % 3 == 2 ? DT_ERR_DTYPE : DT_OK;
        cr_assert_eq(st[i], want, "rank %d returned %s", i, dt_status_str(st[i]));
    }
    /* Which rank fails first is up to the scheduler; the result must name it consistently. */
    int r = -1;
    cr_assert_eq(sscanf(dt_last_error(), "rank %d: ", &r), 1, "message \"%s\"", dt_last_error());
    cr_assert(r >= 0 && r < 6 && st[r] != DT_OK, "message \"%s\"", dt_last_error());
    cr_assert_eq(got, st[r], "returned %s, but rank %d failed with %s", dt_status_str(got), r,
                 dt_status_str(st[r]));
    char want[64];
    snprintf(want, sizeof want, "rank %d: %s trouble on %d", r, r % 3 == 1 ? "shape" : "dtype", r);
    cr_assert_str_eq(dt_last_error(), want);

    T_ERR(dt_local_run(3, silent_body, NULL, st), DT_ERR_DTYPE, "rank 1: ");
    cr_assert(strstr(dt_last_error(), "DT_ERR_DTYPE"), "message \"%s\"", dt_last_error());
}

/* ---- User communicators ------------------------------------------------------------------- */

/* c must be the group ranks[0..n-1] and carry collectives correctly. */
static dt_status check_user_comm(dt_comm *c, const int *ranks, int n, int me) {
    int self = -1;
    int64_t sum = 0, max = -1;
    for (int i = 0; i < n; i++) {
        R_CHECK(dt_comm_world_rank(c, i) == ranks[i], "group rank %d is %d, want %d", i,
                dt_comm_world_rank(c, i), ranks[i]);
        if (ranks[i] == me) self = i;
        sum += ranks[i] + 1;
        if (ranks[i] > max) max = ranks[i];
    }
    R_CHECK(dt_comm_size(c) == n && dt_comm_rank(c) == self, "rank %d of %d, want %d of %d",
            dt_comm_rank(c), dt_comm_size(c), self, n);
    R_CHECK(dt_comm_world_rank(c, n) == -1 && dt_comm_world_rank(c, -1) == -1, "out of range");
    int64_t v = me + 1, out[MAXR], b = me == ranks[0] ? 4242 : -1;
    R_OK(dt_all_reduce(c, &v, out, 1, DT_I64, DT_REDUCE_SUM));
    R_CHECK(out[0] == sum, "sum %lld, want %lld", (long long)out[0], (long long)sum);
    v = me;
    R_OK(dt_all_reduce(c, &v, out, 1, DT_I64, DT_REDUCE_MAX));
    R_CHECK(out[0] == max, "max %lld, want %lld", (long long)out[0], (long long)max);
    R_OK(dt_all_gather(c, &v, out, 1, DT_I64));
    for (int i = 0; i < n; i++)
        R_CHECK(out[i] == ranks[i], "all_gather[%d] = %lld", i, (long long)out[i]);
    R_OK(dt_broadcast(c, &b, 1, DT_I64, 0));
    R_CHECK(b == 4242, "broadcast gave %lld", (long long)b);
    R_OK(dt_barrier(c));
    return DT_OK;
}

static dt_status user_comm_inner(dt_ctx *ctx) {
    const int me = dt_ctx_rank(ctx);
    const int parity[2][2] = {{0, 2}, {1, 3}}, reversed[4] = {3, 2, 1, 0};
    const int *mine = parity[me % 2];
    dt_comm *par = NULL, *rev = NULL, *a = NULL, *b = NULL, *swapped = NULL;
    R_OK(dt_comm_create(ctx, mine, 2, &par));
    R_OK(dt_comm_create(ctx, reversed, 4, &rev));
    R_OK(check_user_comm(par, mine, 2, me));
    R_OK(check_user_comm(rev, reversed, 4, me));
    /* The same pair in the other order is another group with other group ranks. */
    const int other[2] = {mine[1], mine[0]};
    R_OK(dt_comm_create(ctx, other, 2, &swapped));
    R_OK(check_user_comm(swapped, other, 2, me));

    /* The same list twice: two communicators, used interleaved, then one destroyed while the
     * other goes on (a shared group would be freed under it). */
    R_OK(dt_comm_create(ctx, reversed, 4, &a));
    R_OK(dt_comm_create(ctx, reversed, 4, &b));
    R_CHECK(a != b && a != rev, "same list, same handle");
    for (int it = 0; it < 20; it++) {
        int64_t x[3] = {me, it, 1}, y[3], z[5] = {1, 1, 1, 1, me}, w[5];
        R_OK(dt_all_reduce(a, x, y, 3, DT_I64, DT_REDUCE_SUM));
        R_OK(dt_all_reduce(b, z, w, 5, DT_I64, DT_REDUCE_MAX));
        R_CHECK(y[0] == 6 && y[1] == 4 * it && y[2] == 4, "a: %lld %lld %lld", (long long)y[0],
                (long long)y[1], (long long)y[2]);
        R_CHECK(w[0] == 1 && w[4] == 3, "b: %lld %lld", (long long)w[0], (long long)w[4]);
        R_OK(dt_barrier(it % 2 ? a : b));
    }
    R_OK(dt_comm_destroy(a));
    R_OK(check_user_comm(b, reversed, 4, me));
    R_OK(check_user_comm(rev, reversed, 4, me));

    dt_comm *c = T_SENTINEL(dt_comm *);
    int not_me[1] = {(me + 1) % 4}, twice[2] = {me, me}, beyond[2] = {me, 4}, neg[2] = {me, -1};
    char msg[64];
    snprintf(msg, sizeof msg, "calling rank %d is not in ranks", me);
    R_ERR(dt_comm_create(ctx, not_me, 1, &c), DT_ERR_ARG, msg);
    snprintf(msg, sizeof msg, "rank %d appears twice", me);
    R_ERR(dt_comm_create(ctx, twice, 2, &c), DT_ERR_ARG, msg);
    R_ERR(dt_comm_create(ctx, beyond, 2, &c), DT_ERR_ARG, "ranks[1] = 4");
    R_ERR(dt_comm_create(ctx, neg, 2, &c), DT_ERR_ARG, "ranks[1] = -1");
    R_ERR(dt_comm_create(ctx, reversed, 0, &c), DT_ERR_ARG, "n = 0");
    R_ERR(dt_comm_create(ctx, reversed, -3, &c), DT_ERR_ARG, "n = -3");
    R_ERR(dt_comm_create(ctx, (int[]){0, 1, 2, 3, 0}, 5, &c), DT_ERR_ARG, "n = 5");
    R_ERR(dt_comm_create(ctx, NULL, 2, &c), DT_ERR_ARG, "ranks");
    R_ERR(dt_comm_create(NULL, reversed, 4, &c), DT_ERR_ARG, "ctx");
    R_ERR(dt_comm_create(ctx, reversed, 4, NULL), DT_ERR_ARG, "argument out");
    R_CHECK(c == T_SENTINEL(dt_comm *), "comm_out written on failure");
    R_CHECK(dt_comm_rank(NULL) == -1 && dt_comm_size(NULL) == -1 &&
                dt_comm_world_rank(NULL, 0) == -1,
            "getters on a NULL comm");
    R_ERR(dt_barrier(NULL), DT_ERR_ARG, "comm");

    R_OK(dt_comm_destroy(b));
    R_OK(dt_comm_destroy(swapped));
    R_OK(dt_comm_destroy(rev));
    R_OK(dt_comm_destroy(par));
    R_OK(dt_comm_destroy(NULL));
    return DT_OK;
}

static dt_status user_comm_body(dt_ctx *ctx, void *arg) {
    return t_keep_msg(arg, ctx, user_comm_inner(ctx));
}

Test(runtime, user_communicators, .timeout = TIMEOUT_S) {
    t_rank_msgs m = {0};
    dt_status st[4];
    dt_status got = dt_local_run(4, user_comm_body, &m, st);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(st[i], DT_OK, "rank %d: %s", i, m.msg[i]);
    cr_assert_eq(got, DT_OK, "%s", dt_last_error());
}

/* ---- dt_comm_set_observer ----------------------------------------------------------------- */

typedef struct seen {
    int n, kinds[4], backward[4];
    size_t bytes_out;
    char op[4][16], module[4][16];
} seen;

/* Rank 1's events (the rank's thread, or its comm thread for the non-blocking call). */
static void on_event(void *user, const dt_comm_event *e) {
    seen *s = user;
    if (s->n < 4) {
        s->kinds[s->n] = (int)e->kind, s->backward[s->n] = e->backward;
        snprintf(s->op[s->n], sizeof s->op[0], "%s", e->op ? e->op : "-");
        snprintf(s->module[s->n], sizeof s->module[0], "%s", e->module ? e->module : "-");
    }
    s->n++, s->bytes_out += e->bytes_out;
}

static dt_status observer_body(dt_ctx *ctx, void *arg) {
    seen *s = arg;
    int me = dt_ctx_rank(ctx);
    dt_comm *w;
    R_OK(dt_ctx_world_comm(ctx, &w));
    R_ERR(dt_comm_set_observer(NULL, on_event, s), DT_ERR_ARG, "ctx");
    if (me == 1) R_OK(dt_comm_set_observer(ctx, on_event, s));
    int64_t x = me, y[2];
    R_OK(dt_all_reduce(w, &x, &x, 1, DT_I64, DT_REDUCE_SUM)); /* called directly */
    /* a non-blocking call runs on the comm thread with its issuer's op, module and phase */
    dt_comm_site prev = dt_comm_site_swap(
        (dt_comm_site){.caller = "matmul", .module = "layers.0.wq", .backward = 1});
    dt_request *r;
    dt_status st = dt_all_gather_start(w, &x, y, 1, DT_I64, &r);
    dt_comm_site_swap(prev);
    R_OK(st);
    R_OK(dt_request_wait(r, NULL));
    if (me == 1) R_OK(dt_comm_set_observer(ctx, NULL, NULL));
    R_OK(dt_barrier(w)); /* not observed */
    return DT_OK;
}

Test(runtime, comm_observer_sees_op_module_and_phase, .timeout = TIMEOUT_S) {
    seen s = {0};
    t_run(2, observer_body, &s);
    cr_assert_eq(s.n, 2, "%d events", s.n);
    cr_assert_eq(s.kinds[0], DT_COLL_ALL_REDUCE);
    cr_assert_str_eq(s.op[0], "-");
    cr_assert_str_eq(s.module[0], "-");
    cr_assert_eq(s.backward[0], 0);
    cr_assert_eq(s.kinds[1], DT_COLL_ALL_GATHER);
    cr_assert_str_eq(s.op[1], "matmul");
    cr_assert_str_eq(s.module[1], "layers.0.wq");
    cr_assert_eq(s.backward[1], 1);
    cr_assert_eq(s.bytes_out, 8 + 16, "%zu bytes out", s.bytes_out);
}

/* ---- Stress ------------------------------------------------------------------------------- */

static dt_status stress_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    const int me = dt_ctx_rank(ctx), n = dt_ctx_size(ctx);
    dt_comm *w = NULL;
    R_OK(dt_ctx_world_comm(ctx, &w));
    for (int it = 0; it < 2000; it++) {
        R_OK(dt_barrier(w));
        int64_t x[2] = {me, it}, y[2];
        R_OK(dt_all_reduce(w, x, y, 2, DT_I64, DT_REDUCE_SUM));
        R_CHECK(y[0] == n * (n - 1) / 2 && y[1] == (int64_t)n * it, "iteration %d: %lld %lld", it,
                (long long)y[0], (long long)y[1]);
    }
    return DT_OK;
}

Test(runtime, stress_2000_barriers_on_8_ranks, .timeout = TIMEOUT_S) {
    double t0 = t_now_s();
    t_run(8, stress_body, NULL);
    double dt = t_now_s() - t0;
    cr_assert_lt(dt, 10.0, "2000 barriers and all_reduces on 8 ranks took %.2f s", dt);
}

/* Many short runs one after another: contexts and groups are rebuilt and freed each time. */
Test(runtime, many_short_runs, .timeout = TIMEOUT_S) {
    for (int i = 0; i < 100; i++)
        t_run(1 + i % 8, ident_body, &(ident_arg){.n = 1 + i % 8});
}
