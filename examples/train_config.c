/* make train's config: the key table, the JSON file (jansson) and the flags. */
#include "train_config.h"

#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind {
    K_INT,
    K_I64,
    K_U64,
    K_DBL,
    K_BOOL,
    K_STR,
    K_AC,
    K_SCHEDULE,
    K_RUNTIME,
    K_ASYNC_TP,
    K_PRECISION /* "float32" or "bfloat16" into an int (1: bfloat16) */
} kind;

/* One key: its dotted path, the older flag that aliases it (or NULL), where it lives, the
 * bounds of a number and what it means (--help). */
typedef struct key {
    const char *path, *alias;
    kind kind;
    size_t at, cap; /* K_STR: the array's size */
    double lo, hi;
    const char *help;
} key;

#define AT(f) offsetof(tr_config, f)
#define N(p, a, k, f, lo, hi, h)                                                                   \
    { p, a, k, AT(f), 0, lo, hi, h }
#define S(p, a, f, h)                                                                              \
    { p, a, K_STR, AT(f), sizeof(((tr_config *)0)->f), 0, 0, h }
static const key keys[] = {
    N("model.vocab", NULL, K_INT, model.vocab, 2, 1 << 20, "vocabulary (byte tokens mod vocab)"),
    N("model.dim", "--dim", K_INT, model.dim, 1, 1 << 16, "model width"),
    N("model.layers", "--layers", K_INT, model.layers, 1, 1024, "transformer blocks"),
    N("model.heads", "--heads", K_INT, model.heads, 1, 1024, "attention heads"),
    N("model.kv_heads", "--kv-heads", K_INT, model.kv_heads, 1, 1024, "key/value heads (GQA)"),
    N("model.hidden", "--hidden", K_INT, model.hidden, 1, 1 << 20, "feed-forward width"),
    N("model.experts", "--experts", K_INT, model.experts, 0, 1024, "MoE experts per block"),
    N("model.top_k", "--top-k", K_INT, model.top_k, 1, 1024, "experts per token"),
    N("parallelism.dp_replicate", NULL, K_INT, dp_replicate, 1, 1 << 16, "HSDP replicas"),
    N("parallelism.dp_shard", NULL, K_INT, dp_shard, 1, 1 << 16, "data parallel (FSDP) degree"),
    N("parallelism.pp", "--pp", K_INT, pp, 1, 1 << 16, "pipeline stages"),
    N("parallelism.cp", NULL, K_INT, cp, 1, 1 << 16, "context parallel (ring attention)"),
    N("parallelism.tp", NULL, K_INT, tp, 1, 1 << 16, "tensor parallel"),
    N("parallelism.ep", NULL, K_INT, ep, 1, 1 << 16, "expert parallel (MoE)"),
    S("parallelism.mesh", "--mesh", mesh, "explicit mesh (\"dp=2,tp=2\"), instead of the sizes"),
    N("parallelism.fsdp", "--fsdp", K_BOOL, fsdp, 0, 1, "shard parameters over dp_shard"),
    N("parallelism.fsdp_units", "--fsdp-units", K_INT, fsdp_units, -1, 1,
      "root + one FSDP unit per block (-1: auto)"),
    N("parallelism.fsdp_coalesce", NULL, K_BOOL, fsdp_coalesce, 0, 1,
      "small FSDP units gather and reduce together (0: each alone, as FSDP2)"),
    N("parallelism.sequence_parallel", "--sp", K_BOOL, sequence_parallel, 0, 1,
      "norms sharded over the sequence on tp"),
    N("parallelism.loss_parallel", NULL, K_BOOL, loss_parallel, 0, 1,
      "logits stay vocab-sharded into the loss"),
    S("parallelism.fsdp_unit_groups", NULL, fsdp_unit_groups,
      "groups made FSDP units, one each (the rest: the root)"),
    N("parallelism.microbatches", "--micro", K_INT, microbatches, 1, 1 << 16,
      "pipeline micro-batches"),
    N("parallelism.pipeline_schedule", "--schedule", K_SCHEDULE, schedule, 0, 0,
      "afab, 1f1b or interleaved_1f1b"),
    N("parallelism.virtual_stages", "--virtual", K_INT, virtual_stages, 1, 64,
      "interleaved_1f1b: model chunks per rank"),
    N("parallelism.async_tp", "--async-tp", K_ASYNC_TP, async_tp, 0, 0,
      "off, ring or ordered (collective matmuls)"),
    N("model.float8", "--float8", K_BOOL, float8, 0, 1, "the blocks' linears in float8"),
    N("training.mixed_precision_param", NULL, K_PRECISION, bf16, 0, 0,
      "float32, or bfloat16: linears on bf16 inputs, FSDP units gather bf16"),
    N("parallelism.runtime", NULL, K_RUNTIME, ucx, 0, 0, "local (threads) or ucx (processes)"),
    N("parallelism.ucx", "--ucx", K_BOOL, ucx, 0, 1, "1: runtime ucx"),
    N("parallelism.bucket_kb", "--bucket-kb", K_INT, bucket_kb, -1, 1 << 22,
      "grad sync bucket cap (KiB; -1 default)"),
    N("activation_checkpoint.mode", "--ac", K_AC, ac, 0, 0, "none, full, selective, measured"),
    N("activation_checkpoint.budget_kib", NULL, K_I64, ac_budget_kib, 0, 1e9,
      "measured: KiB each block keeps"),
    N("activation_checkpoint.measure_steps", NULL, K_INT, ac_measure_steps, 1, 1 << 16,
      "measured: steps timed first"),
    N("optimizer.lr", "--lr", K_DBL, adamw.lr, 0, 1e3, "AdamW learning rate"),
    N("optimizer.beta1", NULL, K_DBL, adamw.beta1, 0, 1, "AdamW beta1"),
    N("optimizer.beta2", NULL, K_DBL, adamw.beta2, 0, 1, "AdamW beta2"),
    N("optimizer.eps", NULL, K_DBL, adamw.eps, 0, 1, "AdamW eps"),
    N("optimizer.weight_decay", NULL, K_DBL, adamw.weight_decay, 0, 1e3, "AdamW weight decay"),
    N("lr_scheduler.warmup_steps", NULL, K_I64, schedule_lr.warmup_steps, 0, 1e12,
      "linear warmup steps"),
    N("lr_scheduler.stable_steps", NULL, K_I64, schedule_lr.stable_steps, 0, 1e12,
      "steps at the full rate"),
    N("lr_scheduler.decay_steps", NULL, K_I64, schedule_lr.decay_steps, 0, 1e12,
      "cosine decay steps (0 with warmup 0: constant)"),
    N("lr_scheduler.lr_min", NULL, K_DBL, schedule_lr.lr_min, 0, 1, "floor, a fraction of lr"),
    N("training.steps", "--steps", K_INT, steps, 0, 1 << 30, "optimizer steps (in all)"),
    N("training.seq", "--seq", K_INT, model.seq, 1, 1 << 20, "sequence length"),
    N("training.batch", "--batch", K_INT, model.batch, 1, 1 << 20, "global batch (samples)"),
    N("training.grad_accum", "--grad-accum", K_INT, grad_accum, 1, 1 << 16,
      "batches accumulated per step"),
    N("training.max_norm", "--max-norm", K_DBL, max_norm, 0, 1e30,
      "clip the gradient's norm (0: off)"),
    N("training.seed", NULL, K_U64, seed, 0, 0, "the model's generator seed"),
    S("training.text", "--text", text, "the text trained on (bytes)"),
    N("training.eval_fraction", NULL, K_DBL, eval_fraction, 0, 0.5, "text tail held out"),
    N("eval.every", "--eval-every", K_INT, eval_every, 0, 1 << 30, "eval every N steps (0: off)"),
    N("eval.batches", NULL, K_INT, eval_batches, 1, 1 << 16, "held-out batches per eval"),
    S("checkpoint.folder", "--ckpt", ckpt_folder, "checkpoint root (\"\": none)"),
    N("checkpoint.every", "--ckpt-every", K_INT, ckpt_every, 0, 1 << 30,
      "save every N steps (0: never)"),
    N("checkpoint.keep_last", NULL, K_INT, keep_last, 0, 1 << 20, "newest kept (0: all)"),
    N("checkpoint.resume", "--resume", K_BOOL, resume, 0, 1, "resume from the newest at start"),
    S("metrics.trace_out", "--out", trace_out, "trace prefix (.json, .html)"),
    N("metrics.trace_steps", "--trace-steps", K_INT, trace_steps, 0, 1 << 30, "last steps traced"),
    N("metrics.comms", "--comms", K_BOOL, comms, 0, 1, "print step 1's collectives"),
    N("metrics.params", "--params", K_BOOL, print_params, 0, 1, "print the parameter plan"),
    N("metrics.layout", NULL, K_BOOL, print_layout, 0, 1, "print each rank's shards at start"),
    N("metrics.loss_digits", "--loss-digits", K_INT, loss_digits, 0, 12, "decimals of the loss"),
};
enum { NKEYS = sizeof keys / sizeof keys[0] };

