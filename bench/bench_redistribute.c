/* Redistribute on the local runtime against memory speed: 4 ranks (threads), 16 MiB of input
 * per rank (f32), the six transitions S(0)->R, S(1)->R, P->R, P->S(0), P->S(1), S(0)->S(1).
 *
 * Each transition is set against a copy of the bytes it must move, run on every rank at once
 * in the same repetition: a streaming copy (non-temporal stores, core/copy.h) and glibc's
 * memcpy. "Must move" is the least memory traffic per rank, (read + written) / 2, which is
 * what a copy of that many bytes reads and writes: every input byte read once (by some rank)
 * and every output byte written once:
 *   S->R (all_gather)        reads s, writes n*s              -> (n+1)/2 s
 *   P->R (all_reduce)        reads T, writes T                -> T
 *   P->S (reduce_scatter)    reads T, writes T/n              -> (n+1)/(2n) T
 *   S(0)->S(1) (all_to_all)  reads s, writes s                -> s
 * (s: a rank's shard, T: a rank's partial tensor; both 16 MiB here). Each row also gives the
 * ring model's bus bandwidth (nccl-tests' busbw): size / time x (n-1)/n, x 2(n-1)/n for P->R.
 *
 * The references copy between buffers from the library's host allocator, as the tensors
 * are (huge pages where the kernel grants them).
 *
 * Method: one warm-up round, then BENCH_REPS rounds; a round runs every transition and both of
 * its references once, each after a cache flush (4 x the last-level cache) and timed from a
 * barrier to the barrier after the last rank is done. Figures: median [min, max] over rounds.
 *
 *   bench_redistribute [--table] [--ranks N] [--mib M] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "bench_util.h"
#include "core/alloc.h"
#include "core/copy.h"

enum { IN_S0, IN_S1, IN_P, NINPUTS };
enum { T_OP, T_STREAM, T_MEMCPY, NTIMES };

typedef struct bench_case {
    const char *name, *src, *dst;
    int input;
    double must;                 /* bytes per rank, see above */
    double bus_size, bus_factor; /* nccl-tests size (bytes) and busbw factor */
    double t[NTIMES][BENCH_REPS];
} bench_case;

#define NCASES 6
static bench_case cases[NCASES];
static int ranks = 4;
static size_t per_rank = (size_t)16 << 20;
static const char *only; /* --case NAME: that case alone (for a profiler) */

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static void set_cases(void) {
    double n = ranks, s = (double)per_rank, ag = (n - 1) / n;
    bench_case c[NCASES] = {
        {"S(0)->R", "S(0)", "R", IN_S0, (n + 1) / 2 * s, n * s, ag, {{0}}},
        {"S(1)->R", "S(1)", "R", IN_S1, (n + 1) / 2 * s, n * s, ag, {{0}}},
        {"P->R", "P(sum)", "R", IN_P, s, s, 2 * ag, {{0}}},
        {"P->S(0)", "P(sum)", "S(0)", IN_P, (n + 1) / (2 * n) * s, s, ag, {{0}}},
        {"P->S(1)", "P(sum)", "S(1)", IN_P, (n + 1) / (2 * n) * s, s, ag, {{0}}},
        {"S(0)->S(1)", "S(0)", "S(1)", IN_S0, s, s, ag, {{0}}},
    };
    memcpy(cases, c, sizeof c);
}

/* The three inputs, 16 MiB per rank each: S(0) of (n*rows, 1024), S(1) of (rows, n*1024), and
 * P(sum) of (rows, 1024), rows = per_rank / 4 KiB. */
static dt_status make_inputs(dt_mesh *mesh, dt_tensor **in) {
    const int64_t rows = (int64_t)(per_rank / 4 / 1024), n = ranks;
    const int64_t shapes[NINPUTS][2] = {{rows * n, 1024}, {rows, 1024 * n}, {rows, 1024}};
    const char *pl[NINPUTS] = {"S(0)", "S(1)", "P(sum)"};
    for (int i = 0; i < NINPUTS; i++) {
        TRY(bench_input(mesh, shapes[i], pl[i], &in[i]));
    }
    return DT_OK;
}

typedef struct bufs {
    char *src, *dst, *flush;
    size_t flush_bytes;
} bufs;

