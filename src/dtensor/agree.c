/* Argument agreement across ranks (agree.h): descriptions written as labelled items, exchanged
 * over a communicator (a hash first, the texts only when the hashes differ), compared with
 * the first rank's, and one message built from the gathered texts, so every rank that took
 * part computes the same one. Holds no op, plan or checkpoint knowledge: callers describe. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/boot/boot.h"
#include "core/check.h"
#include "core/lru.h"
#include "dtensor/agree.h"
#include "mesh/mesh_impl.h"

#define SEP_LABEL    '\037'
#define SEP_ITEM     '\036'
#define VERDICT_TEXT 480 /* fits the thread's last-error buffer */

/* ---- the debug mode ---------------------------------------------------------------------- */

static dt_dtensor_state *state_of(dt_ctx *ctx) {
    return dt_ctx_slot(ctx, DT_CTX_SLOT_DTENSOR);
}

dt_status dt_agree_debug_on(dt_ctx *ctx, int *on) {
    dt_dtensor_state *s = state_of(ctx);
    if (s->debug_args == DT_AGREE_UNREAD) {
        int flag = 0;
        DT_CHECK(dt_boot_env_flag(DT_AGREE_DEBUG_ENV, 0, &flag));
        s->debug_args = flag ? DT_AGREE_ON : DT_AGREE_OFF;
    }
    *on = s->debug_args == DT_AGREE_ON;
    return DT_OK;
}

dt_status dt_ctx_set_debug_args(dt_ctx *ctx, int on) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG(on == 0 || on == 1, "dt_ctx_set_debug_args: argument on is %d, not 0 or 1", on);
    state_of(ctx)->debug_args = on ? DT_AGREE_ON : DT_AGREE_OFF;
    return DT_OK;
}

/* ---- describing ---------------------------------------------------------------------------- */

void dt_agree_init(dt_agree *a, const char *fn) {
    a->fn = fn;
    a->len = 0;
    a->full = 0;
    memset(a->u.words, 0, sizeof a->u.words);
}

static void add_v(dt_agree *a, const char *label, const char *fmt, va_list ap) {
    if (a->full) return;
    size_t cap = sizeof a->u.text - 1, o = (size_t)a->len; /* a final NUL stays */
    int n = snprintf(a->u.text + o, cap - o, "%s%c", label, SEP_LABEL);
    if (n >= 0 && (size_t)n < cap - o) {
        o += (size_t)n;
        n = vsnprintf(a->u.text + o, cap - o, fmt, ap);
        if (n >= 0 && (size_t)n + 1 < cap - o) {
            o += (size_t)n;
            a->u.text[o++] = SEP_ITEM;
            a->len = (int)o;
            return;
        }
    }
    /* Does not fit: drop the partial item (the hash covers the text, so equal texts stay equal). */
    memset(a->u.text + a->len, 0, sizeof a->u.text - (size_t)a->len);
    a->full = 1;
}

void dt_agree_add(dt_agree *a, const char *label, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_v(a, label, fmt, ap);
    va_end(ap);
}

/* World ranks as ranges: "[0-3]", "[0,2]", "[4-7,12-15]". */
static void ranks_text(const int *r, int n, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && o < cap; i++) {
        int j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1)
            j++;
        if (j >= i + 2) { /* three or more in a row */
            o += (size_t)snprintf(buf + o, cap - o, "%s%d-%d", i ? "," : "", r[i], r[j]);
            i = j;
        } else {
            o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? "," : "", r[i]);
        }
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

void dt_agree_mesh(dt_agree *a, const char *what, const dt_mesh *m) {
    char label[64], dims[DT_MESH_MAX_NDIM * (DT_MESH_NAME_MAX + 16)], ranks[256];
    size_t o = 0;
    dims[0] = '\0';
    for (int d = 0; d < m->ndim && o < sizeof dims; d++)
        o += (size_t)snprintf(dims + o, sizeof dims - o, "%s%s=%d", d ? "," : "", m->names[d],
                              m->shape[d]);
    ranks_text(m->ranks, m->nranks, ranks, sizeof ranks);
    snprintf(label, sizeof label, "%s mesh", what);
    dt_agree_add(a, label, "%s on ranks %s", dims, ranks);
}

