/* The model of fsdp_model.h. */
#include "fsdp_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        if (st_ != DT_OK) return st_;                                                              \
    } while (0)

enum { REP, COL, ROW };
static const int block_split[FM_BLOCK_PARAMS] = {REP, COL, COL, COL, ROW, REP, COL, COL, ROW};

static int param_split(const fm_model *m, int i) {
    if (i == 0 || i == m->np - 2) return REP;
    if (i == m->np - 1) return COL;
    return block_split[(i - 1) % FM_BLOCK_PARAMS];
}

int fm_param_shape(const fm_config *c, int i, int64_t *shape) {
    int np = 1 + c->blocks * FM_BLOCK_PARAMS + 2;
    if (i == 0 || i == np - 1) return shape[0] = c->vocab, shape[1] = c->dim, 2;
    if (i == np - 2) return shape[0] = c->dim, 1;
    switch ((i - 1) % FM_BLOCK_PARAMS) {
    case 0:
    case 5: return shape[0] = c->dim, 1;
    case 6:
    case 7: return shape[0] = c->hidden, shape[1] = c->dim, 2;
    case 8: return shape[0] = c->dim, shape[1] = c->hidden, 2;
    default: return shape[0] = c->dim, shape[1] = c->dim, 2;
    }
}

/* A forward's temporaries, released together; the first failure skips the later calls. */
typedef struct scope {
    dt_tensor *t[48], *last;
    int n;
    dt_status st;
} scope;

#define DO(s, call)                                                                                \
    ((s)->st == DT_OK && ((s)->st = (call)) == DT_OK ? ((s)->t[(s)->n++] = (s)->last) : NULL)

static dt_status scope_end(scope *s, dt_tensor *keep, dt_tensor **out) {
    if (s->st == DT_OK) dt_tensor_retain(*out = keep);
    for (int i = 0; i < s->n; i++) dt_tensor_release(s->t[i]);
    return s->st;
}

static dt_status init_param(fm_model *m, int i, dt_generator *gen) {
    const fm_layout *l = &m->l;
    int64_t shape[2];
    int nd = fm_param_shape(&m->cfg, i, shape);
    dt_placement pl[2] = {dt_replicate(), dt_replicate()};
    if (l->tp_dim >= 0 && param_split(m, i) != REP)
        pl[l->tp_dim] = dt_shard(param_split(m, i) == COL ? 0 : 1);
    dt_tensor *r, *w;
    if (nd == 1) TRY(dt_tensor_ones(m->mesh, DT_F32, 1, shape, l->ndim, pl, &w));
    else {
        TRY(dt_tensor_randn(m->mesh, DT_F32, 2, shape, l->ndim, pl, gen, &r));
        dt_status st = dt_mul_scalar(r, i == 0 ? 1.0 : 1.0 / sqrt((double)shape[1]), &w);
        dt_tensor_release(r);
        TRY(st);
    }
    dt_status st = dt_tensor_set_requires_grad(w, 1);
    if (st == DT_OK && m->fsdp) {
        st = dt_fsdp_shard_param(m->fsdp, w, &m->p[i]);
        dt_tensor_release(w);
    } else if (st == DT_OK) m->p[i] = w;
    else dt_tensor_release(w);
    return st;
}

dt_status fm_init(fm_model *m, dt_mesh *mesh, const fm_config *cfg, const fm_layout *l,
                  uint64_t seed) {
    *m = (fm_model){.cfg = *cfg, .l = *l, .mesh = mesh,
                    .np = 1 + cfg->blocks * FM_BLOCK_PARAMS + 2};
    m->p = calloc((size_t)m->np, sizeof *m->p);
    if (!m->p) return DT_ERR_NOMEM;
    dt_status st = l->fsdp ? dt_fsdp_create(mesh, &l->fsdp_options, &m->fsdp) : DT_OK;
    dt_generator gen = dt_generator_make(seed);
    for (int i = 0; i < m->np && st == DT_OK; i++) st = init_param(m, i, &gen);
    if (st == DT_OK && m->fsdp) {
        st = dt_fsdp_add_unit(m->fsdp, 1, m->p, NULL);
        for (int b = 0; b < cfg->blocks && st == DT_OK; b++)
            st = dt_fsdp_add_unit(m->fsdp, FM_BLOCK_PARAMS, m->p + 1 + b * FM_BLOCK_PARAMS, NULL);
        if (st == DT_OK) st = dt_fsdp_add_unit(m->fsdp, 2, m->p + m->np - 2, NULL);
    }
    if (st != DT_OK) fm_free(m);
    return st;
}

