/* Redistribute on the UCX runtime (processes of this host under dtrun, f32, 1-D mesh):
 * (1) cost growth, as bench_growth's local tables: S(0)->R, P->S(0), S(0)->S(1) and P->R
 *     vs bytes of input per rank at 4 processes and vs processes (2, 4, 8) at 1 MiB;
 * (2) the six transitions of bench_redistribute (S(0)->R, S(1)->R, P->R, P->S(0), P->S(1),
 *     S(0)->S(1)) on 4 processes x 16 MiB next to PyTorch DTensor's redistribute on 4 gloo
 *     processes (bench/redistribute_torch.py, same shapes) when DT_TORCH_PYTHON names a
 *     python with torch (DT_SOURCE_DIR locates bench/, default "."); else it says skipped.
 *
 * Inputs as bench_redistribute's, for B bytes per rank and rows = B / 4 KiB: S(0) of
 * (n*rows, 1024), S(1) of (rows, n*1024), P(sum) of (rows, 1024). "must" is the least bytes
 * per rank ((read + written) / 2: S->R (n+1)/2 B, P->R B, P->S (n+1)/(2n) B, S(0)->S(1) B) and
 * memcpy a memcpy of those bytes on every process at once. A round runs every size, case and
 * memcpy once, interleaved, each after rank 0 alone flushed 4 x the last-level cache and timed
 * on rank 0 from a barrier to the barrier after the last rank; one warm-up round (which also
 * fills the mesh's plan cache), then BENCH_REPS (--quick: 7); median (min-max). The PyTorch
 * side runs after dtensor's, with its own warm-up and rounds (the same count).
 *
 *   bench_ucx_redistribute [--quick] [--rows FILE]   (BENCH_QUICK=1 is --quick: x16 sizes)
 * --rows FILE appends make bench's table rows (dtensor UCX vs PyTorch gloo) to FILE. */
#include "bench_ucx_util.h"
#include "bench_util.h"
#include "core/alloc.h"

enum { IN_S0, IN_S1, IN_P, NINPUTS };
enum { W_OP, W_MEMCPY, NWHICH };
#define NCASES    6
#define MAX_SIZES 8

typedef struct ucase {
    const char *name, *dst;
    int input;
} ucase;
static const ucase cases[NCASES] = {
    {"S(0)->R", "R", IN_S0},   {"S(1)->R", "R", IN_S1},   {"P->R", "R", IN_P},
    {"P->S(0)", "S(0)", IN_P}, {"P->S(1)", "S(1)", IN_P}, {"S(0)->S(1)", "S(1)", IN_S0},
};
static const int growth_cases[] = {0, 3, 5, 2}; /* S(0)->R, P->S(0), S(0)->S(1), P->R */

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

static double must_bytes(int c, int n, size_t b) {
    const char *name = cases[c].name;
    if (!strcmp(cases[c].dst, "R")) return name[0] == 'P' ? (double)b : (n + 1) / 2.0 * (double)b;
    if (name[0] == 'P') return (n + 1) / (2.0 * n) * (double)b;
    return (double)b;
}

/* ---- a rank: --rank --cases i,j,.. --bytes b,.. --reps R; rank 0 prints
 *      "T case size which med_ms min_ms max_ms" ------------------------------------------ */

typedef struct job_args {
    int cases[NCASES], ncases, nsizes, reps;
    size_t sizes[MAX_SIZES];
} job_args;

static dt_status make_inputs(dt_mesh *mesh, int n, size_t bytes, const int need[NINPUTS],
                             dt_tensor **in) {
    const int64_t rows = (int64_t)(bytes / 4096);
    const int64_t shapes[NINPUTS][2] = {{rows * n, 1024}, {rows, 1024 * (int64_t)n}, {rows, 1024}};
    const char *pl[NINPUTS] = {"S(0)", "S(1)", "P(sum)"};
    for (int i = 0; i < NINPUTS; i++) {
        in[i] = NULL;
        if (need[i]) TRY(bench_input(mesh, shapes[i], pl[i], &in[i]));
    }
    return DT_OK;
}

static dt_status run_one(dt_comm *world, dt_tensor *in, const char *dst_text, int which,
                         size_t must, char *src, char *dst, char *flush, size_t flush_bytes,
                         double *out) {
    if (flush) bench_flush(flush, flush_bytes);
    return bench_redistribute_or_copy(world, in, dst_text, which != W_OP, dst, src, must, out);
}

