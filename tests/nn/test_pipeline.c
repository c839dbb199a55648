/* Pipeline parallelism (dtensor/pipeline.h) on real local ranks. The model: h = tanh(h @ W_k)
 * for k < L blocks, loss = mean((h - y)^2); stage s of p runs blocks [s L/p, (s+1) L/p) and the
 * last stage the loss. Invariants: the loss and every weight's gradient equal the unpipelined
 * model's on one rank (f64, to rounding) for p = 2 and 4, m = 1, 2, 4, 8, both schedules, and
 * pp with dp and tp; the schedules simulated against each other (blocking messages) never
 * deadlock and idle (p - 1) / (m + p - 1) of the step; the peak of micro-batches in flight
 * read from the tensor memory accounting is min(p - s, m) on stage s for 1F1B and m for AFAB;
 * a measured bubble with stages that sleep; the trace and the timeline page's stage rows. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

enum { B = 16, D = 6, L = 4 };

static double xs[B * D], ys[B * D], ws[L][D * D];
static double ref_loss, ref_grad[L][D * D];

static void data_init(void) {
    for (int i = 0; i < B * D; i++)
        xs[i] = 0.25 * t_value(1, (size_t)i), ys[i] = 0.05 * t_value(2, (size_t)i);
    for (int k = 0; k < L; k++)
        for (int i = 0; i < D * D; i++)
            ws[k][i] = 0.04 * t_value(10 + (uint64_t)k, (size_t)i);
}

/* Blocks [k0, k1) on h; with target, the loss. The same ops pipelined or not. */
static dt_status model(dt_tensor *h, dt_tensor **w, int k0, int k1, dt_tensor *target,
                       dt_tensor **out) {
    dt_tensor *cur = h;
    dt_tensor_retain(cur);
    for (int k = k0; k < k1; k++) {
        dt_tensor *mm, *t;
        R_OK(dt_mm(cur, w[k], &mm));
        R_OK(dt_tanh(mm, &t));
        dt_tensor_release(mm), dt_tensor_release(cur);
        cur = t;
    }
    if (target) {
        dt_tensor *diff, *sq, *loss;
        R_OK(dt_sub(cur, target, &diff));
        R_OK(dt_mul(diff, diff, &sq));
        R_OK(dt_mean(sq, NULL, 0, 0, &loss));
        dt_tensor_release(diff), dt_tensor_release(sq), dt_tensor_release(cur);
        cur = loss;
    }
    *out = cur;
    return DT_OK;
}

/* The unpipelined model on one rank. */
static dt_status ref_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "w=1", &mesh));
    dt_placement r = dt_replicate();
    int64_t sb[2] = {B, D}, sw[2] = {D, D};
    dt_tensor *x, *y, *w[L], *loss;
    R_OK(dt_tensor_distribute(mesh, xs, DT_F64, 2, sb, 1, &r, DT_ALL_RANKS, &x));
    R_OK(dt_tensor_distribute(mesh, ys, DT_F64, 2, sb, 1, &r, DT_ALL_RANKS, &y));
    for (int k = 0; k < L; k++) {
        R_OK(dt_tensor_distribute(mesh, ws[k], DT_F64, 2, sw, 1, &r, DT_ALL_RANKS, &w[k]));
        R_OK(dt_tensor_set_requires_grad(w[k], 1));
    }
    R_OK(model(x, w, 0, L, y, &loss));
    R_OK(dt_tensor_full_tensor(loss, &ref_loss, sizeof ref_loss));
    R_OK(dt_backward(loss));
    for (int k = 0; k < L; k++) {
        R_OK(dt_tensor_full_tensor(dt_tensor_grad(w[k]), ref_grad[k], sizeof ref_grad[k]));
        dt_tensor_release(w[k]);
    }
    dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(loss);
    dt_mesh_release(mesh);
    return DT_OK;
}

static void reference(void) {
    data_init();
    t_run(1, ref_body, NULL);
    cr_assert(ref_loss > 0, "the reference loss is %g", ref_loss);
}

/* One rank's part: its stage's weights and how its stage_fn behaves. */
typedef struct rank_state {
    dt_tensor *w[L];
    int sleep_ms; /* each forward sleeps this long (the measured bubble) */
} rank_state;

