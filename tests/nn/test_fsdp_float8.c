/* FSDP's float8 all-gather (dt_fsdp_options.float8_all_gather) on dp=4 with uneven shards:
 * the gathered parameters equal the naive e4m3 round trip of the whole parameters under their
 * global tensorwise scales, each gather moves a quarter of the f32 gather's bytes and costs one
 * small all_reduce MAX, and the gradients are f32 and equal those of one rank computing with
 * the rounded parameters. The bf16 gather (bf16_all_gather) likewise: naive bf16 rounding,
 * half of f32's bytes and twice float8's, no extra collective. */
#include <math.h>
#include <stdlib.h>

#include "float8_ref.h"
#include "helpers.h"

#define IN 10
#define HID 6
#define OUT 3
#define BATCH 8

typedef struct run {
    int float8, bf16, ranks;
    float w1[HID * IN], w2[OUT * HID]; /* the parameters the forward uses (rounded by the test) */
    float full1[HID * IN], full2[OUT * HID];  /* what unit_begin handed out */
    float g1[HID * IN], g2[OUT * HID];
    double loss;
    uint64_t ag_calls, ag_bytes, ar_calls;
    int grad_f32;
} run;

static void init(float *w, int n, double k) {
    for (int i = 0; i < n; i++) w[i] = (float)(sin(k * i + 0.5) * (1 + i % 5) * 0.1);
}

static dt_status forward(dt_tensor *x, dt_tensor *w1, dt_tensor *w2, dt_tensor **loss) {
    dt_tensor *h, *a, *y;
    R_OK(dt_linear(x, w1, NULL, &h));
    R_OK(dt_relu(h, &a));
    R_OK(dt_linear(a, w2, NULL, &y));
    R_OK(dt_sum(y, NULL, 0, 0, loss));
    dt_tensor_release(h), dt_tensor_release(a), dt_tensor_release(y);
    return DT_OK;
}

static dt_status reject_body(dt_ctx *ctx, void *arg);

/* The gradients' dtype and full values (collective). */
static dt_status keep_grads(run *r, dt_tensor *a, dt_tensor *b) {
    dt_tensor *g1 = dt_tensor_grad(a), *g2 = dt_tensor_grad(b);
    R_CHECK(g1 && g2, "a parameter has no gradient");
    dt_tensor_info i1, i2;
    R_OK(dt_tensor_info_get(g1, &i1));
    R_OK(dt_tensor_info_get(g2, &i2));
    r->grad_f32 = i1.dtype == DT_F32 && i2.dtype == DT_F32;
    R_OK(dt_tensor_full_tensor(g1, r->g1, sizeof r->g1));
    R_OK(dt_tensor_full_tensor(g2, r->g2, sizeof r->g2));
    return DT_OK;
}

static dt_status body(dt_ctx *ctx, void *arg) {
    run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->ranks == 1 ? "1" : "4", &mesh));
    float x[BATCH * IN];
    init(x, BATCH * IN, 0.37);
    int64_t xs[2] = {BATCH, IN}, s1[2] = {HID, IN}, s2[2] = {OUT, HID};
    dt_placement rep = dt_replicate();
    dt_tensor *tx, *p1, *p2, *loss;
    R_OK(dt_tensor_distribute(mesh, x, DT_F32, 2, xs, 1, &rep, DT_ALL_RANKS, &tx));
    R_OK(dt_tensor_distribute(mesh, r->w1, DT_F32, 2, s1, 1, &rep, DT_ALL_RANKS, &p1));
    R_OK(dt_tensor_distribute(mesh, r->w2, DT_F32, 2, s2, 1, &rep, DT_ALL_RANKS, &p2));
    R_OK(dt_tensor_set_requires_grad(p1, 1));
    R_OK(dt_tensor_set_requires_grad(p2, 1));
    if (r->ranks == 1) { /* the reference: plain f32 on one rank */
        R_OK(forward(tx, p1, p2, &loss));
        R_OK(dt_backward(loss));
        R_OK(keep_grads(r, p1, p2));
    } else {
        dt_fsdp_options o = dt_fsdp_options_default();
        o.float8_all_gather = r->float8;
        o.bf16_all_gather = r->bf16;
        dt_fsdp *f;
        R_OK(dt_fsdp_create(mesh, &o, &f));
        dt_tensor *sh[2], *full[2];
        R_OK(dt_fsdp_shard_param(f, p1, &sh[0]));
        R_OK(dt_fsdp_shard_param(f, p2, &sh[1]));
        R_OK(dt_fsdp_add_unit(f, 2, sh, NULL));
        R_OK(dt_comm_stats_reset(ctx));
        R_OK(dt_fsdp_unit_begin(f, 0, full));
        R_OK(forward(tx, full[0], full[1], &loss));
        /* the gathered values, read off the unit's own copies before they are dropped */
        R_OK(dt_tensor_local_to_host(full[0], r->full1, sizeof r->full1));
        R_OK(dt_tensor_local_to_host(full[1], r->full2, sizeof r->full2));
        R_OK(dt_fsdp_unit_end(f, 0));
        R_OK(dt_backward(loss));
        dt_comm_stats st;
        R_OK(dt_comm_stats_get(ctx, &st));
        if (dt_ctx_rank(ctx) == 0) {
            r->ag_calls = st.calls[DT_COLL_ALL_GATHER];
            r->ag_bytes = st.bytes_in[DT_COLL_ALL_GATHER];
            r->ar_calls = st.calls[DT_COLL_ALL_REDUCE];
        }
        R_OK(keep_grads(r, sh[0], sh[1]));
        R_OK(dt_fsdp_destroy(f));
        dt_tensor_release(sh[0]), dt_tensor_release(sh[1]);
    }
    double l;
    float lf;
    R_OK(dt_tensor_full_tensor(loss, &lf, sizeof lf));
    l = lf;
    if (dt_ctx_rank(ctx) == 0) r->loss = l;
    dt_tensor_release(loss), dt_tensor_release(tx), dt_tensor_release(p1), dt_tensor_release(p2);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* w rounded as the float8 gather must: e4m3 of w * s, back / s, s from the whole of w. */
