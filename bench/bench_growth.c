/* Cost growth: how the redistribute planner's time grows with the mesh, and how a redistribute
 * on the local runtime grows with the tensor and with the number of ranks, each next to a
 * memcpy of the same bytes measured in the same run.
 *
 * (1) Planner: dt_plan_create on mesh descriptions only (no ranks), 1-D meshes of 2..8192
 *     ranks and 2-D / 3-D meshes up to 8192 ranks, for four transitions. dt_plan_create has no
 *     cache (the plan cache belongs to mesh objects, used by dt_tensor_redistribute), so every
 *     call searches. Each figure: median (min-max) of repeated calls, timed one by one.
 * (2) Local runtime (ranks are threads, dt_local_run): S(0)->R (all_gather) and P->S(0)
 *     (reduce_scatter) vs bytes per rank at 4 ranks, and vs rank count at 1 MiB per rank. The
 *     reference is a memcpy of the bytes the transition must move per rank ((read + written)
 *     / 2, as bench_redistribute: S->R (n+1)/2 s, P->S (n+1)/(2n) T) on every rank at once.
 *     A round runs every size, case and reference once, each after a cache flush and timed
 *     from a barrier to the barrier after the last rank; figures are the median (min-max)
 *     over rounds. Rank 0 alone flushes (writes and reads 4 x the shared last-level cache)
 *     while the others wait: with every rank flushing its part at once, as bench_redistribute
 *     does, 4 threads on 2 cores gave bimodal small-size figures (0.1 or 2-5 ms, even for a
 *     4 KiB memcpy). The other core's private L2 (1 MiB here) may keep some data. The plan
 *     comes from the mesh's cache after the warm-up round, as in a training loop.
 *
 *   bench_growth [--quick]    (BENCH_QUICK=1 in the environment is --quick: fewer repetitions,
 *                              x16 size steps, about 30 s on 2 cores) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

#include "bench_util.h"
#include "core/alloc.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static int quick;

/* ---- (1) the planner --------------------------------------------------------------------- */

#define NTRANS        4
#define MAX_PLAN_REPS 201

typedef struct mesh_row {
    int ndim, shape[3];
} mesh_row;

static const mesh_row meshes[] = {
    {1, {2}},        {1, {4}},          {1, {8}},       {1, {16}},      {1, {32}},
    {1, {64}},       {1, {128}},        {1, {256}},     {1, {512}},     {1, {1024}},
    {1, {2048}},     {1, {4096}},       {1, {8192}},    {2, {2, 2}},    {2, {4, 8}},
    {2, {16, 16}},   {2, {32, 64}},     {2, {64, 128}}, {3, {2, 2, 2}}, {3, {4, 4, 8}},
    {3, {8, 8, 16}}, {3, {16, 16, 32}},
};
#define NMESHES ((int)(sizeof meshes / sizeof meshes[0]))

/* Source and target placements per mesh ndim (1..3); NULL: not on meshes of that ndim. The
 * first three change every mesh dim the same way; the fourth mixes kinds over the dims. */
static const char *const trans[NTRANS][3][2] = {
    {{"S(0)", "R"}, {"S(0),S(0)", "R,R"}, {"S(0),S(0),S(0)", "R,R,R"}},
    {{"P(sum)", "S(0)"},
     {"P(sum),P(sum)", "S(0),S(0)"},
     {"P(sum),P(sum),P(sum)", "S(0),S(0),S(0)"}},
    {{"S(0)", "S(1)"}, {"S(0),S(0)", "S(1),S(1)"}, {"S(0),S(0),S(0)", "S(1),S(1),S(1)"}},
    {{NULL, NULL}, {"S(0),S(1)", "R,S(0)"}, {"S(0),S(1),P(sum)", "R,S(0),S(1)"}},
};
static const char *const trans_name[NTRANS] = {"S(0)->R", "P->S(0)", "S(0)->S(1)", "mixed"};

