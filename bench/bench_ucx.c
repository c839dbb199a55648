/* The UCX runtime's collectives as nccl-tests reports them (size, count, type, redop, time,
 * algbw, busbw) for all_gather, reduce_scatter, all_reduce, all_to_all and broadcast, f32 sum,
 * 1 KiB to 64 MiB (x4) on 2, 4 and 8 processes of this host, each point next to the local
 * runtime's time for the same collective, size and ranks (threads in this process) and to
 * ucx_perftest tag_bw between two processes at the same message size, all from the same run.
 *
 * Sizes and busbw as bench_collectives: size is the whole buffer (all_gather: the gathered
 * output, reduce_scatter and all_to_all: each rank's input, all_reduce and broadcast: the
 * vector); algbw = size / time; busbw = algbw x (n-1)/n, x 2(n-1)/n for all_reduce, x 1 for
 * broadcast. x local = UCX time / local runtime time (the target: <= 1.5 at 4 processes);
 * %p2p = busbw / ucx_perftest's bandwidth for messages of the whole size (the target: >= 90%
 * for all_gather and all_to_all on 2 processes; a 2-process all_gather or all_to_all sends
 * messages of half that size, so this sets it against the faster figure).
 *
 * The UCX side runs once per environment of DT_BENCH_UCX_ENVS (bench_ucx_util.h; default the
 * library's defaults, then DT_UCX_SHM=0 where the build reads that variable).
 *
 * Method: per rank count, one job per environment (dtrun, held between rounds) and the local
 * runtime's ranks stay up; a round runs every collective at every size on each job in turn,
 * then on the local runtime, then (in the first rank count's phase) ucx_perftest at every
 * size; one warm-up round, then BENCH_REPS rounds. Each point is timed on rank 0 from a barrier
 * to the barrier after a batch of iterations (enough for about 4 MiB, at most 64, and no more
 * than fill 5 ms at the warm-up round's speed), divided by the batch. No cache flush. Figures:
 * median [min, max] over rounds.
 *
 *   bench_ucx [--quick] [--ranks 2,4,8] [--max BYTES] [--tls UCX_TLS] [--tsv] [--rows FILE]
 * --quick: sizes x16 up to 16 MiB. --tsv: one line per point (bench_html reads it); --rows
 * FILE appends make bench's table rows (16 MiB, or the largest size) to FILE. ucx_perftest
 * runs with UCX_TLS=sm unless --tls. */
#include <pthread.h>
#include <semaphore.h>

#include "bench_ucx_util.h"
#include "bench_util.h"
#include "core/alloc.h"

enum { OP_AG, OP_RS, OP_AR, OP_A2A, OP_BC, NOPS };
static const char *const op_names[NOPS] = {"all_gather", "reduce_scatter", "all_reduce",
                                           "all_to_all", "broadcast"};
#define MAX_SIZES 16
#define MAX_RC    4

static size_t sizes[MAX_SIZES];
static int nsizes, quick;
static size_t max_size = (size_t)64 << 20;
static char envs[BENCH_MAX_ENVS][128];
static int nenvs;
/* seconds per iteration, rank 0's: [rank count][env][op][size][round] and the local runtime */
static double t_ucx[MAX_RC][BENCH_MAX_ENVS][NOPS][MAX_SIZES][BENCH_REPS];
static double t_loc[MAX_RC][NOPS][MAX_SIZES][BENCH_REPS];
static double p2p[MAX_SIZES][BENCH_REPS]; /* GB/s */
static int ucx_ok[MAX_RC][BENCH_MAX_ENVS];

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static double bus_factor(int op, int n) {
    if (op == OP_AR) return 2.0 * (n - 1) / n;
    if (op == OP_BC) return 1.0;
    return (double)(n - 1) / n;
}

static void set_sizes(void) {
    if (quick && max_size > ((size_t)16 << 20)) max_size = (size_t)16 << 20;
    for (size_t s = 1024; s <= max_size && nsizes < MAX_SIZES; s *= quick ? 16 : 4)
        sizes[nsizes++] = s;
    if (nsizes == 0 || (sizes[nsizes - 1] != max_size && nsizes < MAX_SIZES))
        sizes[nsizes++] = max_size;
}