static void round_param(const float *w, float *out, int n) {
    double amax = 0;
    for (int i = 0; i < n; i++) amax = fmax(amax, fabs(w[i]));
    float s = (float)(448.0 / fmax(amax, 1e-12));
    for (int i = 0; i < n; i++) out[i] = (float)t_f8_round(0, (float)(w[i] * s)) / s;
}

static void close_all(const char *what, const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++)
        cr_assert(fabsf(got[i] - want[i]) <= 1e-5f * fabsf(want[i]) + 1e-6f,
                  "%s[%d] = %.9g, want %.9g", what, i, (double)got[i], (double)want[i]);
}

Test(fsdp_float8, gather_quarter_bytes_rounded_params_f32_grads) {
    static run f32 = {.float8 = 0, .ranks = 4}, f8 = {.float8 = 1, .ranks = 4}, ref = {.ranks = 1};
    init(f32.w1, HID * IN, 0.71), init(f32.w2, OUT * HID, 1.13);
    f32.w2[4] = -9.0f; /* one large weight: its tensor's scale is set by it */
    memcpy(f8.w1, f32.w1, sizeof f8.w1), memcpy(f8.w2, f32.w2, sizeof f8.w2);
    round_param(f32.w1, ref.w1, HID * IN);
    round_param(f32.w2, ref.w2, OUT * HID);
    t_run(4, body, &f32);
    t_run(4, body, &f8);
    t_run(1, body, &ref);
    /* the f32 gather hands out the parameters unchanged; the float8 one the rounded ones */
    cr_assert(memcmp(f32.full1, f32.w1, sizeof f32.w1) == 0, "the f32 gather changed w1");
    for (int i = 0; i < HID * IN; i++)
        cr_assert(f8.full1[i] == ref.w1[i], "w1[%d] gathered as %.9g, want %.9g", i,
                  (double)f8.full1[i], (double)ref.w1[i]);
    for (int i = 0; i < OUT * HID; i++)
        cr_assert(f8.full2[i] == ref.w2[i], "w2[%d] gathered as %.9g, want %.9g", i,
                  (double)f8.full2[i], (double)ref.w2[i]);
    /* forward gather + backward refill, each a quarter of f32's bytes and one amax reduce */
    cr_assert_eq(f8.ag_calls, f32.ag_calls);
    cr_assert(f8.ag_calls >= 2, "%llu all_gathers", (unsigned long long)f8.ag_calls);
    cr_assert(f8.ag_bytes * 4 == f32.ag_bytes, "all_gather bytes: float8 %llu, f32 %llu",
              (unsigned long long)f8.ag_bytes, (unsigned long long)f32.ag_bytes);
    cr_assert(f8.ar_calls == f32.ar_calls + f8.ag_calls, "all_reduces: float8 %llu, f32 %llu, "
              "gathers %llu", (unsigned long long)f8.ar_calls, (unsigned long long)f32.ar_calls,
              (unsigned long long)f8.ag_calls);
    cr_assert(f8.grad_f32 && f32.grad_f32, "gradients are not f32");
    close_all("float8 loss", &(float){(float)f8.loss}, &(float){(float)ref.loss}, 1);
    close_all("float8 dw1", f8.g1, ref.g1, HID * IN);
    close_all("float8 dw2", f8.g2, ref.g2, OUT * HID);
    cr_log_info("fsdp float8 gather: %llu calls, %llu bytes (f32: %llu); loss %.6g (f32 %.6g)",
                (unsigned long long)f8.ag_calls, (unsigned long long)f8.ag_bytes,
                (unsigned long long)f32.ag_bytes, f8.loss, f32.loss);
}

/* w rounded to bf16 as the bf16 gather must: nearest, ties to even (no NaN in the data). */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