void fm_free(fm_model *m) {
    dt_fsdp_destroy(m->fsdp);
    m->fsdp = NULL;
    for (int i = 0; m->p && i < m->np; i++) dt_tensor_release(m->p[i]);
    free(m->p);
    m->p = NULL;
}

/* Unit u's parameters as its forward uses them (gathered under FSDP). */
static dt_status unit_begin(fm_model *m, int u, int first, int n, dt_tensor **w) {
    if (m->fsdp) return dt_fsdp_unit_begin(m->fsdp, u, w);
    for (int i = 0; i < n; i++) w[i] = m->p[first + i];
    return DT_OK;
}

static dt_status unit_end(fm_model *m, int u) {
    return m->fsdp ? dt_fsdp_unit_end(m->fsdp, u) : DT_OK;
}

/* x (B, T, C) -> x + attn(norm(x)) -> x1 + mlp(norm(x1)), one checkpointing region. */
static dt_status block(fm_model *m, int b, dt_tensor *x, dt_tensor **out) {
    const fm_config *c = &m->cfg;
    int64_t B = c->batch, T = c->seq, hd = c->dim / c->heads;
    int64_t split_heads[4] = {B, T, c->heads, hd}, merged[3] = {B, T, c->dim};
    dt_tensor *w[FM_BLOCK_PARAMS];
    TRY(unit_begin(m, 1 + b, 1 + b * FM_BLOCK_PARAMS, FM_BLOCK_PARAMS, w));
    dt_ac_region *region;
    TRY(dt_ac_begin(dt_mesh_ctx(m->mesh), m->l.ac, &region));
    scope s = {0};
    dt_tensor *h = DO(&s, dt_rms_norm(x, w[0], 1e-5, &s.last)), *qkv[3];
    for (int i = 0; i < 3; i++) {
        dt_tensor *p = DO(&s, dt_linear(h, w[1 + i], NULL, &s.last));
        dt_tensor *p4 = DO(&s, dt_view(p, 4, split_heads, &s.last));
        qkv[i] = DO(&s, dt_transpose(p4, 1, 2, &s.last)); /* (B, heads, T, hd) */
    }
    dt_tensor *a = DO(&s, dt_sdpa(qkv[0], qkv[1], qkv[2], 1, &s.last));
    dt_tensor *a4 = DO(&s, dt_transpose(a, 1, 2, &s.last));
    dt_tensor *a3 = DO(&s, dt_view(a4, 3, merged, &s.last));
    dt_tensor *o = DO(&s, dt_linear(a3, w[4], NULL, &s.last));
    dt_tensor *x1 = DO(&s, dt_add(x, o, &s.last));
    dt_tensor *h2 = DO(&s, dt_rms_norm(x1, w[5], 1e-5, &s.last));
    dt_tensor *gate = DO(&s, dt_linear(h2, w[6], NULL, &s.last));
    dt_tensor *up = DO(&s, dt_linear(h2, w[7], NULL, &s.last));
    dt_tensor *mlp = DO(&s, dt_swiglu(gate, up, &s.last));
    dt_tensor *down = DO(&s, dt_linear(mlp, w[8], NULL, &s.last));
    dt_tensor *x2 = DO(&s, dt_add(x1, down, &s.last));
    dt_status st = dt_ac_end(region, x2 ? 1 : 0, &x2);
    if (s.st == DT_OK) s.st = st;
    TRY(scope_end(&s, x2, out));
    return unit_end(m, 1 + b);
}

