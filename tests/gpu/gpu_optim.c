/* gpu_check's optimizer section: SGD (nesterov) and AdamW steps on parameters of GPU ranks
 * (f64, f32, and bf16 with f32 master weights; sharded and replicated on a 2x2 mesh) against the
 * same steps on one CPU rank. The CUDA kernel's per-element math is the CPU's header; tolerances
 * allow a GPU compiler's contractions (f64 1e-12, f32 1e-5, bf16 one unit in the last place). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_optim.h"

enum { NP = 3, STEPS = 3 };
static const dt_dtype p_dtype[NP] = {DT_F64, DT_F32, DT_BF16};
static const int64_t p_shape[2] = {9, 70000}; /* over two chunks of the CUDA kernel */

typedef struct orun {
    int cuda, adamw;
    const char *mesh;
    double *full[NP];
} orun;

static dt_status optim_body(dt_ctx *ctx, void *arg) {
    orun *r = arg;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int mnd = dt_mesh_ndim(mesh);
    dt_placement pl[NP][2] = {{dt_shard(0), dt_shard(1)}, {dt_replicate(), dt_shard(0)},
                              {dt_shard(1), dt_replicate()}};
    if (mnd == 1) pl[0][0] = pl[1][0] = pl[2][0] = dt_replicate();
    size_t n = (size_t)(p_shape[0] * p_shape[1]);
    double *buf = malloc(n * 8);
    float *fb = malloc(n * 4);
    uint16_t *hb = malloc(n * 2);
    dt_tensor *p[NP];
    dt_status st = DT_OK;
    for (int k = 0; k < NP && st == DT_OK; k++) {
        for (size_t i = 0; i < n; i++) buf[i] = t_value(300 + (uint64_t)k, i) / 8;
        void *src = p_dtype[k] == DT_F64 ? (void *)buf : p_dtype[k] == DT_F32 ? (void *)fb
                                                                                : (void *)hb;
        if (src != buf) dt_convert_from_f64(p_dtype[k], buf, src, n);
        st = dt_tensor_distribute(mesh, src, p_dtype[k], 2, p_shape, mnd, pl[k], DT_ALL_RANKS,
                                  &p[k]);
        if (st == DT_OK) st = dt_tensor_set_requires_grad(p[k], 1);
    }
    R_OK(st);
    dt_param_group groups[2] = {{.params = p, .n = 2},
                                {.params = p + 2, .n = 1, .master_weights = 1}};
    dt_sgd_options so = {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = 1};
    dt_adamw_options ao = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                           .weight_decay = 0.1};
    dt_optim *o;
    R_OK(r->adamw ? dt_optim_adamw_create(&ao, groups, 2, &o)
                  : dt_optim_sgd_create(&so, groups, 2, &o));
    dt_placement rep[2] = {dt_replicate(), dt_replicate()};
    for (int s = 0; s < STEPS; s++) {
        R_OK(dt_optim_zero_grad(o));
        for (int k = 0; k < NP; k++) {
            for (size_t i = 0; i < n; i++)
                buf[i] = t_value(400 + 10 * (uint64_t)k + (uint64_t)s, i) / 4;
            dt_tensor *g64, *g;
            R_OK(dt_tensor_distribute(mesh, buf, DT_F64, 2, p_shape, mnd, rep, DT_ALL_RANKS,
                                      &g64));
            R_OK(dt_cast(g64, p_dtype[k], &g));
            R_OK(dt_backward_with(p[k], g));
            dt_tensor_release(g), dt_tensor_release(g64);
        }
        R_OK(dt_optim_step(o));
    }
    for (int k = 0; k < NP; k++) {
        dt_tensor *w;
        R_OK(dt_cast(p[k], DT_F64, &w));
        double *full = malloc(n * 8);
        R_OK(dt_tensor_full_tensor(w, full, n * 8));
        if (dt_ctx_rank(ctx) == 0) r->full[k] = full;
        else free(full);
        dt_tensor_release(w), dt_tensor_release(p[k]);
    }
    R_OK(dt_optim_destroy(o));
    free(buf), free(fb), free(hb);
    dt_mesh_release(mesh);
    return DT_OK;
}

void gpu_check_optim(void (*report)(int ok, const char *what, const char *detail)) {
    static const double tol[NP] = {1e-12, 1e-5, 1.0 / 128};
    size_t n = (size_t)(p_shape[0] * p_shape[1]);
    for (int adamw = 0; adamw < 2; adamw++) {
        orun ref = {.adamw = adamw, .mesh = "1"};
        if (dt_local_run(1, optim_body, &ref, NULL) != DT_OK) {
            report(0, "optimizer on one CPU rank", dt_last_error());
            continue;
        }
        orun r = {.cuda = 1, .adamw = adamw, .mesh = "2x2"};
        char what[96], detail[160] = "";
        snprintf(what, sizeof what, "%s step on GPU ranks of a 2x2 mesh against one CPU rank",
                 adamw ? "AdamW" : "SGD");
        dt_status st = dt_local_run(4, optim_body, &r, NULL);
        int ok = st == DT_OK;
        if (!ok) snprintf(detail, sizeof detail, "%s", dt_last_error());
        for (int k = 0; k < NP && ok; k++)
            for (size_t i = 0; i < n && ok; i++) {
                double a = r.full[k][i], b = ref.full[k][i];
                if (!(fabs(a - b) <= tol[k] * (1 + fabs(b)))) {
                    ok = 0;
                    snprintf(detail, sizeof detail, "%s parameter [%zu]: GPU %.10g, CPU %.10g",
                             dt_dtype_name(p_dtype[k]), i, a, b);
                }
            }
        report(ok, what, detail);
        for (int k = 0; k < NP; k++) free(r.full[k]), free(ref.full[k]);
    }
}
