/* The JSON reader of json.h: one pass, nodes and decoded strings in two arrays sized from the
 * text's length (every node takes at least one byte of text), so nothing grows mid-parse; and
 * the integer and checksum helpers the two formats' readers share. */
#include "checkpoint/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An object's keys are compared with each other as they come up to this many (the formats'
 * objects are this small, except a safetensors header's); the keys of a larger object are
 * sorted once it closes. */
#define CK_JSON_FEW_KEYS 16

typedef struct parser {
    const char *s;
    size_t len, i;
    ck_json *doc;
    size_t spos; /* next free byte of doc->strings */
    char *err;
    size_t errcap;
} parser;

static int fail(parser *p, const char *what) {
    snprintf(p->err, p->errcap, "%s at byte %zu", what, p->i);
    return -1;
}

static void skip_ws(parser *p) {
    while (p->i < p->len &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(parser *p, unsigned *out) {
    if (p->len - p->i < 4) return fail(p, "short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return fail(p, "bad \\u escape");
    }
    *out = v;
    return 0;
}

/* The length of the UTF-8 sequence at s (its lead byte 0x80 or above, avail bytes left), or 0
 * when it is not one: RFC 3629's table, so no overlong form, surrogate or code point past
 * U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t avail) {
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    size_t n;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3, lo = c == 0xe0 ? 0xa0 : lo, hi = c == 0xed ? 0x9f : hi;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, lo = c == 0xf0 ? 0x90 : lo, hi = c == 0xf4 ? 0x8f : hi;
    } else {
        return 0;
    }
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (s[k] < 0x80 || s[k] > 0xbf) return 0;
    return n;
}

/* A string at p->i (the opening quote); the decoded bytes go to doc->strings. An escaped
 * code point takes at most 4 UTF-8 bytes for its 6 (or 12) bytes of text, so decoded text
 * never outgrows the text. */
static int parse_string(parser *p, const char **out) {
    p->i++;
    char *dst = p->doc->strings + p->spos;
    size_t n = 0;
    for (;;) {
        if (p->i >= p->len) return fail(p, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"') break;
        if (c < 0x20) return fail(p, "control character in string");
        if (c >= 0x80) { /* a multi-byte character, checked whole, then copied */
            p->i--;
            size_t n8 = utf8_len((const unsigned char *)p->s + p->i, p->len - p->i);
            if (!n8) return fail(p, "invalid UTF-8 in string");
            memcpy(dst + n, p->s + p->i, n8);
            n += n8, p->i += n8;
            continue;
        }
        if (c != '\\') {
            dst[n++] = (char)c;
            continue;
        }
        if (p->i >= p->len) return fail(p, "unterminated escape");
        char e = p->s[p->i++];
        unsigned cp;
        switch (e) {
        case '"':
            dst[n++] = '"';
            continue;
        case '\\':
            dst[n++] = '\\';
            continue;
        case '/':
            dst[n++] = '/';
            continue;
        case 'b':
            dst[n++] = '\b';
            continue;
        case 'f':
            dst[n++] = '\f';
            continue;
        case 'n':
            dst[n++] = '\n';
            continue;
        case 'r':
            dst[n++] = '\r';
            continue;
        case 't':
            dst[n++] = '\t';
            continue;
        case 'u':
            break;
        default:
            return fail(p, "bad escape");
        }
        if (hex4(p, &cp)) return -1;
        if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
            unsigned lo;
            if (p->len - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                return fail(p, "lone surrogate");
            p->i += 2;
            if (hex4(p, &lo)) return -1;
            if (lo < 0xdc00 || lo >= 0xe000) return fail(p, "bad surrogate pair");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
            return fail(p, "lone surrogate");
        }
        if (cp == 0) return fail(p, "\\u0000 in string");
        if (cp < 0x80) {
            dst[n++] = (char)cp;
        } else if (cp < 0x800) {
            dst[n++] = (char)(0xc0 | (cp >> 6));
            dst[n++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            dst[n++] = (char)(0xe0 | (cp >> 12));
            dst[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            dst[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
            dst[n++] = (char)(0xf0 | (cp >> 18));
            dst[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            dst[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            dst[n++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    dst[n] = '\0';
    p->spos += n + 1;
    *out = dst;
    return 0;
}

static int number_char(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* The number that starts at byte at, as far as its characters go, named in the message. */
static int fail_number(parser *p, size_t at, const char *what) {
    size_t end = at;
    while (end < p->len && number_char(p->s[end]))
        end++;
    snprintf(p->err, p->errcap, "number %.*s at byte %zu %s", (int)(end - at < 40 ? end - at : 40),
             p->s + at, at, what);
    return -1;
}

static int parse_int(parser *p, int64_t *out) {
    size_t at = p->i;
    int neg = 0;
    if (p->s[p->i] == '-') neg = 1, p->i++;
    if (p->i >= p->len || p->s[p->i] < '0' || p->s[p->i] > '9') return fail(p, "bad number");
    if (p->s[p->i] == '0' && p->i + 1 < p->len && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
        return fail(p, "leading zero");
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    while (p->i < p->len && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        unsigned d = (unsigned)(p->s[p->i++] - '0');
        if (v > (lim - d) / 10) return fail_number(p, at, "is outside int64");
        v = v * 10 + d;
    }
    if (p->i < p->len && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
        return fail_number(p, at, "has a fraction or an exponent (integers only)");
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int parse_value(parser *p, int depth, int *idx_out);

static int new_node(parser *p, ck_jtype type, int *idx_out) {
    ck_json *d = p->doc;
    int k = d->nnodes++;
    d->nodes[k] = (ck_jnode){.type = type, .first = -1, .next = -1};
    *idx_out = k;
    return 0;
}

/* Whether key is among the members of object self so far (a key given twice is ambiguous:
 * readers differ on which one wins). */
static int seen_key(const ck_json *d, int self, const char *key) {
    for (int k = d->nodes[self].first; k >= 0; k = d->nodes[k].next)
        if (d->nodes[k].key[0] == key[0] && strcmp(d->nodes[k].key, key) == 0) return 1;
    return 0;
}

static int key_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The keys of object self, which starts at byte at, all different: sorted, then neighbours. */
static int unique_keys(parser *p, int self, size_t at) {
    const ck_json *d = p->doc;
    int n = d->nodes[self].count, i = 0;
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return fail(p, "out of memory for an object's keys");
    for (int k = d->nodes[self].first; k >= 0; k = d->nodes[k].next)
        keys[i++] = d->nodes[k].key;
    qsort(keys, (size_t)n, sizeof *keys, key_cmp);
    for (i = 1; i < n && strcmp(keys[i - 1], keys[i]) != 0; i++)
        ;
    if (i < n)
        snprintf(p->err, p->errcap, "duplicate object key \"%.64s\" in the object at byte %zu",
                 keys[i], at);
    free(keys);
    return i < n ? -1 : 0;
}

static int parse_container(parser *p, int depth, int is_obj, int *idx_out) {
    if (depth >= CK_JSON_MAX_DEPTH) {
        snprintf(p->err, p->errcap, "nesting deeper than %d arrays and objects at byte %zu",
                 CK_JSON_MAX_DEPTH, p->i);
        return -1;
    }
    size_t at = p->i;
    int self;
    new_node(p, is_obj ? CK_JOBJ : CK_JARR, &self);
    p->i++;
    skip_ws(p);
    char close = is_obj ? '}' : ']';
    if (p->i < p->len && p->s[p->i] == close) {
        p->i++;
        *idx_out = self;
        return 0;
    }
    int prev = -1;
    for (;;) {
        const char *key = NULL;
        skip_ws(p);
        if (is_obj) {
            if (p->i >= p->len || p->s[p->i] != '"') return fail(p, "expected a key");
            if (parse_string(p, &key)) return -1;
            if (p->doc->nodes[self].count < CK_JSON_FEW_KEYS && seen_key(p->doc, self, key)) {
                snprintf(p->err, p->errcap, "duplicate object key \"%.64s\" at byte %zu", key,
                         p->i);
                return -1;
            }
            skip_ws(p);
            if (p->i >= p->len || p->s[p->i] != ':') return fail(p, "expected ':'");
            p->i++;
        }
        int child;
        if (parse_value(p, depth + 1, &child)) return -1;
        p->doc->nodes[child].key = key;
        if (prev < 0)
            p->doc->nodes[self].first = child;
        else
            p->doc->nodes[prev].next = child;
        prev = child;
        p->doc->nodes[self].count++;
        skip_ws(p);
        if (p->i >= p->len) return fail(p, "unterminated container");
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->s[p->i] != close)
            return fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        p->i++;
        *idx_out = self;
        return is_obj && p->doc->nodes[self].count > CK_JSON_FEW_KEYS ? unique_keys(p, self, at)
                                                                      : 0;
    }
}

static int word(parser *p, const char *w) {
    size_t n = strlen(w);
    if (p->len - p->i < n || memcmp(p->s + p->i, w, n) != 0) return 0;
    p->i += n;
    return 1;
}

static int parse_value(parser *p, int depth, int *idx_out) {
    skip_ws(p);
    if (p->i >= p->len) return fail(p, "expected a value");
    char c = p->s[p->i];
    if (c == '{' || c == '[') return parse_container(p, depth, c == '{', idx_out);
    int k;
    if (c == '"') {
        const char *s;
        if (parse_string(p, &s)) return -1;
        new_node(p, CK_JSTR, &k);
        p->doc->nodes[k].str = s;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        int64_t v = 0;
        if (parse_int(p, &v)) return -1;
        new_node(p, CK_JINT, &k);
        p->doc->nodes[k].num = v;
    } else if (word(p, "true") || word(p, "false")) {
        new_node(p, CK_JBOOL, &k);
        p->doc->nodes[k].num = p->s[p->i - 1] == 'e' && p->s[p->i - 2] == 'u';
    } else if (word(p, "null")) {
        new_node(p, CK_JNULL, &k);
    } else {
        return fail(p, "unexpected character");
    }
    *idx_out = k;
    return 0;
}

int ck_json_parse(const char *text, size_t len, ck_json *out, char *err, size_t errcap) {
    ck_json d = {0};
    if (len > CK_JSON_MAX_BYTES) {
        snprintf(err, errcap, "text of %zu bytes is too long (at most %zu)", len,
                 CK_JSON_MAX_BYTES);
        return -1;
    }
    d.nodes = malloc((len + 1) * sizeof *d.nodes);
    d.strings = malloc(len + 1);
    if (!d.nodes || !d.strings) {
        ck_json_free(&d);
        snprintf(err, errcap, "out of memory for %zu bytes of text", len);
        return -1;
    }
    parser p = {.s = text, .len = len, .doc = &d, .err = err, .errcap = errcap};
    int root;
    if (parse_value(&p, 0, &root) == 0) {
        skip_ws(&p);
        if (p.i == p.len) {
            *out = d;
            return 0;
        }
        fail(&p, "trailing characters");
    }
    ck_json_free(&d);
    return -1;
}

void ck_json_free(ck_json *doc) {
    free(doc->nodes), free(doc->strings);
    doc->nodes = NULL, doc->strings = NULL, doc->nnodes = 0;
}

const ck_jnode *ck_json_get(const ck_json *doc, const ck_jnode *obj, const char *key) {
    if (!obj || obj->type != CK_JOBJ) return NULL;
    for (int k = obj->first; k >= 0; k = doc->nodes[k].next)
        if (strcmp(doc->nodes[k].key, key) == 0) return &doc->nodes[k];
    return NULL;
}

int ck_json_ints(const ck_json *doc, const ck_jnode *arr, int64_t *out, int cap, int64_t lo,
                 int64_t hi) {
    if (!arr || arr->type != CK_JARR || arr->count > cap) return -1;
    int n = 0;
    for (int k = arr->first; k >= 0; k = doc->nodes[k].next) {
        const ck_jnode *v = &doc->nodes[k];
        if (v->type != CK_JINT || v->num < lo || v->num > hi) return -1;
        out[n++] = v->num;
    }
    return n;
}

int ck_json_hex64(const ck_jnode *v, uint64_t *out) {
    if (!v || v->type != CK_JSTR || strlen(v->str) != 16) return -1;
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = v->str[i];
        h <<= 4;
        if (c >= '0' && c <= '9')
            h |= (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            h |= (uint64_t)(c - 'a' + 10);
        else
            return -1;
    }
    *out = h;
    return 0;
}