static dt_status rank_body(dt_ctx *ctx, void *arg) {
    const job_args *a = arg;
    const int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    char spec[16];
    snprintf(spec, sizeof spec, "%d", n);
    dt_mesh *mesh;
    TRY(dt_mesh_create_str(ctx, spec, &mesh));
    dt_comm *world;
    TRY(dt_ctx_world_comm(ctx, &world));
    int need[NINPUTS] = {0};
    size_t ref = 0;
    for (int i = 0; i < a->ncases; i++) {
        need[cases[a->cases[i]].input] = 1;
        for (int s = 0; s < a->nsizes; s++)
            if (must_bytes(a->cases[i], n, a->sizes[s]) > (double)ref)
                ref = (size_t)must_bytes(a->cases[i], n, a->sizes[s]);
    }
    dt_tensor *in[MAX_SIZES][NINPUTS];
    for (int s = 0; s < a->nsizes; s++)
        TRY(make_inputs(mesh, n, a->sizes[s], need, in[s]));
    size_t flush_bytes = 4 * bench_llc_bytes();
    char *src = dt_host_alloc(ref), *dst = dt_host_alloc(ref);
    char *flush = me == 0 ? malloc(flush_bytes) : NULL; /* rank 0 alone, as bench_growth */
    if (!src || !dst || (me == 0 && !flush))
        return dt_error_set(DT_ERR_NOMEM, "bench: out of memory");
    memset(src, 1, ref);
    memset(dst, 2, ref);
    static double t[MAX_SIZES][NCASES][NWHICH][BENCH_REPS];
    dt_status st = DT_OK;
    for (int r = -1; r < a->reps && st == DT_OK; r++) /* r = -1: warm-up */
        for (int s = 0; s < a->nsizes && st == DT_OK; s++)
            for (int i = 0; i < a->ncases && st == DT_OK; i++)
                for (int w = 0; w < NWHICH && st == DT_OK; w++) {
                    const ucase *c = &cases[a->cases[i]];
                    size_t must = (size_t)must_bytes(a->cases[i], n, a->sizes[s]);
                    double v;
                    st = run_one(world, in[s][c->input], c->dst, w, must, src, dst, flush,
                                 flush_bytes, &v);
                    if (st == DT_OK && r >= 0) t[s][i][w][r] = v;
                }
    for (int s = 0; s < a->nsizes && st == DT_OK && me == 0; s++)
        for (int i = 0; i < a->ncases; i++)
            for (int w = 0; w < NWHICH; w++) {
                bench_stat b = bench_stat_of(t[s][i][w], a->reps);
                printf("T %d %d %d %.4f %.4f %.4f\n", a->cases[i], s, w, b.med * 1e3, b.min * 1e3,
                       b.max * 1e3);
            }
    dt_host_free(src);
    dt_host_free(dst);
    free(flush);
    for (int s = 0; s < a->nsizes; s++)
        for (int i = 0; i < NINPUTS; i++)
            dt_tensor_release(in[s][i]);
    dt_mesh_release(mesh);
    return st;
}

/* ---- the driver -------------------------------------------------------------------------- */

/* [case][size][which][med, min, max] in ms from one job; 0 when it failed. */
typedef double job_result[NCASES][MAX_SIZES][NWHICH][3];

static int run_job(int n, const job_args *a, job_result res) {
    char dtrun[1100], self[1024], cmd[4096], list[256] = "";
    if (!bench_find_dtrun(dtrun, sizeof dtrun) || !bench_self(self, sizeof self)) {
        fprintf(stderr, "bench_ucx_redistribute: dtrun not found next to this binary; set "
                        "DT_DTRUN\n");
        return 0;
    }
    int len =
        snprintf(cmd, sizeof cmd, "%s -n %d %s --rank --reps %d --cases ", dtrun, n, self, a->reps);
    for (int i = 0; i < a->ncases; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, "%s%d", i ? "," : "", a->cases[i]);
    for (int s = 0; s < a->nsizes; s++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%zu", s ? "," : "",
                 a->sizes[s]);
    snprintf(cmd + len, sizeof cmd - (size_t)len, " --bytes %s 2>&1", list);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[1024];
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        int c, s, w;
        double v[3];
        if (sscanf(line, "[rank 0] T %d %d %d %lf %lf %lf", &c, &s, &w, &v[0], &v[1], &v[2]) == 6 &&
            c >= 0 && c < NCASES && s >= 0 && s < MAX_SIZES && w >= 0 && w < NWHICH) {
            memcpy(res[c][s][w], v, sizeof v);
            got++;
        } else if (strstr(line, "rror") || strstr(line, "fail"))
            fputs(line, stderr);
    }
    int rc = pclose(p);
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0 && got == a->ncases * a->nsizes * NWHICH;
}

