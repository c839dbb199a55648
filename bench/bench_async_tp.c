/* Async tensor parallelism (dtensor/async_tp.h) against the synchronous form in the same run:
 * one sequence-parallel MLP step, forward and backward, f32 — x (B, T, D) Shard(1) over tp,
 * h = all_gather(x) @ w1^T (colwise, w1 (H, D) Shard(0)), y = reduce_scatter(h @ w2^T) onto
 * Shard(1) (rowwise, w2 (D, H) Shard(1)) — as dt_all_gather_linear + dt_linear_reduce_scatter
 * (ring mode) and as redistribute + dt_linear + redistribute, on the local runtime (tp ranks
 * as threads) and on UCX processes under dtrun, tp = 2 and 4. Each rep times one step of
 * each form back to back (a barrier before and after, rank 0's clock), after one warm-up step
 * of each; figures: median [min, max] over BENCH_REPS reps, milliseconds.
 *
 *   bench_async_tp [--table] [--quick]      the driver (UCX jobs through dtrun)
 *   bench_async_tp --rank                   one UCX rank (dtrun runs these)
 * --table: make bench's rows. BENCH_QUICK or --quick: 7 reps. */
#include "bench_ucx_util.h"
#include "bench_util.h"

enum { B = 2, T = 256, D = 256, H = 512 };

typedef struct job {
    int reps;
    double ms[2][BENCH_REPS]; /* [async, sync][rep], rank 0's */
} job;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

/* One step of form f (0 async, 1 sync): forward, backward from ones, gradients dropped. */
static dt_status step(int f, dt_tensor *x, dt_tensor *w1, dt_tensor *w2, dt_tensor *g) {
    dt_tensor *h = NULL, *y = NULL;
    dt_placement rep = dt_replicate(), seq = dt_shard(1);
    if (f == 0) {
        TRY(dt_all_gather_linear(x, 1, &w1, 0, DT_ASYNC_TP_RING, &h));
        TRY(dt_linear_reduce_scatter(h, w2, 0, DT_ASYNC_TP_RING, &y));
    } else {
        dt_tensor *xr, *p;
        TRY(dt_tensor_redistribute(x, 1, &rep, &xr));
        TRY(dt_linear(xr, w1, NULL, &h));
        TRY(dt_linear(h, w2, NULL, &p));
        TRY(dt_tensor_redistribute(p, 1, &seq, &y));
        dt_tensor_release(xr), dt_tensor_release(p);
    }
    TRY(dt_backward_with(y, g));
    dt_tensor_release(h), dt_tensor_release(y);
    TRY(dt_tensor_zero_grad(x));
    TRY(dt_tensor_zero_grad(w1));
    return dt_tensor_zero_grad(w2);
}

