/* Per-rank trace buffers and the Chrome trace-event writer and merger (no context: the
 * caller says whose events they are). */
#include <pthread.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fiber.h"
#include "dtensor/trace.h"
#include "trace/trace_impl.h"

#define MAX_EVENTS (1u << 20)

typedef struct event {
    double ts, dur;
    int64_t id, step, seq;
    int lane, ndeps, group_size, peer, coll; /* coll: a collective's args are set */
    size_t bytes_in, bytes_out;
    uint64_t comm;
    int64_t deps[DT_TRACE_MAX_DEPS];
    char name[32], op[32], module[64], kind[16], group[32], from[40], to[40];
    char detail[192];
} event;

struct dt_trace {
    pthread_mutex_t mu; /* the rank's thread and its communication thread both record */
    event *ev;
    size_t n, cap, dropped;
    int on;
    int64_t base;    /* the id of ev[0]: ids are base + index */
    int64_t next_id; /* never reset, so that ids kept from an earlier recording stay stale */
    int64_t step;    /* the open step span's, -1 when none */
    double step_t0;
    int has_run;
    double gflops;
    char run_name[64], layout[128];
};

_Thread_local int64_t dt_trace_last_coll_tls;
_Thread_local dt_trace_coll_site dt_trace_coll_tls;
DT_FIBER_LOCAL(dt_trace_last_coll_tls)
DT_FIBER_LOCAL(dt_trace_coll_tls)

static const char *const lane_names[DT_LANE_COUNT] = {"ops",      "compute",     "comm",
                                                      "pipeline", "comm thread", "steps"};

dt_status dt_trace_create(dt_trace **out) {
    dt_trace *t = calloc(1, sizeof *t);
    if (!t) return dt_error(DT_ERR_NOMEM, "dt_trace_start: out of memory");
    pthread_mutex_init(&t->mu, NULL);
    t->next_id = 1;
    t->step = -1;
    *out = t;
    return DT_OK;
}

static void close_step(dt_trace *t);

void dt_trace_on(dt_trace *t, int on) {
    if (!on) close_step(t);
    pthread_mutex_lock(&t->mu);
    if (on) t->n = t->dropped = 0, t->base = t->next_id, t->step = -1;
    t->on = on;
    pthread_mutex_unlock(&t->mu);
}

void dt_trace_destroy(dt_trace *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t->ev);
    free(t);
}

