/* The train-state record as text and back. One "key values" line per fact; names are
 * checkpoint tensor names (printable, no spaces), so a space separates every field. Nothing
 * here reads files or talks to other ranks. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "train/record.h"

/* ---- formatting ---------------------------------------------------------------------------- */

typedef struct tr_buf {
    char *p;
    size_t len, cap;
    int failed;
} tr_buf;

static void put(tr_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(tr_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int need = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (need < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && b->len + (size_t)need < b->cap) {
            b->len += (size_t)need;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap : 1024;
        while (cap <= b->len + (size_t)need)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
}

char *tr_record_format(const tr_record *r, size_t *len_out) {
    tr_buf b = {0};
    put(&b, "%s\nstep %" PRId64 "\ndata_pos %" PRId64 "\n", TR_MAGIC, r->step, r->data_pos);
    if (r->has_gen) put(&b, "generator %" PRIu64 " %" PRIu64 "\n", r->gen.seed, r->gen.offset);
    if (r->has_schedule) {
        const dt_lr_schedule *s = &r->schedule;
        put(&b, "schedule %.17g %.17g %" PRId64 " %" PRId64 " %" PRId64 "\n", s->lr, s->lr_min,
            s->warmup_steps, s->stable_steps, s->decay_steps);
    }
    if (r->has_optim) put(&b, "optim %s %.17g\n", r->kind, r->lr);
    for (int i = 0; i < r->ntensors; i++)
        put(&b, "tensor %s\n", r->tensors[i]);
    for (int i = 0; i < r->nstates; i++)
        put(&b, "state %s\n", r->states[i]);
    for (int i = 0; i < r->nsteps; i++)
        put(&b, "steps %" PRId64 " %s\n", r->steps[i], r->step_names[i]);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len_out = b.len;
    return b.p;
}

static int is_list_line(const char *line) {
    return !strncmp(line, "tensor ", 7) || !strncmp(line, "state ", 6) ||
           !strncmp(line, "steps ", 6);
}

static int line_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *tr_record_merge(char *const *texts, int n, size_t *len_out) {
    size_t nlines = (size_t)n; /* a last line without its newline, each */
    for (int r = 0; r < n; r++)
        for (const char *c = texts[r]; *c; c++)
            nlines += *c == '\n';
    char **lines = malloc(nlines * sizeof *lines);
    if (!lines) return NULL;
    tr_buf b = {0};
    size_t k = 0;
    for (int r = 0; r < n; r++) /* split in place; texts[0]'s other lines go out first */
        for (char *line = texts[r], *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = '\0';
            if (is_list_line(line))
                lines[k++] = line;
            else if (r == 0)
                put(&b, "%s\n", line);
        }
    if (k) qsort(lines, k, sizeof *lines, line_cmp);
    for (size_t i = 0; i < k; i++)
        if (i == 0 || strcmp(lines[i], lines[i - 1]) != 0) put(&b, "%s\n", lines[i]);
    free(lines);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len_out = b.len;
    return b.p;
}

/* ---- parsing ------------------------------------------------------------------------------- */

void tr_record_free(tr_record *r) {
    free(r->tensors), free(r->states), free(r->step_names), free(r->steps), free(r->text);
    memset(r, 0, sizeof *r);
}

int tr_find(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

/* The next space-separated field of *line (NUL-terminated in place), or NULL. */
static char *field(char **line) {
    char *s = *line;
    while (*s == ' ')
        s++;
    if (!*s) return NULL;
    char *e = s;
    while (*e && *e != ' ')
        e++;
    if (*e) *e++ = '\0';
    *line = e;
    return s;
}

static int to_i64(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static int to_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static int to_f64(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* Appends name (and, for steps, its count) to one of the record's lists. */
static int push(const char ***list, int *n, const char *name) {
    const char **g = realloc(*list, (size_t)(*n + 1) * sizeof **list);
    if (!g) return -1;
    *list = g;
    g[(*n)++] = name;
    return 0;
}

/* One line: 0, or -1 with why (a static string). seen: the keys met so far, as bits. */
static int parse_line(char *line, tr_record *r, unsigned *seen, const char **why) {
    static const char *const once[] = {"step", "data_pos", "generator", "schedule", "optim"};
    char *key = field(&line);
    if (!key) return *why = "an empty line", -1;
    for (unsigned k = 0; k < sizeof once / sizeof once[0]; k++)
        if (strcmp(key, once[k]) == 0) {
            if (*seen & (1u << k)) return *why = "a key given twice", -1;
            *seen |= 1u << k;
        }
    char *a = field(&line), *b = a ? field(&line) : NULL;
    int bad = 0;
    if (strcmp(key, "step") == 0) {
        bad = to_i64(a, &r->step) || r->step < 0 || b;
    } else if (strcmp(key, "data_pos") == 0) {
        bad = to_i64(a, &r->data_pos) || b;
    } else if (strcmp(key, "generator") == 0) {
        bad = to_u64(a, &r->gen.seed) || to_u64(b, &r->gen.offset) || field(&line);
        r->has_gen = 1;
    } else if (strcmp(key, "schedule") == 0) {
        dt_lr_schedule *s = &r->schedule;
        char *w = field(&line), *st = field(&line), *d = field(&line);
        bad = to_f64(a, &s->lr) || to_f64(b, &s->lr_min) || to_i64(w, &s->warmup_steps) ||
              to_i64(st, &s->stable_steps) || to_i64(d, &s->decay_steps) || field(&line);
        double lr0;
        if (!bad && dt_lr_warmup_cosine(s, 0, &lr0) != DT_OK)
            return *why = "a schedule the library rejects", -1;
        r->has_schedule = 1;
    } else if (strcmp(key, "optim") == 0) {
        bad = !a || strlen(a) >= sizeof r->kind || to_f64(b, &r->lr) || r->lr < 0 || field(&line);
        if (!bad) snprintf(r->kind, sizeof r->kind, "%s", a);
        r->has_optim = 1;
    } else if (strcmp(key, "tensor") == 0 || strcmp(key, "state") == 0) {
        int t = key[0] == 't';
        bad = !a || b || push(t ? &r->tensors : &r->states, t ? &r->ntensors : &r->nstates, a);
    } else if (strcmp(key, "steps") == 0) {
        int64_t v;
        bad = to_i64(a, &v) || v < 0 || !b || field(&line);
        if (!bad) {
            int64_t *g = realloc(r->steps, (size_t)(r->nsteps + 1) * sizeof *g);
            if (!g) return *why = "out of memory", -1;
            r->steps = g;
            g[r->nsteps] = v;
            int n = r->nsteps;
            if (push(&r->step_names, &n, b)) return *why = "out of memory", -1;
            r->nsteps = n;
        }
    } else {
        return *why = "an unknown key", -1;
    }
    if (bad) return *why = "a malformed value", -1;
    return 0;
}

dt_status tr_record_parse(const char *text, size_t len, tr_record *out, const char *where) {
    memset(out, 0, sizeof *out);
    out->text = malloc(len + 1);
    if (!out->text) return dt_error(DT_ERR_NOMEM, "%s: out of memory for the record", where);
    memcpy(out->text, text, len);
    out->text[len] = '\0';
    if (strlen(out->text) != len)
        return dt_error(DT_ERR_PARSE, "%s: the train-state record holds a NUL byte", where);
    char *line = strchr(out->text, '\n'), *next;
    if (line) *line++ = '\0';
    if (strcmp(out->text, TR_MAGIC) != 0) {
        char shown[64];
        snprintf(shown, sizeof shown, "%s", out->text);
        return dt_error(DT_ERR_PARSE, "%s: not a train-state record (line 1 is \"%s\", not \"%s\")",
                        where, shown, TR_MAGIC);
    }
    unsigned seen = 0;
    for (int lineno = 2; line; lineno++, line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        else if (!*line)
            break; /* after the last newline */
        char shown[64];
        snprintf(shown, sizeof shown, "%s", line);
        const char *why;
        if (parse_line(line, out, &seen, &why))
            return dt_error(DT_ERR_PARSE, "%s: line %d (\"%s\") of the train-state record: %s",
                            where, lineno, shown, why);
    }
    if (!(seen & 1u))
        return dt_error(DT_ERR_PARSE, "%s: the train-state record has no step line", where);
    return DT_OK;
}