void tr_config_defaults(tr_config *c) {
    *c = (tr_config){
        .model = {.vocab = 256,
                  .seq = 64,
                  .batch = 8,
                  .dim = 128,
                  .layers = 2,
                  .heads = 4,
                  .kv_heads = 2,
                  .hidden = 384,
                  .top_k = 2},
        .dp_replicate = 1,
        .dp_shard = 2,
        .pp = 1,
        .cp = 1,
        .tp = 2,
        .ep = 1,
        .fsdp = 1,
        .fsdp_units = -1,
        .fsdp_coalesce = 1,
        .sequence_parallel = 1,
        .loss_parallel = 1,
        .microbatches = 2,
        .schedule = DT_PIPELINE_1F1B,
        .virtual_stages = 1,
        .bucket_kb = -1,
        .ac_measure_steps = 1,
        .adamw = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01},
        .steps = 20,
        .grad_accum = 1,
        .seed = 1234,
        .eval_batches = 2,
        .keep_last = 2,
        .resume = 1,
        .trace_steps = 3,
        .loss_digits = 4,
        .eval_fraction = 0.05,
    };
    snprintf(c->text, sizeof c->text, "/usr/share/common-licenses/GPL-3");
    snprintf(c->trace_out, sizeof c->trace_out, "train_trace");
    snprintf(c->fsdp_unit_groups, sizeof c->fsdp_unit_groups, "layers.*");
}

