/* gpu_check: every op and redistribution on ranks of one GPU against the CPU. Needs no
 * Criterion, UCX or OpenBLAS (make gpu-check runs it where only nvcc, meson and ninja are).
 * Without a GPU it says so and exits 77 (meson's skip).
 *
 *   gpu_check [--quick]     --quick: a few patterns per case (the meson test)
 *
 * Sections: device memory (allocator, copies, errors), work on the communication thread, ops (every
 * case of the CPU suite on meshes 1, 2, 4 and 2x2, each result against the unsharded CPU result),
 * redistribute (the property suite's random cases, exact), the tensor-parallel MLP (one
 * all_reduce), creation (rand, randn, casts... on GPU ranks against the CPU, bit for bit),
 * optimizer steps (gpu_optim.c); the ops section ends with attention's every output
 * (gpu_attention.c), float8's scales, casts and matmul (gpu_float8.c) and its cuBLASLt GEMM
 * (gpu_float8_lt.c), async TP's collective matmuls (gpu_async_tp.c). Last line: "N passed, N failed". */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "gpu_async_tp.h"
#include "gpu_attention.h"
#include "gpu_float8.h"
#include "gpu_norm.h"
#include "gpu_optim.h"
#include "op_cases.h"
#include "property_cases.h"

static int passed, failed;

static void report(int ok, const char *what, const char *detail) {
    if (ok) passed++;
    else {
        failed++;
        if (failed <= 40) printf("  FAIL %s: %s\n", what, detail);
    }
}

static void check_run(const char *what, dt_status st) {
    report(st == DT_OK, what, st == DT_OK ? "" : dt_last_error());
}

static const dt_device gpu = {DT_DEVICE_CUDA, -1};

/* ---- device memory ------------------------------------------------------------------------ */

