/* Redistribute bandwidth on the local runtime: 4 ranks, 16 MiB per rank (f32), for S->R,
 * P->R, P->S and S(0)->S(1). Each figure is printed next to the time plain memcpy needs to
 * move the same bytes per rank with the same number of threads, measured in the same run.
 * Bytes per rank follow the ring model (NCCL's bus bandwidth): all_gather and all_to_all
 * move (n-1)/n of the output, reduce_scatter (n-1)/n of the input, all_reduce twice that.
 * Both sides are timed from a barrier to the barrier after the last rank is done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dtensor.h>

#define RANKS 4
#define PER_RANK (16u << 20) /* bytes of each rank's input shard */
#define REPS 7

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct bench_case {
    const char *name, *src, *dst;
    int64_t shape[2];
    double bytes_per_rank; /* ring-model bytes each rank moves */
    double best_s, ref_s;
} bench_case;

static double times[RANKS];

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static dt_status redistribute_body(dt_ctx *ctx, void *arg) {
    bench_case *c = arg;
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, "4", &mesh));
    dt_placement src[1], dst[1];
    int n;
    TRY(dt_placements_parse(c->src, src, 1, &n));
    TRY(dt_placements_parse(c->dst, dst, 1, &n));
    dt_tensor *t;
    TRY(dt_tensor_zeros(mesh, DT_F32, 2, c->shape, DT_COUNT_OF(src), src, &t));
    dt_tensor_info info;
    dt_tensor_info_get(t, &info);
    memset(info.local_data, 1, info.local_bytes); /* touch the pages */
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        dt_tensor *u;
        TRY(dt_barrier(world));
        double t0 = now();
        TRY(dt_tensor_redistribute(t, DT_COUNT_OF(dst), dst, &u));
        TRY(dt_barrier(world)); /* the time until every rank is done */
        double dt = now() - t0;
        if (dt < best) best = dt;
        dt_tensor_release(u);
    }
    times[dt_ctx_rank(ctx)] = best;
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* The reference: every thread memcpys the same number of bytes at the same time. */
static dt_status memcpy_body(dt_ctx *ctx, void *arg) {
    bench_case *c = arg;
    size_t bytes = (size_t)c->bytes_per_rank;
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) return dt_error_set(DT_ERR_NOMEM, "bench: out of memory");
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        TRY(dt_barrier(world));
        double t0 = now();
        memcpy(b, a, bytes);
        TRY(dt_barrier(world));
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    times[dt_ctx_rank(ctx)] = best;
    free(a);
    free(b);
    return DT_OK;
}

int main(int argc, char **argv) {
    /* --table: rows of "case<TAB>figure<TAB>reference<TAB>ratio" for make bench */
    int table = argc > 1 && !strcmp(argv[1], "--table");
    const int64_t rows = PER_RANK / 4 / 1024; /* f32, 1024 columns: 4096 rows per shard */
    double n = RANKS, shard = PER_RANK;
    bench_case cases[] = {
        {"S(0)->R  (all_gather)", "S(0)", "R", {rows * RANKS, 1024}, shard * (n - 1), 0, 0},
        {"P->R     (all_reduce)", "P(sum)", "R", {rows, 1024}, 2 * shard * (n - 1) / n, 0, 0},
        {"P->S(0)  (reduce_scatter)", "P(sum)", "S(0)", {rows, 1024}, shard * (n - 1) / n, 0, 0},
        {"S(0)->S(1) (all_to_all)",
         "S(0)",
         "S(1)",
         {rows * RANKS, 1024},
         shard * (n - 1) / n,
         0,
         0},
    };
    if (!table) {
        printf("redistribute on the local runtime: %d ranks (threads), %u MiB per rank, f32, best "
               "of %d\n", RANKS, PER_RANK >> 20, REPS);
        printf("%-28s %10s %10s %12s %12s %7s\n", "case", "time ms", "GB/s/rank", "memcpy ms",
               "memcpy GB/s", "ratio");
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bench_case *c = &cases[i];
        if (dt_local_run(RANKS, redistribute_body, c, NULL) != DT_OK) {
            fprintf(stderr, "bench failed: %s\n", dt_last_error());
            return 1;
        }
        c->best_s = times[0];
        if (dt_local_run(RANKS, memcpy_body, c, NULL) != DT_OK) {
            fprintf(stderr, "bench failed: %s\n", dt_last_error());
            return 1;
        }
        c->ref_s = times[0];
        if (table)
            printf("redistribute %s, 4 ranks x 16 MiB\t%.2f GB/s/rank\tmemcpy %.2f "
                   "GB/s/rank\t%.0f%%\n",
                   c->name, c->bytes_per_rank / c->best_s / 1e9, c->bytes_per_rank / c->ref_s / 1e9,
                   100 * c->ref_s / c->best_s);
        else
            printf("%-28s %10.2f %10.2f %12.2f %12.2f %6.0f%%\n", c->name, c->best_s * 1e3,
                   c->bytes_per_rank / c->best_s / 1e9, c->ref_s * 1e3,
                   c->bytes_per_rank / c->ref_s / 1e9, 100 * c->ref_s / c->best_s);
    }
    return 0;
}
