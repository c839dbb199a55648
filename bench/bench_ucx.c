/* bench_ucx: bus bandwidth of all_gather, reduce_scatter, all_reduce and all_to_all over N UCX
 * processes on this host (default 4), 8 B ... 64 MiB, next to the point-to-point bandwidth UCX
 * itself reaches between two processes of the same machine in the same run (ucx_perftest
 * tag_bw), as a ratio.
 *
 *   bench_ucx [-n RANKS] [--max BYTES] [--tls UCX_TLS]
 *
 * Sizes are nccl-tests' "size": the whole buffer (all_gather: the gathered output, reduce_scatter
 * and all_to_all: the input, all_reduce: the vector). Bus bandwidth = size / time x (n-1)/n, and
 * x 2(n-1)/n for all_reduce: the bytes each link carries, comparable to a link's bandwidth.
 * Time = slowest rank's, averaged over iterations. The driver runs ucx_perftest (package
 * ucx-utils) and then itself under dtrun (found next to this binary, or $DT_DTRUN); with
 * --rank it is one rank of the collective run. PyTorch gloo figures are printed beside them
 * when torch is importable (python3 -c "import torch"), else the line says it is not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dtensor.h>

enum { OP_AG, OP_RS, OP_AR, OP_A2A, NOPS };
static const char *const op_names[NOPS] = {"all_gather", "reduce_scatter", "all_reduce",
                                           "all_to_all"};
#define MAX_SIZES 32

static size_t max_bytes = 64u << 20;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int sizes(size_t *out) {
    int k = 0;
    for (size_t s = 8; s <= max_bytes && k < MAX_SIZES; s *= 8)
        out[k++] = s;
    if (out[k - 1] != max_bytes && k < MAX_SIZES) out[k++] = max_bytes;
    return k;
}

/* --- one rank --------------------------------------------------------------------------- */

static dt_status run_op(dt_comm *c, int op, const float *in, float *out, size_t size, int n) {
    size_t per = size / 4 / (size_t)n, all = size / 4;
    if (!per) per = 1;
    if (!all) all = 1;
    switch (op) {
    case OP_AG:
        return dt_all_gather(c, in, out, per, DT_F32);
    case OP_RS:
        return dt_reduce_scatter(c, in, out, per, DT_F32, DT_REDUCE_SUM);
    case OP_AR:
        return dt_all_reduce(c, in, out, all, DT_F32, DT_REDUCE_SUM);
    default:
        return dt_all_to_all(c, in, out, per, DT_F32);
    }
}

static dt_status bench_rank(dt_ctx *ctx, void *arg) {
    (void)arg;
    int n = dt_ctx_size(ctx), me = dt_ctx_rank(ctx);
    dt_comm *c;
    dt_status st = dt_ctx_world_comm(ctx, &c);
    size_t sz[MAX_SIZES];
    int ns = sizes(sz);
    size_t cap = max_bytes + 64 * (size_t)n;
    float *in = calloc(cap / 4, 4), *out = calloc(cap / 4, 4);
    if (!in || !out) return dt_error_set(DT_ERR_NOMEM, "bench: out of memory");
    for (int op = 0; op < NOPS && st == DT_OK; op++) {
        for (int k = 0; k < ns && st == DT_OK; k++) {
            size_t s = sz[k];
            int iters = (int)((size_t)(256u << 20) / s);
            iters = iters < 5 ? 5 : iters > 2000 ? 2000 : iters;
            for (int w = 0; w < 3 && st == DT_OK; w++)
                st = run_op(c, op, in, out, s, n);
            if (st == DT_OK) st = dt_barrier(c);
            double t0 = now_s();
            for (int i = 0; i < iters && st == DT_OK; i++)
                st = run_op(c, op, in, out, s, n);
            double t = (now_s() - t0) / iters;
            if (st == DT_OK) st = dt_all_reduce(c, &t, &t, 1, DT_F64, DT_REDUCE_MAX);
            double factor = op == OP_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
            if (st == DT_OK && me == 0)
                printf("R %s %zu %.3f %.3f\n", op_names[op], s, t * 1e6, s / t / 1e9 * factor);
        }
    }
    free(in);
    free(out);
    return st;
}

/* --- the driver ----------------------------------------------------------------------------- */

/* ucx_perftest tag_bw between two processes, in GB/s; < 0 when it could not run. */
static double perftest(const char *tls, size_t size, int port) {
    char cmd[512];
    long iters = (long)((size_t)(512u << 20) / size);
    iters = iters < 20 ? 20 : iters > 20000 ? 20000 : iters;
    snprintf(cmd, sizeof cmd,
             "UCX_TLS=%s ucx_perftest -p %d >/dev/null 2>&1 & sleep 0.3; "
             "UCX_TLS=%s timeout 60 ucx_perftest 127.0.0.1 -p %d -t tag_bw -s %zu -n %ld -w %ld "
             "-f -v 2>/dev/null | tail -1; wait",
             tls, port, tls, port, size, iters, iters / 10 + 1);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512] = "";
    if (!fgets(line, sizeof line, p)) line[0] = '\0';
    pclose(p);
    /* iterations,lat50,avg_lat,overall_lat,avg_bw,overall_bw (MB/s),... */
    double f[6];
    if (sscanf(line, "%lf,%lf,%lf,%lf,%lf,%lf", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5]) != 6)
        return -1;
    return f[5] * 1048576.0 / 1e9; /* UCX's MB is 2^20 bytes */
}

static int find_dtrun(char *out, size_t cap) {
    const char *env = getenv("DT_DTRUN");
    if (env && *env) return snprintf(out, cap, "%s", env) < (int)cap;
    char self[1024];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) return 0;
    self[k] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return 0;
    *slash = '\0';
    snprintf(out, cap, "%s/../dtrun", self);
    return access(out, X_OK) == 0;
}