/* A 16 GiB f32 tensor (8192, 8192, 64): every dim sharded over 8192 ranks keeps a row. */
static const int64_t plan_shape[3] = {8192, 8192, 64};

/* Times dt_plan_create for one mesh and transition: reps calls (fewer when they pass 0.3 s,
 * never under 7), one warm-up call before. *ncoll_out: collectives in the plan. */
static dt_status time_plan(const mesh_row *m, int t, int reps, bench_stat *out, int *ncoll_out) {
    dt_placement src[3], dst[3];
    int ns, nd;
    TRY(dt_placements_parse(trans[t][m->ndim - 1][0], src, 3, &ns));
    TRY(dt_placements_parse(trans[t][m->ndim - 1][1], dst, 3, &nd));
    double v[MAX_PLAN_REPS], spent = 0;
    int n = 0;
    for (int r = -1; r < reps && (n < 7 || spent < 0.3); r++) {
        dt_plan *p = NULL;
        double t0 = bench_now();
        TRY(dt_plan_create(m->ndim, m->shape, 3, plan_shape, DT_F32, src, dst, NULL, &p));
        double dt = bench_now() - t0;
        *ncoll_out = dt_plan_ncollectives(p);
        dt_plan_release(p);
        if (r < 0) continue;
        v[n++] = dt;
        spent += dt;
    }
    *out = bench_stat_of(v, n);
    return DT_OK;
}