static dt_status run_op(dt_comm *c, int op, float *in, float *out, size_t size, int n) {
    size_t all = size / 4, per = all / (size_t)n;
    switch (op) {
    case OP_AG:
        return dt_all_gather(c, in, out, per, DT_F32);
    case OP_RS:
        return dt_reduce_scatter(c, in, out, per, DT_F32, DT_REDUCE_SUM);
    case OP_AR:
        return dt_all_reduce(c, in, out, all, DT_F32, DT_REDUCE_SUM);
    case OP_A2A:
        return dt_all_to_all(c, in, out, per, DT_F32);
    default:
        return dt_broadcast(c, out, all, DT_F32, 0);
    }
}

/* Iterations per timed batch: enough for about 4 MiB, at most 64, and (once the warm-up
 * round has timed one, warm[op][k] > 0) no more than fill BATCH_S: 8 processes on 2 cores
 * take 0.1 s for a 256 KiB collective, where 16 iterations would make the run long. */
#define BATCH_S 0.005
typedef int batch_t[NOPS][MAX_SIZES];

static void set_batches(batch_t iters, double warm[NOPS][MAX_SIZES]) {
    for (int op = 0; op < NOPS; op++)
        for (int k = 0; k < nsizes; k++) {
            int b = (int)(((size_t)4 << 20) / sizes[k]);
            b = b < 1 ? 1 : b > 64 ? 64 : b;
            if (warm && warm[op][k] > 0 && BATCH_S / warm[op][k] < b)
                b = BATCH_S / warm[op][k] < 1 ? 1 : (int)(BATCH_S / warm[op][k]);
            iters[op][k] = b;
        }
}

/* One round on either runtime: every collective at every size; t[op][k] = seconds per
 * iteration (rank 0's, barrier to barrier). After the first (warm-up) round, rank 0's times
 * set the batches, the same on every rank (broadcast). */
static dt_status one_round(dt_comm *c, int n, float *in, float *out, batch_t iters, int first,
                           double t[NOPS][MAX_SIZES]) {
    for (int op = 0; op < NOPS; op++)
        for (int k = 0; k < nsizes; k++) {
            TRY(dt_barrier(c));
            double t0 = bench_now();
            for (int i = 0; i < iters[op][k]; i++)
                TRY(run_op(c, op, in, out, sizes[k], n));
            TRY(dt_barrier(c));
            t[op][k] = (bench_now() - t0) / iters[op][k];
        }
    if (first) {
        set_batches(iters, t);
        TRY(dt_broadcast(c, iters, (size_t)NOPS * MAX_SIZES, DT_I32, 0));
    }
    return DT_OK;
}

static dt_status alloc_bufs(float **in, float **out) {
    size_t cap = sizes[nsizes - 1];
    *in = dt_host_alloc(cap); /* as tensors are */
    *out = dt_host_alloc(cap);
    if (!*in || !*out) return dt_error_set(DT_ERR_NOMEM, "bench: out of memory");
    memset(*in, 0, cap); /* zeros: sums stay normal floats */
    memset(*out, 0, cap);
    return DT_OK;
}

/* ---- a UCX rank: rounds when the driver says, rank 0 prints "R op k seconds" ---------- */

static dt_status ucx_rank(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx), fd = -1;
    dt_comm *c;
    TRY(dt_ctx_world_comm(ctx, &c));
    float *in, *out;
    dt_status st = alloc_bufs(&in, &out);
    static double t[NOPS][MAX_SIZES];
    batch_t iters;
    set_batches(iters, NULL);
    for (int first = 1; st == DT_OK && bench_rank_wait(&fd); first = 0) {
        st = one_round(c, n, in, out, iters, first, t);
        for (int op = 0; op < NOPS && st == DT_OK && me == 0; op++)
            for (int k = 0; k < nsizes; k++)
                printf("R %d %d %.9e\n", op, k, t[op][k]);
        if (st == DT_OK && me == 0) printf("D\n");
    }
    if (fd >= 0) close(fd);
    dt_host_free(in);
    dt_host_free(out);
    return st;
}

