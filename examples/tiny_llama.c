/* The model of tiny_llama.h. */
#include "tiny_llama.h"

#include <math.h>
#include <stdlib.h>

const char *const tl_weight_names[TL_NWEIGHTS] = {
    "emb", "attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w1", "w3", "w2", "norm", "head",
};

/* How each weight is placed over tp: replicated, column-parallel (S(0)) or row-parallel
 * (S(1)); and its init: 0 = ones (norms), else randn * scale. */
enum { REP, COL, ROW };
static const int split[TL_NWEIGHTS] = {REP, REP, COL, COL, COL, ROW, REP, COL, COL, ROW, REP, COL};

/* The tensors a forward makes, released together; the first failure skips every later call
 * and is what scope_end returns. */
typedef struct scope {
    dt_tensor *t[64];
    int n;
    dt_tensor *last;
    dt_status st;
} scope;

static dt_tensor *scope_keep(scope *s) {
    if (s->n == 64) {
        dt_tensor_release(s->last);
        s->st = DT_ERR_NOMEM;
        return NULL;
    }
    return s->t[s->n++] = s->last;
}

#define DO(s, call) ((s)->st == DT_OK && ((s)->st = (call)) == DT_OK ? scope_keep(s) : NULL)

/* Releases the scope's tensors but keep (retained for the caller). */
static dt_status scope_end(scope *s, dt_tensor *keep, dt_tensor **out) {
    if (s->st == DT_OK && keep) {
        dt_tensor_retain(keep);
        *out = keep;
    }
    for (int i = 0; i < s->n; i++) dt_tensor_release(s->t[i]);
    return s->st;
}

static dt_status init_weight(tl_model *m, int i, dt_generator *gen) {
    const tl_config *c = &m->cfg;
    int64_t shapes[TL_NWEIGHTS][2] = {
        {c->vocab, c->dim}, {c->dim}, {c->dim, c->dim}, {c->dim, c->dim}, {c->dim, c->dim},
        {c->dim, c->dim}, {c->dim}, {c->hidden, c->dim}, {c->hidden, c->dim},
        {c->dim, c->hidden}, {c->dim}, {c->vocab, c->dim},
    };
    int ndim = shapes[i][1] ? 2 : 1, mnd = dt_mesh_ndim(m->mesh);
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int d = 0; d < mnd; d++) pl[d] = dt_replicate();
    if (m->tp_dim >= 0 && split[i] != REP) pl[m->tp_dim] = dt_shard(split[i] == COL ? 0 : 1);
    if (ndim == 1) return dt_tensor_ones(m->mesh, DT_F32, 1, shapes[i], mnd, pl, &m->w[i]);
    dt_tensor *r;
    dt_status st = dt_tensor_randn(m->mesh, DT_F32, 2, shapes[i], mnd, pl, gen, &r);
    /* std 1/sqrt(fan_in) for projections, 1 for the embedding */
    if (st == DT_OK) st = dt_mul_scalar(r, i == 0 ? 1.0 : 1.0 / sqrt((double)shapes[i][1]), &m->w[i]);
    dt_tensor_release(r);
    return st;
}

dt_status tl_model_init(tl_model *m, dt_mesh *mesh, const tl_config *cfg, int dp_dim, int tp_dim,
                        uint64_t seed) {
    *m = (tl_model){.cfg = *cfg, .mesh = mesh, .dp_dim = dp_dim, .tp_dim = tp_dim};
    dt_generator gen = dt_generator_make(seed);
    dt_status st = DT_OK;
    for (int i = 0; i < TL_NWEIGHTS && st == DT_OK; i++) {
        st = init_weight(m, i, &gen);
        if (st == DT_OK) st = dt_tensor_set_requires_grad(m->w[i], 1);
    }
    if (st != DT_OK) tl_model_free(m);
    return st;
}

void tl_model_free(tl_model *m) {
    for (int i = 0; i < TL_NWEIGHTS; i++) dt_tensor_release(m->w[i]), m->w[i] = NULL;
}