static dt_status memory_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    R_OK(dt_ctx_set_device(ctx, gpu));
    dt_device dev = dt_ctx_device(ctx);
    R_CHECK(dev.kind == DT_DEVICE_CUDA, "set_device kept %d", (int)dev.kind);
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t shape[2] = {256, 96};
    float *host = malloc(sizeof(float) * 256 * 96), *back = malloc(sizeof(float) * 256 * 96);
    t_fill(DT_F32, host, 256 * 96, 11);
    dt_placement s0[1] = {dt_shard(0)}, s1[1] = {dt_shard(1)};
    dt_tensor *x, *y, *cpu, *sum;
    R_OK(dt_tensor_distribute(mesh, host, DT_F32, 2, shape, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &x));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(x, &info));
    R_CHECK(info.device.kind == DT_DEVICE_CUDA, "distribute put the shard on %d",
            (int)info.device.kind);
    /* Round trip through the CPU is exact. */
    R_OK(dt_tensor_to_device(x, (dt_device){DT_DEVICE_CPU, 0}, &cpu));
    R_OK(dt_tensor_full_tensor(cpu, back, sizeof(float) * 256 * 96));
    R_CHECK(memcmp(back, host, sizeof(float) * 256 * 96) == 0, "to_device(CPU) changed data");
    /* The TF32 path of f32 GEMMs: a 64x96 @ 96x80 product within TF32's 10-bit mantissa of
     * the exact one. */
    R_OK(dt_ctx_set_tf32(ctx, 1));
    {
        int64_t ws[2] = {96, 80};
        float *w = malloc(sizeof(float) * 96 * 80), *got = malloc(sizeof(float) * 64 * 80);
        t_fill(DT_F32, w, 96 * 80, 12);
        dt_placement rep[1] = {dt_replicate()};
        int64_t xs[2] = {64, 96};
        dt_tensor *a, *b, *c;
        R_OK(dt_tensor_distribute(mesh, host, DT_F32, 2, xs, DT_COUNT_OF(rep), rep, DT_ALL_RANKS,
                                  &a));
        R_OK(dt_tensor_distribute(mesh, w, DT_F32, 2, ws, DT_COUNT_OF(rep), rep, DT_ALL_RANKS, &b));
        R_OK(dt_mm(a, b, &c));
        R_OK(dt_tensor_full_tensor(c, got, sizeof(float) * 64 * 80));
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 80; j++) {
                double acc = 0, mag = 0;
                for (int k = 0; k < 96; k++) {
                    acc += (double)host[i * 96 + k] * w[k * 80 + j];
                    mag += fabs((double)host[i * 96 + k] * w[k * 80 + j]);
                }
                R_CHECK(fabs(got[i * 80 + j] - acc) <= 2e-3 * (1 + mag),
                        "tf32 mm [%d,%d]: %g, want %g", i, j, got[i * 80 + j], acc);
            }
        dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(c);
        free(w), free(got);
    }
    R_OK(dt_ctx_set_tf32(ctx, 0));
    /* Mixing devices is refused. */
    dt_status st = dt_add(x, cpu, &sum);
    R_CHECK(st == DT_ERR_DEVICE && strstr(dt_last_error(), "input 1"), "mixed add: %s %s",
            dt_status_str(st), dt_last_error());
    /* A tensor larger than any GPU: DT_ERR_NOMEM with a message, nothing else changes. */
    int64_t huge[2] = {(int64_t)1 << 38, 1024};
    st = dt_tensor_zeros(mesh, DT_F32, 2, huge, DT_COUNT_OF(s0), s0, &y);
    R_CHECK(st == DT_ERR_NOMEM && strstr(dt_last_error(), "out of memory"), "huge tensor: %s %s",
            dt_status_str(st), dt_last_error());
    /* Steady state: after one warm-up step, the same step never reaches cudaMalloc. The
     * allocator is the GPU's, shared by both ranks: read it when both are between steps. */
    dt_memory_stats m0, m1;
    dt_comm *world;
    R_OK(dt_ctx_world_comm(ctx, &world));
    for (int it = 0; it < 20; it++) {
        dt_tensor *a, *b, *c;
        R_OK(dt_add(x, x, &a));
        R_OK(dt_tensor_redistribute(a, DT_COUNT_OF(s1), s1, &b));
        R_OK(dt_unary_op(DT_OP_GELU, b, &c));
        dt_tensor_release(a), dt_tensor_release(b), dt_tensor_release(c);
        if (it == 0) {
            R_OK(dt_barrier(world));
            R_OK(dt_device_memory_stats(dev, &m0));
            R_OK(dt_barrier(world));
        }
    }
    R_OK(dt_barrier(world));
    R_OK(dt_device_memory_stats(dev, &m1));
    R_CHECK(m1.device_allocs == m0.device_allocs,
            "steady state called cudaMalloc %" PRIu64 " times",
            m1.device_allocs - m0.device_allocs);
    R_CHECK(m1.requests > m0.requests && m1.peak >= m1.in_use, "allocator statistics");
    R_OK(dt_ctx_synchronize(ctx));
    dt_tensor_release(cpu);
    dt_tensor_release(x);
    dt_mesh_release(mesh);
    free(host);
    free(back);
    return DT_OK;
}

/* ---- work on the communication thread ------------------------------------------------------ */

/* An async redistribute and a non-blocking all_reduce on GPU tensors, with kernels queued on
 * the compute stream while they run: the communication thread must use the rank's GPU. */