/* ---- the local runtime, held between rounds -------------------------------------------- */

typedef struct local_ctl {
    sem_t go, done;
    int n, quit, ri, rec; /* rec: the round to record, -1 for the warm-up */
    dt_status st;
} local_ctl;

static dt_status local_rank(dt_ctx *ctx, void *arg) {
    local_ctl *l = arg;
    dt_comm *c;
    TRY(dt_ctx_world_comm(ctx, &c));
    float *in, *out;
    dt_status st = alloc_bufs(&in, &out);
    double t[NOPS][MAX_SIZES];
    batch_t iters;
    set_batches(iters, NULL);
    for (int first = 1;; first = 0) {
        sem_wait(&l->go);
        if (l->quit) break;
        if (st == DT_OK) st = one_round(c, l->n, in, out, iters, first, t);
        if (dt_ctx_rank(ctx) == 0) {
            for (int op = 0; op < NOPS && l->rec >= 0; op++)
                for (int k = 0; k < nsizes; k++)
                    t_loc[l->ri][op][k][l->rec] = t[op][k];
            l->st = st;
            sem_post(&l->done);
        }
    }
    dt_host_free(in);
    dt_host_free(out);
    return st;
}

static void *local_thread(void *arg) {
    local_ctl *l = arg;
    dt_status st = dt_local_run(l->n, local_rank, l, NULL);
    if (st != DT_OK) {
        fprintf(stderr, "bench_ucx: local runtime, %d ranks: %s\n", l->n, dt_last_error());
        l->st = st;
    }
    return NULL;
}

/* ---- the driver ------------------------------------------------------------------------ */

typedef struct line_ctx {
    int ri, e, rec;
} line_ctx;

static void on_line(const char *line, void *arg) {
    const line_ctx *x = arg;
    int op, k;
    double t;
    if (sscanf(line, "R %d %d %lf", &op, &k, &t) == 3 && op >= 0 && op < NOPS && k >= 0 &&
        k < nsizes && x->rec >= 0)
        t_ucx[x->ri][x->e][op][k][x->rec] = t;
}

/* One rank count: its jobs and local ranks up, BENCH_REPS + 1 rounds, all down. */
static int measure(int ri, int n, int perftest, const char *tls) {
    bench_job jobs[BENCH_MAX_ENVS];
    char args[128];
    snprintf(args, sizeof args, "--max %zu%s", max_size, quick ? " --quick" : "");
    for (int e = 0; e < nenvs; e++)
        ucx_ok[ri][e] = bench_job_start(&jobs[e], envs[e], n, args);
    local_ctl l = {.n = n, .ri = ri};
    sem_init(&l.go, 0, 0);
    sem_init(&l.done, 0, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, local_thread, &l) != 0) return 0;
    for (int r = -1; r < BENCH_REPS; r++) {
        for (int e = 0; e < nenvs; e++) {
            line_ctx x = {ri, e, r};
            if (ucx_ok[ri][e]) ucx_ok[ri][e] = bench_job_round(&jobs[e], on_line, &x);
        }
        l.rec = r;
        for (int i = 0; i < n; i++)
            sem_post(&l.go);
        sem_wait(&l.done);
        for (int k = 0; k < nsizes && perftest && r >= 0; k++)
            p2p[k][r] = bench_perftest(tls, sizes[k]);
    }
    l.quit = 1;
    for (int i = 0; i < n; i++)
        sem_post(&l.go);
    pthread_join(th, NULL);
    for (int e = 0; e < nenvs; e++)
        ucx_ok[ri][e] = bench_job_end(&jobs[e]) && ucx_ok[ri][e];
    return l.st == DT_OK;
}

