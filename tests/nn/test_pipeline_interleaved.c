/* Interleaved 1F1B (dtensor/pipeline.h) with v virtual stages per rank, on real local ranks.
 * The model: h = tanh(h @ W_k) for k < L blocks, loss = mean((h - y)^2), split into v p chunks
 * of L / (v p) blocks, rank s of p holding chunks s, s + p, ..., the last chunk the loss.
 * Invariants: the loss and every weight's gradient equal a naive f64 loop's (one rank, hand
 * written backward) for p = 2, 4 and v = 2, also with dp x pp; the recorded schedules of all
 * ranks, replayed in unit time, idle (p - 1) / (v m + p - 1) of the step and never deadlock;
 * the chunk activations in flight peak at min(v m, (v - 1) p + p - s) on rank s; bad
 * arguments fail on every rank naming the value; the trace has one row per virtual stage. */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"

enum { B = 16, D = 6, L = 8, PMAX = 4, VMAX = 2, MMAX = 8, NA = 6 * VMAX * MMAX };

static double xs[B * D], ys[B * D], ws[L][D * D];
static double ref_loss, ref_grad[L][D * D];

/* The model and its backward as plain loops (h_{k+1} = tanh(h_k W_k)). */
static void reference(void) {
    for (int i = 0; i < B * D; i++)
        xs[i] = 0.25 * t_value(1, (size_t)i), ys[i] = 0.05 * t_value(2, (size_t)i);
    for (int k = 0; k < L; k++)
        for (int i = 0; i < D * D; i++)
            ws[k][i] = 0.3 * t_value(10 + (uint64_t)k, (size_t)i);
    static double h[L + 1][B * D];
    double dh[B * D], dz[B * D];
    memcpy(h[0], xs, sizeof xs);
    for (int k = 0; k < L; k++)
        for (int b = 0; b < B; b++)
            for (int j = 0; j < D; j++) {
                double z = 0;
                for (int e = 0; e < D; e++)
                    z += h[k][b * D + e] * ws[k][e * D + j];
                h[k + 1][b * D + j] = tanh(z);
            }
    ref_loss = 0;
    for (int i = 0; i < B * D; i++) {
        double d = h[L][i] - ys[i];
        ref_loss += d * d / (B * D);
        dh[i] = 2 * d / (B * D);
    }
    for (int k = L - 1; k >= 0; k--) {
        for (int i = 0; i < B * D; i++)
            dz[i] = dh[i] * (1 - h[k + 1][i] * h[k + 1][i]);
        for (int e = 0; e < D; e++)
            for (int j = 0; j < D; j++) {
                double g = 0;
                for (int b = 0; b < B; b++)
                    g += h[k][b * D + e] * dz[b * D + j];
                ref_grad[k][e * D + j] = g;
            }
        for (int b = 0; b < B; b++)
            for (int e = 0; e < D; e++) {
                double g = 0;
                for (int j = 0; j < D; j++)
                    g += dz[b * D + j] * ws[k][e * D + j];
                dh[b * D + e] = g;
            }
    }
}

typedef struct rank_state {
    dt_tensor *w[L]; /* this rank's chunks' weights */
} rank_state;

/* Chunk c: blocks [c L / C, (c + 1) L / C), the last also the loss. */
static dt_status stage_fn(void *user, const dt_pipeline_stage_call *c, dt_tensor **out) {
    rank_state *rs = user;
    int per = L / c->nchunks;
    dt_tensor *cur = c->input;
    dt_tensor_retain(cur);
    for (int k = c->chunk * per; k < (c->chunk + 1) * per; k++) {
        dt_tensor *mm, *t;
        R_CHECK(rs->w[k], "chunk %d on stage %d has no weight %d", c->chunk, c->stage, k);
        R_OK(dt_mm(cur, rs->w[k], &mm));
        R_OK(dt_tanh(mm, &t));
        dt_tensor_release(mm), dt_tensor_release(cur);
        cur = t;
    }
    if (c->chunk == c->nchunks - 1) {
        dt_tensor *diff, *sq, *loss;
        R_OK(dt_sub(cur, c->target, &diff));
        R_OK(dt_mul(diff, diff, &sq));
        R_OK(dt_mean(sq, NULL, 0, 0, &loss));
        dt_tensor_release(diff), dt_tensor_release(sq), dt_tensor_release(cur);
        cur = loss;
    }
    *out = cur;
    return DT_OK;
}

