/* float8 against its references in the same run, medians [min, max] of BENCH_REPS
 * interleaved rounds:
 *
 *   bench_float8                      the float8 GEMM (dt_mm on e4m3 inputs, f32 out, widened
 *                                     in the kernel) vs dt_mm in f32, one rank, n x n x n
 *   dtrun -n 2 bench_float8 [ELEMS]   FSDP's parameter all-gather over UCX processes (2 or 4):
 *                                     one unit of one f32 parameter of ELEMS elements (default
 *                                     4 Mi) gathered in float8 (float8_all_gather), in bf16
 *                                     (bf16_all_gather: torchtitan's mixed_precision_param =
 *                                     bfloat16) and in f32: time of dt_fsdp_unit_begin (the
 *                                     amax all_reduce, the cast, the gather, the widening) and
 *                                     the gather's bytes per call (dt_comm_stats), on rank 0
 *                                     between barriers. */
#include <math.h>

#include "bench_util.h"

#define DT_CHECK(call)                                                                             \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

/* ---- the GEMM ---------------------------------------------------------------------------- */

static dt_status mm_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    DT_CHECK(dt_mesh_create_str(ctx, "1", &mesh));
    static const int64_t sizes[] = {128, 256, 512};
    printf("float8 GEMM on the CPU, one rank: (n, n) @ (n, n), median [min, max] of %d rounds\n",
           BENCH_REPS);
    printf("%6s %28s %28s %8s\n", "n", "f32 dt_mm (ms)", "e4m3 dt_mm -> f32 (ms)", "f8/f32");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k], shape[2] = {n, n};
        dt_placement r = dt_replicate();
        dt_tensor *a, *b, *a8, *b8, *out;
        dt_generator gen = dt_generator_make(7);
        DT_CHECK(dt_tensor_randn(mesh, DT_F32, 2, shape, 1, &r, &gen, &a));
        DT_CHECK(dt_tensor_randn(mesh, DT_F32, 2, shape, 1, &r, &gen, &b));
        DT_CHECK(dt_cast(a, DT_F8E4M3, &a8));
        DT_CHECK(dt_cast(b, DT_F8E4M3, &b8));
        double t32[BENCH_REPS], t8[BENCH_REPS];
        for (int rep = -1; rep < BENCH_REPS; rep++) { /* one warm-up round */
            double t0 = bench_now();
            DT_CHECK(dt_mm(a, b, &out));
            double t1 = bench_now();
            dt_tensor_release(out);
            double t2 = bench_now();
            DT_CHECK(dt_mm(a8, b8, &out));
            double t3 = bench_now();
            dt_tensor_release(out);
            if (rep >= 0) t32[rep] = (t1 - t0) * 1e3, t8[rep] = (t3 - t2) * 1e3;
        }
        bench_stat s32 = bench_stat_of(t32, BENCH_REPS), s8 = bench_stat_of(t8, BENCH_REPS);
        printf("%6lld %10.3f [%6.3f, %6.3f] %10.3f [%6.3f, %6.3f] %8.2f\n", (long long)n, s32.med,
               s32.min, s32.max, s8.med, s8.min, s8.max, s8.med / s32.med);
        dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(a8), dt_tensor_release(b8);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

/* ---- FSDP's gather over UCX --------------------------------------------------------------- */

enum { C_F8, C_BF16, C_F32, NCASES };
static const char *const case_names[NCASES] = {"float8 (f32 params)", "bf16 (f32 params)",
                                                "f32"};

typedef struct gather_case {
    dt_fsdp *f;
    dt_tensor *shard;
    double t[BENCH_REPS], ag[BENCH_REPS]; /* unit_begin, and the all_gather inside it (ms) */
    uint64_t bytes, calls;
} gather_case;