static dt_status async_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    R_OK(dt_ctx_set_device(ctx, gpu));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "dp=2,tp=2", &mesh));
    int64_t shape[2] = {37, 24};
    float *host = malloc(sizeof(float) * 37 * 24), *back = malloc(sizeof(float) * 37 * 24);
    t_fill(DT_F32, host, 37 * 24, 5);
    dt_placement src[2] = {dt_shard(0), dt_shard(1)}, dst[2] = {dt_replicate(), dt_shard(0)};
    dt_tensor *x, *y, *g;
    R_OK(dt_tensor_distribute(mesh, host, DT_F32, 2, shape, DT_COUNT_OF(src), src, DT_ALL_RANKS,
                              &x));
    dt_request *req;
    R_OK(dt_tensor_redistribute_async(x, DT_COUNT_OF(dst), dst, &req));
    R_OK(dt_unary_op(DT_OP_GELU, x, &g)); /* compute meanwhile */
    R_OK(dt_request_wait(req, &y));
    R_OK(dt_tensor_full_tensor(y, back, sizeof(float) * 37 * 24));
    R_CHECK(memcmp(back, host, sizeof(float) * 37 * 24) == 0, "async redistribute changed data");
    /* A non-blocking all_reduce of this rank's shard of g over tp, on device buffers. */
    dt_tensor_info gi;
    R_OK(dt_tensor_info_get(g, &gi));
    dt_comm *tp;
    R_OK(dt_mesh_dim_comm(mesh, 1, &tp));
    dt_tensor *sum;
    dt_placement same[2] = {dt_shard(0), dt_shard(1)};
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, DT_COUNT_OF(same), same, &sum));
    dt_tensor_info si;
    R_OK(dt_tensor_info_get(sum, &si));
    dt_request *creq;
    R_OK(dt_all_reduce_start(tp, gi.local_data, si.local_data, gi.local_numel, DT_F32,
                             DT_REDUCE_MAX, &creq));
    R_OK(dt_request_wait(creq, NULL));
    float *mine = malloc(gi.local_bytes + 4), *red = malloc(si.local_bytes + 4);
    R_OK(dt_tensor_local_to_host(g, mine, gi.local_bytes));
    R_OK(dt_tensor_local_to_host(sum, red, si.local_bytes));
    for (size_t i = 0; i < gi.local_numel; i++)
        R_CHECK(red[i] >= mine[i], "all_reduce(max) element %zu: %g < this rank's %g", i, red[i],
                mine[i]);
    free(mine), free(red), free(host), free(back);
    dt_tensor_release(sum), dt_tensor_release(g), dt_tensor_release(y), dt_tensor_release(x);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* ---- a registered op on GPU tensors -------------------------------------------------------- */

/* out = 2 x, computed on the host between two copies queued on the rank's stream: what a user
 * kernel sees (device pointers, the stream to queue on) is what this checks. */
