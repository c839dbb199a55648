/* dt_train_state_save and _load: the training state as one checkpoint per step directory. The
 * tensors go through dtensor/checkpoint.h (which reshards on load); the rest is the record of
 * record.c in the checkpoint's blob. A load checks everything against the state first, agrees
 * the outcome over the world, and only then changes anything. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/lru.h"
#include "dtensor/comm.h"
#include "dtensor/mesh.h"
#include "dtensor/train_state.h"
#include "train/record.h"

#define TR_NAME_CAP (DT_CHECKPOINT_NAME_MAX + 1)

dt_status dt_train_state_path(const char *root, int64_t step, char *buf, size_t cap) {
    const char *fn = "dt_train_state_path";
    DT_ARG(root && buf, "%s: argument root or buf is NULL", fn);
    DT_ARG(step >= 0, "%s: argument step = %" PRId64 " is negative", fn, step);
    int need = snprintf(buf, cap, "%s/%s%08" PRId64, root, DT_TRAIN_STATE_PREFIX, step);
    if (need < 0 || (size_t)need >= cap)
        return dt_error(DT_ERR_SIZE, "%s: the path needs %d bytes, cap is %zu", fn, need + 1, cap);
    return DT_OK;
}

static dt_status check_state(const char *fn, dt_ctx *ctx, const dt_train_state *s) {
    DT_ARG(ctx != NULL, "%s: argument ctx is NULL", fn);
    DT_ARG(s != NULL, "%s: argument s is NULL", fn);
    DT_ARG(s->params != NULL, "%s: s->params is NULL (the model's registry is required)", fn);
    int np = dt_params_count(s->params);
    dt_tensor *t = NULL;
    DT_ARG(np > 0, "%s: s->params has no parameters", fn);
    DT_CHECK(dt_params_at(s->params, 0, NULL, &t));
    DT_ARG(t != NULL, "%s: s->params is not materialized (dt_params_materialize)", fn);
    DT_ARG(dt_mesh_ctx(dt_params_mesh(s->params)) == ctx,
           "%s: argument ctx is not the context of s->params' mesh", fn);
    return DT_OK;
}

/* The tensors of a state by name: the parameters, then the optimizer's state tensors. */
typedef struct tr_names {
    int n, np, nopt;
    const char **names;
    dt_tensor **tensors;
    const char **opt_names; /* optimizer parameter k's registry name */
    char *arena;            /* the state tensors' names, TR_NAME_CAP bytes each */
} tr_names;

static void names_free(tr_names *nm) {
    free(nm->names), free(nm->tensors), free(nm->opt_names), free(nm->arena);
    memset(nm, 0, sizeof *nm);
}

static dt_status names_make(const char *fn, const dt_train_state *s, tr_names *nm) {
    memset(nm, 0, sizeof *nm);
    int np = dt_params_count(s->params), ns = 0, nopt = 0;
    if (s->optim) {
        DT_CHECK(dt_optim_param_count(s->optim, &nopt));
        DT_CHECK(dt_optim_state_count(s->optim, &ns));
    }
    nm->names = malloc((size_t)(np + ns) * sizeof *nm->names);
    nm->tensors = malloc((size_t)(np + ns) * sizeof *nm->tensors);
    nm->opt_names = malloc((size_t)(nopt + 1) * sizeof *nm->opt_names);
    nm->arena = malloc((size_t)(ns + 1) * TR_NAME_CAP);
    if (!nm->names || !nm->tensors || !nm->opt_names || !nm->arena)
        return dt_error(DT_ERR_NOMEM, "%s: out of memory for %d names", fn, np + ns);
    DT_CHECK(dt_params_arrays(s->params, nm->names, nm->tensors, np, &nm->np));
    for (int k = 0; k < nopt; k++) {
        dt_tensor *p;
        DT_CHECK(dt_optim_param(s->optim, k, &p));
        int i = 0;
        while (i < np && nm->tensors[i] != p)
            i++;
        DT_ARG(i < np, "%s: s->optim's parameter %d is not one of s->params' parameters", fn, k);
        nm->opt_names[k] = nm->names[i];
    }
    nm->nopt = nopt;
    for (int i = 0; i < ns; i++) {
        char *name = nm->arena + (size_t)i * TR_NAME_CAP;
        DT_CHECK(dt_optim_state_named(s->optim, nm->opt_names, i, name, TR_NAME_CAP,
                                      &nm->tensors[np + i]));
        nm->names[np + i] = name;
    }
    nm->n = np + ns;
    return DT_OK;
}

/* ---- save ---------------------------------------------------------------------------------- */

/* Every rank returns the same outcome: the lowest failing rank's status and message. Every rank
 * gets here, whatever failed before. */