static dt_status case_init(dt_mesh *mesh, int c, int64_t elems, gather_case *g) {
    dt_fsdp_options o = dt_fsdp_options_default();
    o.float8_all_gather = c == C_F8;
    o.bf16_all_gather = c == C_BF16;
    DT_CHECK(dt_fsdp_create(mesh, &o, &g->f));
    dt_placement r = dt_replicate();
    dt_tensor *p;
    DT_CHECK(dt_tensor_arange(mesh, DT_F32, 0, (double)elems, 1, 1, &r, &p));
    DT_CHECK(dt_fsdp_shard_param(g->f, p, &g->shard));
    dt_tensor_release(p);
    return dt_fsdp_add_unit(g->f, 1, &g->shard, NULL);
}

static dt_status gather_body(dt_ctx *ctx, void *arg) {
    int64_t elems = *(int64_t *)arg;
    dt_mesh *mesh;
    DT_CHECK(dt_mesh_create_str(ctx, dt_ctx_size(ctx) == 2 ? "2" : "4", &mesh));
    dt_comm *world;
    DT_CHECK(dt_ctx_world_comm(ctx, &world));
    gather_case g[NCASES] = {0};
    for (int c = 0; c < NCASES; c++) DT_CHECK(case_init(mesh, c, elems, &g[c]));
    for (int rep = -1; rep < BENCH_REPS; rep++)
        for (int c = 0; c < NCASES; c++) {
            dt_tensor *full;
            DT_CHECK(dt_barrier(world));
            DT_CHECK(dt_comm_stats_reset(ctx));
            double t0 = bench_now();
            DT_CHECK(dt_fsdp_unit_begin(g[c].f, 0, &full));
            double t1 = bench_now();
            dt_comm_stats st;
            DT_CHECK(dt_comm_stats_get(ctx, &st));
            DT_CHECK(dt_fsdp_unit_end(g[c].f, 0));
            if (rep < 0) continue;
            g[c].t[rep] = (t1 - t0) * 1e3;
            g[c].ag[rep] = st.time_us[DT_COLL_ALL_GATHER] * 1e-3;
            g[c].bytes = st.bytes_out[DT_COLL_ALL_GATHER];
            g[c].calls = st.calls[DT_COLL_ALL_GATHER];
        }
    if (dt_ctx_rank(ctx) == 0) {
        printf("FSDP parameter all-gather over UCX, %d processes, one parameter of %lld "
               "elements; median [min, max] of %d rounds\n",
               dt_ctx_size(ctx), (long long)elems, BENCH_REPS);
        printf("%-20s %30s %7s %30s %7s %10s\n", "gather", "dt_fsdp_unit_begin (ms)", "x bf16",
               "its all_gather alone (ms)", "x bf16", "bytes/call");
        bench_stat b = bench_stat_of(g[C_BF16].t, BENCH_REPS);
        bench_stat ba = bench_stat_of(g[C_BF16].ag, BENCH_REPS);
        for (int c = 0; c < NCASES; c++) {
            bench_stat s = bench_stat_of(g[c].t, BENCH_REPS), a = bench_stat_of(g[c].ag, BENCH_REPS);
            printf("%-20s %10.3f [%7.3f, %7.3f] %7.2f %10.3f [%7.3f, %7.3f] %7.2f %10llu\n",
                   case_names[c], s.med, s.min, s.max, s.med / b.med, a.med, a.min, a.max,
                   a.med / ba.med,
                   (unsigned long long)(g[c].calls ? g[c].bytes / g[c].calls : 0));
        }
    }
    for (int c = 0; c < NCASES; c++) {
        dt_tensor_release(g[c].shard);
        DT_CHECK(dt_fsdp_destroy(g[c].f));
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

int main(int argc, char **argv) {
    dt_status st;
    if (getenv("RANK") || getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK")) {
        int64_t elems = argc > 1 ? atoll(argv[1]) : (int64_t)4 << 20;
        st = dt_ucx_run(gather_body, &elems);
    } else {
        dt_status rs;
        st = dt_local_run(1, mm_body, NULL, &rs);
        if (st == DT_OK) st = rs;
    }
    if (st != DT_OK) {
        fprintf(stderr, "bench_float8: %s: %s\n", dt_status_str(st), dt_last_error());
        return 1;
    }
    return 0;
}