Test(fsdp_float8, bf16_gather_half_bytes_rounded_params_f32_grads) {
    static run f32 = {.ranks = 4}, bf = {.bf16 = 1, .ranks = 4}, f8 = {.float8 = 1, .ranks = 4},
               ref = {.ranks = 1};
    init(f32.w1, HID * IN, 0.71), init(f32.w2, OUT * HID, 1.13);
    f32.w2[4] = -9.0f;
    memcpy(bf.w1, f32.w1, sizeof bf.w1), memcpy(bf.w2, f32.w2, sizeof bf.w2);
    memcpy(f8.w1, f32.w1, sizeof f8.w1), memcpy(f8.w2, f32.w2, sizeof f8.w2);
    int changed = 0;
    for (int i = 0; i < HID * IN; i++) changed += (ref.w1[i] = bf16_round(f32.w1[i])) != f32.w1[i];
    for (int i = 0; i < OUT * HID; i++) ref.w2[i] = bf16_round(f32.w2[i]);
    cr_assert(changed > HID * IN / 2, "only %d of w1's values change in bf16", changed);
    t_run(4, body, &f32);
    t_run(4, body, &bf);
    t_run(4, body, &f8);
    t_run(1, body, &ref);
    for (int i = 0; i < HID * IN; i++)
        cr_assert(bf.full1[i] == ref.w1[i], "w1[%d] gathered as %.9g, want %.9g", i,
                  (double)bf.full1[i], (double)ref.w1[i]);
    for (int i = 0; i < OUT * HID; i++)
        cr_assert(bf.full2[i] == ref.w2[i], "w2[%d] gathered as %.9g, want %.9g", i,
                  (double)bf.full2[i], (double)ref.w2[i]);
    /* torchtitan's mixed_precision_param = bfloat16 moves half of f32's bytes; float8 half
     * of that; neither changes the number of gathers, and bf16 needs no scale */
    cr_assert(bf.ag_calls == f32.ag_calls && f8.ag_calls == f32.ag_calls && bf.ag_calls >= 2,
              "all_gathers: bf16 %llu, float8 %llu, f32 %llu", (unsigned long long)bf.ag_calls,
              (unsigned long long)f8.ag_calls, (unsigned long long)f32.ag_calls);
    cr_assert(bf.ag_bytes * 2 == f32.ag_bytes && f8.ag_bytes * 2 == bf.ag_bytes,
              "all_gather bytes: f32 %llu, bf16 %llu, float8 %llu",
              (unsigned long long)f32.ag_bytes, (unsigned long long)bf.ag_bytes,
              (unsigned long long)f8.ag_bytes);
    cr_assert(bf.ar_calls == f32.ar_calls, "all_reduces: bf16 %llu, f32 %llu",
              (unsigned long long)bf.ar_calls, (unsigned long long)f32.ar_calls);
    cr_assert(bf.grad_f32, "gradients are not f32");
    close_all("bf16 loss", &(float){(float)bf.loss}, &(float){(float)ref.loss}, 1);
    close_all("bf16 dw1", bf.g1, ref.g1, HID * IN);
    close_all("bf16 dw2", bf.g2, ref.g2, OUT * HID);
    cr_log_info("fsdp gather bytes: f32 %llu, bf16 %llu, float8 %llu",
                (unsigned long long)f32.ag_bytes, (unsigned long long)bf.ag_bytes,
                (unsigned long long)f8.ag_bytes);
}

Test(fsdp_float8, rejects_non_f32_params) {
    t_run(2, reject_body, NULL);
}

static dt_status reject_body(dt_ctx *ctx, void *arg) {
    (void)arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2", &mesh));
    dt_fsdp_options o = dt_fsdp_options_default();
    o.float8_all_gather = 1;
    dt_fsdp *f;
    R_OK(dt_fsdp_create(mesh, &o, &f));
    int64_t shape[2] = {4, 4};
    dt_placement rep = dt_replicate();
    dt_tensor *p, *sh;
    R_OK(dt_tensor_ones(mesh, DT_BF16, 2, shape, 1, &rep, &p));
    R_OK(dt_fsdp_shard_param(f, p, &sh));
    R_ERR(dt_fsdp_add_unit(f, 1, &sh, NULL), DT_ERR_UNSUPPORTED, "params[0] is bf16");
    dt_tensor_release(sh), dt_tensor_release(p);
    R_OK(dt_fsdp_destroy(f));
    /* the bf16 gather takes f32 parameters too, and a unit gathers in one dtype */
    o.float8_all_gather = 0, o.bf16_all_gather = 1;
    R_OK(dt_fsdp_create(mesh, &o, &f));
    R_OK(dt_tensor_ones(mesh, DT_BF16, 2, shape, 1, &rep, &p));
    R_OK(dt_fsdp_shard_param(f, p, &sh));
    R_ERR(dt_fsdp_add_unit(f, 1, &sh, NULL), DT_ERR_UNSUPPORTED, "bf16_all_gather takes f32");
    dt_tensor_release(sh), dt_tensor_release(p);
    R_OK(dt_fsdp_destroy(f));
    o.float8_all_gather = 1;
    R_ERR(dt_fsdp_create(mesh, &o, &f), DT_ERR_ARG, "both");
    dt_mesh_release(mesh);
    return DT_OK;
}