static dt_status agree(dt_comm *world, dt_status mine) {
    int64_t v = mine == DT_OK ? INT64_MAX : dt_comm_rank(world), low;
    struct {
        int32_t status;
        char msg[1020];
    } why = {.status = mine};
    if (mine != DT_OK) snprintf(why.msg, sizeof why.msg, "%s", dt_last_error());
    DT_CHECK(dt_all_reduce(world, &v, &low, 1, DT_I64, DT_REDUCE_MIN));
    if (low == INT64_MAX) return DT_OK;
    _Static_assert(sizeof why % 4 == 0, "broadcast as int32 words");
    DT_CHECK(dt_broadcast(world, &why, sizeof why / 4, DT_I32, (int)low));
    why.msg[sizeof why.msg - 1] = '\0';
    return dt_error((dt_status)why.status, "%s", why.msg);
}

/* Every distinct record to every rank (pipeline stages hold different parameters; the ranks of
 * a stage the same, so each distinct text travels once: ranks compare 64-bit hashes first),
 * merged into *text (*len bytes): the blob rank 0 saves. *all: the gathered texts (freed by the
 * caller). Every rank returns the same outcome. */
static dt_status gather_record(const char *fn, dt_comm *world, char **text, size_t *len,
                               char **all) {
    int n = dt_comm_size(world);
    size_t words = (*len + 1 + 7) / 8; /* the text and its NUL, padded with NULs to int64s */
    uint64_t *padded = calloc(words, 8), mine[2], *info = malloc((size_t)n * 2 * 8);
    size_t *counts = malloc((size_t)n * sizeof *counts), total = 0;
    char **texts = malloc((size_t)n * sizeof *texts);
    int64_t ok = padded && info && counts && texts, all_ok = 0;
    dt_status st = dt_all_reduce(world, &ok, &all_ok, 1, DT_I64, DT_REDUCE_MIN);
    if (st == DT_OK && !all_ok) st = dt_error(DT_ERR_NOMEM, "%s: out of memory for the record", fn);
    if (st == DT_OK) {
        memcpy(padded, *text, *len);
        mine[0] = dt_lru_hash(padded, (unsigned)words), mine[1] = words;
        st = dt_all_gather(world, mine, info, 2, DT_I64);
    }
    int distinct = 0;
    for (int r = 0; st == DT_OK && r < n; r++) { /* the first rank with each record sends it */
        int first = 1;
        for (int q = 0; q < r && first; q++)
            first = !(info[2 * q] == info[2 * r] && info[2 * q + 1] == info[2 * r + 1]);
        counts[r] = first ? (size_t)info[2 * r + 1] : 0;
        total += counts[r];
    }
    if (st == DT_OK) {
        *all = malloc(total * 8);
        ok = *all != NULL;
        st = dt_all_reduce(world, &ok, &all_ok, 1, DT_I64, DT_REDUCE_MIN);
        if (st == DT_OK && !all_ok)
            st =
                dt_error(DT_ERR_NOMEM, "%s: out of memory for %zu bytes of records", fn, total * 8);
    }
    if (st == DT_OK) st = dt_all_gatherv(world, padded, *all, counts, NULL, DT_I64);
    if (st == DT_OK) {
        size_t at = 0;
        for (int r = 0; r < n; at += counts[r++] * 8)
            if (counts[r]) texts[distinct++] = *all + at;
        char *merged = tr_record_merge(texts, distinct, len);
        if (merged)
            free(*text), *text = merged;
        else
            st = dt_error(DT_ERR_NOMEM, "%s: out of memory merging the records", fn);
        st = agree(world, st);
    }
    free(padded), free(info), free(counts), free(texts);
    return st;
}

/* This rank's record of s (malloc'd into *text, *len bytes) and the tensors it saves. */
static dt_status record_of(const char *fn, const dt_train_state *s, tr_names *nm, char **text,
                           size_t *len) {
    DT_CHECK(names_make(fn, s, nm));
    tr_record r = {.step = s->step,
                   .data_pos = s->data_pos,
                   .has_gen = s->gen != NULL,
                   .has_schedule = s->schedule != NULL,
                   .has_optim = s->optim != NULL,
                   .ntensors = nm->np,
                   .tensors = nm->names,
                   .nstates = nm->n - nm->np,
                   .states = nm->names + nm->np,
                   .nsteps = nm->nopt,
                   .step_names = nm->opt_names};
    if (s->gen) r.gen = *s->gen;
    if (s->schedule) r.schedule = *s->schedule;
    int64_t *steps = NULL;
    if (s->optim) {
        const char *kind;
        DT_CHECK(dt_optim_kind(s->optim, &kind));
        snprintf(r.kind, sizeof r.kind, "%s", kind);
        DT_CHECK(dt_optim_get_lr(s->optim, &r.lr));
        if (!(steps = malloc((size_t)(nm->nopt + 1) * sizeof *steps)))
            return dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
        for (int k = 0; k < nm->nopt; k++)
            dt_optim_steps_get(s->optim, k, &steps[k]);
        r.steps = steps;
    }
    *text = tr_record_format(&r, len);
    free(steps);
    if (!*text) return dt_error(DT_ERR_NOMEM, "%s: out of memory for the record", fn);
    return DT_OK;
}