static void print_size(size_t bytes, char *buf, size_t cap) {
    if (bytes >= (size_t)1 << 20)
        snprintf(buf, cap, "%zu MiB", bytes >> 20);
    else
        snprintf(buf, cap, "%zu KiB", bytes >> 10);
}

static void growth_rows(int n, const job_args *a, job_result res, int by_ranks) {
    for (int s = 0; s < a->nsizes; s++)
        for (int i = 0; i < a->ncases; i++) {
            int c = a->cases[i];
            const double *op = res[c][s][W_OP], *mc = res[c][s][W_MEMCPY];
            double must = must_bytes(c, n, a->sizes[s]);
            char key[32], cell[2][48];
            if (by_ranks)
                snprintf(key, sizeof key, "%d", n);
            else
                print_size(a->sizes[s], key, sizeof key);
            snprintf(cell[0], sizeof cell[0], "%.3f (%.3f-%.3f)", op[0], op[1], op[2]);
            snprintf(cell[1], sizeof cell[1], "%.3f (%.3f-%.3f)", mc[0], mc[1], mc[2]);
            printf("%-8s %-10s %9.3f  %-28s %7.2f  %-28s %7.2f %6.0f%%\n", key, cases[c].name,
                   must / 1048576, cell[0], must / op[0] / 1e6, cell[1], must / mc[0] / 1e6,
                   100 * mc[0] / op[0]);
        }
}

static void growth_header(void) {
    printf("%-8s %-10s %9s  %-28s %7s  %-28s %7s %7s\n", "", "case", "must MiB",
           "redistribute ms (min-max)", "GB/s", "memcpy ms (min-max)", "GB/s", "%mcpy");
}

static int growth(int quick, int reps) {
    static job_result res;
    job_args a = {.ncases = 4, .reps = reps};
    memcpy(a.cases, growth_cases, sizeof growth_cases);
    for (size_t b = (size_t)16 << 10; b <= (size_t)16 << 20; b *= quick ? 16 : 4)
        a.sizes[a.nsizes++] = b;
    if (a.sizes[a.nsizes - 1] != ((size_t)16 << 20)) a.sizes[a.nsizes++] = (size_t)16 << 20;
    printf("(1) redistribute on the UCX runtime (processes under dtrun on %ld cores), f32, 1-D "
           "mesh; median (min-max) of %d interleaved rounds, each run after rank 0 flushed 4 x "
           "%zu MiB LLC;\n    must = least bytes per rank ((read + written) / 2), memcpy = a "
           "memcpy of those bytes on every process at once, %%mcpy = memcpy time / redistribute "
           "time\n(1a) vs bytes of input per rank, 4 processes\n",
           sysconf(_SC_NPROCESSORS_ONLN), reps, bench_llc_bytes() >> 20);
    growth_header();
    int ok = run_job(4, &a, res);
    if (ok)
        growth_rows(4, &a, res, 0);
    else
        printf("(failed)\n");
    printf("(1b) vs processes, 1 MiB of input per rank\n");
    growth_header();
    a.nsizes = 1;
    a.sizes[0] = (size_t)1 << 20;
    for (int n = 2; n <= 8; n *= 2) {
        if (run_job(n, &a, res))
            growth_rows(n, &a, res, 1);
        else
            printf("%-8d (failed)\n", n), ok = 0;
        fflush(stdout);
    }
    return ok;
}

/* PyTorch's side: [case][med, min, max] ms; 0 when it did not run. */
static int run_torch(const char *py, int reps, double out[NCASES][3]) {
    const char *src = getenv("DT_SOURCE_DIR");
    char cmd[2048], line[512];
    snprintf(cmd, sizeof cmd, "%s %s/bench/redistribute_torch.py 4 16 %d 2>/dev/null", py,
             src ? src : ".", reps);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        char name[32];
        double v[3];
        if (sscanf(line, "%31s %lf %lf %lf", name, &v[0], &v[1], &v[2]) != 4) continue;
        for (int c = 0; c < NCASES; c++)
            if (!strcmp(name, cases[c].name)) memcpy(out[c], v, sizeof v), got++;
    }
    return pclose(p) == 0 && got == NCASES;
}

