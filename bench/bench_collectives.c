/* The local runtime's collectives as nccl-tests reports them: size, count, type, time, algbw,
 * busbw, over a size sweep (1 KiB to 64 MiB, x4) and a rank sweep (2, 4, 8 threads), f32 sum.
 *
 * Sizes are nccl-tests' "size": the whole buffer (all_gather: the gathered output,
 * reduce_scatter and all_to_all: each rank's input, all_reduce and broadcast: the vector).
 * algbw = size / time; busbw = algbw x (n-1)/n (all_gather, reduce_scatter, all_to_all),
 * x 2(n-1)/n (all_reduce), x 1 (broadcast): the ring model's bytes per link. Each point is also
 * set against a copy of the least bytes each rank must move ("must", (read + written) / 2,
 * every input byte read once and every output byte written once: all_gather (n+1)/(2n) S,
 * reduce_scatter (n+1)/(2n) S, all_reduce, all_to_all and broadcast S) on every rank at once,
 * in the same round: streaming stores from
 * 256 KiB on, memcpy below (core/copy.h, dt_copy_large). mem% = copy time / collective time.
 *
 * Method: one warm-up round, then BENCH_REPS rounds; a round times every collective at every
 * size and its copy, each from a barrier to the barrier after a batch of iterations (enough
 * for about 4 MiB, at most 64), divided by the batch. No cache flush: small sizes run from the
 * cache, as in a training step. Figures: median [min, max] over rounds.
 *
 *   bench_collectives [--quick] [--tsv] [--ranks 2,4,8] [--max BYTES] [--busy N]
 * --tsv prints one line per point for bench_html (see the header line). --quick: sizes x16 up
 * to 16 MiB, for a run of seconds. --busy N: N other processes spin on the CPU for the whole
 * run, as a build or another job beside the ranks would (how waits fare when something else
 * wants the cores). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dtensor.h>

#include "bench_util.h"
#include "core/alloc.h"
#include "core/copy.h"

enum { OP_AG, OP_RS, OP_AR, OP_A2A, OP_BC, NOPS };
static const char *const op_names[NOPS] = {"all_gather", "reduce_scatter", "all_reduce",
                                           "all_to_all", "broadcast"};
#define MAX_SIZES      24
#define MAX_RANKCOUNTS 8

static size_t sizes[MAX_SIZES];
static int nsizes;
/* [rank count][op][size][round]: collective and copy seconds per iteration (rank 0's). */
static double t_op[MAX_RANKCOUNTS][NOPS][MAX_SIZES][BENCH_REPS];
static double t_ref[MAX_RANKCOUNTS][NOPS][MAX_SIZES][BENCH_REPS];
static int cur; /* the rank count being measured */

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static double must_bytes(int op, size_t size, int n) {
    double s = (double)size;
    if (op == OP_RS || op == OP_AG) return (n + 1) / (2.0 * n) * s; /* S: the whole buffer */
    return s;
}

static double bus_factor(int op, int n) {
    if (op == OP_AR) return 2.0 * (n - 1) / n;
    if (op == OP_BC) return 1.0;
    return (double)(n - 1) / n;
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

static dt_status body(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *c;
    TRY(dt_ctx_world_comm(ctx, &c));
    size_t cap = sizes[nsizes - 1];                            /* the largest "must" is S */
    float *in = dt_host_alloc(cap), *out = dt_host_alloc(cap); /* as tensors are */
    if (!in || !out) return dt_error_set(DT_ERR_NOMEM, "bench: out of memory");
    memset(in, 0, cap); /* zeros: sums stay normal floats */
    memset(out, 0, cap);
    dt_status st = DT_OK;
    for (int r = -1; r < BENCH_REPS && st == DT_OK; r++)
        for (int op = 0; op < NOPS && st == DT_OK; op++)
            for (int k = 0; k < nsizes && st == DT_OK; k++) {
                size_t s = sizes[k], must = (size_t)must_bytes(op, s, n);
                int iters = (int)(((size_t)4 << 20) / s);
                iters = iters < 1 ? 1 : iters > 64 ? 64 : iters;
                st = dt_barrier(c);
                double t0 = bench_now();
                for (int i = 0; i < iters && st == DT_OK; i++)
                    st = run_op(c, op, in, out, s, n);
                if (st == DT_OK) st = dt_barrier(c);
                double t1 = bench_now();
                for (int i = 0; i < iters; i++)
                    dt_copy_large(out, in, must);
                if (st == DT_OK) st = dt_barrier(c);
                double t2 = bench_now();
                if (r >= 0 && me == 0) {
                    t_op[cur][op][k][r] = (t1 - t0) / iters;
                    t_ref[cur][op][k][r] = (t2 - t1) / iters;
                }
            }
    dt_host_free(in);
    dt_host_free(out);
    return st;
}

/* N processes that spin until killed (--busy); returns how many started. */
static int start_busy(int n, pid_t *pids) {
    int started = 0;
    for (; started < n; started++) {
        pid_t p = fork();
        if (p < 0) break;
        if (p == 0) { /* dies with the bench, however the bench ends */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() == 1) _exit(0);
            for (volatile unsigned long x = 0;; x++) {
            }
        }
        pids[started] = p;
    }
    return started;
}