/* Both saves: out NULL, synchronous; else dt_checkpoint_save_async's pending into *out. */
static dt_status save(const char *fn, dt_ctx *ctx, const char *root, const dt_train_state *s,
                      int keep_last, dt_checkpoint_pending **out) {
    DT_CHECK(check_state(fn, ctx, s));
    DT_ARG(root && *root, "%s: argument root is NULL or empty", fn);
    DT_ARG(s->step >= 0, "%s: s->step = %" PRId64 " is negative", fn, s->step);
    dt_comm *world;
    DT_CHECK(dt_ctx_world_comm(ctx, &world));
    char dir[4096], *text = NULL, *all = NULL;
    size_t len = 0;
    tr_names nm = {0};
    dt_status st = dt_train_state_path(root, s->step, dir, sizeof dir);
    if (st == DT_OK) st = record_of(fn, s, &nm, &text, &len);
    st = agree(world, st); /* a stage's own mismatch fails every rank before any collective */
    if (st == DT_OK) st = gather_record(fn, world, &text, &len, &all);
    dt_checkpoint_save_options so = {
        .blob = text, .blob_bytes = len, .keep_last = keep_last > 0 ? keep_last : 0};
    if (st == DT_OK && out)
        st = dt_checkpoint_save_async(ctx, dir, nm.names, nm.tensors, nm.n, &so, out);
    else if (st == DT_OK)
        st = dt_checkpoint_save(ctx, dir, nm.names, nm.tensors, nm.n, &so);
    free(text), free(all);
    names_free(&nm);
    return st;
}

dt_status dt_train_state_save(dt_ctx *ctx, const char *root, const dt_train_state *s,
                              int keep_last) {
    return save("dt_train_state_save", ctx, root, s, keep_last, NULL);
}

dt_status dt_train_state_save_async(dt_ctx *ctx, const char *root, const dt_train_state *s,
                                    int keep_last, dt_checkpoint_pending **out) {
    const char *fn = "dt_train_state_save_async";
    DT_ARG(out != NULL, "%s: argument out is NULL", fn);
    return save(fn, ctx, root, s, keep_last, out);
}

/* ---- load ---------------------------------------------------------------------------------- */

/* The record of dir, read and parsed. */
static dt_status read_record(const char *fn, const char *dir, tr_record *r) {
    memset(r, 0, sizeof *r);
    size_t len;
    dt_status st = dt_checkpoint_blob(dir, NULL, 0, &len);
    if (st == DT_ERR_ARG)
        return dt_error(DT_ERR_PARSE,
                        "%s: %s holds no train-state record (it was saved without "
                        "a blob, not by dt_train_state_save)",
                        fn, dir);
    DT_CHECK(st);
    char *text = malloc(len + 1), where[4200];
    if (!text) return dt_error(DT_ERR_NOMEM, "%s: out of memory for a blob of %zu bytes", fn, len);
    st = dt_checkpoint_blob(dir, text, len, &len);
    snprintf(where, sizeof where, "%s: %s", fn, dir);
    if (st == DT_OK) st = tr_record_parse(text, len, r, where);
    free(text);
    return st;
}

/* Everything s asks for is in the record r of dir; *steps_out[k] = optimizer parameter k's
 * saved step count. Changes nothing. */
static dt_status match(const char *fn, const char *dir, const dt_train_state *s, const tr_record *r,
                       const tr_names *nm, int64_t *steps_out) {
    for (int i = 0; i < nm->np; i++)
        if (tr_find(r->tensors, r->ntensors, nm->names[i]) < 0)
            return dt_error(DT_ERR_ARG, "%s: %s has no parameter \"%s\" (s->params has it)", fn,
                            dir, nm->names[i]);
    if (s->gen && !r->has_gen)
        return dt_error(DT_ERR_ARG, "%s: %s was saved without a generator (s->gen is set)", fn,
                        dir);
    if (!s->optim) return DT_OK;
    const char *kind;
    DT_CHECK(dt_optim_kind(s->optim, &kind));
    if (!r->has_optim)
        return dt_error(DT_ERR_ARG, "%s: %s was saved without an optimizer (s->optim is %s)", fn,
                        dir, kind);
    if (strcmp(kind, r->kind) != 0)
        return dt_error(DT_ERR_ARG, "%s: %s was saved from %s, s->optim is %s", fn, dir, r->kind,
                        kind);
    for (int k = 0; k < nm->nopt; k++) {
        int j = tr_find(r->step_names, r->nsteps, nm->opt_names[k]);
        if (j < 0)
            return dt_error(DT_ERR_ARG, "%s: %s has no optimizer state for parameter \"%s\"", fn,
                            dir, nm->opt_names[k]);
        steps_out[k] = r->steps[j];
    }
    for (int i = nm->np; i < nm->n; i++)
        if (tr_find(r->states, r->nstates, nm->names[i]) < 0)
            return dt_error(DT_ERR_ARG,
                            "%s: %s has no optimizer state \"%s\" (saved by an optimizer "
                            "without that slot: other momentum or master weights)",
                            fn, dir, nm->names[i]);
    return DT_OK;
}

