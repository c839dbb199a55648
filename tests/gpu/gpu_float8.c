/* gpu_check's float8 section: scales, scaled casts to e4m3 and e5m2 and the scaled float8
 * matmul (the CUDA kernel widens to f32, then cuBLAS's f32 GEMM) on 2 GPU ranks against the
 * same calls on CPU ranks: scales and codes bit for bit, products within 1e-5 relative (the
 * two GEMMs sum in different orders). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpu_float8.h"
#include "rank_helpers.h"

enum { M = 5, K = 12, N = 7 };

typedef struct f8_run {
    int cuda;
    float sa, sb[N], out[M * N];
    uint8_t a8[M * K], b8[K * N];
} f8_run;

static dt_status body(dt_ctx *ctx, void *arg) {
    f8_run *r = arg;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    float a[M * K], b[K * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)(sin(0.7 * i) * (1 + i % 4));
    for (int i = 0; i < K * N; i++) b[i] = (float)(cos(0.3 * i) * 0.01 * (1 + i % 3));
    int64_t sa[2] = {M, K}, sb[2] = {K, N};
    dt_placement s0 = dt_shard(0), s1 = dt_shard(1);
    dt_tensor *ta, *tb, *fa, *fb, *a8, *b8, *out;
    R_OK(dt_tensor_distribute(mesh, a, DT_F32, 2, sa, 1, &s0, DT_ALL_RANKS, &ta));
    R_OK(dt_tensor_distribute(mesh, b, DT_F32, 2, sb, 1, &s1, DT_ALL_RANKS, &tb));
    R_OK(dt_float8_scale_tensorwise(ta, DT_F8E4M3, &fa));
    R_OK(dt_float8_scale_axiswise(tb, DT_F8E5M2, 0, &fb));
    R_OK(dt_cast_scaled(ta, DT_F8E4M3, fa, &a8));
    R_OK(dt_cast_scaled(tb, DT_F8E5M2, fb, &b8));
    R_OK(dt_mm_scaled(a8, fa, b8, fb, &out));
    R_OK(dt_tensor_full_tensor(fa, &r->sa, sizeof r->sa));
    R_OK(dt_tensor_full_tensor(fb, r->sb, sizeof r->sb));
    R_OK(dt_tensor_full_tensor(a8, r->a8, sizeof r->a8));
    R_OK(dt_tensor_full_tensor(b8, r->b8, sizeof r->b8));
    R_OK(dt_tensor_full_tensor(out, r->out, sizeof r->out));
    dt_tensor *all[] = {ta, tb, fa, fb, a8, b8, out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

void gpu_check_float8(void (*report)(int ok, const char *what, const char *detail)) {
    static f8_run cpu = {.cuda = 0}, gpu = {.cuda = 1};
    dt_status st = dt_local_run(2, body, &cpu, NULL);
    if (st == DT_OK) st = dt_local_run(2, body, &gpu, NULL);
    report(st == DT_OK, "float8 scales, casts and scaled matmul on 2 GPU ranks",
           st == DT_OK ? "" : dt_last_error());
    if (st != DT_OK) return;
    char detail[160] = "";
    int ok = cpu.sa == gpu.sa && memcmp(cpu.sb, gpu.sb, sizeof cpu.sb) == 0;
    if (!ok) snprintf(detail, sizeof detail, "scales differ: %.9g vs %.9g", cpu.sa, gpu.sa);
    report(ok, "float8 amax scales: GPU == CPU", detail);
    ok = memcmp(cpu.a8, gpu.a8, sizeof cpu.a8) == 0 && memcmp(cpu.b8, gpu.b8, sizeof cpu.b8) == 0;
    report(ok, "float8 e4m3 and e5m2 codes: GPU == CPU", ok ? "" : "codes differ");
    ok = 1;
    for (int i = 0; i < M * N && ok; i++)
        if (!(fabsf(gpu.out[i] - cpu.out[i]) <= 1e-5f * fabsf(cpu.out[i]) + 1e-7f)) {
            ok = 0;
            snprintf(detail, sizeof detail, "element %d: GPU %.9g, CPU %.9g", i, gpu.out[i],
                     cpu.out[i]);
        }
    report(ok, "float8 scaled matmul (widened, f32 GEMM): GPU == CPU within 1e-5", detail);
}