static int versus_torch(int reps, const char *rows_path) {
    static job_result res;
    double pt[NCASES][3];
    job_args a = {.ncases = NCASES, .nsizes = 1, .reps = reps, .sizes = {(size_t)16 << 20}};
    for (int c = 0; c < NCASES; c++)
        a.cases[c] = c;
    int ok = run_job(4, &a, res);
    const char *py = getenv("DT_TORCH_PYTHON");
    if (py && !*py) py = NULL;
    int have_pt = py && run_torch(py, reps, pt);
    printf("\n(2) dtensor on UCX, 4 processes, vs PyTorch DTensor on gloo, 4 processes%s; 16 "
           "MiB of f32 per rank (the shapes of bench_redistribute); ms, median (min-max) of %d "
           "rounds each, PyTorch run after dtensor; ratio = PyTorch time / dtensor time\n%-11s "
           "%-28s %-28s %9s\n",
           have_pt ? "" : (py ? " (PyTorch failed)" : " (PyTorch skipped: DT_TORCH_PYTHON unset)"),
           reps, "case", "dtensor UCX", "PyTorch gloo", "ratio");
    FILE *f = rows_path ? fopen(rows_path, "a") : NULL;
    for (int c = 0; c < NCASES; c++) {
        const double *d = res[c][0][W_OP];
        char dc[48] = "failed", pc[48] = "-", ratio[16] = "-";
        if (ok) snprintf(dc, sizeof dc, "%.2f (%.2f-%.2f)", d[0], d[1], d[2]);
        if (have_pt) snprintf(pc, sizeof pc, "%.2f (%.2f-%.2f)", pt[c][0], pt[c][1], pt[c][2]);
        if (ok && have_pt) snprintf(ratio, sizeof ratio, "%.1fx", pt[c][0] / d[0]);
        printf("%-11s %-28s %-28s %9s\n", cases[c].name, dc, pc, ratio);
        if (f && have_pt)
            fprintf(f,
                    "redistribute %s, UCX 4 processes x 16 MiB\t%s ms\tPyTorch DTensor gloo 4 "
                    "processes %s ms\t%s (PyTorch / dtensor)\n",
                    cases[c].name, dc, pc, ratio);
        else if (f)
            fprintf(f, "redistribute %s, UCX 4 processes x 16 MiB\t%s ms\tPyTorch %s\t-\n",
                    cases[c].name, dc, py ? "failed" : "skipped (DT_TORCH_PYTHON unset)");
    }
    if (f) fclose(f);
    return ok;
}

static int parse_list(const char *s, long *out, int max) {
    int n = 0;
    for (char *p = (char *)s; *p && n < max; p += *p == ',')
        out[n++] = strtol(p, &p, 10);
    return n;
}

int main(int argc, char **argv) {
    const char *q = getenv("BENCH_QUICK"), *rows_path = NULL;
    int quick = q && *q && strcmp(q, "0") != 0, rank_mode = 0;
    job_args a = {.reps = BENCH_REPS};
    for (int i = 1; i < argc; i++) {
        long v[MAX_SIZES];
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--rank"))
            rank_mode = 1;
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows_path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            a.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) {
            a.ncases = parse_list(argv[++i], v, NCASES);
            for (int k = 0; k < a.ncases; k++)
                a.cases[k] = v[k] >= 0 && v[k] < NCASES ? (int)v[k] : 0;
        } else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) {
            a.nsizes = parse_list(argv[++i], v, MAX_SIZES);
            for (int k = 0; k < a.nsizes; k++)
                a.sizes[k] = v[k] >= 4096 ? (size_t)v[k] : 4096;
        } else {
            fprintf(stderr, "usage: bench_ucx_redistribute [--quick] [--rows FILE]\n");
            return 2;
        }
    }
    if (a.reps < 1 || a.reps > BENCH_REPS) a.reps = BENCH_REPS;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rank_mode) {
        dt_status st = dt_ucx_run(rank_body, &a);
        if (st != DT_OK)
            fprintf(stderr, "bench_ucx_redistribute: %s: %s\n", dt_status_str(st), dt_last_error());
        return st == DT_OK ? 0 : 1;
    }
    if (!dt_ucx_available()) {
        printf("bench_ucx_redistribute: this build has no UCX runtime; nothing to measure\n");
        return 0;
    }
    int reps = quick ? 7 : BENCH_REPS;
    int ok = growth(quick, reps);
    ok &= versus_torch(BENCH_REPS, rows_path);
    return ok ? 0 : 1;
}