static double p2p_med(int k) {
    bench_stat s = bench_stat_of(p2p[k], BENCH_REPS);
    return s.min > 0 ? s.med : -1; /* a failed run anywhere: no figure */
}

static void size_name(size_t s, char *buf, size_t cap) {
    if (s >= ((size_t)1 << 20))
        snprintf(buf, cap, "%zu MiB", s >> 20);
    else
        snprintf(buf, cap, "%zu KiB", s >> 10);
}

/* make bench's rows at one size: 4 processes (the local-runtime target) and all_gather and
 * all_to_all on 2 processes (the perftest target), each environment. */
static void rows(FILE *f, const int *rc, int nr) {
    int k = nsizes - 1;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] == ((size_t)16 << 20)) k = i;
    char sz[32];
    size_name(sizes[k], sz, sizeof sz);
    for (int ri = 0; ri < nr; ri++)
        for (int e = 0; e < nenvs; e++)
            for (int op = 0; op < NOPS; op++) {
                int n = rc[ri];
                if (n != 4 && !(n == 2 && (op == OP_AG || op == OP_A2A))) continue;
                const char *env = strcmp(envs[e], "-") ? envs[e] : "defaults";
                if (!ucx_ok[ri][e]) {
                    fprintf(f, "ucx %s, %d processes, %s (%s)\tfailed\t-\t-\n", op_names[op], n, sz,
                            env);
                    continue;
                }
                bench_stat u = bench_stat_of(t_ucx[ri][e][op][k], BENCH_REPS);
                bench_stat lo = bench_stat_of(t_loc[ri][op][k], BENCH_REPS);
                double bus = (double)sizes[k] / u.med / 1e9 * bus_factor(op, n), p = p2p_med(k);
                fprintf(f, "ucx %s, %d processes, %s (%s)\t%.2f ms [%.2f, %.2f], busbw %.2f GB/s\t",
                        op_names[op], n, sz, env, u.med * 1e3, u.min * 1e3, u.max * 1e3, bus);
                if (n == 2 && p > 0)
                    fprintf(f, "ucx_perftest tag_bw %.2f GB/s\t%.0f%% of perftest\n", p,
                            100 * bus / p);
                else
                    fprintf(f, "local runtime %.2f ms [%.2f, %.2f]\t%.2fx local\n", lo.med * 1e3,
                            lo.min * 1e3, lo.max * 1e3, u.med / lo.med);
            }
}

static void print_point(int tsv, int ri, int n, int e, int op, int k) {
    bench_stat u = bench_stat_of(t_ucx[ri][e][op][k], BENCH_REPS);
    bench_stat lo = bench_stat_of(t_loc[ri][op][k], BENCH_REPS);
    double alg = (double)sizes[k] / u.med / 1e9, bus = alg * bus_factor(op, n), p = p2p_med(k);
    const char *redop = op == OP_RS || op == OP_AR ? "sum" : "none";
    if (tsv) {
        printf("%d\t%s\t%s\t%zu\t%zu\tfloat\t%s\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.2f\t%.2f\t%.2f\t"
               "%.2f\t%.3f\t%.1f\n",
               n, op_names[op], envs[e], sizes[k], sizes[k] / 4, redop, u.med * 1e6, u.min * 1e6,
               u.max * 1e6, alg, bus, lo.med * 1e6, lo.min * 1e6, lo.max * 1e6, u.med / lo.med,
               p > 0 ? p : 0, p > 0 ? 100 * bus / p : 0);
        return;
    }
    char pc[16] = "-";
    if (p > 0) snprintf(pc, sizeof pc, "%.0f%%", 100 * bus / p);
    printf("%10zu %10zu %5s %4s %10.1f %10.1f %10.1f %8.3f %8.3f %10.1f %7.2fx %8.2f %6s\n",
           sizes[k], sizes[k] / 4, "float", redop, u.med * 1e6, u.min * 1e6, u.max * 1e6, alg, bus,
           lo.med * 1e6, u.med / lo.med, p > 0 ? p : 0, pc);
}

