/* gpu_check's norm backward section: dt_layer_norm_backward and dt_rms_norm_backward on GPU
 * ranks (one rank, and the rows sharded over 2) against one CPU rank, every output compared (gx,
 * and gw / gb, which op_cases does not see). Rows across the fixed sum blocks, rows of every
 * kernel shape (a warp, 256 and 1024 threads per row), 2 normalised dims; f32, f64 and bf16.
 * The CUDA kernel rounds each product as the CPU does; the row statistics add in another order,
 * so they agree within 1e-12 (f64), 1e-5 (f32) and 1e-2 (bf16: one unit in the last place) of
 * each output's largest magnitude. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_norm.h"

enum { NOUT = 3 };

typedef struct nshape {
    int nd, k;
    int64_t shape[3];
} nshape;

static const nshape SHAPES[] = {
    {2, 1, {70, 40}},
    {2, 1, {33, 1500}},
    {2, 1, {5, 9000}},
    {3, 2, {6, 4, 50}},
};

typedef struct nrun {
    int cuda, rms, weight;
    nshape s;
    const char *mesh;
    dt_dtype dtype;
    double *full[NOUT]; /* gx, gw, gb on rank 0 */
    size_t n[NOUT];
} nrun;

static dt_status make(dt_mesh *mesh, const char *m, int ndim, const int64_t *shape, dt_dtype dt,
                      uint64_t seed, int rows, dt_tensor **out) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    double *v = malloc(n * 8 + 8);
    void *buf = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++)
        v[i] = t_value(seed, i) + (rows ? 0.0 : 1.5);
    dt_convert_from_f64(dt, v, buf, n);
    dt_placement pl[1] = {rows && strcmp(m, "1") ? dt_shard(0) : dt_replicate()};
    dt_status st = dt_tensor_distribute(mesh, buf, dt, ndim, shape, 1, pl, DT_ALL_RANKS, out);
    free(buf), free(v);
    return st;
}

static dt_status norm_body(dt_ctx *ctx, void *arg) {
    nrun *r = arg;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    dt_tensor *t[6] = {0}; /* x, grad, weight, gx, gw, gb */
    const int64_t *ws = r->s.shape + r->s.nd - r->s.k;
    R_OK(make(mesh, r->mesh, r->s.nd, r->s.shape, r->dtype, 1, 1, &t[0]));
    R_OK(make(mesh, r->mesh, r->s.nd, r->s.shape, r->dtype, 2, 1, &t[1]));
    if (r->weight) R_OK(make(mesh, r->mesh, r->s.k, ws, r->dtype, 3, 0, &t[2]));
    if (r->rms)
        R_OK(dt_rms_norm_backward(t[0], t[2], t[1], 1e-5, r->s.k, &t[3], &t[4]));
    else
        R_OK(dt_layer_norm_backward(t[0], t[2], t[1], 1e-5, r->s.k, &t[3], &t[4], &t[5]));
    for (int i = 0; i < NOUT; i++) {
        if (!t[3 + i]) continue;
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(t[3 + i], &info));
        size_t es = dt_dtype_size(info.dtype);
        void *full = malloc(info.numel * es + 8);
        R_OK(dt_tensor_full_tensor(t[3 + i], full, info.numel * es));
        if (dt_mesh_rank(mesh) == 0) {
            r->n[i] = info.numel;
            r->full[i] = malloc(info.numel * 8 + 8);
            dt_convert_to_f64(info.dtype, full, r->full[i], info.numel);
        }
        free(full);
    }
    for (int i = 0; i < 6; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

void gpu_check_norm(void (*report)(int ok, const char *what, const char *detail)) {
    static const char *names[NOUT] = {"gx", "gw", "gb"};
    const dt_dtype dtypes[3] = {DT_F32, DT_F64, DT_BF16};
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++)
        for (int di = 0; di < 3; di++)
            for (int v = 0; v < 4; v++) {
                nrun ref = {.rms = v & 1,
                            .weight = v >> 1,
                            .s = SHAPES[si],
                            .mesh = "1",
                            .dtype = dtypes[di]};
                dt_status st = dt_local_run(1, norm_body, &ref, NULL);
                for (int m = 0; m < 2 && st == DT_OK; m++) {
                    nrun run = ref;
                    run.cuda = 1, run.mesh = m ? "2" : "1";
                    memset(run.full, 0, sizeof run.full);
                    char what[160], detail[200] = "";
                    snprintf(what, sizeof what,
                             "%s on GPU mesh %s, %s, %s, x (%lld, %lld%s), %d normalised dims",
                             run.rms ? "rms_norm_backward" : "layer_norm_backward", run.mesh,
                             dt_dtype_name(run.dtype), run.weight ? "weight" : "no weight",
                             (long long)run.s.shape[0], (long long)run.s.shape[1],
                             run.s.nd == 3 ? ", 50" : "", run.s.k);
                    dt_status rs = dt_local_run(m ? 2 : 1, norm_body, &run, NULL);
                    double tol = run.dtype == DT_BF16 ? 1e-2 : run.dtype == DT_F64 ? 1e-12 : 1e-5;
                    for (int i = 0; i < NOUT && rs == DT_OK && !detail[0]; i++) {
                        if (!ref.full[i]) continue;
                        double scale = 0;
                        for (size_t j = 0; j < ref.n[i]; j++)
                            scale = fmax(scale, fabs(ref.full[i][j]));
                        for (size_t j = 0; j < ref.n[i] && !detail[0]; j++)
                            if (!(fabs(run.full[i][j] - ref.full[i][j]) <=
                                  tol * (fabs(ref.full[i][j]) + scale)))
                                snprintf(detail, sizeof detail, "%s[%zu] = %.9g, CPU %.9g",
                                         names[i], j, run.full[i][j], ref.full[i][j]);
                    }
                    report(rs == DT_OK && !detail[0], what, rs != DT_OK ? dt_last_error() : detail);
                    for (int i = 0; i < NOUT; i++)
                        free(run.full[i]);
                }
                if (st != DT_OK) report(0, "norm backward on one CPU rank", dt_last_error());
                for (int i = 0; i < NOUT; i++)
                    free(ref.full[i]);
            }
}
