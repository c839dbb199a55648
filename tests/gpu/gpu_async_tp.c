/* gpu_check's async tensor parallelism section: dt_all_gather_linear (two weights on one
 * gather) into dt_linear_reduce_scatter, forward and backward, on GPU ranks of the local
 * runtime (tp = 2 and 3, a sequence tp does not divide) against the synchronous form
 * (redistribute + dt_linear) on as many CPU ranks: every output and gradient compared, f32 and
 * f64, both reduce modes. The collective matmuls' buffers, GEMMs, transposes and sums run
 * through the device's tables; the transfers are the comm layer's send and recv. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_async_tp.h"

enum { NOUT = 5, B = 2, T = 11, D = 12, H = 10 };

typedef struct trun {
    int cuda, n;
    dt_dtype dtype;
    dt_async_tp_mode mode;
    double *full[NOUT]; /* y, dx, dw1, dw3, dw2 on rank 0 */
    size_t len[NOUT];
} trun;

static dt_status make(dt_mesh *mesh, int ndim, const int64_t *shape, dt_placement p, dt_dtype dt,
                      uint64_t seed, dt_tensor **out) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    double *v = malloc(n * 8 + 8);
    void *buf = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++)
        v[i] = t_value(seed, i) / 7;
    dt_convert_from_f64(dt, v, buf, n);
    dt_status st = dt_tensor_distribute(mesh, buf, dt, ndim, shape, 1, &p, DT_ALL_RANKS, out);
    free(buf), free(v);
    return st;
}

/* x (B, T, D) S(1) -> h1, h3 = x @ w1^T, x @ w3^T (H) -> y = (h1 * h3) @ w2^T reduce_scattered
 * to S(1); backward from g. */
static dt_status body(dt_ctx *ctx, void *arg) {
    trun *r = arg;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, &r->n, (const char *const[]){"tp"}, &mesh));
    int64_t sx[3] = {B, T, D}, sw[2] = {H, D}, s2[2] = {D, H};
    dt_tensor *x, *w[3], *g, *h[2], *p, *y;
    R_OK(make(mesh, 3, sx, dt_shard(1), r->dtype, 1, &x));
    R_OK(make(mesh, 2, sw, dt_shard(0), r->dtype, 2, &w[0]));
    R_OK(make(mesh, 2, sw, dt_shard(0), r->dtype, 3, &w[1]));
    R_OK(make(mesh, 2, s2, dt_shard(1), r->dtype, 4, &w[2]));
    R_OK(make(mesh, 3, sx, dt_shard(1), r->dtype, 5, &g));
    dt_tensor *leaves[4] = {x, w[0], w[1], w[2]};
    for (int i = 0; i < 4; i++)
        R_OK(dt_tensor_set_requires_grad(leaves[i], 1));
    if (r->cuda) {
        R_OK(dt_all_gather_linear(x, 2, w, 0, r->mode, h));
        R_OK(dt_mul(h[0], h[1], &p));
        R_OK(dt_linear_reduce_scatter(p, w[2], 0, r->mode, &y));
    } else {
        dt_tensor *xr, *q;
        dt_placement rep = dt_replicate(), seq = dt_shard(1);
        R_OK(dt_tensor_redistribute(x, 1, &rep, &xr));
        R_OK(dt_linear(xr, w[0], NULL, &h[0]));
        R_OK(dt_linear(xr, w[1], NULL, &h[1]));
        R_OK(dt_mul(h[0], h[1], &p));
        R_OK(dt_linear(p, w[2], NULL, &q));
        R_OK(dt_tensor_redistribute(q, 1, &seq, &y));
        dt_tensor_release(xr), dt_tensor_release(q);
    }
    R_OK(dt_backward_with(y, g));
    dt_tensor *outs[NOUT] = {y, dt_tensor_grad(x), dt_tensor_grad(w[0]), dt_tensor_grad(w[1]),
                             dt_tensor_grad(w[2])};
    for (int i = 0; i < NOUT; i++) {
        R_CHECK(outs[i] != NULL, "output %d missing", i);
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(outs[i], &info));
        size_t es = dt_dtype_size(info.dtype);
        void *full = malloc(info.numel * es + 8);
        R_OK(dt_tensor_full_tensor(outs[i], full, info.numel * es));
        if (dt_mesh_rank(mesh) == 0) {
            r->len[i] = info.numel;
            r->full[i] = malloc(info.numel * 8 + 8);
            dt_convert_to_f64(info.dtype, full, r->full[i], info.numel);
        }
        free(full);
    }
    dt_tensor *all[] = {x, w[0], w[1], w[2], g, h[0], h[1], p, y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

void gpu_check_async_tp(void (*report)(int ok, const char *what, const char *detail)) {
    static const char *names[NOUT] = {"y", "dx", "dw1", "dw3", "dw2"};
    const dt_dtype dtypes[2] = {DT_F32, DT_F64};
    for (int di = 0; di < 2; di++)
        for (int n = 2; n <= 3; n++) {
            trun ref = {.n = n, .dtype = dtypes[di]};
            dt_status st = dt_local_run(n, body, &ref, NULL);
            for (int m = DT_ASYNC_TP_RING; m <= DT_ASYNC_TP_ORDERED && st == DT_OK; m++) {
                trun run = {.cuda = 1, .n = n, .dtype = dtypes[di], .mode = (dt_async_tp_mode)m};
                char what[128], detail[160] = "";
                snprintf(what, sizeof what,
                         "async tp (all_gather_linear x2, linear_reduce_"
                         "scatter) on GPU tp=%d, %s, %s",
                         n, dt_dtype_name(run.dtype), m == DT_ASYNC_TP_RING ? "ring" : "ordered");
                dt_status rs = dt_local_run(n, body, &run, NULL);
                double tol = run.dtype == DT_F64 ? 1e-10 : 1e-4;
                for (int i = 0; rs == DT_OK && i < NOUT && !detail[0]; i++)
                    for (size_t k = 0; k < ref.len[i] && !detail[0]; k++) {
                        double w = ref.full[i][k], g = run.full[i][k];
                        if (!(fabs(g - w) <= tol * (1 + fabs(w))))
                            snprintf(detail, sizeof detail, "%s element %zu is %.9g, want %.9g",
                                     names[i], k, g, w);
                    }
                report(rs == DT_OK && !detail[0], what, rs != DT_OK ? dt_last_error() : detail);
                for (int i = 0; i < NOUT; i++)
                    free(run.full[i]);
            }
            if (st != DT_OK) report(0, "async tp's synchronous form on CPU ranks", dt_last_error());
            for (int i = 0; i < NOUT; i++)
                free(ref.full[i]);
        }
}