static dt_status stage_fn(void *user, const dt_pipeline_stage_call *c, dt_tensor **out) {
    rank_state *rs = user;
    int per = L / c->nstages;
    if (rs->sleep_ms) t_sleep_ms(rs->sleep_ms);
    return model(c->input, rs->w, c->stage * per, (c->stage + 1) * per, c->target, out);
}

/* Placements on a stage mesh: the batch S(0) over dp; weights alternately column- and
 * row-parallel over tp (so some stages hand a Partial tensor on), replicated elsewhere. */
static void placements(dt_mesh *m, int weight, int k, dt_placement *pl) {
    for (int d = 0; d < dt_mesh_ndim(m); d++) {
        const char *n = dt_mesh_dim_name(m, d);
        pl[d] = dt_replicate();
        if (!weight && !strcmp(n, "dp")) pl[d] = dt_shard(0);
        if (weight && !strcmp(n, "tp")) pl[d] = dt_shard(k % 2 ? 0 : 1);
    }
}

/* This rank's weights, and the batch on stage 0 (inputs) and the last stage (targets). */
static dt_status make_stage(dt_pipeline *pl, rank_state *rs, dt_tensor **x, dt_tensor **y) {
    dt_mesh *m = dt_pipeline_stage_mesh(pl);
    int s = dt_pipeline_stage(pl), p = dt_pipeline_nstages(pl), per = L / p, nd = dt_mesh_ndim(m);
    int64_t sb[2] = {B, D}, sw[2] = {D, D};
    dt_placement pw[DT_MESH_MAX_NDIM], pb[DT_MESH_MAX_NDIM];
    for (int k = s * per; k < (s + 1) * per; k++) {
        placements(m, 1, k, pw);
        R_OK(dt_tensor_distribute(m, ws[k], DT_F64, 2, sw, nd, pw, DT_ALL_RANKS, &rs->w[k]));
        R_OK(dt_tensor_set_requires_grad(rs->w[k], 1));
    }
    placements(m, 0, 0, pb);
    *x = *y = NULL;
    if (s == 0) R_OK(dt_tensor_distribute(m, xs, DT_F64, 2, sb, nd, pb, DT_ALL_RANKS, x));
    if (s == p - 1) R_OK(dt_tensor_distribute(m, ys, DT_F64, 2, sb, nd, pb, DT_ALL_RANKS, y));
    return DT_OK;
}

static void free_stage(rank_state *rs, dt_tensor *x, dt_tensor *y) {
    for (int k = 0; k < L; k++)
        dt_tensor_release(rs->w[k]), rs->w[k] = NULL;
    dt_tensor_release(x), dt_tensor_release(y);
}

static int close_to(double a, double b) {
    return fabs(a - b) <= 1e-12 * (1 + fabs(b));
}

