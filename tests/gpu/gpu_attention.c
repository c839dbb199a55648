/* gpu_check's attention section: dt_sdpa_lse and dt_sdpa_backward on GPU ranks (heads sharded
 * over 2 ranks, and one rank) against one CPU rank, every output compared: the forward's out
 * and log-sum-exp, the backward's dq, dk and dv (op_cases compares only an op's first output).
 * Grouped-query heads (8/2, 4/1), causal and not, f32, f64 and bf16 (f32 rows); lengths off the
 * flash kernels' tiles (37 queries on 45 keys, 130) and head dims 16, 64 and 160 (above the
 * flash kernels' 128: the cuBLAS path). The seq-first layout (q (B, T, H, D), dt_sdpa_seq_first)
 * on the flash kernels' shapes, against the CPU's seq-first kernels. And q's heads over 4 ranks
 * with k and v whole (attention's q-heads rule: each rank reads its kv heads in place through
 * dt_sdpa_heads, dk and dv Partial(sum)), on both paths. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_attention.h"

enum { NOUT = 5 };

/* q's and k's (= v's) shapes. */
typedef struct ashape {
    int64_t q[4], k[4];
} ashape;

static const ashape SHAPES[] = {
    {{2, 8, 37, 16}, {2, 2, 45, 16}},
    {{1, 4, 130, 64}, {1, 1, 130, 64}},
    {{2, 4, 33, 160}, {2, 2, 33, 160}},
};

typedef struct arun {
    int cuda, causal, seq_first, kv_whole; /* kv_whole: k, v Replicate, q sharded */
    ashape shape;
    const char *mesh;
    dt_dtype dtype;
    double *full[NOUT]; /* out, lse, dq, dk, dv on rank 0 */
    size_t n[NOUT];
} arun;

static dt_status make(dt_mesh *mesh, const arun *r, int ndim, const int64_t *shape, dt_dtype dt,
                      uint64_t seed, int kv, dt_tensor **out) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    double *v = malloc(n * 8 + 8);
    void *buf = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++)
        v[i] = t_value(seed, i) / 4;
    dt_convert_from_f64(dt, v, buf, n);
    dt_placement pl[1] = {strcmp(r->mesh, "1") && !(kv && r->kv_whole)
                              ? dt_shard(r->seq_first ? 2 : 1)
                              : dt_replicate()};
    dt_status st = dt_tensor_distribute(mesh, buf, dt, ndim, shape, 1, pl, DT_ALL_RANKS, out);
    free(buf), free(v);
    return st;
}

