/* A model of one's own for make train's trainer (trainer.h), written with the library's layers;
 * layout, optimizer, data: build/examples/my_llama examples/configs/my_llama.json */
#include <math.h>

#include "trainer.h"
#define NAME(fmt) (snprintf(name, sizeof name, "layers.%d." fmt, i), name)

typedef struct block {
    dt_module attention_norm, ffn_norm;
    dt_nn_attention attention;
    dt_nn_mlp mlp;
} block;
typedef struct model {
    dt_module embed, norm, output;
    block layers[64];
    int n, vocab;
    dt_tensor *cos, *sin;
} model;

static dt_status declare(void *self, dt_params *p, const tl_config *c) {
    model *m = self;
    dt_init one = {DT_INIT_NORMAL, 1}, in = {DT_INIT_NORMAL, 1 / sqrt(c->dim)},
            hid = {DT_INIT_NORMAL, 1 / sqrt(c->hidden)};
    char name[64]; /* groups (dt_params_begin_group) are the FSDP units' bounds */
    if ((m->n = c->layers) > 64) return dt_error_set(DT_ERR_ARG, "my_llama: over 64 layers");
    m->vocab = c->vocab;
    TR_TRY(dt_params_begin_group(p, "tok_embeddings"));
    TR_TRY(dt_nn_embedding_create(p, "tok_embeddings", c->vocab, c->dim, one, &m->embed));
    for (int i = 0; i < c->layers; i++) {
        block *b = &m->layers[i];
        TR_TRY(dt_params_begin_group(p, (snprintf(name, sizeof name, "layers.%d", i), name)));
        TR_TRY(dt_nn_rms_norm_create(p, NAME("attention_norm"), c->dim, 1e-5, &b->attention_norm));
        TR_TRY(dt_nn_attention_create(p, NAME("attention"), c->dim, c->heads, c->kv_heads, in, in,
                                      &b->attention));
        TR_TRY(dt_nn_rms_norm_create(p, NAME("ffn_norm"), c->dim, 1e-5, &b->ffn_norm));
        TR_TRY(dt_nn_mlp_create(p, NAME("feed_forward"), c->dim, c->hidden, in, hid, &b->mlp));
    }
    TR_TRY(dt_params_begin_group(p, "output"));
    TR_TRY(dt_nn_rms_norm_create(p, "norm", c->dim, 1e-5, &m->norm));
    TR_TRY(dt_nn_linear_create(p, "output", c->dim, c->vocab, 0, in, &m->output));
    return tr_rope_tables(p, c, &m->cos, &m->sin);
}

static dt_tensor *loss(void *self, dt_scope *s, dt_tensor *tokens, dt_tensor *targets) {
    model *m = self;
    dt_tensor *x = dt_nn_embedding_forward(s, m->embed, tokens), *h;
    for (block *b = m->layers; b < m->layers + m->n; b++) {
        h = dt_nn_rms_norm_forward(s, b->attention_norm, x);
        x = DT_DO(s, dt_add, x, dt_nn_attention_forward(s, &b->attention, h, m->cos, m->sin));
        x = DT_DO(s, dt_add, x,
                  dt_nn_mlp_forward(s, &b->mlp, dt_nn_rms_norm_forward(s, b->ffn_norm, x)));
    }
    x = dt_nn_linear_forward(s, m->output, dt_nn_rms_norm_forward(s, m->norm, x));
    int64_t rows[2] = {-1, m->vocab}, flat[1] = {-1};
    return DT_DO(s, dt_cross_entropy, DT_DO(s, dt_view, x, 2, rows),
                 DT_DO(s, dt_view, targets, 1, flat), DT_REDUCTION_MEAN);
}

static void release(void *self) {
    dt_tensor_release(((model *)self)->cos), dt_tensor_release(((model *)self)->sin);
}

int main(int argc, char **argv) {
    static const tr_model mine = {"my_llama", sizeof(model), declare, loss, release};
    return tr_main(argc, argv, &mine);
}
