/* Per-rank trace buffers and the Chrome trace-event writer and merger (no context: the
 * caller says whose events they are). */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/trace.h"
#include "trace/trace_impl.h"

#define MAX_EVENTS (1u << 20)

typedef struct event {
    double ts, dur;
    int lane;
    char name[32];
    char detail[192];
} event;

struct dt_trace {
    pthread_mutex_t mu; /* the rank's thread and its communication thread both record */
    event *ev;
    size_t n, cap, dropped;
    int on;
};

static const char *const lane_names[DT_LANE_COUNT] = {"ops", "compute", "comm", "pipeline"};

dt_status dt_trace_create(dt_trace **out) {
    dt_trace *t = calloc(1, sizeof *t);
    if (!t) return dt_error(DT_ERR_NOMEM, "dt_trace_start: out of memory");
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return DT_OK;
}

void dt_trace_on(dt_trace *t, int on) {
    pthread_mutex_lock(&t->mu);
    if (on) t->n = t->dropped = 0;
    t->on = on;
    pthread_mutex_unlock(&t->mu);
}

void dt_trace_destroy(dt_trace *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t->ev);
    free(t);
}

void dt_trace_add(dt_trace *t, dt_lane lane, const char *name, double t0_us, const char *fmt, ...) {
    if (!t || !t->on) return;
    double now = dt_now_us();
    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        event *ev = cap <= MAX_EVENTS ? realloc(t->ev, cap * sizeof *ev) : NULL;
        if (!ev) {
            t->dropped++;
            pthread_mutex_unlock(&t->mu);
            return;
        }
        t->ev = ev;
        t->cap = cap;
    }
    event *e = &t->ev[t->n++];
    e->ts = t0_us;
    e->dur = now - t0_us;
    e->lane = lane;
    snprintf(e->name, sizeof e->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&t->mu);
}

/* JSON string contents: our texts hold no control characters, only quotes and backslashes
 * need escaping. */
static void put_json(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

dt_status dt_trace_save(const dt_trace *t, int r, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return dt_error(DT_ERR_SYSTEM, "dt_trace_write: cannot open \"%s\" for writing", path);
    fprintf(f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", r, r);
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", r, r);
    dt_trace *tm = (dt_trace *)t; /* the lock only */
    if (t) pthread_mutex_lock(&tm->mu);
    size_t n = t ? t->n : 0;
    /* The first three rows always; the pipeline's only on a rank that ran one. */
    int rows = DT_LANE_PIPELINE;
    for (size_t i = 0; i < n; i++)
        if (t->ev[i].lane == DT_LANE_PIPELINE) rows = DT_LANE_COUNT;
    for (int l = 0; l < rows; l++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                r, l, lane_names[l]);
    for (size_t i = 0; i < n; i++) {
        const event *e = &t->ev[i];
        fprintf(f, ",\n{\"name\":\"");
        put_json(f, e->name);
        fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"detail\":\"", lane_names[e->lane], e->ts, e->dur, r, e->lane);
        put_json(f, e->detail);
        fprintf(f, "\"}}");
    }
    if (t) pthread_mutex_unlock(&tm->mu);
    fprintf(f, "\n]\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return dt_error(DT_ERR_SYSTEM, "dt_trace_write: writing \"%s\" failed", path);
    return DT_OK;
}

dt_status dt_trace_merge(const char *const *paths, int n, const char *out_path) {
    DT_ARG(paths != NULL && n >= 1, "dt_trace_merge: paths is NULL or n = %d", n);
    DT_ARG_NOT_NULL(out_path);
    FILE *out = fopen(out_path, "w");
    if (!out) return dt_error(DT_ERR_SYSTEM, "dt_trace_merge: cannot open \"%s\"", out_path);
    dt_status st = DT_OK;
    int first = 1;
    char line[4096];
    fputs("[\n", out);
    for (int i = 0; i < n && st == DT_OK; i++) {
        FILE *in = paths[i] ? fopen(paths[i], "r") : NULL;
        if (!in) {
            st = dt_error(DT_ERR_ARG, "dt_trace_merge: cannot read \"%s\"", paths[i] ? paths[i] : "(null)");
            break;
        }
        /* One event per line, as dt_trace_write writes them. */
        while (fgets(line, sizeof line, in)) {
            char *p = line;
            if (*p != '{') continue;
            size_t len = strcspn(p, "\n");
            while (len && (p[len - 1] == ',' || p[len - 1] == ' ')) len--;
            p[len] = '\0';
            fprintf(out, "%s%s", first ? "" : ",\n", p);
            first = 0;
        }
        fclose(in);
    }
    fputs("\n]\n", out);
    if (fclose(out) != 0 && st == DT_OK)
        st = dt_error(DT_ERR_SYSTEM, "dt_trace_merge: writing \"%s\" failed", out_path);
    return st;
}
