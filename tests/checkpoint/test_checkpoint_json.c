/* Malformed JSON in a checkpoint (metadata.json and the rank files' safetensors headers, read
 * by checkpoint/json.c): duplicate keys, nesting past 32 levels, integers past int64, fractions and
 * exponents, wrong types, and lists, files and texts past their limits. Each is a collective
 * load of the fixed 2x2 save with its text edited by the test (the 2^20-tensor lists and the
 * reader's own cases: one caller), and each fails on every rank with one status and one
 * message that names the value at fault; limits are probed on both sides (the last accepted
 * count or depth, then one more). The integers, checksums, limits and byte offsets expected
 * are written here as literals or counted by the test. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include "checkpoint/json.h"
#include "checkpoint/meta.h"
#include "ckpt_common.h"
#include "helpers.h"

#define W 4 /* the fixed save's 2x2 mesh, loaded onto the same layout */

typedef struct outcome {
    const ct_run *r;
    dt_status st[W];
    char msg[W][1024];
    int wrong[W]; /* DT_OK, but the shard differs from the saved tensor */
} outcome;

static dt_status load_body(dt_ctx *ctx, void *arg) {
    outcome *o = arg;
    const ct_run *r = o->r;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, r->mesh_ndim, r->mesh_shape, NULL, &mesh));
    dt_tensor *t[CT_MAX] = {0};
    const char *names[CT_MAX];
    for (int i = 0; i < r->n; i++) {
        dt_placement pl[DT_MESH_MAX_NDIM];
        int np;
        R_OK(dt_placements_parse(r->specs[i].placements, pl, DT_MESH_MAX_NDIM, &np));
        R_OK(dt_tensor_zeros(mesh, r->specs[i].dtype, r->specs[i].ndim, r->specs[i].shape, np, pl,
                             &t[i]));
        names[i] = r->specs[i].name;
    }
    o->st[rank] = dt_checkpoint_load(r->dir, names, t, r->n, NULL);
    snprintf(o->msg[rank], sizeof o->msg[rank], "%s", o->st[rank] ? dt_last_error() : "");
    for (int i = 0; i < r->n && o->st[rank] == DT_OK; i++) {
        size_t bytes;
        void *full = ct_full(&r->specs[i], &bytes);
        R_CHECK(full, "out of memory");
        o->wrong[rank] |= ct_check_shard(t[i], full) != DT_OK;
        free(full);
    }
    for (int i = 0; i < r->n; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* Loads r on its W ranks; every rank must return the same status and message. */
static outcome load_all(const ct_run *r, const char *what) {
    outcome o = {.r = r};
    t_run(W, load_body, &o);
    for (int k = 1; k < W; k++) {
        cr_expect_eq(o.st[k], o.st[0], "%s: rank %d returned %s, rank 0 %s", what, k,
                     dt_status_str(o.st[k]), dt_status_str(o.st[0]));
        cr_expect_str_eq(o.msg[k], o.msg[0], "%s: rank %d's message differs", what, k);
    }
    return o;
}

/* The load fails with want on every rank, its message naming the file and each needle. */
static void expect_fail(const ct_run *r, const char *what, dt_status want, const char *file,
                        const char *n1, const char *n2) {
    outcome o = load_all(r, what);
    cr_expect_eq(o.st[0], want, "%s: %s (%s)", what, dt_status_str(o.st[0]), o.msg[0]);
    cr_expect(strstr(o.msg[0], file), "%s: \"%s\" does not name %s", what, o.msg[0], file);
    cr_expect(strstr(o.msg[0], n1), "%s: \"%s\" does not say \"%s\"", what, o.msg[0], n1);
    cr_expect(!n2 || strstr(o.msg[0], n2), "%s: \"%s\" does not say \"%s\"", what, o.msg[0], n2);
}

static void expect_loads(const ct_run *r, const char *what) {
    outcome o = load_all(r, what);
    cr_expect_eq(o.st[0], DT_OK, "%s: %s", what, o.msg[0]);
    for (int k = 0; k < W; k++)
        cr_expect(!o.wrong[k], "%s: rank %d loaded other data", what, k);
}

/* text with the first occurrence of `find` replaced by `repl` (malloc'd). */
static char *edited(const char *text, const char *find, const char *repl) {
    const char *at = strstr(text, find);
    cr_assert(at, "\"%s\" is not in the text", find);
    size_t head = (size_t)(at - text), fl = strlen(find), rl = strlen(repl);
    char *out = malloc(strlen(text) - fl + rl + 1);
    cr_assert(out);
    memcpy(out, text, head);
    memcpy(out + head, repl, rl);
    strcpy(out + head + rl, at + fl);
    return out;
}

/* Writes text with find replaced by repl to path. */
static void spit_edited(const char *path, const char *text, const char *find, const char *repl) {
    char *e = edited(text, find, repl);
    t_spit(path, e, strlen(e));
    free(e);
}

/* `prefix` followed by n copies of `item`, then `suffix` (malloc'd). */
static char *repeated(const char *prefix, const char *item, long n, const char *suffix) {
    size_t pl = strlen(prefix), il = strlen(item), sl = strlen(suffix);
    char *s = malloc(pl + (size_t)n * il + sl + 1);
    cr_assert(s);
    memcpy(s, prefix, pl);
    for (long i = 0; i < n; i++)
        memcpy(s + pl + (size_t)i * il, item, il);
    strcpy(s + pl + (size_t)n * il, suffix);
    return s;
}

typedef struct fixture {
    char *dir;
    char path[600], meta[700];
    ct_run saved;
    char *text; /* metadata.json as saved */
    size_t len;
} fixture;

static void fixture_save(fixture *f) {
    f->dir = t_tmpdir();
    snprintf(f->path, sizeof f->path, "%s/ck", f->dir);
    snprintf(f->meta, sizeof f->meta, "%s/metadata.json", f->path);
    f->saved = ct_fixed(f->path, 0);
    t_run(W, ct_body, &f->saved);
    f->text = t_slurp(f->meta, &f->len);
    cr_assert(strncmp(f->text, "{\"format\":\"dtensor-checkpoint\",", 31) == 0, "%.60s", f->text);
}

static void fixture_done(fixture *f) {
    t_spit(f->meta, f->text, f->len); /* the saved text loads again */
    expect_loads(&f->saved, "restored metadata");
    free(f->text);
    t_rmtree(f->dir);
}

#define HEAD "{\"format\":\"dtensor-checkpoint\","

Test(checkpoint_json, duplicate_keys_fail_by_name) {
    fixture f;
    fixture_save(&f);
    spit_edited(f.meta, f.text, HEAD, HEAD "\"format\":\"dtensor-checkpoint\",");
    char at[64]; /* where the second key ends */
    snprintf(at, sizeof at, "\"format\" at byte %zu", strlen(HEAD) + strlen("\"format\""));
    expect_fail(&f.saved, "duplicate root key", DT_ERR_PARSE, "metadata.json",
                "duplicate object key", at);
    spit_edited(f.meta, f.text, "\"begin\":", "\"begin\":0,\"begin\":");
    expect_fail(&f.saved, "duplicate chunk key", DT_ERR_PARSE, "metadata.json",
                "duplicate object key", "begin");
    t_spit(f.meta, f.text, f.len);
    /* a rank file's header: "format":"pt" in its __metadata__ becomes a key given twice,
     * in as many bytes (so that nothing else moves) */
    char f1[700];
    snprintf(f1, sizeof f1, "%s/rank-00001.safetensors", f.path);
    size_t hl;
    char *h = t_slurp(f1, &hl), *fmt = memmem(h, hl, "\"format\":\"pt\"", 13);
    cr_assert(fmt, "rank 1's header has no __metadata__ format");
    memcpy(fmt, "\"a\":1,\"a\":222", 13);
    t_spit(f1, h, hl);
    expect_fail(&f.saved, "duplicate header key", DT_ERR_PARSE, "rank-00001.safetensors",
                "bad safetensors header", "duplicate object key");
    memcpy(fmt, "\"format\":\"pt\"", 13);
    t_spit(f1, h, hl);
    free(h);
    fixture_done(&f);
}

Test(checkpoint_json, nesting_deeper_than_32_levels_fails) {
    fixture f;
    fixture_save(&f);
    /* the root, then 31 arrays: 32 levels, an unknown member, ignored */
    char *deep = repeated(HEAD "\"deep\":", "[", 31, "");
    char *full = repeated(deep, "]", 31, ",");
    spit_edited(f.meta, f.text, HEAD, full);
    expect_loads(&f.saved, "32 levels");
    free(deep), free(full);
    deep = repeated(HEAD "\"deep\":", "[", 32, "");
    full = repeated(deep, "]", 32, ",");
    spit_edited(f.meta, f.text, HEAD, full);
    char at[64]; /* the 33rd level's bracket: the root's is the first */
    snprintf(at, sizeof at, "at byte %zu", strlen(HEAD "\"deep\":") + 31);
    expect_fail(&f.saved, "33 levels", DT_ERR_PARSE, "metadata.json",
                "nesting deeper than 32 arrays and objects", at);
    free(deep), free(full);
    /* far past it: refused at the same byte, before the reader recurses any deeper */
    deep = repeated(HEAD "\"deep\":", "[", 100000, "");
    full = repeated(deep, "]", 100000, ",");
    spit_edited(f.meta, f.text, HEAD, full);
    expect_fail(&f.saved, "100000 levels", DT_ERR_PARSE, "metadata.json",
                "nesting deeper than 32 arrays and objects", at);
    free(deep), free(full);
    fixture_done(&f);
}

/* The first chunk's "begin" value replaced by num; where num starts. */
static size_t begin_is(fixture *f, const char *num) {
    const char *b = strstr(f->text, "\"begin\":");
    cr_assert(b);
    size_t n = strspn(b + 8, "0123456789");
    char find[64], repl[96];
    snprintf(find, sizeof find, "\"begin\":%.*s,", (int)n, b + 8);
    snprintf(repl, sizeof repl, "\"begin\":%s,", num);
    spit_edited(f->meta, f->text, find, repl);
    return (size_t)(b - f->text) + 8;
}

Test(checkpoint_json, integers_past_int64_and_non_integers_fail) {
    fixture f;
    fixture_save(&f);
    char at[80]; /* the number and its first byte */
    snprintf(at, sizeof at, "number 9223372036854775808 at byte %zu",
             begin_is(&f, "9223372036854775808")); /* 2^63 */
    expect_fail(&f.saved, "2^63", DT_ERR_PARSE, "metadata.json", at, "is outside int64");
    snprintf(at, sizeof at, "number -9223372036854775809 at byte %zu",
             begin_is(&f, "-9223372036854775809"));
    expect_fail(&f.saved, "-2^63-1", DT_ERR_PARSE, "metadata.json", at, "is outside int64");
    begin_is(&f, "123456789012345678901234567890");
    expect_fail(&f.saved, "30 digits", DT_ERR_PARSE, "metadata.json",
                "number 123456789012345678901234567890 at byte", "is outside int64");
    begin_is(&f, "9223372036854775807"); /* parses, then lies outside its file */
    expect_fail(&f.saved, "2^63-1", DT_ERR_PARSE, "metadata.json", "byte range is outside", NULL);
    snprintf(at, sizeof at, "number 1.5 at byte %zu", begin_is(&f, "1.5")); /* its first byte */
    expect_fail(&f.saved, "fraction", DT_ERR_PARSE, "metadata.json", at, "fraction or an exponent");
    snprintf(at, sizeof at, "number -1E3 at byte %zu", begin_is(&f, "-1E3"));
    expect_fail(&f.saved, "exponent", DT_ERR_PARSE, "metadata.json", at, "fraction or an exponent");
    begin_is(&f, "\"1.5e3\""); /* in a string: no number, a chunk without a begin */
    expect_fail(&f.saved, "string", DT_ERR_PARSE, "metadata.json", "byte range is outside", NULL);
    spit_edited(f.meta, f.text, HEAD, HEAD "\"note\":0.25,"); /* in a member nobody reads */
    expect_fail(&f.saved, "fraction anywhere", DT_ERR_PARSE, "metadata.json", "number 0.25", NULL);
    fixture_done(&f);
}

Test(checkpoint_json, wrong_types_fail_by_name) {
    fixture f;
    fixture_save(&f);
    spit_edited(f.meta, f.text, "\"version\":1", "\"version\":\"1\"");
    expect_fail(&f.saved, "string version", DT_ERR_PARSE, "metadata.json", "unsupported version",
                NULL);
    spit_edited(f.meta, f.text, "\"files\":[", "\"files\":{},\"was\":[");
    expect_fail(&f.saved, "files object", DT_ERR_PARSE, "metadata.json", "no file list", NULL);
    spit_edited(f.meta, f.text, "\"tensors\":[", "\"tensors\":7,\"was\":[");
    expect_fail(&f.saved, "tensors number", DT_ERR_PARSE, "metadata.json", "no tensor list", NULL);
    spit_edited(f.meta, f.text, "\"chunks\":[", "\"chunks\":\"[]\",\"was\":[");
    expect_fail(&f.saved, "chunks string", DT_ERR_PARSE, "metadata.json", "no chunk list", NULL);
    spit_edited(f.meta, f.text, "\"offset\":[", "\"offset\":[\"0\",");
    expect_fail(&f.saved, "offset string", DT_ERR_PARSE, "metadata.json", "offset or shape", NULL);
    /* the first chunk's checksum as a number of 16 digits instead of a string of them */
    const char *x = strstr(strstr(f.text, "\"tensors\":"), "\"xxh64\":\"");
    cr_assert(x);
    char find[40], repl[40];
    snprintf(find, sizeof find, "%.26s", x);
    snprintf(repl, sizeof repl, "\"xxh64\":1234567890123456");
    spit_edited(f.meta, f.text, find, repl);
    expect_fail(&f.saved, "numeric xxh64", DT_ERR_PARSE, "metadata.json", "no xxh64 checksum",
                NULL);
    const char *b = strstr(f.text, "\"block_xxh3\":[\"");
    cr_assert(b);
    snprintf(find, sizeof find, "%.32s", b);
    snprintf(repl, sizeof repl, "\"block_xxh3\":[null");
    spit_edited(f.meta, f.text, find, repl);
    expect_fail(&f.saved, "null block checksum", DT_ERR_PARSE, "metadata.json", "block checksum 0",
                "not 16 hex digits");
    char *arr = malloc(f.len + 3);
    snprintf(arr, f.len + 3, "[%s]", f.text);
    t_spit(f.meta, arr, strlen(arr));
    expect_fail(&f.saved, "array root", DT_ERR_PARSE, "metadata.json",
                "not a dtensor-checkpoint metadata file", NULL);
    free(arr);
    fixture_done(&f);
}

Test(checkpoint_json, lists_past_their_limits_fail_naming_the_limit) {
    fixture f;
    fixture_save(&f);
    /* 65536 chunks (CK_MAX_CHUNKS) are read, one more is refused unread */
    char *list = repeated("\"chunks\":[", "0,", 65536, "0],\"was\":[");
    spit_edited(f.meta, f.text, "\"chunks\":[", list);
    expect_fail(&f.saved, "65537 chunks", DT_ERR_PARSE, "metadata.json", "over 65536 chunks", NULL);
    free(list);
    list = repeated("\"chunks\":[", "0,", 65535, "0],\"was\":[");
    spit_edited(f.meta, f.text, "\"chunks\":[", list);
    expect_fail(&f.saved, "65536 chunks", DT_ERR_PARSE, "metadata.json", "names no file", NULL);
    free(list);
    /* 2^20 tensors (CK_MAX_TENSORS) likewise, read by one caller (the text is 2 MiB) */
    char err[300];
    ck_meta m;
    list = repeated("\"tensors\":[", "0,", 1 << 20, "0],\"was\":[");
    char *e = edited(f.text, "\"tensors\":[", list);
    cr_expect_eq(ck_meta_parse(e, strlen(e), &m, err, sizeof err), -1);
    cr_expect(strstr(err, "over 1048576 tensors"), "2^20+1 tensors: %s", err);
    free(list), free(e);
    list = repeated("\"tensors\":[", "0,", (1 << 20) - 1, "0],\"was\":[");
    e = edited(f.text, "\"tensors\":[", list);
    cr_expect_eq(ck_meta_parse(e, strlen(e), &m, err, sizeof err), -1);
    cr_expect(strstr(err, "a tensor has no valid name"), "2^20 tensors: %s", err);
    free(list), free(e);
    /* a metadata file over 1 GiB is refused before it is read (sparse: no bytes written) */
    cr_assert_eq(truncate(f.meta, ((off_t)1 << 30) + 1), 0);
    expect_fail(&f.saved, "1 GiB + 1", DT_ERR_IO, "metadata.json", "1073741825 bytes",
                "over the 1073741824 allowed");
    fixture_done(&f);
}

/* The reader itself: int64's ends and u64 checksums exactly, and text over 2^31 bytes refused
 * before it is read. */
Test(checkpoint_json, int64_ends_and_checksums_are_exact) {
    char err[300];
    const char *t = "{\"n\":[-9223372036854775808,9223372036854775807,0,-1],"
                    "\"h\":[\"ffffffffffffffff\",\"0000000000000000\",\"8000000000000001\","
                    "\"FFFFFFFFFFFFFFFF\",\"fffffffffffffff\",\"fffffffffffffffff\"]}";
    ck_json doc;
    cr_assert_eq(ck_json_parse(t, strlen(t), &doc, err, sizeof err), 0, "%s", err);
    const ck_jnode *root = &doc.nodes[0];
    int64_t v[4];
    cr_assert_eq(ck_json_ints(&doc, ck_json_get(&doc, root, "n"), v, 4, INT64_MIN, INT64_MAX), 4);
    cr_expect(v[0] == INT64_MIN && v[1] == INT64_MAX && v[2] == 0 && v[3] == -1);
    cr_expect_eq(ck_json_ints(&doc, ck_json_get(&doc, root, "n"), v, 3, INT64_MIN, INT64_MAX), -1);
    cr_expect_eq(ck_json_ints(&doc, ck_json_get(&doc, root, "n"), v, 4, -1, INT64_MAX), -1);
    const ck_jnode *h = ck_json_get(&doc, root, "h");
    cr_assert(h && h->type == CK_JARR && h->count == 6);
    const ck_jnode *hv[6];
    for (int i = 0, k = h->first; i < 6; i++, k = doc.nodes[k].next)
        hv[i] = &doc.nodes[k];
    uint64_t u = 0;
    cr_expect(ck_json_hex64(hv[0], &u) == 0 && u == UINT64_MAX);
    cr_expect(ck_json_hex64(hv[1], &u) == 0 && u == 0);
    cr_expect(ck_json_hex64(hv[2], &u) == 0 && u == 0x8000000000000001ull);
    for (int i = 3; i < 6; i++) /* upper case (the writer's is lower), 15 and 17 digits */
        cr_expect_eq(ck_json_hex64(hv[i], &u), -1, "checksum %d", i);
    ck_json_free(&doc);
    /* a length past the limit is refused from the length alone: t is not read that far */
    cr_expect_eq(ck_json_parse(t, ((size_t)1 << 31) + 1, &doc, err, sizeof err), -1);
    cr_expect(strstr(err, "2147483649 bytes is too long"), "%s", err);
    /* brackets, a fraction and an exponent inside a string (after an escaped quote, before an
     * escaped backslash) are text, not nesting or numbers */
    const char *str = "{\"s\":\"\\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ 1.5e3 \\\\\","
                      "\"n\":[[1]]}";
    cr_assert_eq(ck_json_parse(str, strlen(str), &doc, err, sizeof err), 0, "%s", err);
    const ck_jnode *sv = ck_json_get(&doc, &doc.nodes[0], "s");
    cr_expect(sv && sv->type == CK_JSTR && sv->str[0] == '"' && strlen(sv->str) == 49 &&
                  sv->str[48] == '\\',
              "%s", sv ? sv->str : "(none)");
    ck_json_free(&doc);
    const char *nul = "{\"a\":\"x\\u0000y\"}";
    cr_expect_eq(ck_json_parse(nul, strlen(nul), &doc, err, sizeof err), -1);
    cr_expect(strstr(err, "\\u0000") && strstr(err, "at byte"), "%s", err);
}

/* Duplicate keys in objects of every size: up to 16 keys each is compared as it comes (the
 * byte after the second one named), past 16 they are sorted once the object closes (the
 * object's first byte named); distinct keys pass both ways. */
Test(checkpoint_json, duplicate_keys_in_small_and_large_objects) {
    char err[300], text[600];
    ck_json doc;
    for (int n = 15; n <= 18; n++) { /* n distinct keys "k0".."k<n-1>", then "k3" again */
        int len = snprintf(text, sizeof text, "{");
        for (int i = 0; i < n; i++)
            len += snprintf(text + len, sizeof text - (size_t)len, "\"k%d\":%d,", i, i);
        text[len - 1] = '}';
        cr_assert_eq(ck_json_parse(text, (size_t)len, &doc, err, sizeof err), 0, "%d keys: %s", n,
                     err);
        cr_expect_eq(doc.nodes[0].count, n);
        ck_json_free(&doc);
        snprintf(text + len - 1, sizeof text - (size_t)len + 1, ",\"k3\":0}");
        size_t at = (size_t)len + strlen(",\"k3\"") - 1; /* the byte after the second "k3" */
        char want[80];
        if (n < 16) /* the duplicate is the 16th key or earlier */
            snprintf(want, sizeof want, "duplicate object key \"k3\" at byte %zu", at);
        else
            snprintf(want, sizeof want, "duplicate object key \"k3\" in the object at byte 0");
        cr_expect_eq(ck_json_parse(text, strlen(text), &doc, err, sizeof err), -1, "%d keys", n);
        cr_expect(strstr(err, want), "%d keys: \"%s\" does not say \"%s\"", n, err, want);
    }
    /* one key in several objects, and keys one of which begins the other */
    const char *nested = "{\"a\":{\"k\":1},\"b\":{\"k\":2},\"kk\":{\"k\":3,\"k1\":4}}";
    cr_expect_eq(ck_json_parse(nested, strlen(nested), &doc, err, sizeof err), 0, "%s", err);
    ck_json_free(&doc);
}

/* Strings in UTF-8 (RFC 3629): 2-, 3- and 4-byte forms and their ends pass as they are; a stray
 * continuation byte, overlong forms, a surrogate, past U+10FFFF and a cut sequence do not,
 * named at their first byte (6, after {"a":"). */
Test(checkpoint_json, strings_are_valid_utf8) {
    char err[300];
    ck_json doc;
    const char *ok[] = {"\xc3\xa9",     "\xe2\x82\xac",     "\xf0\x9d\x84\x9e", "\xc2\x80",
                        "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf"};
    const char *bad[] = {"\x80",         "\xc0\x80",         "\xc1\xbf",         "\xe0\x9f\xbf",
                         "\xed\xa0\x80", "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80",
                         "\xff",         "\xe2\x82",         "\xc3\x22"};
    char u[40];
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        int n = snprintf(u, sizeof u, "{\"a\":\"%s\"}", ok[i]);
        cr_assert_eq(ck_json_parse(u, (size_t)n, &doc, err, sizeof err), 0, "ok %zu: %s", i, err);
        const ck_jnode *a = ck_json_get(&doc, &doc.nodes[0], "a");
        cr_expect(a && strcmp(a->str, ok[i]) == 0, "ok %zu: the bytes differ", i);
        ck_json_free(&doc);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int n = snprintf(u, sizeof u, "{\"a\":\"%s\"}", bad[i]);
        cr_expect_eq(ck_json_parse(u, (size_t)n, &doc, err, sizeof err), -1, "bad %zu", i);
        cr_expect(strstr(err, "invalid UTF-8 in string at byte 6"), "bad %zu: %s", i, err);
    }
}