/* The weights of this rank's chunks (replicated), and the batch (S(0) over dp). */
static dt_status make_rank(dt_pipeline *pl, rank_state *rs, dt_tensor **x, dt_tensor **y) {
    dt_mesh *m = dt_pipeline_stage_mesh(pl);
    int s = dt_pipeline_stage(pl), p = dt_pipeline_nstages(pl), v = dt_pipeline_nvirtual(pl);
    int per = L / (p * v), nd = dt_mesh_ndim(m);
    int64_t sb[2] = {B, D}, sw[2] = {D, D};
    dt_placement rep[DT_MESH_MAX_NDIM], pb[DT_MESH_MAX_NDIM];
    for (int d = 0; d < nd; d++)
        rep[d] = dt_replicate(),
        pb[d] = strcmp(dt_mesh_dim_name(m, d), "dp") ? rep[d] : dt_shard(0);
    for (int j = 0; j < v; j++)
        for (int k = (j * p + s) * per; k < (j * p + s + 1) * per; k++) {
            R_OK(dt_tensor_distribute(m, ws[k], DT_F64, 2, sw, nd, rep, DT_ALL_RANKS, &rs->w[k]));
            R_OK(dt_tensor_set_requires_grad(rs->w[k], 1));
        }
    *x = *y = NULL;
    if (s == 0) R_OK(dt_tensor_distribute(m, xs, DT_F64, 2, sb, nd, pb, DT_ALL_RANKS, x));
    if (s == p - 1) R_OK(dt_tensor_distribute(m, ys, DT_F64, 2, sb, nd, pb, DT_ALL_RANKS, y));
    return DT_OK;
}

static void free_rank(rank_state *rs, dt_tensor *x, dt_tensor *y) {
    for (int k = 0; k < L; k++)
        dt_tensor_release(rs->w[k]), rs->w[k] = NULL;
    dt_tensor_release(x), dt_tensor_release(y);
}

static dt_status make_pipeline(dt_mesh *mesh, int v, int m, rank_state *rs, dt_pipeline **out) {
    int pp;
    R_OK(dt_mesh_dim_index(mesh, "pp", &pp));
    dt_pipeline_config cfg = {.pp_dim = pp,
                              .nmicro = m,
                              .schedule = DT_PIPELINE_INTERLEAVED_1F1B,
                              .nvirtual = v,
                              .loss_reduction = DT_REDUCTION_MEAN,
                              .stage_fn = stage_fn,
                              .user = rs};
    return dt_pipeline_create(mesh, &cfg, out);
}

static int close_to(double a, double b) {
    return fabs(a - b) <= 1e-12 * (1 + fabs(b));
}