/* One timed run of case c, side which; returns the barrier-to-barrier seconds. */
static dt_status run_one(dt_comm *world, dt_tensor **in, const bench_case *c, int which,
                         const bufs *b, double *out) {
    bench_flush(b->flush, b->flush_bytes);
    dt_placement dst[1];
    int np;
    TRY(dt_placements_parse(c->dst, dst, 1, &np));
    dt_tensor *u = NULL;
    TRY(dt_barrier(world));
    double t0 = bench_now();
    if (which == T_OP)
        TRY(dt_tensor_redistribute(in[c->input], 1, dst, &u));
    else if (which == T_STREAM)
        dt_copy_stream(b->dst, b->src, (size_t)c->must);
    else
        memcpy(b->dst, b->src, (size_t)c->must);
    TRY(dt_barrier(world));
    *out = bench_now() - t0;
    dt_tensor_release(u);
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    (void)arg;
    char spec[16];
    snprintf(spec, sizeof spec, "%d", ranks);
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, spec, &mesh));
    dt_tensor *in[NINPUTS];
    TRY(make_inputs(mesh, in));
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    size_t ref = (size_t)ranks * per_rank; /* the largest "must" */
    bufs b = {dt_host_alloc(ref), dt_host_alloc(ref), NULL, 4 * bench_llc_bytes() / (size_t)ranks};
    b.flush = malloc(b.flush_bytes);
    if (!b.src || !b.dst || !b.flush) return dt_error_set(DT_ERR_NOMEM, "bench: out of memory");
    memset(b.src, 1, ref);
    memset(b.dst, 2, ref);
    dt_status st = DT_OK;
    for (int r = -1; r < BENCH_REPS && st == DT_OK; r++) /* r = -1: warm-up */
        for (int i = 0; i < NCASES && st == DT_OK; i++)
            for (int w = 0; w < NTIMES && st == DT_OK && (!only || !strcmp(only, cases[i].name));
                 w++) {
                double t;
                st = run_one(world, in, &cases[i], w, &b, &t);
                if (st == DT_OK && r >= 0 && dt_ctx_rank(ctx) == 0) cases[i].t[w][r] = t;
            }
    dt_host_free(b.src);
    dt_host_free(b.dst);
    free(b.flush);
    for (int i = 0; i < NINPUTS; i++)
        dt_tensor_release(in[i]);
    dt_mesh_release(mesh);
    return st;
}

int main(int argc, char **argv) {
    int table = 0; /* --table: rows of "case<TAB>figure<TAB>reference<TAB>ratio" for make bench */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--table"))
            table = 1;
        else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            per_rank = (size_t)atoi(argv[++i]) << 20;
        else if (!strcmp(argv[i], "--case") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr,
                    "usage: bench_redistribute [--table] [--ranks N] [--mib M] [--case NAME]\n");
            return 2;
        }
    }
    if (ranks < 2 || ranks > 64 || per_rank < ((size_t)1 << 20)) {
        fprintf(stderr, "bench_redistribute: --ranks 2..64, --mib >= 1\n");
        return 2;
    }
    set_cases();
    int known = !only;
    for (int i = 0; i < NCASES; i++)
        known |= only && !strcmp(only, cases[i].name);
    if (!known) {
        fprintf(stderr, "bench_redistribute: --case \"%s\" is none of S(0)->R, S(1)->R, P->R, "
                        "P->S(0), P->S(1), S(0)->S(1)\n", only);
        return 2;
    }
    if (dt_local_run(ranks, body, NULL, NULL) != DT_OK) {
        fprintf(stderr, "bench_redistribute failed: %s\n", dt_last_error());
        return 1;
    }
    if (!table)
        printf("redistribute on the local runtime: %d ranks (threads) on %ld cores, %zu MiB per "
               "rank, f32; median [min, max] of %d interleaved rounds, each run after a flush of "
               "4 x %zu MiB LLC\nmust = least bytes per rank ((read + written) / 2); stream = "
               "streaming copy of those bytes on every rank at once; busbw = ring model\n%-11s %8s "
               "%22s %9s %9s %9s %7s %7s %8s\n",
               ranks, sysconf(_SC_NPROCESSORS_ONLN), per_rank >> 20, BENCH_REPS,
               bench_llc_bytes() >> 20, "case", "must MiB", "time ms [min, max]", "GB/s", "stream",
               "memcpy", "%strm", "%mcpy", "busbw");
    for (int i = 0; i < NCASES; i++) {
        const bench_case *c = &cases[i];
        if (only && strcmp(only, c->name)) continue;
        bench_stat op = bench_stat_of(c->t[T_OP], BENCH_REPS);
        bench_stat sc = bench_stat_of(c->t[T_STREAM], BENCH_REPS);
        bench_stat mc = bench_stat_of(c->t[T_MEMCPY], BENCH_REPS);
        double gbs = c->must / op.med / 1e9, bus = c->bus_size / op.med / 1e9 * c->bus_factor;
        if (table)
            printf("redistribute %s, %d ranks x %zu MiB\t%.2f ms [%.2f, %.2f], %.2f GB/s/rank, "
                   "busbw %.2f\tstreaming copy %.2f GB/s [%.2f, %.2f] (memcpy %.2f)\t%.0f%%\n",
                   c->name, ranks, per_rank >> 20, op.med * 1e3, op.min * 1e3, op.max * 1e3, gbs,
                   bus, c->must / sc.med / 1e9, c->must / sc.max / 1e9, c->must / sc.min / 1e9,
                   c->must / mc.med / 1e9, 100 * sc.med / op.med);
        else
            printf("%-11s %8.1f %8.2f [%5.2f, %5.2f] %9.2f %9.2f %9.2f %6.0f%% %6.0f%% %8.2f\n",
                   c->name, c->must / 1048576, op.med * 1e3, op.min * 1e3, op.max * 1e3, gbs,
                   c->must / sc.med / 1e9, c->must / mc.med / 1e9, 100 * sc.med / op.med,
                   100 * mc.med / op.med, bus);
    }
    return 0;
}