static dt_status body(dt_ctx *ctx, void *arg) {
    job *j = arg;
    dt_mesh *mesh;
    int n = dt_ctx_size(ctx);
    TRY(dt_mesh_create(ctx, 1, &n, (const char *const[]){"tp"}, &mesh));
    dt_comm *comm;
    TRY(dt_mesh_dim_comm(mesh, 0, &comm));
    int64_t sx[3] = {B, T, D}, s1[2] = {H, D}, s2[2] = {D, H};
    dt_placement seq = dt_shard(1), col = dt_shard(0), row = dt_shard(1);
    dt_tensor *x, *w1, *w2, *g;
    dt_generator gen = dt_generator_make(7);
    TRY(dt_tensor_rand(mesh, DT_F32, 3, sx, 1, &seq, &gen, &x));
    TRY(dt_tensor_rand(mesh, DT_F32, 2, s1, 1, &col, &gen, &w1));
    TRY(dt_tensor_rand(mesh, DT_F32, 2, s2, 1, &row, &gen, &w2));
    TRY(dt_tensor_ones(mesh, DT_F32, 3, sx, 1, &seq, &g));
    dt_tensor *leaves[3] = {x, w1, w2};
    for (int i = 0; i < 3; i++)
        TRY(dt_tensor_set_requires_grad(leaves[i], 1));
    for (int r = -1; r < j->reps; r++)
        for (int f = 0; f < 2; f++) {
            TRY(dt_barrier(comm));
            double t0 = bench_now();
            TRY(step(f, x, w1, w2, g));
            TRY(dt_barrier(comm));
            if (r >= 0 && dt_ctx_rank(ctx) == 0) j->ms[f][r] = (bench_now() - t0) * 1e3;
        }
    if (dt_ctx_rank(ctx) == 0 && getenv("DT_BENCH_RANK_OUT"))
        for (int r = 0; r < j->reps; r++)
            printf("R %d %.6f %.6f\n", r, j->ms[0][r], j->ms[1][r]);
    for (int i = 0; i < 3; i++)
        dt_tensor_release(leaves[i]);
    dt_tensor_release(g);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* One UCX job of n processes; 1 when every rep came back. */
static int run_ucx(int n, job *j) {
    char dtrun[1100], self[1024], cmd[2400];
    if (!bench_find_dtrun(dtrun, sizeof dtrun) || !bench_self(self, sizeof self)) return 0;
    snprintf(cmd, sizeof cmd, "DT_BENCH_RANK_OUT=1 %s -n %d %s --rank --reps %d 2>&1", dtrun, n,
             self, j->reps);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[512];
    int got = 0, r;
    double a, s;
    while (fgets(line, sizeof line, p)) {
        const char *at = strstr(line, "R ");
        if (at && sscanf(at, "R %d %lf %lf", &r, &a, &s) == 3 && r >= 0 && r < j->reps)
            j->ms[0][r] = a, j->ms[1][r] = s, got++;
        else if (strstr(line, "rror"))
            fputs(line, stderr);
    }
    int rc = pclose(p);
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0 && got == j->reps;
}

static void report(const char *where, int n, const job *j, int table) {
    bench_stat a = bench_stat_of(j->ms[0], j->reps), s = bench_stat_of(j->ms[1], j->reps);
    if (table)
        printf("async tp %s tp=%d step ms\t%.2f [%.2f, %.2f]\t%.2f [%.2f, %.2f] (synchronous)\t"
               "%.2f\n",
               where, n, a.med, a.min, a.max, s.med, s.min, s.max, a.med / s.med);
    else
        printf("%-6s tp=%d  async %8.2f ms [%.2f, %.2f]  synchronous %8.2f ms [%.2f, %.2f]  "
               "ratio %.2f\n",
               where, n, a.med, a.min, a.max, s.med, s.min, s.max, a.med / s.med);
}

int main(int argc, char **argv) {
    const char *q = getenv("BENCH_QUICK");
    int table = 0, rank_mode = 0;
    job j = {.reps = q && *q && strcmp(q, "0") ? 7 : BENCH_REPS};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--table"))
            table = 1;
        else if (!strcmp(argv[i], "--quick"))
            j.reps = 7;
        else if (!strcmp(argv[i], "--rank"))
            rank_mode = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            j.reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_async_tp [--table] [--quick]\n");
            return 2;
        }
    }
    if (j.reps < 1 || j.reps > BENCH_REPS) j.reps = BENCH_REPS;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rank_mode) {
        dt_status st = dt_ucx_run(body, &j);
        if (st != DT_OK)
            fprintf(stderr, "bench_async_tp: %s: %s\n", dt_status_str(st), dt_last_error());
        return st == DT_OK ? 0 : 1;
    }
    if (!table)
        printf("async TP vs synchronous: one SP MLP step (B %d, T %d, D %d, H %d, f32), forward + "
               "backward, median [min, max] of %d reps\n",
               B, T, D, H, j.reps);
    int ok = 1;
    for (int n = 2; n <= 4; n += 2) {
        dt_status st[4];
        if (dt_local_run(n, body, &j, st) != DT_OK) {
            fprintf(stderr, "bench_async_tp: local tp=%d: %s\n", n, dt_last_error());
            ok = 0;
        } else {
            report("local", n, &j, table);
        }
        if (!dt_ucx_available()) continue;
        if (run_ucx(n, &j))
            report("ucx", n, &j, table);
        else
            fprintf(stderr, "bench_async_tp: ucx tp=%d failed\n", n), ok = 0;
    }
    return ok ? 0 : 1;
}