/* ---- the loss and gradients equal the unpipelined model's ------------------------------- */
static dt_status equal_body(dt_ctx *ctx, void *arg) {
    (void)ctx;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, (const char *)arg, &mesh));
    int pp;
    R_OK(dt_mesh_dim_index(mesh, "pp", &pp));
    const int micros[4] = {1, 2, 4, 8};
    for (int sched = 0; sched < DT_PIPELINE_SCHEDULE_COUNT; sched++) {
        for (int mi = 0; mi < 4; mi++) {
            rank_state rs = {0};
            dt_pipeline_config cfg = {.pp_dim = pp,
                                      .nmicro = micros[mi],
                                      .schedule = (dt_pipeline_schedule)sched,
                                      .loss_reduction = DT_REDUCTION_MEAN,
                                      .stage_fn = stage_fn,
                                      .user = &rs};
            dt_pipeline *pl;
            R_OK(dt_pipeline_create(mesh, &cfg, &pl));
            dt_tensor *x, *y;
            R_OK(make_stage(pl, &rs, &x, &y));
            double loss = -1;
            /* Two steps: gradients accumulate, so the second leaves twice the gradient. */
            for (int rep = 1; rep <= 2; rep++) {
                R_OK(dt_pipeline_step(pl, x, y, &loss));
                R_CHECK(close_to(loss, ref_loss), "%s, %s, m = %d: loss %.17g, want %.17g",
                        (const char *)arg, dt_pipeline_schedule_name(cfg.schedule), cfg.nmicro,
                        loss, ref_loss);
                for (int k = 0; k < L; k++) {
                    if (!rs.w[k]) continue;
                    double g[D * D];
                    dt_tensor *gt = dt_tensor_grad(rs.w[k]);
                    R_CHECK(gt, "W%d has no gradient", k);
                    dt_tensor_info info;
                    R_OK(dt_tensor_info_get(gt, &info));
                    dt_placement want[DT_MESH_MAX_NDIM];
                    placements(info.mesh, 1, k, want);
                    for (int d = 0; d < info.mesh_ndim; d++)
                        R_CHECK(dt_placement_equal(info.placements[d], want[d]),
                                "dW%d is not in W%d's placements on mesh dim %d", k, k, d);
                    R_OK(dt_tensor_full_tensor(gt, g, sizeof g));
                    for (int i = 0; i < D * D; i++)
                        R_CHECK(close_to(g[i], rep * ref_grad[k][i]),
                                "%s, %s, m = %d, step %d: dW%d[%d] = %.17g, want %.17g",
                                (const char *)arg, dt_pipeline_schedule_name(cfg.schedule),
                                cfg.nmicro, rep, k, i, g[i], rep * ref_grad[k][i]);
                }
            }
            free_stage(&rs, x, y);
            R_OK(dt_pipeline_destroy(pl));
        }
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(pipeline, pp2_equals_unpipelined) {
    reference();
    t_run(2, equal_body, "pp=2,dp=1");
}
Test(pipeline, pp4_equals_unpipelined) {
    reference();
    t_run(4, equal_body, "pp=4,dp=1");
}
Test(pipeline, pp2_dp2_equals_unpipelined) {
    reference();
    t_run(4, equal_body, "pp=2,dp=2");
}
Test(pipeline, pp2_tp2_equals_unpipelined) {
    reference();
    t_run(4, equal_body, "pp=2,tp=2");
}
Test(pipeline, dp2_pp2_tp2_equals_unpipelined) {
    reference();
    t_run(8, equal_body, "dp=2,pp=2,tp=2");
}

/* ---- the schedules as data, simulated against each other ---------------------------------
 * Every stage runs its list; a send completes with the matching receive at the head of the
 * peer's list, at the later of their clocks (blocking messages, as dt_send's); forwards take
 * tf and backwards tb. No deadlock, messages pair up (activation with activation, gradient
 * with gradient, the same micro-batch), each micro-batch runs forward then backward once,
 * and every stage idles (p - 1) / (m + p - 1) of the step. */
enum { PMAX = 8, MMAX = 16 };

static int is_send(dt_pipeline_op op) {
    return op == DT_PIPE_SEND_ACT || op == DT_PIPE_SEND_GRAD;
}
static int is_comm(dt_pipeline_op op) {
    return op >= DT_PIPE_SEND_ACT;
}

static void simulate(dt_pipeline_schedule sched, int p, int m, double tf, double tb) {
    dt_pipeline_action a[PMAX][6 * MMAX];
    int n[PMAX], pc[PMAX] = {0};
    double clock[PMAX] = {0}, busy[PMAX] = {0};
    for (int s = 0; s < p; s++) {
        cr_assert_eq(dt_pipeline_schedule_build(sched, p, 1, m, s, a[s], 6 * MMAX, &n[s]), DT_OK, "%s",
                     dt_last_error());
        int fwd[MMAX] = {0}, bwd[MMAX] = {0};
        for (int k = 0; k < n[s]; k++) {
            int i = a[s][k].micro;
            if (a[s][k].op == DT_PIPE_FORWARD) fwd[i]++;
            if (a[s][k].op == DT_PIPE_BACKWARD)
                cr_assert(fwd[i] == 1 && bwd[i]++ == 0, "%s p=%d m=%d stage %d: B%d",
                          dt_pipeline_schedule_name(sched), p, m, s, i);
        }
        for (int i = 0; i < m; i++)
            cr_assert(fwd[i] == 1 && bwd[i] == 1, "stage %d micro %d", s, i);
    }
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < p; r++) {
            while (pc[r] < n[r]) {
                dt_pipeline_action x = a[r][pc[r]];
                if (!is_comm(x.op)) {
                    double t = x.op == DT_PIPE_FORWARD ? tf : tb;
                    clock[r] += t, busy[r] += t, pc[r]++, progress = 1;
                    continue;
                }
                int q = x.peer;
                if (pc[q] >= n[q]) break;
                dt_pipeline_action y = a[q][pc[q]];
                if (!is_comm(y.op) || y.peer != r || is_send(y.op) == is_send(x.op)) break;
                dt_pipeline_action snd = is_send(x.op) ? x : y, rcv = is_send(x.op) ? y : x;
                cr_assert(
                    snd.micro == rcv.micro &&
                        (snd.op == DT_PIPE_SEND_ACT) == (rcv.op == DT_PIPE_RECV_ACT),
                    "%s p=%d m=%d: stage %d's op %d (micro %d) meets stage %d's op %d (micro %d)",
                    dt_pipeline_schedule_name(sched), p, m, r, x.op, x.micro, q, y.op, y.micro);
                double t = clock[r] > clock[q] ? clock[r] : clock[q];
                clock[r] = clock[q] = t;
                pc[r]++, pc[q]++, progress = 1;
            }
        }
    }
    double T = 0;
    for (int s = 0; s < p; s++) {
        cr_assert(pc[s] == n[s], "%s p=%d m=%d deadlocks: stage %d stops at action %d of %d",
                  dt_pipeline_schedule_name(sched), p, m, s, pc[s], n[s]);
        if (clock[s] > T) T = clock[s];
    }
    double want = (double)(p - 1) / (m + p - 1);
    for (int s = 0; s < p; s++)
        cr_assert(fabs((1 - busy[s] / T) - want) < 1e-12,
                  "%s p=%d m=%d tf=%g tb=%g: stage %d idles %.6f of the step, want %.6f",
                  dt_pipeline_schedule_name(sched), p, m, tf, tb, s, 1 - busy[s] / T, want);
}