static int run_planner(void) {
    int reps = quick ? 31 : MAX_PLAN_REPS;
    printf("(1) redistribute planner: dt_plan_create (no cache: every call searches) on mesh "
           "descriptions, f32 tensor (8192, 8192, 64);\n    us per call, median (min-max) of up "
           "to %d calls [collectives in the plan]\n",
           reps);
    for (int t = 0; t < NTRANS; t++)
        printf("    %-10s 1-D %s -> %s; 2-D %s -> %s; 3-D %s -> %s\n", trans_name[t],
               trans[t][0][0] ? trans[t][0][0] : "-", trans[t][0][1] ? trans[t][0][1] : "-",
               trans[t][1][0], trans[t][1][1], trans[t][2][0], trans[t][2][1]);
    printf("%-10s %5s", "mesh", "ranks");
    for (int t = 0; t < NTRANS; t++)
        printf("  %-26s", trans_name[t]);
    printf("\n");
    for (int i = 0; i < NMESHES; i++) {
        const mesh_row *m = &meshes[i];
        char name[32];
        int ranks = 1;
        if (m->ndim == 1)
            snprintf(name, sizeof name, "%d", m->shape[0]);
        else if (m->ndim == 2)
            snprintf(name, sizeof name, "%dx%d", m->shape[0], m->shape[1]);
        else
            snprintf(name, sizeof name, "%dx%dx%d", m->shape[0], m->shape[1], m->shape[2]);
        for (int d = 0; d < m->ndim; d++)
            ranks *= m->shape[d];
        printf("%-10s %5d", name, ranks);
        for (int t = 0; t < NTRANS; t++) {
            char cell[64] = "-";
            if (trans[t][m->ndim - 1][0]) {
                bench_stat s;
                int ncoll = 0;
                if (time_plan(m, t, reps, &s, &ncoll) != DT_OK) {
                    fprintf(stderr, "\nbench_growth: planning %s on %s failed: %s\n", trans_name[t],
                            name, dt_last_error());
                    return 1;
                }
                snprintf(cell, sizeof cell, "%.1f (%.1f-%.1f) [%d]", s.med * 1e6, s.min * 1e6,
                         s.max * 1e6, ncoll);
            }
            printf("  %-26s", cell);
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

/* ---- (2) the local runtime --------------------------------------------------------------- */

#define MAX_SIZES 8
#define NCASES    2
enum { W_OP, W_MEMCPY, NWHICH };

static const char *const case_name[NCASES] = {"S(0)->R", "P->S(0)"};

typedef struct sweep {
    int ranks, nsizes, reps;
    size_t sizes[MAX_SIZES]; /* bytes of input per rank */
    double t[MAX_SIZES][NCASES][NWHICH][BENCH_REPS];
} sweep;

/* Bytes per rank a transition must move (see the top of the file). */
static double must_bytes(int c, int n, size_t s) {
    return c == 0 ? (n + 1) / 2.0 * (double)s : (n + 1) / (2.0 * n) * (double)s;
}

/* Inputs for one size, E = bytes / 4 floats per rank: S(0) of (n, E), each rank a row; and
 * P(sum) of (n, E / n), reduce-scattered into a row per rank. */
static dt_status make_inputs(dt_mesh *mesh, int n, size_t bytes, dt_tensor **in) {
    const int64_t e = (int64_t)(bytes / 4);
    const int64_t shapes[NCASES][2] = {{n, e}, {n, e / n}};
    const char *pl[NCASES] = {"S(0)", "P(sum)"};
    for (int i = 0; i < NCASES; i++) {
        TRY(bench_input(mesh, shapes[i], pl[i], &in[i]));
    }
    return DT_OK;
}

typedef struct bufs {
    char *src, *dst, *flush;
    size_t flush_bytes;
} bufs;

static dt_status run_one(dt_comm *world, dt_tensor *in, int c, int which, size_t must,
                         const bufs *b, double *out) {
    if (b->flush) bench_flush(b->flush, b->flush_bytes); /* rank 0 only, see the top */
    return bench_redistribute_or_copy(world, in, c == 0 ? "R" : "S(0)", which != W_OP, b->dst,
                                      b->src, must, out);
}

static dt_status sweep_body(dt_ctx *ctx, void *arg) {
    sweep *sw = arg;
    const int n = sw->ranks;
    char spec[16];
    snprintf(spec, sizeof spec, "%d", n);
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, spec, &mesh));
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    dt_tensor *in[MAX_SIZES][NCASES] = {{NULL}};
    size_t ref = 0;
    for (int s = 0; s < sw->nsizes; s++) {
        TRY(make_inputs(mesh, n, sw->sizes[s], in[s]));
        for (int c = 0; c < NCASES; c++)
            if (must_bytes(c, n, sw->sizes[s]) > (double)ref)
                ref = (size_t)must_bytes(c, n, sw->sizes[s]);
    }
    const int flusher = dt_ctx_rank(ctx) == 0;
    bufs b = {dt_host_alloc(ref), dt_host_alloc(ref), NULL, 4 * bench_llc_bytes()};
    if (flusher) b.flush = malloc(b.flush_bytes);
    if (!b.src || !b.dst || (flusher && !b.flush))
        return dt_error_set(DT_ERR_NOMEM, "bench: out of memory");
    memset(b.src, 1, ref);
    memset(b.dst, 2, ref);
    dt_status st = DT_OK;
    for (int r = -1; r < sw->reps && st == DT_OK; r++) /* r = -1: warm-up */
        for (int s = 0; s < sw->nsizes && st == DT_OK; s++)
            for (int c = 0; c < NCASES && st == DT_OK; c++)
                for (int w = 0; w < NWHICH && st == DT_OK; w++) {
                    double t;
                    size_t must = (size_t)must_bytes(c, n, sw->sizes[s]);
                    st = run_one(world, in[s][c], c, w, must, &b, &t);
                    if (st == DT_OK && r >= 0 && dt_ctx_rank(ctx) == 0) sw->t[s][c][w][r] = t;
                }
    dt_host_free(b.src);
    dt_host_free(b.dst);
    free(b.flush);
    for (int s = 0; s < sw->nsizes; s++)
        for (int c = 0; c < NCASES; c++)
            dt_tensor_release(in[s][c]);
    dt_mesh_release(mesh);
    return st;
}

static void print_size(size_t bytes, char *buf, size_t cap) {
    if (bytes >= (size_t)1 << 20)
        snprintf(buf, cap, "%zu MiB", bytes >> 20);
    else
        snprintf(buf, cap, "%zu KiB", bytes >> 10);
}

/* One row per (size, case) of a finished sweep; key: "size" or "ranks" first. */
static void print_rows(const sweep *sw, int by_ranks) {
    for (int s = 0; s < sw->nsizes; s++)
        for (int c = 0; c < NCASES; c++) {
            bench_stat op = bench_stat_of(sw->t[s][c][W_OP], sw->reps);
            bench_stat mc = bench_stat_of(sw->t[s][c][W_MEMCPY], sw->reps);
            double must = must_bytes(c, sw->ranks, sw->sizes[s]);
            char key[32], cell[2][48];
            if (by_ranks)
                snprintf(key, sizeof key, "%d", sw->ranks);
            else
                print_size(sw->sizes[s], key, sizeof key);
            snprintf(cell[0], sizeof cell[0], "%.3f (%.3f-%.3f)", op.med * 1e3, op.min * 1e3,
                     op.max * 1e3);
            snprintf(cell[1], sizeof cell[1], "%.3f (%.3f-%.3f)", mc.med * 1e3, mc.min * 1e3,
                     mc.max * 1e3);
            printf("%-8s %-8s %9.3f  %-28s %7.2f  %-28s %7.2f %6.0f%%\n", key, case_name[c],
                   must / 1048576, cell[0], must / op.med / 1e9, cell[1], must / mc.med / 1e9,
                   100 * mc.med / op.med);
        }
    fflush(stdout);
}

static void print_header(void) {
    printf("%-8s %-8s %9s  %-28s %7s  %-28s %7s %7s\n", "", "case", "must MiB",
           "redistribute ms (min-max)", "GB/s", "memcpy ms (min-max)", "GB/s", "%mcpy");
}

static int run_local(void) {
    int reps = quick ? 7 : BENCH_REPS;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    static sweep sw; /* large: the timings of every round */
    printf("\n(2) redistribute on the local runtime (ranks = threads on %ld cores; above %ld ranks "
           "the threads oversubscribe the cores, so time grows with ranks also from scheduling), "
           "f32;\n    median (min-max) of %d interleaved rounds, each run after rank 0 flushed 4 x "
           "%zu MiB LLC; must = least bytes per rank ((read + written) / 2),\n    memcpy = a "
           "memcpy of those bytes on every rank at once, %%mcpy = memcpy time / redistribute "
           "time\n",
           cores, cores, reps, bench_llc_bytes() >> 20);
    memset(&sw, 0, sizeof sw);
    sw.ranks = 4;
    sw.reps = reps;
    for (size_t b = (size_t)4 << 10; b <= (size_t)16 << 20; b *= quick ? 16 : 4)
        sw.sizes[sw.nsizes++] = b;
    printf("(2a) vs bytes of input per rank, 4 ranks\n");
    print_header();
    if (dt_local_run(4, sweep_body, &sw, NULL) != DT_OK) {
        fprintf(stderr, "bench_growth failed: %s\n", dt_last_error());
        return 1;
    }
    print_rows(&sw, 0);
    printf("(2b) vs ranks, 1 MiB of input per rank\n");
    print_header();
    for (int n = 2; n <= 64; n *= 2) {
        memset(&sw, 0, sizeof sw);
        sw.ranks = n;
        sw.reps = reps;
        sw.nsizes = 1;
        sw.sizes[0] = (size_t)1 << 20;
        if (dt_local_run(n, sweep_body, &sw, NULL) != DT_OK) {
            fprintf(stderr, "bench_growth failed at %d ranks: %s\n", n, dt_last_error());
            return 1;
        }
        print_rows(&sw, 1);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *q = getenv("BENCH_QUICK");
    quick = q && *q && strcmp(q, "0") != 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(stderr, "usage: bench_growth [--quick]\n");
            return 2;
        }
    }
    int rc = run_planner();
    return rc ? rc : run_local();
}