dt_status fm_loss(fm_model *m, dt_tensor *tokens, dt_tensor *targets, dt_tensor **out) {
    const fm_config *c = &m->cfg;
    int64_t rows[2] = {(int64_t)c->batch * c->seq, c->vocab}, flat[1] = {rows[0]};
    int nu = c->blocks + 2;
    dt_tensor *w[2], *x, *y = NULL;
    TRY(unit_begin(m, 0, 0, 1, w));
    TRY(dt_embedding(w[0], tokens, &x));
    dt_status st = unit_end(m, 0);
    for (int b = 0; b < c->blocks && st == DT_OK; b++) {
        st = block(m, b, x, &y);
        dt_tensor_release(x);
        x = st == DT_OK ? y : NULL;
    }
    if (st == DT_OK) st = unit_begin(m, nu - 1, m->np - 2, 2, w);
    if (st != DT_OK) {
        dt_tensor_release(x);
        return st;
    }
    scope s = {0};
    dt_tensor *h = DO(&s, dt_rms_norm(x, w[0], 1e-5, &s.last));
    dt_tensor *logits = DO(&s, dt_linear(h, w[1], NULL, &s.last)); /* vocab-parallel over tp */
    dt_tensor *lg = DO(&s, dt_view(logits, 2, rows, &s.last));
    dt_tensor *tg = DO(&s, dt_view(targets, 1, flat, &s.last));
    dt_tensor *loss = DO(&s, dt_cross_entropy(lg, tg, DT_REDUCTION_MEAN, &s.last));
    dt_tensor_release(x);
    TRY(scope_end(&s, loss, out));
    return unit_end(m, nu - 1);
}

dt_status fm_batch(const fm_model *m, int step, dt_tensor **tokens, dt_tensor **targets) {
    const fm_config *c = &m->cfg;
    int64_t n = (int64_t)c->batch * c->seq, shape[2] = {c->batch, c->seq};
    int64_t *buf = malloc(sizeof *buf * (size_t)(2 * n));
    if (!buf) return DT_ERR_NOMEM;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(step + 1);
    for (int b = 0; b < c->batch; b++) {
        int64_t prev = 0;
        for (int t = 0; t <= c->seq; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            /* mostly the previous token + 1, sometimes random */
            int64_t v = x % 4 ? (prev + 1) % c->vocab : (int64_t)(x >> 8) % c->vocab;
            if (t < c->seq) buf[b * c->seq + t] = v;
            if (t > 0) buf[n + b * c->seq + t - 1] = v;
            prev = v;
        }
    }
    dt_placement pl[2] = {dt_replicate(), dt_replicate()};
    if (m->l.dp_dim >= 0) pl[m->l.dp_dim] = dt_shard(0);
    if (m->l.rep_dim >= 0) pl[m->l.rep_dim] = dt_shard(0);
    dt_status st = dt_tensor_distribute(m->mesh, buf, DT_I64, 2, shape, m->l.ndim, pl,
                                        DT_ALL_RANKS, tokens);
    if (st == DT_OK) {
        st = dt_tensor_distribute(m->mesh, buf + n, DT_I64, 2, shape, m->l.ndim, pl,
                                  DT_ALL_RANKS, targets);
        if (st != DT_OK) dt_tensor_release(*tokens);
    }
    free(buf);
    return st;
}

int64_t fm_issued_on_dp(dt_ctx *ctx, const fm_layout *l, dt_coll_kind kind) {
    dt_comm_stats cs;
    int64_t n = 0;
    if (l->dp_dim < 0 || dt_comm_stats_get(ctx, &cs) != DT_OK) return 0;
    for (int e = 0; e < cs.nentries; e++)
        if (cs.entries[e].kind == kind && !strcmp(cs.entries[e].group, l->names[l->dp_dim]))
            n += (int64_t)cs.entries[e].calls;
    return n;
}