/* ---- (b) the loss and gradients equal the naive loop's ----------------------------------- */
static dt_status equal_body(dt_ctx *ctx, void *arg) {
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, (const char *)arg, &mesh));
    int pp;
    R_OK(dt_mesh_dim_index(mesh, "pp", &pp));
    int p = dt_mesh_dim_size(mesh, pp);
    for (int m = p; m <= MMAX; m *= 2) {
        rank_state rs = {0};
        dt_pipeline *pl;
        R_OK(make_pipeline(mesh, 2, m, &rs, &pl));
        dt_tensor *x, *y;
        R_OK(make_rank(pl, &rs, &x, &y));
        /* two steps: the gradients accumulate, the second leaves twice the first's */
        for (int rep = 1; rep <= 2; rep++) {
            double loss = -1;
            R_OK(dt_pipeline_step(pl, x, y, &loss));
            R_CHECK(close_to(loss, ref_loss), "%s m = %d: loss %.17g, want %.17g",
                    (const char *)arg, m, loss, ref_loss);
            for (int k = 0; k < L; k++) {
                if (!rs.w[k]) continue;
                double g[D * D];
                dt_tensor_info gi;
                R_OK(dt_tensor_info_get(dt_tensor_grad(rs.w[k]), &gi));
                for (int d = 0; d < gi.mesh_ndim; d++) /* reduced over dp once per step */
                    R_CHECK(gi.placements[d].kind == DT_PLACEMENT_REPLICATE,
                            "%s m = %d: dW%d is not reduced over mesh dim %d", (const char *)arg, m,
                            k, d);
                R_OK(dt_tensor_full_tensor(dt_tensor_grad(rs.w[k]), g, sizeof g));
                for (int i = 0; i < D * D; i++)
                    R_CHECK(close_to(g[i], rep * ref_grad[k][i]),
                            "%s m = %d step %d: dW%d[%d] = %.17g, want %.17g", (const char *)arg, m,
                            rep, k, i, g[i], rep * ref_grad[k][i]);
            }
        }
        free_rank(&rs, x, y);
        R_OK(dt_pipeline_destroy(pl));
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(pipeline_interleaved, pp2_v2_equals_the_naive_loop) {
    reference();
    t_run(2, equal_body, "pp=2,dp=1");
}
Test(pipeline_interleaved, pp4_v2_equals_the_naive_loop) {
    reference();
    t_run(4, equal_body, "pp=4,dp=1");
}
Test(pipeline_interleaved, dp2_pp2_v2_equals_the_naive_loop) {
    reference();
    t_run(4, equal_body, "dp=2,pp=2");
}

/* ---- (a), (c) the recorded schedules -------------------------------------------------------
 * Every rank runs one step and keeps its records; the main thread then replays all ranks'
 * records against each other. */
static dt_pipeline_record recs[PMAX][NA];
static int nrecs[PMAX], peaks[PMAX];

static dt_status record_body(dt_ctx *ctx, void *arg) {
    const int *vm = arg; /* p, v, m */
    char shape[32];
    snprintf(shape, sizeof shape, "pp=%d,dp=1", vm[0]);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, shape, &mesh));
    rank_state rs = {0};
    dt_pipeline *pl;
    R_OK(make_pipeline(mesh, vm[1], vm[2], &rs, &pl));
    dt_tensor *x, *y;
    R_OK(make_rank(pl, &rs, &x, &y));
    R_OK(dt_pipeline_step(pl, x, y, NULL));
    dt_pipeline_stats st;
    R_OK(dt_pipeline_stats_get(pl, &st));
    int s = dt_pipeline_stage(pl);
    R_CHECK(st.nrecords <= NA, "%d records", st.nrecords);
    for (int i = 0; i < st.nrecords; i++)
        R_OK(dt_pipeline_record_get(pl, i, &recs[s][i]));
    nrecs[s] = st.nrecords, peaks[s] = st.peak_inflight;
    free_rank(&rs, x, y);
    R_OK(dt_pipeline_destroy(pl));
    dt_mesh_release(mesh);
    return DT_OK;
}

static int is_compute(dt_pipeline_op op) {
    return op == DT_PIPE_FORWARD || op == DT_PIPE_BACKWARD;
}

/* Dataflow replay (messages buffered, free): each rank runs its recorded computations in
 * order, one time unit each, a forward of chunk c once chunk c - 1's forward of the micro-batch
 * ended, a backward once its own forward and chunk c + 1's backward ended. Returns the step's
 * length; busy[s] = 2 v m. */
static int replay_dataflow(int p, int v, int m) {
    int C = p * v, end_f[PMAX * VMAX][MMAX], end_b[PMAX * VMAX][MMAX], pc[PMAX] = {0};
    int clock[PMAX] = {0};
    memset(end_f, -1, sizeof end_f), memset(end_b, -1, sizeof end_b);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++)
            while (pc[s] < nrecs[s]) {
                dt_pipeline_action a = recs[s][pc[s]].action;
                if (!is_compute(a.op)) {
                    pc[s]++;
                    continue;
                }
                int c = a.chunk, i = a.micro, t = clock[s];
                int dep1 = a.op == DT_PIPE_FORWARD ? (c ? end_f[c - 1][i] : 0) : end_f[c][i];
                int dep2 = a.op == DT_PIPE_BACKWARD && c < C - 1 ? end_b[c + 1][i] : 0;
                if (dep1 < 0 || dep2 < 0) break;
                if (dep1 > t) t = dep1;
                if (dep2 > t) t = dep2;
                clock[s] = t + 1;
                (a.op == DT_PIPE_FORWARD ? end_f : end_b)[c][i] = t + 1;
                pc[s]++, progress = 1;
            }
    }
    int T = 0;
    for (int s = 0; s < p; s++) {
        cr_assert(pc[s] == nrecs[s], "p=%d v=%d m=%d: rank %d's computations stop at %d", p, v, m,
                  s, pc[s]);
        if (clock[s] > T) T = clock[s];
    }
    return T;
}

