/* gpu_check's cuBLASLt float8 section: float8 linears (x (M, K) @ w (N, K)^T, the "TN" form
 * cuBLASLt's float8 GEMM takes) on 2 GPU ranks and on 2 CPU ranks, both against an f64 sum of
 * the decoded codes. The device's compute capability says which path must have run: cuBLASLt
 * for sm_89+ and qualifying shapes, the widening f32 GEMM otherwise (cudasim: CUDASIM_CC). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/float8.h"
#include "gpu_float8.h"
#include "ops/cuda/cuda_kernels.h"
#include "rank_helpers.h"

enum { M = 6, KMAX = 48, NMAX = 48 };

typedef struct lt_case {
    const char *name;
    dt_dtype xt, wt;
    int K, N, lt; /* lt: a shape cuBLASLt's float8 GEMM takes */
} lt_case;

static const lt_case cases[] = {
    {"e4m3 x e4m3, K 32, N 48", DT_F8E4M3, DT_F8E4M3, 32, 48, 1},
    {"e4m3 x e5m2, K 48, N 16", DT_F8E4M3, DT_F8E5M2, 48, 16, 1},
    {"e5m2 x e5m2, K 32, N 16 (no cuBLASLt kernel)", DT_F8E5M2, DT_F8E5M2, 32, 16, 0},
    {"e4m3 x e4m3, K 24 (not a multiple of 16)", DT_F8E4M3, DT_F8E4M3, 24, 16, 0},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

typedef struct lt_run {
    int cuda;
    uint8_t x[NCASES][M * KMAX], w[NCASES][NMAX * KMAX];
    float out[NCASES][M * NMAX];
} lt_run;

/* A finite code of dt (no NaN, no infinity), from a fixed LCG so every run sees the same. */
static uint8_t finite_code(dt_dtype dt, uint32_t *state) {
    for (;;) {
        *state = *state * 1664525u + 1013904223u;
        uint8_t c = (uint8_t)(*state >> 24);
        if (dt == DT_F8E4M3 ? (c & 0x7f) != 0x7f : (c & 0x7c) != 0x7c) return c;
    }
}

static dt_status body(dt_ctx *ctx, void *arg) {
    lt_run *r = arg;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    for (int c = 0; c < NCASES; c++) {
        const lt_case *k = &cases[c];
        int64_t sx[2] = {M, k->K}, sw[2] = {k->N, k->K};
        dt_placement s0 = dt_shard(0), rep = dt_replicate();
        dt_tensor *x, *w, *out;
        R_OK(dt_tensor_distribute(mesh, r->x[c], k->xt, 2, sx, 1, &s0, DT_ALL_RANKS, &x));
        R_OK(dt_tensor_distribute(mesh, r->w[c], k->wt, 2, sw, 1, &rep, DT_ALL_RANKS, &w));
        R_OK(dt_linear(x, w, NULL, &out)); /* (M, K) @ (N, K)^T -> (M, N) f32, rows sharded */
        R_OK(dt_tensor_full_tensor(out, r->out[c], sizeof(float) * M * (size_t)k->N));
        dt_tensor_release(out);
        dt_tensor_release(w);
        dt_tensor_release(x);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

/* Largest |got - f64 sum| over the case, relative to the sum of |products| of its row/column
 * (f32 accumulation over K terms errs by about K * 2^-24 of it). */
static double worst_error(const lt_run *r, int c) {
    const lt_case *k = &cases[c];
    dt_f8_format fx = dt_f8_format_of(k->xt == DT_F8E5M2), fw = dt_f8_format_of(k->wt == DT_F8E5M2);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < k->N; j++) {
            double s = 0, mag = 0;
            for (int l = 0; l < k->K; l++) {
                double p = (double)dt_f8_to_f32_fmt(r->x[c][i * k->K + l], fx) *
                           (double)dt_f8_to_f32_fmt(r->w[c][j * k->K + l], fw);
                s += p;
                mag += fabs(p);
            }
            double e = fabs(r->out[c][i * k->N + j] - s) / (mag > 0 ? mag : 1);
            if (!(e <= worst)) worst = e; /* NaN counts as the worst */
        }
    return worst;
}

void gpu_check_float8_lt(void (*report)(int ok, const char *what, const char *detail)) {
    static lt_run cpu = {.cuda = 0}, gpu = {.cuda = 1};
    uint32_t state = 12345u;
    for (int c = 0; c < NCASES; c++) {
        for (int i = 0; i < M * cases[c].K; i++)
            cpu.x[c][i] = finite_code(cases[c].xt, &state);
        for (int i = 0; i < cases[c].N * cases[c].K; i++)
            cpu.w[c][i] = finite_code(cases[c].wt, &state);
    }
    memcpy(gpu.x, cpu.x, sizeof cpu.x);
    memcpy(gpu.w, cpu.w, sizeof cpu.w);
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    int cc = major * 10 + minor;
    unsigned long long lt0 = dt_cuda_float8_lt_gemms();
    dt_status st = dt_local_run(2, body, &cpu, NULL);
    if (st == DT_OK) st = dt_local_run(2, body, &gpu, NULL);
    unsigned long long lt = dt_cuda_float8_lt_gemms() - lt0;
    report(st == DT_OK, "float8 linears (cuBLASLt shapes and others) on 2 GPU ranks",
           st == DT_OK ? "" : dt_last_error());
    if (st != DT_OK) return;
    unsigned long long want = 0;
    for (int c = 0; c < NCASES; c++)
        want += cc >= 89 && cases[c].lt ? 2 : 0; /* one per rank */
    char detail[200] = "", what[160];
    snprintf(detail, sizeof detail, "sm_%d: %llu cuBLASLt float8 GEMMs, expected %llu", cc, lt,
             want);
    report(lt == want,
           cc >= 89 ? "float8 GEMM takes cuBLASLt on sm_89+ where the shape allows"
                    : "float8 GEMM widens to f32 below sm_89",
           lt == want ? "" : detail);
    for (int c = 0; c < NCASES; c++) {
        double eg = worst_error(&gpu, c), ec = worst_error(&cpu, c);
        /* 4e-6 of the row's |products|: f32 accumulation over up to 48 terms (48 * 2^-24 is
         * 2.9e-6); cuBLASLt (and cudasim's f64) err less. */
        int ok = eg <= 4e-6 && ec <= 4e-6;
        snprintf(detail, sizeof detail, "GPU error %.3g, CPU error %.3g of sum |products|", eg, ec);
        snprintf(what, sizeof what, "float8 linear %s (%s): GPU and CPU == f64 within 4e-6",
                 cases[c].name, cc >= 89 && cases[c].lt ? "cuBLASLt" : "widened");
        report(ok, what, ok ? "" : detail);
    }
}