static dt_status twice_kernel(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    size_t count = 1;
    for (int d = 0; d < in[0].ndim; d++) count *= (size_t)in[0].shape[d];
    cudaStream_t s = (cudaStream_t)dt_cuda_current_stream();
    if (in[0].device.kind != DT_DEVICE_CUDA || out->device.kind != DT_DEVICE_CUDA || !s)
        return dt_error_set(DT_ERR_DEVICE, "twice: blocks on device %d/%d, stream %p",
                            (int)in[0].device.kind, (int)out->device.kind, (void *)s);
    float *h = malloc(sizeof(float) * count + 4);
    cudaError_t e =
        cudaMemcpyAsync(h, in[0].data, sizeof(float) * count, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    for (size_t i = 0; i < count; i++) h[i] *= 2;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(out->data, h, sizeof(float) * count, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* h goes away */
    free(h);
    return e == cudaSuccess ? DT_OK : dt_error_set(DT_ERR_DEVICE, "twice: CUDA error %d", (int)e);
}

static dt_status twice_infer(const dt_block *in, int n, dt_block *out, void *user) {
    (void)n, (void)user;
    *out = in[0];
    return DT_OK;
}

static dt_status user_op_body(dt_ctx *ctx, void *arg) {
    dt_op op = *(dt_op *)arg;
    R_OK(dt_ctx_set_device(ctx, gpu));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    int64_t shape[2] = {9, 4};
    float x[36], y[36];
    t_fill(DT_F32, x, 36, 3);
    dt_placement s0[1] = {dt_shard(0)};
    dt_tensor *t, *u;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, shape, DT_COUNT_OF(s0), s0, DT_ALL_RANKS, &t));
    R_OK(dt_op_call(op, &t, 1, NULL, &u));
    R_OK(dt_tensor_full_tensor(u, y, sizeof y));
    for (int i = 0; i < 36; i++)
        R_CHECK(y[i] == 2 * x[i], "element %d: %g, want %g", i, y[i], 2 * x[i]);
    dt_tensor_release(u), dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

static void check_user_op(void) {
    static const dt_placement rows[1][DT_OP_MAX_USER_INPUTS + 1] = {
        {{DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM}}};
    dt_op_def def = {.name = "gpu_check_twice", .ninputs = 1, .rows = rows, .nrows = 1,
                     .infer = twice_infer, .kernel = twice_kernel};
    dt_op op;
    dt_status st = dt_op_register(&def, &op);
    if (st == DT_OK) st = dt_local_run(2, user_op_body, &op, NULL);
    check_run("a registered op's kernel on GPU blocks and the rank's stream", st);
}

/* ---- ops --------------------------------------------------------------------------------- */

static void check_ops(int quick) {
    static const char *const meshes[] = {"1", "2", "4", "2x2"};
    for (size_t ci = 0; ci < op_ncases; ci++) {
        const op_case *c = &op_cases[ci];
        op_run ref = {.c = c, .mesh = "1"};
        for (int i = 0; i < c->n; i++) ref.pl[i][0] = dt_replicate();
        if (dt_local_run(1, op_body, &ref, NULL) != DT_OK) {
            report(0, c->name, dt_last_error());
            continue;
        }
        for (size_t mi = 0; mi < sizeof meshes / sizeof meshes[0]; mi++) {
            int tries = op_case_tries(c, meshes[mi]);
            if (quick && tries > 3) tries = 3;
            for (int t = 0; t < tries; t++) {
                op_run r = {.c = c, .mesh = meshes[mi], .cuda = 1};
                op_case_placements(c, ci, meshes[mi], t, r.pl);
                char what[128], msg[256];
                snprintf(what, sizeof what, "op %s on mesh %s, try %d", c->name, meshes[mi], t);
                dt_status st = dt_local_run(op_mesh_ranks(meshes[mi]), op_body, &r, NULL);
                if (st != DT_OK) report(0, what, dt_last_error());
                else report(op_result_matches(&ref, &r, msg, sizeof msg), what, msg);
                free(r.result);
            }
        }
        free(ref.result);
    }
}

/* Dropout on GPU ranks: each run checks itself against dt_tensor_rand (op_cases.c) and must
 * equal the one-rank CPU result bit for bit, on 1-D and 2-D meshes. */
static void check_dropout(void) {
    static const dt_dtype dtypes[] = {DT_F32, DT_F64, DT_BF16};
    static const struct {
        const char *mesh;
        dt_placement pl[2];
    } runs[] = {
        {"1", {{DT_PLACEMENT_REPLICATE, 0, DT_REDUCE_SUM}}},
        {"4", {{DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}}},
        {"2x2", {{DT_PLACEMENT_SHARD, 0, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 2, DT_REDUCE_SUM}}},
        {"2x2", {{DT_PLACEMENT_PARTIAL, 0, DT_REDUCE_SUM}, {DT_PLACEMENT_SHARD, 1, DT_REDUCE_SUM}}},
    };
    for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++) {
        dropout_run ref = {.mesh = "1", .dtype = dtypes[di], .p = 0.375};
        if (dt_local_run(1, dropout_body, &ref, NULL) != DT_OK) {
            report(0, "dropout on one CPU rank", dt_last_error());
            continue;
        }
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
            dropout_run r = {.mesh = runs[i].mesh, .dtype = dtypes[di], .p = 0.375, .cuda = 1};
            memcpy(r.pl, runs[i].pl, sizeof r.pl);
            char what[96];
            snprintf(what, sizeof what, "dropout %s on mesh %s (run %zu), bit for bit",
                     dt_dtype_name(dtypes[di]), r.mesh, i);
            dt_status st = dt_local_run(op_mesh_ranks(r.mesh), dropout_body, &r, NULL);
            if (st != DT_OK) report(0, what, dt_last_error());
            else report(r.bytes == ref.bytes && !memcmp(r.out, ref.out, ref.bytes), what,
                        "differs from one CPU rank");
            free(r.out);
        }
        free(ref.out);
    }
}