static void stop_busy(int n, const pid_t *pids) {
    for (int i = 0; i < n; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
}

enum { MAX_BUSY = 64 };

int main(int argc, char **argv) {
    int quick = 0, tsv = 0, nr = 3, rc[MAX_RANKCOUNTS] = {2, 4, 8}, busy = 0;
    pid_t busy_pids[MAX_BUSY] = {0};
    size_t max = (size_t)64 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--tsv"))
            tsv = 1;
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--busy") && i + 1 < argc)
            busy = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
            nr = 0;
            for (char *p = argv[++i]; *p && nr < MAX_RANKCOUNTS; p += *p == ',')
                rc[nr++] = (int)strtol(p, &p, 10);
        } else {
            fprintf(stderr, "usage: bench_collectives [--quick] [--tsv] [--ranks 2,4,8] "
                            "[--max BYTES] [--busy N]\n");
            return 2;
        }
    }
    if (busy < 0 || busy > MAX_BUSY) {
        fprintf(stderr, "bench_collectives: --busy %d: give 0 to %d processes\n", busy, MAX_BUSY);
        return 2;
    }
    if (quick && max > ((size_t)16 << 20)) max = (size_t)16 << 20;
    for (size_t s = 1024; s <= max && nsizes < MAX_SIZES; s *= quick ? 16 : 4)
        sizes[nsizes++] = s;
    if (nsizes == 0 || (sizes[nsizes - 1] != max && nsizes < MAX_SIZES)) sizes[nsizes++] = max;
    for (int i = 0; i < nr; i++)
        if (rc[i] < 2 || rc[i] > 64 || max % (4 * (size_t)rc[i])) {
            fprintf(stderr,
                    "bench_collectives: %d ranks: ranks go from 2 to 64 and --max must "
                    "be a multiple of 4 x ranks\n",
                    rc[i]);
            return 2;
        }
    int spinning = start_busy(busy, busy_pids);
    for (cur = 0; cur < nr; cur++)
        if (dt_local_run(rc[cur], body, NULL, NULL) != DT_OK) {
            fprintf(stderr, "bench_collectives (%d ranks) failed: %s\n", rc[cur], dt_last_error());
            stop_busy(spinning, busy_pids);
            return 1;
        }
    stop_busy(spinning, busy_pids);
    if (tsv)
        printf("ranks\top\tsize\tcount\ttype\tredop\ttime_us\tmin_us\tmax_us\talgbw\tbusbw\t"
               "must_GBps\tcopy_GBps\tmem_pct\n");
    else
        printf("local runtime collectives, %ld cores%s; median [min, max] of %d interleaved "
               "rounds; GB/s = 1e9 B/s\n",
               sysconf(_SC_NPROCESSORS_ONLN), spinning ? ", beside spinning processes" : "",
               BENCH_REPS);
    for (int ri = 0; ri < nr; ri++) {
        int n = rc[ri];
        for (int op = 0; op < NOPS; op++) {
            if (!tsv)
                printf("\n# %s, %d ranks\n%12s %12s %6s %6s %10s %10s %10s %8s %8s %7s\n",
                       op_names[op], n, "size", "count", "type", "redop", "time_us", "min_us",
                       "max_us", "algbw", "busbw", "mem%");
            for (int k = 0; k < nsizes; k++) {
                bench_stat o = bench_stat_of(t_op[ri][op][k], BENCH_REPS);
                bench_stat f = bench_stat_of(t_ref[ri][op][k], BENCH_REPS);
                double size = (double)sizes[k], alg = size / o.med / 1e9;
                double must = must_bytes(op, sizes[k], n);
                const char *redop = op == OP_RS || op == OP_AR ? "sum" : "none";
                if (tsv)
                    printf("%d\t%s\t%zu\t%zu\tfloat\t%s\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t"
                           "%.1f\n",
                           n, op_names[op], sizes[k], sizes[k] / 4, redop, o.med * 1e6, o.min * 1e6,
                           o.max * 1e6, alg, alg * bus_factor(op, n), must / o.med / 1e9,
                           must / f.med / 1e9, 100 * f.med / o.med);
                else
                    printf("%12zu %12zu %6s %6s %10.2f %10.2f %10.2f %8.3f %8.3f %6.0f%%\n",
                           sizes[k], sizes[k] / 4, "float", redop, o.med * 1e6, o.min * 1e6,
                           o.max * 1e6, alg, alg * bus_factor(op, n), 100 * f.med / o.med);
            }
        }
    }
    return 0;
}