/* The scalars, once the tensors are in: nothing here can fail (match checked the values). */
static void apply(dt_train_state *s, const tr_record *r, const tr_names *nm, const int64_t *steps) {
    s->step = r->step;
    s->data_pos = r->data_pos;
    if (s->gen) *s->gen = r->gen;
    if (s->schedule && r->has_schedule) *s->schedule = r->schedule;
    if (!s->optim) return;
    for (int k = 0; k < nm->nopt; k++)
        dt_optim_steps_set(s->optim, k, steps[k]);
    dt_optim_set_lr(s->optim, r->lr);
}

dt_status dt_train_state_load(dt_ctx *ctx, const char *dir, dt_train_state *s) {
    const char *fn = "dt_train_state_load";
    DT_CHECK(check_state(fn, ctx, s));
    DT_ARG(dir && *dir, "%s: argument dir is NULL or empty", fn);
    dt_comm *world;
    DT_CHECK(dt_ctx_world_comm(ctx, &world));
    tr_record r = {0};
    tr_names nm = {0};
    int64_t *steps = NULL;
    dt_status st = read_record(fn, dir, &r);
    if (st == DT_OK) st = names_make(fn, s, &nm);
    if (st == DT_OK && !(steps = malloc((size_t)(nm.nopt + 1) * sizeof *steps)))
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    if (st == DT_OK) st = match(fn, dir, s, &r, &nm, steps);
    st = agree(world, st);
    if (st == DT_OK) {
        dt_checkpoint_load_options lo = {.strict = 0, .ctx = ctx};
        st = dt_checkpoint_load(dir, nm.names, nm.tensors, nm.n, &lo);
    }
    if (st == DT_OK) apply(s, &r, &nm, steps);
    free(steps);
    names_free(&nm);
    tr_record_free(&r);
    return st;
}

/* Rank 0's choice of the newest complete step directory, or none. */
typedef struct tr_pick {
    int32_t status, found;
    char text[4096]; /* the path, or the error message */
} tr_pick;

static void pick_latest(const char *root, tr_pick *p) {
    DIR *d = opendir(root);
    if (!d && errno == ENOENT) return; /* a first run: nothing saved yet */
    if (!d) {
        p->status = dt_error(DT_ERR_IO, "dt_train_state_load_latest: cannot list %s: %s", root,
                             strerror(errno));
    } else {
        closedir(d);
        dt_status st = dt_checkpoint_latest(root, DT_TRAIN_STATE_PREFIX, p->text, sizeof p->text);
        p->found = st == DT_OK;
        /* DT_ERR_IO: root lists, but holds no complete step directory */
        if (st != DT_OK && st != DT_ERR_IO) p->status = st;
    }
    if (p->status != DT_OK) snprintf(p->text, sizeof p->text, "%s", dt_last_error());
}

dt_status dt_train_state_load_latest(dt_ctx *ctx, const char *root, dt_train_state *s, int *found) {
    const char *fn = "dt_train_state_load_latest";
    DT_CHECK(check_state(fn, ctx, s));
    DT_ARG(root && *root, "%s: argument root is NULL or empty", fn);
    DT_ARG(found != NULL, "%s: argument found is NULL", fn);
    dt_comm *world;
    DT_CHECK(dt_ctx_world_comm(ctx, &world));
    tr_pick p = {0};
    if (dt_comm_rank(world) == 0) pick_latest(root, &p);
    _Static_assert(sizeof p % 4 == 0, "broadcast as int32 words");
    DT_CHECK(dt_broadcast(world, &p, sizeof p / 4, DT_I32, 0));
    p.text[sizeof p.text - 1] = '\0';
    if (p.status != DT_OK) return dt_error((dt_status)p.status, "%s", p.text);
    if (p.found) DT_CHECK(dt_train_state_load(ctx, p.text, s));
    *found = p.found;
    return DT_OK;
}