/* ---- redistribute ------------------------------------------------------------------------ */

static void check_redistribute(int quick, uint64_t seed) {
    static const char *const meshes[] = {"1", "2", "4", "2x2", "4x1", "1x2"};
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        sweep s = {.mesh = meshes[i], .nranks = op_mesh_ranks(meshes[i]), .seed = seed + i,
                   .cases = quick ? 20 : 150, .cuda = 1};
        char what[96];
        snprintf(what, sizeof what, "redistribute %d random cases on mesh %s (seed %" PRIu64 ")",
                 s.cases, s.mesh, s.seed);
        check_run(what, dt_local_run(s.nranks, property_body, &s, NULL));
    }
}

/* ---- creation, random numbers and casts ---------------------------------------------------- */

/* Each case made on GPU ranks of mesh 2x2 under several placements, gathered, against the
 * one-rank CPU tensor: bit for bit (dtensor/create.h promises it). */
#define CREATE_CASES 10

typedef struct create_run {
    int cuda;
    dt_placement pl[2];
    void *out[CREATE_CASES]; /* rank 0's gathered tensors */
    size_t bytes[CREATE_CASES];
} create_run;

static dt_status create_case(dt_mesh *mesh, int i, const dt_placement *pl, int np,
                             dt_tensor **out) {
    int64_t shape[2] = {5, 7};
    dt_generator g = {77, 3};
    dt_tensor *t;
    switch (i) {
    case 0: return dt_tensor_rand(mesh, DT_F32, 2, shape, np, pl, &g, out);
    case 1: return dt_tensor_randn(mesh, DT_BF16, 2, shape, np, pl, &g, out);
    case 2: return dt_tensor_randn(mesh, DT_F64, 2, shape, np, pl, &g, out);
    case 3:
    case 4:
        R_OK(dt_tensor_zeros(mesh, i == 3 ? DT_F16 : DT_F32, 2, shape, np, pl, out));
        return i == 3 ? dt_tensor_uniform_(*out, -1, 2, &g) : dt_tensor_normal_(*out, 3, 0.5, &g);
    case 5: return dt_tensor_arange(mesh, DT_F64, -1, 9, 0.37, np, pl, out);
    case 6: return dt_tensor_eye(mesh, DT_I64, 5, 7, np, pl, out);
    case 7: return dt_tensor_full_value(mesh, DT_F16, 2, shape, np, pl, 0.1, out);
    case 8: /* a Partial f32 -> bf16 cast reduces first, on the GPU */
        R_OK(dt_tensor_randn(mesh, DT_F32, 2, shape, np, pl, &g, &t));
        break;
    default:
        R_OK(dt_tensor_arange(mesh, DT_I64, -40, 30, 3, np, pl, &t));
        break;
    }
    dt_status st = dt_cast(t, i == 8 ? DT_BF16 : DT_F32, out);
    dt_tensor_release(t);
    return st;
}

static dt_status create_body(dt_ctx *ctx, void *arg) {
    create_run *run = arg;
    if (run->cuda) R_OK(dt_ctx_set_device(ctx, gpu));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, run->cuda ? "2x2" : "1x1", &mesh));
    for (int i = 0; i < CREATE_CASES; i++) {
        dt_tensor *t;
        dt_tensor_info info;
        R_OK(create_case(mesh, i, run->pl, 2, &t));
        R_OK(dt_tensor_info_get(t, &info));
        size_t bytes = info.numel * dt_dtype_size(info.dtype);
        void *full = malloc(bytes);
        R_OK(dt_tensor_full_tensor(t, full, bytes));
        if (dt_mesh_rank(mesh) == 0) run->out[i] = full, run->bytes[i] = bytes;
        else free(full);
        dt_tensor_release(t);
    }
    dt_mesh_release(mesh);
    return DT_OK;
}

