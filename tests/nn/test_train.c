/* The small Llama-style model of examples/tiny_llama.c trained for 20 AdamW steps on one rank,
 * on a 2x2 (dp x tp) mesh (batch sharded over dp; torchtitan's colwise/rowwise plan with a
 * vocab-parallel head, so the loss is loss parallel, over tp), on 3 tp ranks (every sharded
 * weight uneven), on 2 dp ranks, and on 2x2 again with FSDP over dp and sequence parallelism.
 * The loss curves must agree within 1e-5 relative in f32: the gradients autograd derives, and
 * the collectives dispatch inserts for them, equal one rank's. Between steps each rank holds
 * exactly its parameters and their AdamW moments (sharded alike under FSDP). */
#include <math.h>

#include "../../examples/tiny_llama.h"
#include "dtensor/tensor_impl.h"
#include "helpers.h"
#include "op_cases.h"

enum { STEPS = 20 };
#define LR 0.02

static const tl_config cfg = {.vocab = 11,
                              .seq = 6,
                              .batch = 2,
                              .dim = 8,
                              .layers = 1,
                              .heads = 2,
                              .kv_heads = 1,
                              .hidden = 12};

typedef struct layout {
    const char *mesh;
    tl_layout l;
} layout;

typedef struct train_run {
    layout l;
    float loss[STEPS];
} train_run;

static dt_status train_body(dt_ctx *ctx, void *arg) {
    train_run *r = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, r->l.mesh, &mesh));
    tl_model m;
    R_OK(tl_model_init(&m, mesh, &cfg, &r->l.l, 1234));
    dt_adamw_options adamw = {
        .lr = LR, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    dt_optim *opt;
    R_OK(dt_optim_adamw_create_params(&adamw, m.params, &opt));
    int np = dt_params_count(m.params);
    int64_t param_bytes = 0, rope_bytes = 0;
    for (int i = 0; i < np; i++) {
        dt_tensor *w;
        dt_tensor_info info;
        R_OK(dt_params_at(m.params, i, NULL, &w));
        R_OK(dt_tensor_info_get(w, &info));
        param_bytes += (int64_t)info.local_bytes;
    }
    dt_tensor *rope[2] = {m.cos, m.sin};
    for (int i = 0; i < 2; i++) {
        dt_tensor_info info;
        R_OK(dt_tensor_info_get(rope[i], &info));
        rope_bytes += (int64_t)info.local_bytes;
    }
    for (int s = 0; s < STEPS; s++) {
        dt_tensor *tok, *tgt, *loss;
        R_OK(tl_batch(&m, NULL, 0, s, &tok, &tgt));
        R_OK(tl_loss(&m, tok, tgt, &loss));
        R_OK(dt_tensor_full_tensor(loss, &r->loss[s], sizeof r->loss[s]));
        R_OK(dt_backward(loss));
        dt_tensor_release(loss), dt_tensor_release(tok), dt_tensor_release(tgt);
        R_OK(dt_optim_step(opt));
        R_OK(dt_optim_zero_grad(opt));
        /* What is left between steps: the parameters and AdamW's two moments per parameter,
         * and the rope tables (the graph, the gradients and every temporary are gone) */
        dt_tensor_memory mem;
        R_OK(dt_ctx_tensor_memory(ctx, &mem));
        int64_t live = mem.tensors, bytes = mem.bytes;
        R_CHECK(live == 3 * np + 2 && bytes == 3 * param_bytes + rope_bytes,
                "step %d: %lld tensors and %lld bytes alive, want %d and %lld", s, (long long)live,
                (long long)bytes, 3 * np + 2, (long long)(3 * param_bytes + rope_bytes));
    }
    R_OK(dt_optim_destroy(opt));
    tl_model_free(&m);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(train, loss_curves_equal_on_every_layout) {
    static const layout layouts[] = {
        {"1", {.dp_dim = -1, .tp_dim = -1}},
        {"2x2", {.dp_dim = 0, .tp_dim = 1, .loss_parallel = 1}},
        {"3", {.dp_dim = -1, .tp_dim = 0, .loss_parallel = 1}},
        {"2", {.dp_dim = 0, .tp_dim = -1}},
        {"2x2", {.dp_dim = 0, .tp_dim = 1, .fsdp = 1, .sequence_parallel = 1, .loss_parallel = 1}},
    };
    train_run ref = {.l = layouts[0]};
    t_run(1, train_body, &ref);
    cr_assert(ref.loss[STEPS - 1] < ref.loss[0] * 0.9, "one rank did not learn: %g -> %g",
              ref.loss[0], ref.loss[STEPS - 1]);
    for (size_t i = 1; i < sizeof layouts / sizeof layouts[0]; i++) {
        train_run r = {.l = layouts[i]};
        t_run(op_mesh_ranks(layouts[i].mesh), train_body, &r);
        for (int s = 0; s < STEPS; s++)
            cr_assert(fabsf(r.loss[s] - ref.loss[s]) <= 1e-5f * fabsf(ref.loss[s]),
                      "mesh %s step %d: loss %.8g, one rank %.8g", layouts[i].mesh, s, r.loss[s],
                      ref.loss[s]);
        cr_log_info("mesh %s: %d steps, loss %.6g -> %.6g as on one rank", layouts[i].mesh, STEPS,
                    r.loss[0], r.loss[STEPS - 1]);
    }
}