int main(int argc, char **argv) {
    int n = 4, rank_mode = 0, table = 0;
    const char *tls = "sm";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rank"))
            rank_mode = 1;
        else if (!strcmp(argv[i], "--table")) /* make bench: rows for 1 MiB and 16 MiB */
            table = 1;
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max_bytes = strtoull(argv[++i], 0, 10);
        else if (!strcmp(argv[i], "--tls") && i + 1 < argc)
            tls = argv[++i];
        else {
            fprintf(stderr, "usage: bench_ucx [-n RANKS] [--max BYTES] [--tls UCX_TLS] [--table]\n");
            return 2;
        }
    }
    if (max_bytes < 8) max_bytes = 8;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rank_mode) {
        dt_status st = dt_ucx_run(bench_rank, NULL);
        if (st != DT_OK) fprintf(stderr, "bench_ucx: %s: %s\n", dt_status_str(st), dt_last_error());
        return st == DT_OK ? 0 : 1;
    }
    if (!dt_ucx_available()) {
        if (!table) printf("bench_ucx: this build has no UCX runtime; nothing to measure\n");
        return 0;
    }
    if (table && max_bytes > (16u << 20)) max_bytes = 16u << 20;
    char dtrun[1100];
    if (!find_dtrun(dtrun, sizeof dtrun)) {
        fprintf(stderr, "bench_ucx: dtrun not found next to this binary; set DT_DTRUN\n");
        return 1;
    }
    size_t sz[MAX_SIZES];
    int ns = sizes(sz);
    double p2p[MAX_SIZES];
    int have_perftest = system("command -v ucx_perftest >/dev/null 2>&1") == 0;
    int port = 20000 + (int)(getpid() % 20000);
    for (int k = 0; k < ns; k++)
        p2p[k] = have_perftest ? perftest(tls, sz[k], port + k) : -1;

    /* The collectives twice: the default transports, then with CMA (DT_UCX_CMA=1). */
    static double bw[2][NOPS][MAX_SIZES], us[2][NOPS][MAX_SIZES];
    int ok = 1;
    for (int v = 0; v < 2; v++) {
        char cmd[4096], self[1024];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        self[len > 0 ? len : 0] = '\0';
        snprintf(cmd, sizeof cmd, "UCX_TLS=%s DT_UCX_CMA=%d %s -n %d %s --rank --max %zu 2>&1", tls,
                 v, dtrun, n, self, max_bytes);
        FILE *p = popen(cmd, "r");
        if (!p) return 1;
        char line[512];
        while (fgets(line, sizeof line, p)) {
            char op[32];
            size_t s;
            double t, b;
            if (sscanf(line, "[rank 0] R %31s %zu %lf %lf", op, &s, &t, &b) != 4) {
                if (strstr(line, "rror")) fputs(line, stdout);
                continue;
            }
            for (int o = 0; o < NOPS; o++)
                for (int k = 0; k < ns; k++)
                    if (!strcmp(op, op_names[o]) && sz[k] == s) {
                        bw[v][o][k] = b;
                        us[v][o][k] = t;
                    }
        }
        int rc = pclose(p);
        ok &= WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    }
    if (table) {
        for (int o = 0; o < NOPS; o++)
            for (int k = 0; k < ns; k++) {
                if (sz[k] != (1u << 20) && sz[k] != (16u << 20)) continue;
                if (p2p[k] > 0)
                    printf("ucx %s, %d processes, %zu MiB, CMA\t%.2f GB/s bus\tucx_perftest %.2f "
                           "GB/s\t%.0f%%\n", op_names[o], n, sz[k] >> 20, bw[1][o][k], p2p[k],
                           100 * bw[1][o][k] / p2p[k]);
                else
                    printf("ucx %s, %d processes, %zu MiB, CMA\t%.2f GB/s bus\t(no ucx_perftest)\t-\n",
                           op_names[o], n, sz[k] >> 20, bw[1][o][k]);
            }
        return ok ? 0 : 1;
    }
    printf("bench_ucx: %d processes on this host (%ld cores), UCX_TLS=%s. busbw in GB/s; p2p = "
           "ucx_perftest tag_bw between two processes at the same size, %s; ratio = busbw / p2p.\n"
           "default = shared memory without CMA (clean failures); cma = DT_UCX_CMA=1\n",
           n, sysconf(_SC_NPROCESSORS_ONLN), tls,
           have_perftest ? "measured just before" : "(ucx_perftest not installed)");
    printf("%-15s %10s %10s %9s %9s %9s %8s %8s\n", "collective", "size", "time_us", "default",
           "cma", "p2p", "ratio", "ratio_cma");
    for (int o = 0; o < NOPS; o++) {
        for (int k = 0; k < ns; k++) {
            char pb[16] = "-", r0[16] = "-", r1[16] = "-";
            if (p2p[k] > 0) {
                snprintf(pb, sizeof pb, "%.2f", p2p[k]);
                snprintf(r0, sizeof r0, "%.0f%%", 100 * bw[0][o][k] / p2p[k]);
                snprintf(r1, sizeof r1, "%.0f%%", 100 * bw[1][o][k] / p2p[k]);
            }
            printf("%-15s %10zu %10.1f %9.3f %9.3f %9s %8s %8s\n", op_names[o], sz[k], us[0][o][k],
                   bw[0][o][k], bw[1][o][k], pb, r0, r1);
        }
    }
    if (system("python3 -c 'import torch' >/dev/null 2>&1") == 0)
        printf("gloo: torch is installed, but this benchmark does not drive it yet\n");
    else
        printf("gloo: torch is not installed here; no gloo figures to compare\n");
    return ok ? 0 : 1;
}