static void check_create(void) {
    create_run ref = {.pl = {dt_replicate(), dt_replicate()}};
    check_run("creation on one CPU rank", dt_local_run(1, create_body, &ref, NULL));
    const char *texts[] = {"S(0),S(-1)", "P(sum),S(-1)", "R,P(max)", "S(-1),P(avg)"};
    for (int k = 0; k < 4; k++) {
        create_run run = {.cuda = 1};
        int n = 0;
        dt_placements_parse(texts[k], run.pl, 2, &n);
        char what[96], detail[96] = "";
        snprintf(what, sizeof what, "rand/randn/uniform_/normal_/arange/eye/full/cast on GPU [%s]",
                 texts[k]);
        dt_status st = dt_local_run(4, create_body, &run, NULL);
        for (int i = 0; st == DT_OK && i < CREATE_CASES && !detail[0]; i++)
            if (!ref.out[i] || run.bytes[i] != ref.bytes[i] ||
                memcmp(run.out[i], ref.out[i], ref.bytes[i]) != 0)
                snprintf(detail, sizeof detail, "case %d differs from the CPU tensor", i);
        report(st == DT_OK && !detail[0], what, st != DT_OK ? dt_last_error() : detail);
        for (int i = 0; i < CREATE_CASES; i++) free(run.out[i]);
    }
    for (int i = 0; i < CREATE_CASES; i++) free(ref.out[i]);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int n = dt_cuda_device_count();
    if (n == 0) {
        printf("gpu_check: no CUDA device is visible (no GPU, no driver, or a build without "
               "CUDA): skipped\n");
        return 77;
    }
    const char *seed_env = getenv("DT_PROPERTY_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL);
    printf("gpu_check: %d CUDA device%s, %s run, DT_PROPERTY_SEED=%" PRIu64 "\n", n,
           n == 1 ? "" : "s", quick ? "quick" : "full", seed);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int p0 = passed, f0 = failed;
    check_run("device memory: allocator, copies, errors (2 ranks)",
              dt_local_run(2, memory_body, NULL, NULL));
    check_run("async redistribute and non-blocking all_reduce (2x2)",
              dt_local_run(4, async_body, NULL, NULL));
    check_user_op();
    printf("memory/async: %d passed, %d failed\n", passed - p0, failed - f0);
    p0 = passed, f0 = failed;
    check_ops(quick);
    check_dropout();
    gpu_check_attention(report);
    gpu_check_float8(report);
    gpu_check_float8_lt(report);
    gpu_check_async_tp(report);
    gpu_check_norm(report);
    printf("ops:          %d passed, %d failed\n", passed - p0, failed - f0);
    p0 = passed, f0 = failed;
    check_redistribute(quick, seed);
    printf("redistribute: %d passed, %d failed\n", passed - p0, failed - f0);
    p0 = passed, f0 = failed;
    mlp_run mlp = {.cuda = 1, .T = 64, .C = 128, .H = 512, .wscale = 64};
    check_run("tensor-parallel MLP on 4 ranks of one GPU", dt_local_run(4, mlp_body, &mlp, NULL));
    printf("mlp:          %d passed, %d failed\n", passed - p0, failed - f0);
    p0 = passed, f0 = failed;
    check_create();
    printf("create:       %d passed, %d failed\n", passed - p0, failed - f0);
    p0 = passed, f0 = failed;
    gpu_check_optim(report);
    printf("optim:        %d passed, %d failed\n", passed - p0, failed - f0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("(%.1f s)\n",
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