int main(int argc, char **argv) {
    int rank_mode = 0, tsv = 0, nr = 3, rc[MAX_RC] = {2, 4, 8};
    const char *tls = "sm", *rows_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rank"))
            rank_mode = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--tsv"))
            tsv = 1;
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max_size = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--tls") && i + 1 < argc)
            tls = argv[++i];
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows_path = argv[++i];
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
            nr = 0;
            for (char *p = argv[++i]; *p && nr < MAX_RC; p += *p == ',')
                rc[nr++] = (int)strtol(p, &p, 10);
        } else {
            fprintf(stderr, "usage: bench_ucx [--quick] [--ranks 2,4,8] [--max BYTES] [--tls "
                            "UCX_TLS] [--tsv] [--rows FILE]\n");
            return 2;
        }
    }
    set_sizes();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rank_mode) {
        dt_status st = dt_ucx_run(ucx_rank, NULL);
        if (st != DT_OK) fprintf(stderr, "bench_ucx: %s: %s\n", dt_status_str(st), dt_last_error());
        return st == DT_OK ? 0 : 1;
    }
    if (!dt_ucx_available()) {
        printf("bench_ucx: this build has no UCX runtime; nothing to measure\n");
        return 0;
    }
    for (int i = 0; i < nr; i++)
        if (rc[i] < 2 || rc[i] > 64 || max_size % (4 * (size_t)rc[i]) || max_size < 1024) {
            fprintf(stderr,
                    "bench_ucx: %d ranks: ranks go from 2 to 64 and --max (>= 1024) must "
                    "be a multiple of 4 x ranks\n",
                    rc[i]);
            return 2;
        }
    nenvs = bench_ucx_envs(envs, BENCH_MAX_ENVS);
    int have_perftest = system("command -v ucx_perftest >/dev/null 2>&1") == 0, ok = 1;
    double t0 = bench_now();
    for (int ri = 0; ri < nr; ri++)
        ok &= measure(ri, rc[ri], have_perftest && ri == 0, tls);
    if (rows_path) {
        FILE *f = fopen(rows_path, "a");
        if (f) {
            rows(f, rc, nr);
            fclose(f);
        }
    }
    if (tsv)
        printf("ranks\top\tenv\tsize\tcount\ttype\tredop\ttime_us\tmin_us\tmax_us\talgbw\tbusbw\t"
               "local_us\tlocal_min\tlocal_max\tx_local\tp2p_GBps\tp2p_pct\n");
    else
        printf("UCX collectives, %ld cores; median [min, max] of %d interleaved rounds (%.0f s); "
               "GB/s = 1e9 B/s; local = the local runtime (threads) in the same rounds; p2p = "
               "ucx_perftest tag_bw (UCX_TLS=%s) between 2 processes, same size%s\n",
               sysconf(_SC_NPROCESSORS_ONLN), BENCH_REPS, bench_now() - t0, tls,
               have_perftest ? "" : " (ucx_perftest not installed)");
    for (int ri = 0; ri < nr; ri++)
        for (int e = 0; e < nenvs; e++) {
            if (!ucx_ok[ri][e]) {
                fprintf(tsv ? stderr : stdout, "UCX, %d processes, %s: failed\n", rc[ri], envs[e]);
                ok = 0;
                continue;
            }
            for (int op = 0; op < NOPS; op++) {
                if (!tsv)
                    printf("\n# %s, %d processes, environment: %s\n%10s %10s %5s %4s %10s %10s "
                           "%10s %8s %8s %10s %8s %8s %6s\n",
                           op_names[op], rc[ri], strcmp(envs[e], "-") ? envs[e] : "defaults",
                           "size", "count", "type", "redop", "time_us", "min_us", "max_us", "algbw",
                           "busbw", "local_us", "x local", "p2p", "%p2p");
                for (int k = 0; k < nsizes; k++)
                    print_point(tsv, ri, rc[ri], e, op, k);
            }
        }
    return ok ? 0 : 1;
}