/* Rendezvous replay (dt_send's blocking messages): a send completes with the matching receive
 * at the head of the peer's list, at the later of their clocks; forwards take 1, backwards 2.
 * Returns the step's length; fails on a deadlock or a mismatched message. */
static int replay_rendezvous(int p, int v, int m) {
    int pc[PMAX] = {0}, clock[PMAX] = {0};
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++)
            while (pc[s] < nrecs[s]) {
                dt_pipeline_action x = recs[s][pc[s]].action;
                if (is_compute(x.op)) {
                    clock[s] += x.op == DT_PIPE_FORWARD ? 1 : 2, pc[s]++, progress = 1;
                    continue;
                }
                int q = x.peer;
                if (pc[q] >= nrecs[q]) break;
                dt_pipeline_action y = recs[q][pc[q]].action;
                if (is_compute(y.op) || y.peer != s) break;
                int sx = x.op == DT_PIPE_SEND_ACT || x.op == DT_PIPE_SEND_GRAD;
                int sy = y.op == DT_PIPE_SEND_ACT || y.op == DT_PIPE_SEND_GRAD;
                if (sx == sy) break;
                dt_pipeline_action snd = sx ? x : y, rcv = sx ? y : x;
                int act = snd.op == DT_PIPE_SEND_ACT;
                cr_assert(snd.micro == rcv.micro &&
                              rcv.op == (act ? DT_PIPE_RECV_ACT : DT_PIPE_RECV_GRAD) &&
                              rcv.chunk == snd.chunk + (act ? 1 : -1),
                          "p=%d v=%d m=%d: rank %d's op %d (chunk %d micro %d) meets rank %d's "
                          "op %d (chunk %d micro %d)",
                          p, v, m, s, x.op, x.chunk, x.micro, q, y.op, y.chunk, y.micro);
                int t = clock[s] > clock[q] ? clock[s] : clock[q];
                clock[s] = clock[q] = t;
                pc[s]++, pc[q]++, progress = 1;
            }
    }
    int T = 0;
    for (int s = 0; s < p; s++) {
        cr_assert(pc[s] == nrecs[s], "p=%d v=%d m=%d deadlocks: rank %d stops at action %d of %d",
                  p, v, m, s, pc[s], nrecs[s]);
        if (clock[s] > T) T = clock[s];
    }
    return T;
}