dt_status tr_style_parse(const char *name, dt_style *out) {
    static const struct {
        const char *name;
        int kind;
    } styles[] = {{"colwise", 0},          {"colwise_replicate", 1}, {"rowwise", 2},
                  {"rowwise_sequence", 3}, {"sequence_parallel", 4}, {"prepare_replicate", 5},
                  {"loss_parallel", 6}};
    for (size_t i = 0; i < sizeof styles / sizeof styles[0]; i++) {
        if (strcmp(name, styles[i].name)) continue;
        switch (styles[i].kind) {
        case 0:
            *out = dt_style_colwise();
            break;
        case 1:
            *out = dt_style_colwise_to(dt_replicate());
            break;
        case 2:
            *out = dt_style_rowwise();
            break;
        case 3:
            *out = dt_style_rowwise_to(dt_shard(1));
            break;
        case 4:
            *out = dt_style_sequence_parallel();
            break;
        case 5:
            *out = dt_style_prepare_input(dt_replicate());
            break;
        default:
            *out = dt_style_loss_parallel();
            break;
        }
        return DT_OK;
    }
    return dt_error_set(DT_ERR_ARG,
                        "style \"%s\": want colwise, colwise_replicate, rowwise, "
                        "rowwise_sequence, sequence_parallel, prepare_replicate or loss_parallel",
                        name);
}

dt_status tr_config_plan(const tr_config *c, dt_style_rule *rules, int cap, int *n) {
    if (c->nplan > cap)
        return dt_error_set(DT_ERR_ARG, "tp_plan: %d rules, room for %d", c->nplan, cap);
    for (int i = 0; i < c->nplan; i++) {
        rules[i].pattern = c->plan[i].pattern;
        dt_status st = tr_style_parse(c->plan[i].style, &rules[i].style);
        if (st != DT_OK) return st;
    }
    *n = c->nplan;
    return DT_OK;
}