dt_status tl_batch(const tl_model *m, int step, dt_tensor **tokens, dt_tensor **targets) {
    const tl_config *c = &m->cfg;
    int64_t n = (int64_t)c->batch * c->seq, shape[2] = {c->batch, c->seq};
    int64_t *buf = malloc(sizeof *buf * (size_t)(2 * n));
    if (!buf) return DT_ERR_NOMEM;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
    for (int b = 0; b < c->batch; b++) {
        int64_t prev = 0;
        for (int t = 0; t <= c->seq; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* a learnable rule: mostly the previous token + 1, sometimes random */
            int64_t tok = x % 4 ? (prev + 1) % c->vocab : (int64_t)(x >> 8) % c->vocab;
            if (t < c->seq) buf[b * c->seq + t] = tok;
            if (t > 0) buf[n + b * c->seq + t - 1] = tok;
            prev = tok;
        }
    }
    int mnd = dt_mesh_ndim(m->mesh);
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int d = 0; d < mnd; d++) pl[d] = dt_replicate();
    if (m->dp_dim >= 0) pl[m->dp_dim] = dt_shard(0);
    dt_status st = dt_tensor_distribute(m->mesh, buf, DT_I64, 2, shape, mnd, pl, DT_ALL_RANKS,
                                        tokens);
    if (st == DT_OK) {
        st = dt_tensor_distribute(m->mesh, buf + n, DT_I64, 2, shape, mnd, pl, DT_ALL_RANKS,
                                  targets);
        if (st != DT_OK) dt_tensor_release(*tokens);
    }
    free(buf);
    return st;
}

dt_status tl_loss(const tl_model *m, dt_tensor *tokens, dt_tensor *targets, dt_tensor **out) {
    const tl_config *c = &m->cfg;
    int64_t B = c->batch, T = c->seq, C = c->dim, hd = c->dim / c->heads;
    int64_t split_heads[4] = {B, T, c->heads, hd}, merged[3] = {B, T, C};
    int64_t rows[2] = {B * T, c->vocab}, flat[1] = {B * T};
    dt_tensor *const *w = m->w;
    scope s = {0};
    dt_tensor *x = DO(&s, dt_embedding(w[0], tokens, &s.last));
    dt_tensor *h = DO(&s, dt_rms_norm(x, w[1], 1e-5, &s.last));
    dt_tensor *qkv[3];
    for (int i = 0; i < 3; i++) {
        dt_tensor *p = DO(&s, dt_linear(h, w[2 + i], NULL, &s.last));
        dt_tensor *p4 = DO(&s, dt_view(p, 4, split_heads, &s.last));
        qkv[i] = DO(&s, dt_transpose(p4, 1, 2, &s.last)); /* (B, heads, T, hd) */
    }
    dt_tensor *a = DO(&s, dt_sdpa(qkv[0], qkv[1], qkv[2], 1, &s.last));
    dt_tensor *a4 = DO(&s, dt_transpose(a, 1, 2, &s.last));
    dt_tensor *a3 = DO(&s, dt_view(a4, 3, merged, &s.last));
    dt_tensor *o = DO(&s, dt_linear(a3, w[5], NULL, &s.last));
    dt_tensor *x1 = DO(&s, dt_add(x, o, &s.last));
    dt_tensor *h2 = DO(&s, dt_rms_norm(x1, w[6], 1e-5, &s.last));
    dt_tensor *gate = DO(&s, dt_linear(h2, w[7], NULL, &s.last));
    dt_tensor *up = DO(&s, dt_linear(h2, w[8], NULL, &s.last));
    dt_tensor *mlp = DO(&s, dt_swiglu(gate, up, &s.last));
    dt_tensor *down = DO(&s, dt_linear(mlp, w[9], NULL, &s.last));
    dt_tensor *x2 = DO(&s, dt_add(x1, down, &s.last));
    dt_tensor *h3 = DO(&s, dt_rms_norm(x2, w[10], 1e-5, &s.last));
    dt_tensor *logits = DO(&s, dt_linear(h3, w[11], NULL, &s.last));
    dt_tensor *lg = DO(&s, dt_view(logits, 2, rows, &s.last));
    dt_tensor *tg = DO(&s, dt_view(targets, 1, flat, &s.last));
    dt_tensor *loss = DO(&s, dt_cross_entropy(lg, tg, DT_REDUCTION_MEAN, &s.last));
    return scope_end(&s, loss, out);
}