static void check_schedule(int p, int v, int m) {
    int arg[3] = {p, v, m};
    memset(nrecs, 0, sizeof nrecs);
    t_run(p, record_body, arg);
    int C = p * v;
    for (int s = 0; s < p; s++) {
        /* each chunk of the rank runs each micro-batch forward, then backward, once */
        int fwd[PMAX * VMAX][MMAX] = {{0}}, bwd[PMAX * VMAX][MMAX] = {{0}}, live = 0, most = 0;
        for (int k = 0; k < nrecs[s]; k++) {
            dt_pipeline_action a = recs[s][k].action;
            cr_assert(a.chunk >= 0 && a.chunk < C && a.chunk % p == s, "rank %d names chunk %d", s,
                      a.chunk);
            if (a.op == DT_PIPE_FORWARD) fwd[a.chunk][a.micro]++, live++;
            if (a.op == DT_PIPE_BACKWARD) {
                cr_assert(fwd[a.chunk][a.micro] == 1 && bwd[a.chunk][a.micro]++ == 0,
                          "rank %d: chunk %d micro %d's backward", s, a.chunk, a.micro);
                live--;
            }
            if (live > most) most = live;
        }
        for (int c = s; c < C; c += p)
            for (int i = 0; i < m; i++)
                cr_assert(fwd[c][i] == 1 && bwd[c][i] == 1, "rank %d chunk %d micro %d", s, c, i);
        /* (c) Peak chunk activations in flight. Rank s runs (v - 1) p + p - s - 1 warm-up
         * forwards before its first backward: chunk c's first backward needs the forwards of
         * micro-batch 0 through chunks c + 1 .. C - 1, which come back to rank s after the
         * rank's own forwards of the first round of p micro-batches through each of its v
         * chunks but the last ((v - 1) p), and those of the micro-batches still in the
         * p - s - 1 ranks after it (as 1F1B's warm-up). Then one forward and one backward in
         * turn keep warm-up + 1 in flight, and the cool-down drains them: the peak is
         * min(v m, (v - 1) p + p - s). Each chunk activation is 1/v of a stage's, so rank 0
         * holds p stage-activations, as 1F1B's stage 0 (Megatron's warm-up, 2 (p - s - 1)
         * deeper to hide asynchronous sends, holds more). */
        int want = (v - 1) * p + p - s < v * m ? (v - 1) * p + p - s : v * m;
        cr_assert(most == want && peaks[s] == want,
                  "p=%d v=%d m=%d rank %d: %d chunk activations in flight (the pipeline "
                  "counted %d), want %d",
                  p, v, m, s, most, peaks[s], want);
    }
    /* (a) The bubble: in a step of T units every rank computes 2 v m (dataflow, all 1) or
     * 3 v m (rendezvous, backward 2) units; it idles (p - 1) / (v m + p - 1) of the step. */
    double want = (double)(p - 1) / (v * m + p - 1);
    int T1 = replay_dataflow(p, v, m), T2 = replay_rendezvous(p, v, m);
    double idle1 = 1 - 2.0 * v * m / T1, idle2 = 1 - 3.0 * v * m / T2;
    cr_assert(fabs(idle1 - want) < 1e-12 && fabs(idle2 - want) < 1e-12,
              "p=%d v=%d m=%d: idles %.6f (dataflow) and %.6f (blocking), want %.6f", p, v, m,
              idle1, idle2, want);
}

Test(pipeline_interleaved, recorded_schedules_idle_the_bubble_and_hold_the_bound) {
    reference();
    const int ps[2] = {2, 4};
    for (int k = 0; k < 2; k++)
        for (int v = 1; v <= VMAX; v++)
            for (int m = ps[k]; m <= MMAX; m *= 2)
                if (L % (ps[k] * v) == 0) check_schedule(ps[k], v, m);
}