Test(pipeline, schedules_never_deadlock_and_idle_the_bubble) {
    const double costs[3][2] = {{1, 2}, {1, 1}, {1, 0}};
    for (int sched = 0; sched < DT_PIPELINE_SCHEDULE_COUNT; sched++)
        for (int p = 1; p <= PMAX; p++)
            for (int m = 1; m <= MMAX; m++)
                for (int c = 0; c < 3; c++)
                    simulate((dt_pipeline_schedule)sched, p, m, costs[c][0], costs[c][1]);
}

/* ---- micro-batches in flight, from the tensor memory accounting --------------------------
 * Between actions a rank holds its parameters, their gradients and the micro-batches in
 * flight; one micro-batch's share is what the first forward added. The most bytes held
 * between actions, in those shares, is min(p - s, m) on stage s for 1F1B and m for AFAB. */
static dt_status memory_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "pp=4,dp=1", &mesh));
    const int m = 8;
    for (int sched = 0; sched < DT_PIPELINE_SCHEDULE_COUNT; sched++) {
        rank_state rs = {0};
        dt_pipeline_config cfg = {.pp_dim = 0,
                                  .nmicro = m,
                                  .schedule = (dt_pipeline_schedule)sched,
                                  .loss_reduction = DT_REDUCTION_MEAN,
                                  .stage_fn = stage_fn,
                                  .user = &rs};
        dt_pipeline *pl;
        R_OK(dt_pipeline_create(mesh, &cfg, &pl));
        dt_tensor *x, *y;
        R_OK(make_stage(pl, &rs, &x, &y));
        R_OK(dt_pipeline_step(pl, x, y, NULL)); /* makes the gradients */
        R_OK(dt_pipeline_step(pl, x, y, NULL));
        dt_pipeline_stats st;
        R_OK(dt_pipeline_stats_get(pl, &st));
        int s = dt_pipeline_stage(pl), p = dt_pipeline_nstages(pl);
        int64_t share = -1, most = 0, end = 0;
        for (int i = 0; i < st.nrecords; i++) {
            dt_pipeline_record r;
            R_OK(dt_pipeline_record_get(pl, i, &r));
            int64_t held = r.live_bytes - st.start_bytes;
            if (r.action.op == DT_PIPE_FORWARD && r.action.micro == 0) share = held;
            if (held > most) most = held;
            end = held;
        }
        int want = sched != DT_PIPELINE_AFAB ? (p - s < m ? p - s : m) : m;
        R_CHECK(share > 0, "stage %d: the first forward added %lld bytes", s, (long long)share);
        R_CHECK(most / share == want && st.peak_inflight == want,
                "%s stage %d: %lld bytes at the most, %lld per micro-batch: %lld micro-batches "
                "(the schedule says %d), want %d",
                dt_pipeline_schedule_name(cfg.schedule), s, (long long)most, (long long)share,
                (long long)(most / share), st.peak_inflight, want);
        R_CHECK(end == 0, "stage %d: %lld bytes more after the step than before", s,
                (long long)end);
        free_stage(&rs, x, y);
        R_OK(dt_pipeline_destroy(pl));
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(pipeline, live_micro_batches_1f1b_p_afab_m) {
    data_init();
    t_run(4, memory_body, NULL);
}

/* ---- the measured bubble ------------------------------------------------------------------
 * Stages whose forward sleeps 5 ms (20 ms with DT_PIPE_BUBBLE=1), so that the threads need no
 * core while busy; backward is small.
 * All ranks start together (a barrier); a stage idles 1 - busy / T of the step, T the longest
 * rank's step. Always checked (a loaded machine cannot break these): each rank ran its
 * schedule's actions in order, each forward slept, busy + idle is the step, the records are
 * in time order. The exact fractions are the simulation's above; the measured one depends on
 * how late sleeping threads wake, so it is compared with (p - 1) / (m + p - 1) within
 * DT_PIPE_BUBBLE_TOL (default 0.1) only with DT_PIPE_BUBBLE=1 (on a loaded 2-core machine
 * each hand-off can wait a millisecond for its thread to wake, and a sleep oversleeps).
 * DT_PIPE_BUBBLE_PRINT=1 prints the fractions. */
static dt_status bubble_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "pp=4,dp=1", &mesh));
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    const char *tol_env = getenv("DT_PIPE_BUBBLE_TOL"), *on = getenv("DT_PIPE_BUBBLE");
    double tol = tol_env ? atof(tol_env) : 0.1;
    int compare = on && atoi(on);
    const int micros[2] = {4, 8};
    for (int sched = 0; sched < DT_PIPELINE_SCHEDULE_COUNT; sched++) {
        for (int mi = 0; mi < 2; mi++) {
            rank_state rs = {.sleep_ms = compare ? 20 : 5};
            int m = micros[mi];
            dt_pipeline_config cfg = {.pp_dim = 0,
                                      .nmicro = m,
                                      .schedule = (dt_pipeline_schedule)sched,
                                      .loss_reduction = DT_REDUCTION_MEAN,
                                      .stage_fn = stage_fn,
                                      .user = &rs};
            dt_pipeline *pl;
            R_OK(dt_pipeline_create(mesh, &cfg, &pl));
            dt_tensor *x, *y;
            R_OK(make_stage(pl, &rs, &x, &y));
            R_OK(dt_barrier(world));
            R_OK(dt_pipeline_step(pl, x, y, NULL));
            dt_pipeline_stats st;
            R_OK(dt_pipeline_stats_get(pl, &st));
            int p = dt_pipeline_nstages(pl), s = dt_pipeline_stage(pl), n;
            const char *name = dt_pipeline_schedule_name(cfg.schedule);
            dt_pipeline_action want_a[6 * 8];
            R_OK(dt_pipeline_schedule_build(cfg.schedule, p, 1, m, s, want_a, 6 * 8, &n));
            R_CHECK(st.nrecords == n, "%s m = %d stage %d: %d records, %d actions", name, m, s,
                    st.nrecords, n);
            double busy = 0, prev_end = 0;
            for (int i = 0; i < n; i++) {
                dt_pipeline_record r;
                R_OK(dt_pipeline_record_get(pl, i, &r));
                R_CHECK(r.action.op == want_a[i].op && r.action.micro == want_a[i].micro &&
                            r.action.peer == want_a[i].peer,
                        "%s m = %d stage %d: record %d is not the schedule's action", name, m, s,
                        i);
                R_CHECK(r.start_us >= prev_end && r.end_us >= r.start_us, "record %d's times", i);
                prev_end = r.end_us;
                if (r.action.op == DT_PIPE_FORWARD)
                    R_CHECK(r.end_us - r.start_us >= rs.sleep_ms * 1e3,
                            "forward %d took %.0f us, under %d ms", r.action.micro,
                            r.end_us - r.start_us, rs.sleep_ms);
                if (r.action.op <= DT_PIPE_BACKWARD) busy += r.end_us - r.start_us;
            }
            R_CHECK(fabs(busy - st.busy_us) <= 1e-6 * st.step_us + 1 && st.step_us >= prev_end &&
                        fabs(st.busy_us + st.idle_us - st.step_us) <= 1e-6 * st.step_us,
                    "stage %d: busy %.0f (records %.0f) + idle %.0f != step %.0f us", s, st.busy_us,
                    busy, st.idle_us, st.step_us);
            double T;
            R_OK(dt_all_reduce(world, &st.step_us, &T, 1, DT_F64, DT_REDUCE_MAX));
            double want = (double)(p - 1) / (m + p - 1), got = 1 - st.busy_us / T;
            R_CHECK(!compare || fabs(got - want) <= tol,
                    "%s m = %d stage %d: busy %.0f us of %.0f: idle %.3f, want %.3f +- %.2f", name,
                    m, s, st.busy_us, T, got, want, tol);
            if (getenv("DT_PIPE_BUBBLE_PRINT"))
                printf("bubble %s m=%d stage %d: %.3f (want %.3f)\n", name, m, s, got, want);
            free_stage(&rs, x, y);
            R_OK(dt_pipeline_destroy(pl));
        }
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(pipeline, measured_bubble_matches_the_formula) {
    data_init();
    t_run(4, bubble_body, NULL);
}

/* ---- the trace and the timeline page ------------------------------------------------------ */
static char trace_dir[64];

static dt_status trace_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "pp=2,dp=1", &mesh));
    rank_state rs = {.sleep_ms = 2};
    dt_pipeline_config cfg = {.pp_dim = 0,
                              .nmicro = 4,
                              .schedule = DT_PIPELINE_1F1B,
                              .loss_reduction = DT_REDUCTION_MEAN,
                              .stage_fn = stage_fn,
                              .user = &rs};
    dt_pipeline *pl;
    R_OK(dt_pipeline_create(mesh, &cfg, &pl));
    dt_tensor *x, *y;
    R_OK(make_stage(pl, &rs, &x, &y));
    R_OK(dt_trace_start(ctx));
    R_OK(dt_pipeline_step(pl, x, y, NULL));
    R_OK(dt_trace_stop(ctx));
    char path[128];
    snprintf(path, sizeof path, "%s/rank%d.json", trace_dir, dt_ctx_rank(ctx));
    R_OK(dt_trace_write(ctx, path));
    free_stage(&rs, x, y);
    R_OK(dt_pipeline_destroy(pl));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(pipeline, trace_and_timeline_show_stages) {
    data_init();
    snprintf(trace_dir, sizeof trace_dir, "/tmp/dt_pipe_trace.XXXXXX");
    cr_assert(mkdtemp(trace_dir));
    t_run(2, trace_body, NULL);
    char *json, *page;
    t_trace_page(trace_dir, 2, &json, &page);
    /* Each stage: 4 forwards and 4 backwards, each span naming its stage and micro-batch. */
    t_assert_pipeline_spans(json, page, 2, 4);
    cr_assert(strstr(json, "\"name\":\"pipeline\""), "the trace names the pipeline row");
    cr_assert(strstr(page, "id=\"pipeline\"") && strstr(page, "stage 0 (rank 0)") &&
                  strstr(page, "stage 1 (rank 1)"),
              "the page's stage rows");
    cr_assert_eq(t_count(page, "class=\"span pf\""), 8);
    cr_assert_eq(t_count(page, "class=\"span pb\""), 8);
    /* Stage 1 waits for stage 0's first forward; stage 0 for stage 1's first backward. */
    cr_assert(strstr(page, "stage 1 idle before micro 0 forward"), "stage 1's first idle span");
    cr_assert(strstr(page, "stage 0 idle before micro 0 backward"), "stage 0's bubble");
    cr_assert_eq(t_count(page, "<tr class=\"stage\">"), 2);
    free(json), free(page);
}