static dt_status attention_body(dt_ctx *ctx, void *arg) {
    arun *r = arg;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->mesh, &mesh));
    int64_t qs[4], ks[4];
    memcpy(qs, r->shape.q, sizeof qs), memcpy(ks, r->shape.k, sizeof ks);
    if (r->seq_first) /* (B, H, T, D) -> (B, T, H, D) */
        qs[1] = r->shape.q[2], qs[2] = r->shape.q[1], ks[1] = r->shape.k[2], ks[2] = r->shape.k[1];
    dt_tensor *t[9] = {0}; /* q, k, v, g, out, lse, dq, dk, dv */
    R_OK(make(mesh, r, 4, qs, r->dtype, 1, 0, &t[0]));
    R_OK(make(mesh, r, 4, ks, r->dtype, 2, 1, &t[1]));
    R_OK(make(mesh, r, 4, ks, r->dtype, 3, 1, &t[2]));
    R_OK(make(mesh, r, 4, qs, r->dtype, 4, 0, &t[3]));
    dt_op_args a = {.causal = r->causal, .seq_first = r->seq_first};
    R_OK(dt_op_call_aux(DT_OP_SDPA, t, 3, &a, &t[4], &t[5], 1));
    dt_tensor *in[5] = {t[0], t[1], t[2], t[3], t[5]};
    R_OK(dt_op_call_aux(DT_OP_SDPA_BACKWARD, in, 5, &a, &t[6], &t[7], 2));
    for (int i = 0; i < NOUT; i++) {
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(t[4 + i], &info));
        size_t es = dt_dtype_size(info.dtype);
        void *full = malloc(info.numel * es + 8);
        R_OK(dt_tensor_full_tensor(t[4 + i], full, info.numel * es));
        if (dt_mesh_rank(mesh) == 0) {
            r->n[i] = info.numel;
            r->full[i] = malloc(info.numel * 8 + 8);
            dt_convert_to_f64(info.dtype, full, r->full[i], info.numel);
        }
        free(full);
    }
    for (int i = 0; i < 9; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

void gpu_check_attention(void (*report)(int ok, const char *what, const char *detail)) {
    static const char *names[NOUT] = {"out", "lse", "dq", "dk", "dv"};
    const dt_dtype dtypes[3] = {DT_F32, DT_F64, DT_BF16};
    for (int sf = 0; sf < 2; sf++)
        for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0] - (size_t)sf; si++)
            for (int di = 0; di < 3; di++)
                for (int causal = 0; causal < 2; causal++) {
                    arun ref = {.causal = causal,
                                .seq_first = sf,
                                .mesh = "1",
                                .dtype = dtypes[di],
                                .shape = SHAPES[si]};
                    dt_status st = dt_local_run(1, attention_body, &ref, NULL);
                    for (int m = 0; m < 3 && st == DT_OK; m++) {
                        arun run = ref;
                        run.cuda = 1,
                        run.mesh = m == 2 ? "4"
                                   : m    ? "2"
                                          : "1",
                        run.kv_whole = m == 2;
                        memset(run.full, 0, sizeof run.full);
                        char what[128], detail[160] = "";
                        snprintf(what, sizeof what,
                                 "sdpa forward + backward on GPU mesh %s, %s%s%s%s, q (%lld, %lld, "
                                 "%lld, %lld), %lld kv heads",
                                 run.mesh, dt_dtype_name(run.dtype), causal ? ", causal" : "",
                                 sf ? ", seq-first" : "", run.kv_whole ? ", k and v whole" : "",
                                 (long long)run.shape.q[0], (long long)run.shape.q[1],
                                 (long long)run.shape.q[2], (long long)run.shape.q[3],
                                 (long long)run.shape.k[1]);
                        dt_status rs = dt_local_run(m == 2 ? 4
                                                    : m    ? 2
                                                           : 1,
                                                    attention_body, &run, NULL);
                        /* bf16: inputs and outputs round to 8 bits; the rest is f32 on both devices
                         * (TF32 not allowed here: gpu_check's ranks keep the default) */
                        double tol = run.dtype == DT_BF16  ? 2e-2
                                     : run.dtype == DT_F64 ? 1e-10
                                                           : 1e-4;
                        int ranks = m == 2 ? 4 : m ? 2 : 1;
                        for (int i = 0; rs == DT_OK && i < NOUT && !detail[0]; i++) {
                            /* dk and dv may come out Partial(sum) (q's heads split over whole k
                             * and v): in bf16 each rank's share rounds to 8 bits before the
                             * sum, an error of up to a rounding of the largest share per rank */
                            double big = 0, share = 0;
                            for (size_t k = 0; k < ref.n[i]; k++)
                                big = fmax(big, fabs(ref.full[i][k]));
                            if (run.dtype == DT_BF16 && i >= 3) share = ranks * big / 128;
                            for (size_t k = 0; k < ref.n[i] && !detail[0]; k++) {
                                double w = ref.full[i][k], g = run.full[i][k];
                                if (!(fabs(g - w) <= tol * (1 + fabs(w)) + share) &&
                                    !(isinf(w) && g == w))
                                    snprintf(detail, sizeof detail,
                                             "%s element %zu is %.9g, want %.9g", names[i], k, g,
                                             w);
                            }
                        }
                        report(rs == DT_OK && !detail[0], what,
                               rs != DT_OK ? dt_last_error() : detail);
                        for (int i = 0; i < NOUT; i++)
                            free(run.full[i]);
                    }
                    if (st != DT_OK) report(0, "sdpa on one CPU rank", dt_last_error());
                    for (int i = 0; i < NOUT; i++)
                        free(ref.full[i]);
                }
}