/* ---- (d) bad arguments fail on every rank, naming the value ------------------------------- */
static dt_status errors_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "pp=2,dp=1", &mesh));
    rank_state rs = {0};
    dt_pipeline *pl = T_SENTINEL(dt_pipeline *);
    R_ERR(make_pipeline(mesh, -1, 4, &rs, &pl), DT_ERR_ARG, "config->nvirtual = -1");
    R_ERR(make_pipeline(mesh, 2, 3, &rs, &pl), DT_ERR_ARG,
          "nmicro = 3 is not a multiple of nstages = 2");
    dt_pipeline_config c = {.pp_dim = 0,
                            .nmicro = 4,
                            .schedule = DT_PIPELINE_1F1B,
                            .nvirtual = 2,
                            .loss_reduction = DT_REDUCTION_MEAN,
                            .stage_fn = stage_fn,
                            .user = &rs};
    R_ERR(dt_pipeline_create(mesh, &c, &pl), DT_ERR_ARG,
          "nvirtual = 2 needs schedule interleaved_1f1b, not 1f1b");
    R_CHECK(pl == T_SENTINEL(dt_pipeline *), "out set on failure");
    int n = -5;
    dt_pipeline_schedule I = DT_PIPELINE_INTERLEAVED_1F1B;
    R_ERR(dt_pipeline_schedule_build(I, 2, 0, 4, 0, NULL, 0, &n), DT_ERR_ARG, "nvirtual = 0");
    R_ERR(dt_pipeline_schedule_build(I, 1, 2, 4, 0, NULL, 0, &n), DT_ERR_ARG,
          "nvirtual = 2 needs nstages >= 2, not 1");
    R_ERR(dt_pipeline_schedule_build(I, 4, 2, 6, 0, NULL, 0, &n), DT_ERR_ARG,
          "nmicro = 6 is not a multiple of nstages = 4");
    dt_pipeline_action few[8];
    R_ERR(dt_pipeline_schedule_build(I, 2, 2, 2, 1, few, 8, &n), DT_ERR_ARG, "cap = 8");
    R_CHECK(n == -5, "n_out set on failure");
    dt_pipeline_schedule s = DT_PIPELINE_SCHEDULE_COUNT;
    R_OK(dt_pipeline_schedule_parse("Interleaved1F1B", &s));
    R_CHECK(s == I, "Interleaved1F1B parses to %d", (int)s);
    R_OK(dt_pipeline_schedule_parse(dt_pipeline_schedule_name(I), &s));
    R_CHECK(s == I, "%s parses to %d", dt_pipeline_schedule_name(I), (int)s);
    R_OK(dt_pipeline_schedule_parse("GPipe", &s));
    R_CHECK(s == DT_PIPELINE_AFAB, "GPipe parses to %d", (int)s);
    R_OK(dt_pipeline_schedule_parse("1F1B", &s));
    R_CHECK(s == DT_PIPELINE_1F1B, "1F1B parses to %d", (int)s);
    R_ERR(dt_pipeline_schedule_parse("ZBV", &s), DT_ERR_ARG, "name = \"ZBV\"");
    R_CHECK(s == DT_PIPELINE_1F1B, "out set on failure");
    /* and a good pipeline still runs */
    R_OK(make_pipeline(mesh, 2, 2, &rs, &pl));
    dt_tensor *x, *y;
    R_OK(make_rank(pl, &rs, &x, &y));
    double loss;
    R_OK(dt_pipeline_step(pl, x, y, &loss));
    R_CHECK(close_to(loss, ref_loss), "loss %.17g, want %.17g", loss, ref_loss);
    free_rank(&rs, x, y);
    R_OK(dt_pipeline_destroy(pl));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(pipeline_interleaved, errors_name_the_value_on_every_rank) {
    reference();
    t_run(2, errors_body, NULL);
}

/* ---- the trace: one row per virtual stage ------------------------------------------------- */
static char trace_dir[64];

static dt_status trace_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "pp=2,dp=1", &mesh));
    rank_state rs = {0};
    dt_pipeline *pl;
    R_OK(make_pipeline(mesh, 2, 2, &rs, &pl));
    dt_tensor *x, *y;
    R_OK(make_rank(pl, &rs, &x, &y));
    R_OK(dt_trace_start(ctx));
    R_OK(dt_pipeline_step(pl, x, y, NULL));
    R_OK(dt_trace_stop(ctx));
    char path[128];
    snprintf(path, sizeof path, "%s/rank%d.json", trace_dir, dt_ctx_rank(ctx));
    R_OK(dt_trace_write(ctx, path));
    free_rank(&rs, x, y);
    R_OK(dt_pipeline_destroy(pl));
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(pipeline_interleaved, trace_rows_per_virtual_stage) {
    reference();
    snprintf(trace_dir, sizeof trace_dir, "/tmp/dt_pipe_i1f1b.XXXXXX");
    cr_assert(mkdtemp(trace_dir));
    t_run(2, trace_body, NULL);
    char *json, *page;
    t_trace_page(trace_dir, 2, &json, &page);
    /* chunks 0 and 2 on rank 0, 1 and 3 on rank 1: each runs both micro-batches once */
    t_assert_pipeline_spans(json, page, 4, 2);
    const char *rows[4] = {"stage 0 (rank 0)", "stage 1 (rank 1)", "stage 2 (rank 0)",
                           "stage 3 (rank 1)"};
    for (int c = 0; c < 4; c++)
        cr_assert(strstr(page, rows[c]), "the page has no row \"%s\"", rows[c]);
    cr_assert_eq(t_count(page, "<tr class=\"stage\">"), 4);
    cr_assert_eq(t_count(page, "class=\"span pf\""), 8);
    cr_assert_eq(t_count(page, "class=\"span pb\""), 8);
    free(json), free(page);
}