static void copy(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

static int64_t add(dt_trace *t, dt_lane lane, const char *name, double t0_us,
                   const dt_trace_args *a, const char *fmt, va_list ap) {
    double now = dt_now_us();
    pthread_mutex_lock(&t->mu);
    if (!t->on) { /* stopped while this event ran */
        pthread_mutex_unlock(&t->mu);
        return 0;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        event *ev = cap <= MAX_EVENTS ? realloc(t->ev, cap * sizeof *ev) : NULL;
        if (!ev) {
            t->dropped++;
            pthread_mutex_unlock(&t->mu);
            return 0;
        }
        t->ev = ev;
        t->cap = cap;
    }
    event *e = &t->ev[t->n++];
    memset(e, 0, offsetof(event, detail));
    e->id = t->next_id++;
    e->ts = t0_us;
    e->dur = now - t0_us;
    e->lane = lane;
    /* A step stamps the events that began inside its span; one that began before it straddles
     * two steps and carries none. */
    e->step = t->step >= 0 && t0_us >= t->step_t0 ? t->step : -1;
    e->peer = -1;
    copy(e->name, sizeof e->name, name);
    if (a) {
        for (int i = 0; i < a->ndeps; i++) {
            int64_t d = a->deps[i];
            int seen = d < t->base || d >= e->id; /* only earlier events of this recording */
            for (int j = 0; j < e->ndeps && !seen; j++) seen = e->deps[j] == d;
            if (!seen && e->ndeps < DT_TRACE_MAX_DEPS) e->deps[e->ndeps++] = d;
        }
        copy(e->op, sizeof e->op, a->op);
        copy(e->module, sizeof e->module, a->module);
        if (a->kind) {
            e->coll = 1;
            copy(e->kind, sizeof e->kind, a->kind);
            copy(e->group, sizeof e->group, a->group);
            copy(e->from, sizeof e->from, a->from);
            copy(e->to, sizeof e->to, a->to);
            e->group_size = a->group_size, e->peer = a->peer;
            e->bytes_in = a->bytes_in, e->bytes_out = a->bytes_out;
            e->seq = a->seq, e->comm = a->comm;
        }
    }
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    int64_t id = e->id;
    pthread_mutex_unlock(&t->mu);
    if (a && a->kind) dt_trace_last_coll_tls = id;
    return id;
}

void dt_trace_add(dt_trace *t, dt_lane lane, const char *name, double t0_us, const char *fmt, ...) {
    if (!t || !t->on) return;
    va_list ap;
    va_start(ap, fmt);
    add(t, lane, name, t0_us, NULL, fmt, ap);
    va_end(ap);
}

int64_t dt_trace_add_args(dt_trace *t, dt_lane lane, const char *name, double t0_us,
                          const dt_trace_args *a, const char *fmt, ...) {
    if (!t || !t->on) return 0;
    va_list ap;
    va_start(ap, fmt);
    int64_t id = add(t, lane, name, t0_us, a, fmt, ap);
    va_end(ap);
    return id;
}

int dt_trace_is_on(const dt_trace *t) {
    return t && t->on;
}

int dt_trace_lane_of(dt_trace *t, int64_t id) {
    if (!t) return -1;
    pthread_mutex_lock(&t->mu);
    int lane = id >= t->base && id - t->base < (int64_t)t->n ? t->ev[id - t->base].lane : -1;
    pthread_mutex_unlock(&t->mu);
    return lane;
}

int64_t dt_trace_last_id(dt_trace *t) {
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    int64_t id = t->n ? t->base + (int64_t)t->n - 1 : 0;
    pthread_mutex_unlock(&t->mu);
    return id;
}

/* The open span as an event of its own, stamped with its step. */
static void close_step(dt_trace *t) {
    pthread_mutex_lock(&t->mu);
    int64_t step = t->on ? t->step : -1;
    double t0 = t->step_t0;
    t->step = -1;
    pthread_mutex_unlock(&t->mu);
    if (step < 0) return;
    dt_trace_add(t, DT_LANE_STEP, "step", t0, "step %lld", (long long)step);
    pthread_mutex_lock(&t->mu);
    if (t->n && t->ev[t->n - 1].lane == DT_LANE_STEP) t->ev[t->n - 1].step = step;
    pthread_mutex_unlock(&t->mu);
}

void dt_trace_set_step(dt_trace *t, int64_t step) {
    if (!t) return;
    close_step(t);
    pthread_mutex_lock(&t->mu);
    if (t->on && step >= 0) t->step = step, t->step_t0 = dt_now_us();
    pthread_mutex_unlock(&t->mu);
}

void dt_trace_put_run(dt_trace *t, const char *name, double gflops, const char *layout) {
    pthread_mutex_lock(&t->mu);
    t->has_run = 1;
    t->gflops = gflops;
    copy(t->run_name, sizeof t->run_name, name);
    copy(t->layout, sizeof t->layout, layout);
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

/* ,"key":"value" */
static void put_str(FILE *f, const char *key, const char *v) {
    fprintf(f, ",\"%s\":\"", key);
    put_json(f, v);
    fputc('"', f);
}

static void put_args(FILE *f, const event *e) {
    fprintf(f, "\"args\":{\"detail\":\"");
    put_json(f, e->detail);
    fprintf(f, "\",\"id\":%lld", (long long)e->id);
    if (e->ndeps) {
        fprintf(f, ",\"deps\":[");
        for (int i = 0; i < e->ndeps; i++)
            fprintf(f, "%s%lld", i ? "," : "", (long long)e->deps[i]);
        fputc(']', f);
    }
    if (e->module[0]) put_str(f, "module", e->module);
    if (e->step >= 0) fprintf(f, ",\"step\":%lld", (long long)e->step);
    if (e->op[0]) put_str(f, "op", e->op);
    if (e->coll) {
        put_str(f, "kind", e->kind);
        put_str(f, "group", e->group);
        fprintf(f, ",\"group_size\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,\"seq\":%lld",
                e->group_size, e->bytes_in, e->bytes_out, (long long)e->seq);
        fprintf(f, ",\"comm\":\"%016llx\"", (unsigned long long)e->comm);
        if (e->peer >= 0) fprintf(f, ",\"peer\":%d", e->peer);
        if (e->from[0]) put_str(f, "from", e->from);
        if (e->to[0]) put_str(f, "to", e->to);
    }
    fputc('}', f);
}

dt_status dt_trace_save(const dt_trace *t, int r, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return dt_error(DT_ERR_SYSTEM, "dt_trace_write: cannot open \"%s\" for writing", path);
    fprintf(f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", r, r);
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", r, r);
    dt_trace *tm = (dt_trace *)t; /* the lock only */
    if (t) pthread_mutex_lock(&tm->mu);
    if (t && t->has_run) {
        fprintf(f, ",\n{\"name\":\"dt_run\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"", r);
        put_json(f, t->run_name);
        fprintf(f, "\",\"gflops\":%.3f", t->gflops);
        put_str(f, "layout", t->layout);
        fprintf(f, "}}");
    }
    size_t n = t ? t->n : 0;
    /* The first three rows always; the others only on a rank that recorded on them. */
    int used[DT_LANE_COUNT] = {1, 1, 1};
    for (size_t i = 0; i < n; i++) used[t->ev[i].lane] = 1;
    for (int l = 0; l < DT_LANE_COUNT; l++)
        if (used[l])
            fprintf(f,
                    ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                    "\"args\":{\"name\":\"%s\"}}",
                    r, l, lane_names[l]);
    for (size_t i = 0; i < n; i++) {
        const event *e = &t->ev[i];
        fprintf(f, ",\n{\"name\":\"");
        put_json(f, e->name);
        fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,",
                lane_names[e->lane], e->ts, e->dur, r, e->lane);
        put_args(f, e);
        fputc('}', f);
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
