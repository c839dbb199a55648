/* make demo: a 2x2 ("dp","tp") mesh of 4 in-process ranks.
 * Part 1: a 5x6 tensor is sharded as (Shard(0), Shard(1)) from rank 0, each rank prints its
 * shard, and the shards are gathered back and compared with the original on every rank.
 * Part 2: a transformer block forward, tensor- and sequence-parallel, checked against the
 * same block computed unsharded; prints each step's placements and the communication, and
 * writes a trace (Perfetto / chrome://tracing) and a timeline page.
 * demo [--cuda] [outdir]: --cuda puts the 4 ranks on the GPU(s) (several ranks per GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "block.h"

#define ROWS 5
#define COLS 6

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) {                                                                        \
            fprintf(stderr, "%s failed: %s: %s\n", #call, dt_status_str(st_), dt_last_error());  \
            return st_;                                                                            \
        }                                                                                          \
    } while (0)

static dt_status show_shard(dt_tensor *t, int rank) {
    dt_tensor_info info;
    float x[ROWS * COLS];
    TRY(dt_tensor_info_get(t, &info));
    TRY(dt_tensor_local_to_host(t, x, sizeof x)); /* the shard may live on a GPU */
    printf("rank %d (dp=%d, tp=%d) holds rows [%lld:%lld) cols [%lld:%lld):\n", rank,
           dt_mesh_coord(info.mesh, 0), dt_mesh_coord(info.mesh, 1),
           (long long)info.local_offset[0], (long long)(info.local_offset[0] + info.local_shape[0]),
           (long long)info.local_offset[1],
           (long long)(info.local_offset[1] + info.local_shape[1]));
    for (int64_t i = 0; i < info.local_shape[0]; i++) {
        printf("   ");
        for (int64_t j = 0; j < info.local_shape[1]; j++)
            printf(" %5.1f", x[i * info.local_shape[1] + j]);
        printf("\n");
    }
    fflush(stdout);
    return DT_OK;
}

static dt_status layout_part(dt_ctx *ctx) {
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    float full[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) full[i] = (float)(i / COLS) + (float)(i % COLS) / 10.0f;
    dt_placement pl[2];
    int n;
    TRY(dt_placements_parse("S(0),S(1)", pl, 2, &n));
    int64_t shape[2] = {ROWS, COLS};
    dt_tensor *t;
    /* Only rank 0 passes the full tensor; it sends every other rank its shard. */
    TRY(dt_tensor_distribute(mesh, rank == 0 ? full : NULL, DT_F32, 2, shape, DT_COUNT_OF(pl), pl,
                             0, &t));
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    if (rank == 0) {
        printf("dtensor demo: 4 ranks as threads, mesh dp=2 x tp=2\n\n");
        TRY(dt_tensor_print_layout(t, stdout));
        printf("\n");
    }
    for (int r = 0; r < dt_ctx_size(ctx); r++) { /* print in rank order */
        TRY(dt_barrier(world));
        if (r == rank) TRY(show_shard(t, rank));
    }
    float back[ROWS * COLS];
    TRY(dt_tensor_full_tensor(t, back, sizeof back));
    int ok = memcmp(back, full, sizeof full) == 0;
    int all_ok;
    TRY(dt_all_reduce(world, &ok, &all_ok, 1, DT_I32, DT_REDUCE_MIN));
    if (rank == 0)
        printf("\nfull_tensor on every rank %s the original 5x6 tensor\n",
               all_ok ? "equals" : "DIFFERS FROM");
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return all_ok ? DT_OK : DT_ERR_SHAPE;
}

static const char *outdir = ".";

static dt_status block_part(dt_ctx *ctx) {
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    dt_tensor *x, *xr, *y, *ref;
    TRY(dt_demo_input(mesh, "S(0),S(1)", &x));
    TRY(dt_demo_input(mesh, "R,R", &xr));
    if (rank == 0)
        printf("\ntransformer block forward, tensor + sequence parallel (rank 0's view):\n");
    TRY(dt_trace_start(ctx));
    TRY(dt_comm_stats_reset(ctx));
    TRY(dt_demo_block(ctx, mesh, 1, rank == 0, x, &y));
    TRY(dt_trace_stop(ctx));
    dt_comm_stats stats;
    TRY(dt_comm_stats_get(ctx, &stats));
    for (int r = 0; r < 2; r++) { /* ranks 0 and 1 (tp peers), in order */
        TRY(dt_barrier(world));
        char title[64];
        snprintf(title, sizeof title, "rank %d communication in the block", r);
        if (r == rank) TRY(dt_comm_stats_print(&stats, title, stdout));
    }
    TRY(dt_demo_block(ctx, mesh, 0, 0, xr, &ref)); /* unsharded: every rank computes it whole */
    float got[2 * 8 * 16], want[2 * 8 * 16];
    TRY(dt_tensor_full_tensor(y, got, sizeof got));
    TRY(dt_tensor_full_tensor(ref, want, sizeof want));
    double worst = 0;
    for (int i = 0; i < 2 * 8 * 16; i++) {
        double d = fabs((double)got[i] - want[i]) / (1 + fabs((double)want[i]));
        if (d > worst) worst = d;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/dtensor_trace.rank%d.json", outdir, rank);
    TRY(dt_trace_write(ctx, path));
    TRY(dt_barrier(world));
    if (rank == 0) {
        printf("\nsharded output vs the unsharded block: largest relative difference %.2e (%s)\n",
               worst, worst < 1e-4 ? "ok" : "TOO LARGE");
        char paths[4][4096], trace[4096], html[4096];
        const char *p[4];
        for (int r = 0; r < 4; r++) {
            snprintf(paths[r], sizeof paths[r], "%s/dtensor_trace.rank%d.json", outdir, r);
            p[r] = paths[r];
        }
        snprintf(trace, sizeof trace, "%s/dtensor_trace.json", outdir);
        snprintf(html, sizeof html, "%s/dtensor_timeline.html", outdir);
        TRY(dt_trace_merge(p, 4, trace));
        for (int r = 0; r < 4; r++) remove(paths[r]);
        TRY(dt_trace_render_html(trace, html));
        printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", trace);
        printf("timeline: %s (open in a browser; works offline)\n", html);
    }
    dt_tensor_release(x), dt_tensor_release(xr), dt_tensor_release(y), dt_tensor_release(ref);
    dt_mesh_release(mesh);
    return worst < 1e-4 ? DT_OK : dt_error_set(DT_ERR_SHAPE, "block output differs by %g", worst);
}

static dt_status body(dt_ctx *ctx, void *arg) {
    if (*(int *)arg) TRY(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_status st = layout_part(ctx);
    return st == DT_OK ? block_part(ctx) : st;
}

int main(int argc, char **argv) {
    int cuda = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cuda") == 0) cuda = 1;
        else outdir = argv[i];
    }
    if (cuda) printf("the 4 ranks compute on CUDA device(s): %d visible\n", dt_cuda_device_count());
    dt_status st = dt_local_run(4, body, &cuda, NULL);
    if (st != DT_OK) {
        fprintf(stderr, "demo failed: %s: %s\n", dt_status_str(st), dt_last_error());
        return 1;
    }
    return 0;
}