/* parallelism.tp_plan: an object of pattern -> style name. */
static int load_plan(tr_config *c, json_t *plan, const char *path) {
    const char *pattern;
    json_t *v;
    dt_style style;
    if (!json_is_object(plan))
        return fprintf(stderr,
                       "train: %s: parallelism.tp_plan: want an object of module "
                       "pattern -> style\n",
                       path),
               2;
    c->nplan = 0;
    json_object_foreach(plan, pattern, v) {
        const char *name = json_is_string(v) ? json_string_value(v) : "";
        if (tr_style_parse(name, &style) != DT_OK)
            return fprintf(stderr, "train: %s: parallelism.tp_plan.%s: %s\n", path, pattern,
                           dt_last_error()),
                   2;
        if (c->nplan == TR_PLAN_MAX || strlen(pattern) >= sizeof c->plan[0].pattern)
            return fprintf(stderr,
                           "train: %s: parallelism.tp_plan: more than %d rules or a "
                           "pattern over %zu characters (%s)\n",
                           path, TR_PLAN_MAX, sizeof c->plan[0].pattern - 1, pattern),
                   2;
        snprintf(c->plan[c->nplan].pattern, sizeof c->plan[0].pattern, "%s", pattern);
        snprintf(c->plan[c->nplan].style, sizeof c->plan[0].style, "%s", name);
        c->nplan++;
    }
    return 0;
}

static const key *key_named(const char *path) {
    for (int k = 0; k < NKEYS; k++)
        if (!strcmp(keys[k].path, path)) return &keys[k];
    return NULL;
}

/* Sets k from a flag's text or a JSON value (exactly one of text, json); where names the
 * source for the error ("flag", "file.json"). 0 or 2 (printed). */