/* ---- bad input ----------------------------------------------------------------------------- */
static dt_status errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh, *flat;
    R_OK(dt_mesh_create_str(ctx, "pp=2,dp=1", &mesh));
    R_OK(dt_mesh_create_str(ctx, "pp=2", &flat));
    rank_state rs = {0};
    dt_pipeline_config good = {.pp_dim = 0,
                               .nmicro = 4,
                               .schedule = DT_PIPELINE_1F1B,
                               .loss_reduction = DT_REDUCTION_MEAN,
                               .stage_fn = stage_fn,
                               .user = &rs},
                       c;
    dt_pipeline *pl = T_SENTINEL(dt_pipeline *);
    c = good, c.pp_dim = 2;
    R_ERR(dt_pipeline_create(mesh, &c, &pl), DT_ERR_ARG, "config->pp_dim = 2");
    c = good, c.pp_dim = -1;
    R_ERR(dt_pipeline_create(mesh, &c, &pl), DT_ERR_ARG, "config->pp_dim = -1");
    c = good, c.nmicro = 0;
    R_ERR(dt_pipeline_create(mesh, &c, &pl), DT_ERR_ARG, "config->nmicro = 0");
    c = good, c.schedule = (dt_pipeline_schedule)7;
    R_ERR(dt_pipeline_create(mesh, &c, &pl), DT_ERR_ARG, "config->schedule = 7");
    c = good, c.loss_reduction = DT_REDUCTION_NONE;
    R_ERR(dt_pipeline_create(mesh, &c, &pl), DT_ERR_ARG, "config->loss_reduction");
    c = good, c.stage_fn = NULL;
    R_ERR(dt_pipeline_create(mesh, &c, &pl), DT_ERR_ARG, "config->stage_fn");
    R_ERR(dt_pipeline_create(flat, &good, &pl), DT_ERR_ARG, "only the pp dim");
    R_ERR(dt_pipeline_create(NULL, &good, &pl), DT_ERR_ARG, "mesh");
    R_CHECK(pl == T_SENTINEL(dt_pipeline *), "out set on failure");
    int n = -5;
    R_ERR(dt_pipeline_schedule_build((dt_pipeline_schedule)9, 2, 1, 4, 0, NULL, 0, &n), DT_ERR_ARG,
          "schedule = 9");
    R_ERR(dt_pipeline_schedule_build(DT_PIPELINE_AFAB, 2, 1, 0, 0, NULL, 0, &n), DT_ERR_ARG,
          "nmicro = 0");
    R_ERR(dt_pipeline_schedule_build(DT_PIPELINE_AFAB, 2, 1, 4, 2, NULL, 0, &n), DT_ERR_ARG,
          "stage = 2");
    dt_pipeline_action few[3];
    R_ERR(dt_pipeline_schedule_build(DT_PIPELINE_AFAB, 2, 1, 4, 0, few, 3, &n), DT_ERR_ARG, "cap = 3");
    R_CHECK(n == -5, "n_out set on failure");
    /* A batch that does not split: stage 0 refuses it before it communicates. */
    R_OK(dt_pipeline_create(mesh, &good, &pl));
    dt_tensor *x, *y;
    R_OK(make_stage(pl, &rs, &x, &y));
    if (dt_pipeline_stage(pl) == 0) {
        dt_pipeline *three;
        c = good, c.nmicro = 3;
        R_OK(dt_pipeline_create(mesh, &c, &three));
        R_ERR(dt_pipeline_step(three, x, NULL, NULL), DT_ERR_ARG, "not divisible by nmicro = 3");
        R_MSG("inputs");
        R_ERR(dt_pipeline_step(pl, NULL, NULL, NULL), DT_ERR_ARG, "inputs is NULL on stage 0");
        R_OK(dt_pipeline_destroy(three));
    }
    /* And the pipeline still works. */
    double loss;
    R_OK(dt_pipeline_step(pl, x, y, &loss));
    R_CHECK(loss > 0, "loss %g", loss);
    free_stage(&rs, x, y);
    R_OK(dt_pipeline_destroy(pl));
    dt_mesh_release(mesh), dt_mesh_release(flat);
    return DT_OK;
}

Test(pipeline, errors_name_the_argument) {
    data_init();
    t_run(2, errors_body, NULL);
}