void dt_agree_placements(dt_agree *a, const char *what, const dt_placement *p, int n) {
    char label[64], text[128];
    snprintf(label, sizeof label, "%s placements", what);
    /* As given, before any check: ranks that pass different invalid placements learn that,
     * rather than some failing the check and the others waiting. */
    if (!p || n < 0 || n > DT_MESH_MAX_NDIM) {
        dt_agree_add(a, label, "%d at %s", n, p ? "an array" : "NULL");
        return;
    }
    if (dt_placements_format(p, n, text, sizeof text) != DT_OK) snprintf(text, sizeof text, "?");
    dt_agree_add(a, label, "[%s]", text);
}

static void shape_text(const int64_t *s, int n, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < n && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)s[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

void dt_agree_tensor(dt_agree *a, const char *what, const dt_tensor *t) {
    char label[64], shape[DT_MAX_NDIM * 22 + 4];
    shape_text(t->shape, t->ndim, shape, sizeof shape);
    snprintf(label, sizeof label, "%s shape", what);
    dt_agree_add(a, label, "%s", shape);
    snprintf(label, sizeof label, "%s dtype", what);
    dt_agree_add(a, label, "%s", dt_dtype_name(t->dtype));
    dt_agree_placements(a, what, t->placements, t->mesh->ndim);
    dt_agree_mesh(a, what, t->mesh);
}

void dt_agree_words(dt_agree *a, const char *label, const uint64_t *w, int n) {
    char text[DT_AGREE_WORDS * 4];
    size_t o = (size_t)snprintf(text, sizeof text, "[");
    for (int i = 0; i < n && o < sizeof text; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "%s%llu", i ? ", " : "",
                              (unsigned long long)w[i]);
    if (o < sizeof text) snprintf(text + o, sizeof text - o, "]");
    dt_agree_add(a, label, "%s", text);
}

static uint64_t hash_of(const dt_agree *a) {
    unsigned nw = (unsigned)(a->len + 7) / 8;
    return dt_lru_hash(a->u.words, nw) ^ (uint64_t)a->len;
}

/* ---- comparing ----------------------------------------------------------------------------- */

/* Item k of text (label and value, lengths), 0 when there is none. */
static int item_at(const char *text, int k, const char **label, int *llen, const char **value,
                   int *vlen) {
    const char *p = text;
    for (int i = 0; i < k; i++) {
        p = strchr(p, SEP_ITEM);
        if (!p) return 0;
        p++;
    }
    const char *sep = strchr(p, SEP_LABEL), *end = sep ? strchr(sep, SEP_ITEM) : NULL;
    if (!*p || !sep || !end) return 0;
    *label = p, *llen = (int)(sep - p);
    *value = sep + 1, *vlen = (int)(end - sep - 1);
    return 1;
}

/* The message naming the first difference between text t0 (world rank r0) and tr (rank rr). */
static void difference(const char *fn, const char *why, const char *t0, int r0, const char *tr,
                       int rr, char *msg, size_t cap) {
    char head[160];
    snprintf(head, sizeof head, "%s: ranks passed different arguments%s%s%s", fn, why ? " (" : "",
             why ? why : "", why ? ")" : "");
    for (int k = 0;; k++) {
        const char *l0 = "", *v0 = "", *lr = "", *vr = "";
        int ll0 = 0, vl0 = 0, llr = 0, vlr = 0;
        int h0 = item_at(t0, k, &l0, &ll0, &v0, &vl0), hr = item_at(tr, k, &lr, &llr, &vr, &vlr);
        if (!h0 && !hr) break;
        int same_label = h0 && hr && ll0 == llr && !memcmp(l0, lr, (size_t)ll0);
        if (same_label && vl0 == vlr && !memcmp(v0, vr, (size_t)vl0)) continue;
        if (same_label)
            snprintf(msg, cap, "%s: %.*s: rank %d passed %.*s, rank %d passed %.*s", head, ll0, l0,
                     r0, vl0 > 160 ? 160 : vl0, v0, rr, vlr > 160 ? 160 : vlr, vr);
        else
            snprintf(msg, cap,
                     "%s: argument %d: rank %d passed %.*s%s%.*s, rank %d passed "
                     "%.*s%s%.*s",
                     head, k, r0, ll0, l0, h0 ? " " : "nothing more", vl0 > 120 ? 120 : vl0, v0, rr,
                     llr, lr, hr ? " " : "nothing more", vlr > 120 ? 120 : vlr, vr);
        return;
    }
    /* Equal items, different bytes: the descriptions were cut at different items. */
    snprintf(msg, cap,
             "%s: their descriptions differ past the %d bytes compared (rank %d and "
             "rank %d)",
             head, DT_AGREE_WORDS * 8, r0, rr);
}

/* Over the gathered texts (n of them, each DT_AGREE_WORDS words; world ranks in wr): the
 * message for the first text that differs from the first, or 0 when all are equal. */
static int first_difference(const char *fn, const char *why, const uint64_t *texts, int n,
                            const int *wr, char *msg, size_t cap) {
    const size_t bytes = DT_AGREE_WORDS * 8;
    const char *t0 = (const char *)texts;
    for (int r = 1; r < n; r++) {
        const char *tr = (const char *)(texts + (size_t)r * DT_AGREE_WORDS);
        if (memcmp(t0, tr, bytes)) {
            difference(fn, why, t0, wr[0], tr, wr[r], msg, cap);
            return 1;
        }
    }
    return 0;
}

/* ---- exchanging ---------------------------------------------------------------------------- */

/* Gathers every member's text on comm and, when they differ, writes the message (all members
 * compute the same one). *differs = 0 when equal. */
static dt_status gather_texts(dt_comm *c, const dt_agree *a, const char *why, int *differs,
                              char *msg, size_t cap) {
    int n = dt_comm_size(c);
    uint64_t *all = malloc(sizeof(uint64_t) * DT_AGREE_WORDS * (size_t)n);
    int *wr = malloc(sizeof(int) * (size_t)n);
    dt_status st = all && wr ? DT_OK : dt_error(DT_ERR_NOMEM, "%s: out of memory", a->fn);
    if (st == DT_OK) st = dt_all_gather(c, a->u.words, all, DT_AGREE_WORDS, DT_I64);
    if (st == DT_OK) {
        for (int r = 0; r < n; r++)
            wr[r] = dt_comm_world_rank(c, r);
        *differs = first_difference(a->fn, why, all, n, wr, msg, cap);
    }
    free(all);
    free(wr);
    return st;
}

/* Hashes on comm: *equal = 1 when every member's matches. */
static dt_status gather_hashes(dt_comm *c, const dt_agree *a, int *equal) {
    int n = dt_comm_size(c);
    uint64_t h = hash_of(a), small[16],
             *all = n <= 16 ? small : malloc(sizeof(uint64_t) * (size_t)n);
    if (!all) return dt_error(DT_ERR_NOMEM, "%s: out of memory", a->fn);
    dt_status st = dt_all_gather(c, &h, all, 1, DT_I64);
    *equal = 1;
    for (int r = 0; st == DT_OK && r < n; r++)
        *equal &= all[r] == h;
    if (all != small) free(all);
    return st;
}

static dt_status prefixed(dt_status st, const char *fn) {
    if (st != DT_OK) dt_error_prefix(fn);
    return st;
}

dt_status dt_agree_comm(dt_comm *c, const dt_agree *a, const char *why) {
    int equal = 0, differs = 0;
    char msg[VERDICT_TEXT];
    DT_CHECK(prefixed(gather_hashes(c, a, &equal), a->fn));
    if (equal) return DT_OK;
    DT_CHECK(prefixed(gather_texts(c, a, why, &differs, msg, sizeof msg), a->fn));
    /* Equal texts under unequal hashes cannot happen (the hash is a function of the text). */
    DT_ASSERT(differs);
    return dt_error(DT_ERR_ARG, "%s", msg);
}

static dt_status mesh_comm(dt_mesh *mesh, dt_comm **c) {
    return dt_mesh_mask_comm(mesh, (1u << mesh->ndim) - 1, c);
}

dt_status dt_agree_on_mesh(dt_mesh *mesh, const dt_agree *a, const char *why) {
    if (mesh->rank < 0) return DT_OK;
    dt_comm *c;
    DT_CHECK(mesh_comm(mesh, &c));
    return dt_agree_comm(c, a, why);
}

/* ---- across a mesh and other ranks ------------------------------------------------------- */

/* The outcome the first rank sends everyone: a status word, then the message. */
#define VERDICT_WORDS (1 + VERDICT_TEXT / 8)
typedef union verdict {
    uint64_t words[VERDICT_WORDS];
    struct {
        int64_t status;
        char text[VERDICT_TEXT];
    } v;
} verdict;

static dt_status verdict_status(const verdict *v) {
    return v->v.status == DT_OK ? DT_OK : dt_error((dt_status)v->v.status, "%s", v->v.text);
}

/* A rank outside the mesh: its description to the mesh's first rank, the verdict back. */
static dt_status across_outside(dt_mesh *mesh, dt_comm *world, const dt_agree *a) {
    int first = mesh->ranks[0];
    verdict v;
    dt_status st = dt_send(world, a->u.words, DT_AGREE_WORDS, DT_I64, first);
    if (st == DT_OK) st = dt_recv(world, v.words, VERDICT_WORDS, DT_I64, first);
    if (st != DT_OK) {
        char pre[160];
        snprintf(pre, sizeof pre,
                 "%s: comparing this rank's arguments with rank %d's (the "
                 "source mesh's first)",
                 a->fn, first);
        dt_error_prefix(pre);
        return st;
    }
    v.v.text[VERDICT_TEXT - 1] = '\0';
    return verdict_status(&v);
}

/* The first rank: each other rank's description, compared with its own unless the mesh's
 * ranks already differ (msg holds that message then). */
static dt_status collect_others(dt_comm *world, const dt_agree *a, const char *why,
                                const uint64_t *bits, int size, int *differs, char *msg,
                                size_t cap) {
    uint64_t *t = malloc(sizeof(uint64_t) * DT_AGREE_WORDS);
    if (!t) return dt_error(DT_ERR_NOMEM, "%s: out of memory", a->fn);
    dt_status st = DT_OK;
    int me = dt_comm_world_rank(world, dt_comm_rank(world));
    for (int q = 0; q < size && st == DT_OK; q++) {
        if (!(bits[q / 64] >> (q % 64) & 1)) continue;
        st = dt_recv(world, t, DT_AGREE_WORDS, DT_I64, q);
        if (st == DT_OK && !*differs && memcmp(t, a->u.words, sizeof a->u.words)) {
            ((char *)t)[DT_AGREE_WORDS * 8 - 1] = '\0';
            difference(a->fn, why, a->u.text, me, (const char *)t, q, msg, cap);
            *differs = 1;
        }
    }
    free(t);
    return st;
}

dt_status dt_agree_across(dt_mesh *mesh, const int *others, int nothers, const dt_agree *a,
                          const char *why) {
    dt_ctx *ctx = mesh->ctx;
    dt_comm *world, *c;
    DT_CHECK(dt_ctx_world_comm(ctx, &world));
    if (mesh->rank < 0) return across_outside(mesh, world, a);
    DT_CHECK(mesh_comm(mesh, &c));
    /* Every member's hash and the world ranks its call names besides the mesh's, as bits. */
    const int size = ctx->size, bw = (size + 63) / 64, n = dt_comm_size(c);
    uint64_t *rec = calloc((size_t)(1 + bw) * (size_t)(n + 2), sizeof *rec);
    if (!rec) return dt_error(DT_ERR_NOMEM, "%s: out of memory", a->fn);
    uint64_t *all = rec + 1 + bw, *bits = all + (size_t)(1 + bw) * (size_t)n;
    rec[0] = hash_of(a);
    for (int i = 0; i < nothers; i++)
        rec[1 + others[i] / 64] |= 1ull << (others[i] % 64);
    int equal = 1, differs = 0, any = 0;
    char msg[VERDICT_TEXT] = "";
    dt_status st = dt_all_gather(c, rec, all, (size_t)(1 + bw), DT_I64);
    for (int r = 0; st == DT_OK && r < n; r++) {
        const uint64_t *m = all + (size_t)r * (size_t)(1 + bw);
        equal &= m[0] == rec[0];
        for (int w = 0; w < bw; w++)
            bits[w] |= m[1 + w], any |= m[1 + w] != 0;
    }
    if (st == DT_OK && !equal) st = gather_texts(c, a, why, &differs, msg, sizeof msg);
    verdict v = {{0}};
    if (st == DT_OK && any) {
        /* Ranks beyond the mesh take part: the first rank hears them and tells all. */
        if (mesh->rank == 0)
            st = collect_others(world, a, why, bits, size, &differs, msg, sizeof msg);
        if (st == DT_OK && mesh->rank == 0) {
            v.v.status = differs ? DT_ERR_ARG : DT_OK;
            snprintf(v.v.text, sizeof v.v.text, "%s", msg);
        }
        if (st == DT_OK) st = dt_broadcast(c, v.words, VERDICT_WORDS, DT_I64, 0);
        for (int q = 0; st == DT_OK && mesh->rank == 0 && q < size; q++)
            if (bits[q / 64] >> (q % 64) & 1)
                st = dt_send(world, v.words, VERDICT_WORDS, DT_I64, q);
    } else if (st == DT_OK) {
        v.v.status = differs ? DT_ERR_ARG : DT_OK;
        snprintf(v.v.text, sizeof v.v.text, "%s", msg);
    }
    free(rec);
    if (st != DT_OK) return prefixed(st, a->fn);
    v.v.text[VERDICT_TEXT - 1] = '\0';
    return verdict_status(&v);
}

/* ---- checkpoint ---------------------------------------------------------------------------- */

dt_status dt_agree_checkpoint(const char *fn, dt_ctx *world, const char *dir,
                              const char *const *names, dt_tensor *const *tensors, int n) {
    if (!dir || n < 0 || (n > 0 && (!names || !tensors))) return DT_OK; /* the caller's error */
    for (int i = 0; i < n; i++)
        if (!names[i] || !tensors[i] || tensors[i]->magic != DT_TENSOR_LIVE) return DT_OK;
    dt_ctx *ctx = world ? world : n > 0 ? tensors[0]->mesh->ctx : NULL;
    if (!ctx || !dt_agree_debug(ctx)) return DT_OK;
    int on;
    DT_CHECK(dt_agree_debug_on(ctx, &on));
    if (!on) return DT_OK;
    dt_agree *a = malloc(sizeof *a);
    if (!a) return dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    dt_status st = DT_OK;
    if (world) {
        dt_comm *c;
        dt_agree_init(a, fn);
        dt_agree_add(a, "dir", "\"%s\"", dir);
        st = dt_ctx_world_comm(world, &c);
        if (st == DT_OK) st = dt_agree_comm(c, a, DT_AGREE_DEBUG_ENV);
    }
    for (int i = 0; i < n && st == DT_OK; i++) {
        dt_mesh *m = tensors[i]->mesh;
        int k = 0;
        for (int j = 0; j < i; j++)
            k += dt_mesh_equal(tensors[j]->mesh, m);
        char what[32], label[48];
        snprintf(what, sizeof what, "tensor %d", k);
        snprintf(label, sizeof label, "%s name", what);
        dt_agree_init(a, fn);
        dt_agree_add(a, "dir", "\"%s\"", dir);
        dt_agree_add(a, label, "\"%s\"", names[i]);
        dt_agree_tensor(a, what, tensors[i]);
        st = dt_agree_on_mesh(m, a, DT_AGREE_DEBUG_ENV);
    }
    free(a);
    return st;
}