static int set(tr_config *c, const key *k, const char *text, json_t *json, const char *where) {
    char *p = (char *)c + k->at, *end = NULL;
    char shown[256];
    if (json) {
        char *dump = json_dumps(json, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(shown, sizeof shown, "%s", dump ? dump : "?");
        free(dump);
    } else {
        snprintf(shown, sizeof shown, "\"%s\"", text);
    }
#define BAD(why) return fprintf(stderr, "train: %s: %s = %s: %s\n", where, k->path, shown, why), 2
    double num = 0;
    const char *str = NULL;
    if (k->kind == K_STR || k->kind == K_AC || k->kind == K_SCHEDULE || k->kind == K_RUNTIME ||
        k->kind == K_ASYNC_TP || k->kind == K_PRECISION) {
        if (json && !json_is_string(json)) BAD("want a string");
        str = json ? json_string_value(json) : text;
    } else if (k->kind == K_BOOL && json && json_is_boolean(json)) {
        num = json_is_true(json);
    } else if (k->kind == K_BOOL && text && (!strcmp(text, "true") || !strcmp(text, "false"))) {
        num = !strcmp(text, "true");
    } else if (json) {
        if (!json_is_number(json)) BAD("want a number");
        if (k->kind != K_DBL && !json_is_integer(json)) BAD("want an integer");
        num = json_number_value(json);
        if (k->kind == K_U64) {
            if (json_integer_value(json) < 0) BAD("want a non-negative integer");
            *(uint64_t *)p = (uint64_t)json_integer_value(json);
            return 0;
        }
    } else {
        if (k->kind == K_U64) {
            unsigned long long v = strtoull(text, &end, 0);
            if (!*text || *end || text[0] == '-') BAD("want a non-negative integer");
            *(uint64_t *)p = v;
            return 0;
        }
        num = k->kind == K_DBL ? strtod(text, &end) : (double)strtoll(text, &end, 10);
        if (!*text || *end) BAD(k->kind == K_DBL ? "want a number" : "want an integer");
    }
    switch (k->kind) {
    case K_STR:
        if (strlen(str) >= k->cap) BAD("too long");
        memcpy(p, str, strlen(str) + 1);
        return 0;
    case K_AC:
        if (dt_ac_mode_parse(str, (dt_ac_mode *)p) != DT_OK) BAD("want none, full or selective");
        return 0;
    case K_SCHEDULE:
        if (dt_pipeline_schedule_parse(str, (dt_pipeline_schedule *)p) != DT_OK)
            BAD("want afab, 1f1b or interleaved_1f1b");
        return 0;
    case K_ASYNC_TP:
        if (!strcmp(str, "off"))
            *(dt_async_tp_mode *)p = DT_ASYNC_TP_OFF;
        else if (!strcmp(str, "ring"))
            *(dt_async_tp_mode *)p = DT_ASYNC_TP_RING;
        else if (!strcmp(str, "ordered"))
            *(dt_async_tp_mode *)p = DT_ASYNC_TP_ORDERED;
        else
            BAD("want off, ring or ordered");
        return 0;
    case K_PRECISION:
        if (strcmp(str, "float32") && strcmp(str, "bfloat16")) BAD("want float32 or bfloat16");
        *(int *)p = !strcmp(str, "bfloat16");
        return 0;
    case K_RUNTIME:
        if (strcmp(str, "local") && strcmp(str, "ucx")) BAD("want local or ucx");
        *(int *)p = !strcmp(str, "ucx");
        return 0;
    default:
        break;
    }
    if (!(num >= k->lo && num <= k->hi)) {
        char why[96];
        snprintf(why, sizeof why, "not in [%g, %g]", k->lo, k->hi);
        BAD(why);
    }
    if (k->kind == K_DBL)
        *(double *)p = num;
    else if (k->kind == K_I64)
        *(int64_t *)p = (int64_t)num;
    else
        *(int *)p = (int)num;
    return 0;
#undef BAD
}

/* The file's sections and keys over c. */
static int load_file(tr_config *c, const char *path) {
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return fprintf(stderr, "train: %s:%d:%d: %s\n", path, err.line, err.column, err.text), 2;
    int rc = 0;
    const char *section, *name;
    json_t *body, *v;
    if (!json_is_object(root)) {
        fprintf(stderr, "train: %s: want an object of sections ({\"training\": {...}})\n", path);
        rc = 2;
    }
    json_object_foreach(root, section, body) {
        if (rc) break;
        if (!json_is_object(body)) {
            fprintf(stderr, "train: %s: section %s is not an object\n", path, section);
            rc = 2;
            break;
        }
        json_object_foreach(body, name, v) {
            char dotted[160];
            snprintf(dotted, sizeof dotted, "%s.%s", section, name);
            if (!strcmp(dotted, "parallelism.tp_plan")) {
                if ((rc = load_plan(c, v, path))) break;
                continue;
            }
            const key *k = key_named(dotted);
            if (!k) {
                fprintf(stderr, "train: %s: unknown key %s (train --help lists them)\n", path,
                        dotted);
                rc = 2;
                break;
            }
            if ((rc = set(c, k, NULL, v, path))) break;
        }
    }
    json_decref(root);
    return rc;
}

int tr_config_world(const tr_config *c) {
    int shape[DT_MESH_MAX_NDIM], nd, w = 1;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    if (dt_mesh_parse(c->mesh, shape, names, &nd) != DT_OK) return -1;
    for (int d = 0; d < nd; d++)
        w *= shape[d];
    return w;
}

/* The mesh string from the sizes, unless one was given; then checks what depends on it. */
static int derive(tr_config *c) {
    int sizes[6] = {c->pp, c->dp_replicate, c->dp_shard, c->cp, c->ep, c->tp};
    static const char *const names[6] = {"pp", "dp_replicate", "dp_shard", "cp", "ep", "tp"};
    if (!c->mesh[0]) {
        size_t len = 0;
        for (int d = 0; d < 6; d++)
            if (sizes[d] > 1)
                len += (size_t)snprintf(c->mesh + len, sizeof c->mesh - len, "%s%s=%d",
                                        len ? "," : "", names[d], sizes[d]);
        if (!len) snprintf(c->mesh, sizeof c->mesh, "%s", c->model.experts ? "ep=1" : "1");
    }
    int shape[DT_MESH_MAX_NDIM], nd, pp = 1;
    char dn[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    if (dt_mesh_parse(c->mesh, shape, dn, &nd) != DT_OK)
        return fprintf(stderr, "train: parallelism.mesh = \"%s\": %s\n", c->mesh, dt_last_error()),
               2;
    if (nd == 1 && !strcmp(dn[0], "pp")) { /* the stages need a dim of their own */
        size_t len = strlen(c->mesh);
        if (len + 12 >= sizeof c->mesh)
            return fprintf(stderr, "train: parallelism.mesh = \"%s\" is too long\n", c->mesh), 2;
        snprintf(c->mesh + len, sizeof c->mesh - len, ",dp_shard=1");
        shape[nd] = 1, snprintf(dn[nd++], sizeof dn[0], "dp_shard");
    }
    int has_ep = 0;
    for (int d = 0; d < nd; d++) {
        if (!strcmp(dn[d], "pp")) pp = shape[d];
        if (!strcmp(dn[d], "ep")) has_ep = 1;
    }
    if (c->model.experts && !has_ep)
        return fprintf(stderr,
                       "train: model.experts = %d needs an ep dim in the mesh \"%s\" "
                       "(parallelism.ep, or ep=1)\n",
                       c->model.experts, c->mesh),
               2;
    if (c->model.experts && (c->model.top_k < 1 || c->model.top_k > c->model.experts))
        return fprintf(stderr, "train: model.top_k = %d is not in [1, model.experts = %d]\n",
                       c->model.top_k, c->model.experts),
               2;
    c->pp = strstr(c->mesh, "pp=") ? pp : 0; /* a pp dim, even of 1 stage, runs the pipeline */
    if (c->pp) {
        if (c->model.batch % c->microbatches)
            return fprintf(stderr,
                           "train: parallelism.microbatches = %d does not divide "
                           "training.batch = %d\n",
                           c->microbatches, c->model.batch),
                   2;
        if (c->fsdp_units == 1)
            return fprintf(stderr, "train: parallelism.fsdp_units = 1 does not run under a "
                                   "pipeline (set it to 0 or -1)\n"),
                   2;
        if (c->grad_accum > 1)
            return fprintf(stderr,
                           "train: training.grad_accum = %d under a pipeline: raise "
                           "parallelism.microbatches instead\n",
                           c->grad_accum),
                   2;
        c->fsdp_units = 0;
    }
    if (c->fsdp_units < 0) c->fsdp_units = !c->model.experts;
    if (c->model.experts && c->fsdp_units)
        return fprintf(stderr,
                       "train: parallelism.fsdp_units = 1 takes no MoE experts "
                       "(model.experts = %d): set it to 0\n",
                       c->model.experts),
               2;
    if (c->virtual_stages > 1 && (!c->pp || c->schedule != DT_PIPELINE_INTERLEAVED_1F1B))
        return fprintf(stderr,
                       "train: parallelism.virtual_stages = %d needs a pp dim and "
                       "pipeline_schedule interleaved_1f1b\n",
                       c->virtual_stages),
               2;
    if (c->ac == DT_AC_MEASURED && c->ac_budget_kib <= 0)
        return fprintf(stderr, "train: activation_checkpoint.mode measured needs "
                               "activation_checkpoint.budget_kib > 0 (the KiB a block keeps)\n"),
               2;
    if (c->trace_steps > c->steps) c->trace_steps = c->steps;
    return 0;
}

void tr_config_usage(FILE *f) {
    tr_config d;
    tr_config_defaults(&d);
    fprintf(f, "usage: train [CONFIG.json | --config CONFIG.json] [--section.key VALUE ...]\n"
               "Trains examples/tiny_llama.c's model from a config file (examples/configs/);\n"
               "flags override its keys. Keys (short flag), default:\n");
    for (int i = 0; i < NKEYS; i++) {
        const key *k = &keys[i];
        const char *p = (const char *)&d + k->at;
        char v[64];
        switch (k->kind) {
        case K_STR:
            snprintf(v, sizeof v, "\"%.56s\"", p);
            break;
        case K_DBL:
            snprintf(v, sizeof v, "%g", *(const double *)p);
            break;
        case K_I64:
            snprintf(v, sizeof v, "%lld", (long long)*(const int64_t *)p);
            break;
        case K_U64:
            snprintf(v, sizeof v, "%llu", (unsigned long long)*(const uint64_t *)p);
            break;
        case K_AC:
            snprintf(v, sizeof v, "%s", dt_ac_mode_name(*(const dt_ac_mode *)p));
            break;
        case K_ASYNC_TP:
            snprintf(v, sizeof v, "%s",
                     (const char *[]){"off", "ring", "ordered"}[*(const dt_async_tp_mode *)p]);
            break;
        case K_SCHEDULE:
            snprintf(v, sizeof v, "%s",
                     dt_pipeline_schedule_name(*(const dt_pipeline_schedule *)p));
            break;
        case K_RUNTIME:
            snprintf(v, sizeof v, "%s", *(const int *)p ? "ucx" : "local");
            break;
        case K_PRECISION:
            snprintf(v, sizeof v, "%s", *(const int *)p ? "bfloat16" : "float32");
            break;
        default:
            snprintf(v, sizeof v, "%d", *(const int *)p);
            break;
        }
        fprintf(f, "  --%-32s %-13s %-10s %s\n", k->path, k->alias ? k->alias : "", v, k->help);
    }
    fprintf(f, "  parallelism.tp_plan (in the file only): {\"module pattern\": \"style\", ...} "
               "replaces the model's tensor-parallel plan; styles: colwise, colwise_replicate, "
               "rowwise, rowwise_sequence, sequence_parallel, prepare_replicate, loss_parallel\n"
               "  --ranks N: the world when no size or mesh says it (N ranks as dp_shard=N)\n");
}

int tr_config_parse(int argc, char **argv, tr_config *c) {
    tr_config_defaults(c);
    int i = 1, rc, ranks = 0;
    for (int j = 1; j < argc; j++)
        if (!strcmp(argv[j], "--help") || !strcmp(argv[j], "-h")) return tr_config_usage(stdout), 1;
    if (i < argc && strncmp(argv[i], "--", 2)) {
        if ((rc = load_file(c, argv[i]))) return rc;
        i++;
    }
    int mesh_flag = 0;
    for (; i < argc; i += 2) {
        const char *a = argv[i];
        if (i + 1 >= argc) return fprintf(stderr, "train: %s wants a value (train --help)\n", a), 2;
        const char *v = argv[i + 1];
        if (!strcmp(a, "--config")) {
            if ((rc = load_file(c, v))) return rc;
            continue;
        }
        if (!strcmp(a, "--ranks")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (!*v || *end || n < 1 || n > 1 << 16)
                return fprintf(stderr, "train: --ranks %s is not in [1, 65536]\n", v), 2;
            ranks = (int)n;
            continue;
        }
        const key *k = NULL;
        for (int j = 0; j < NKEYS && !k; j++)
            if ((!strncmp(a, "--", 2) && !strcmp(a + 2, keys[j].path)) ||
                (keys[j].alias && !strcmp(a, keys[j].alias)))
                k = &keys[j];
        if (!k) return fprintf(stderr, "train: unknown flag %s (train --help)\n", a), 2;
        if (k->at == AT(mesh)) mesh_flag = 1;
        if ((rc = set(c, k, v, NULL, "flag"))) return rc;
    }
    /* --ranks N alone (the older flag): N ranks as dp_shard=N, 4 as make train's 2x2 */
    if (ranks && !mesh_flag && ranks != 4) snprintf(c->mesh, sizeof c->mesh, "dp_shard=%d", ranks);
    if ((rc = derive(c))) return rc;
    if (ranks && tr_config_world(c) != ranks && !c->ucx)
        return fprintf(stderr, "train: parallelism.mesh \"%s\" has %d ranks, --ranks %d\n", c->mesh,
                       tr_config_world(c), ranks),
               2;
    return 0;
}
