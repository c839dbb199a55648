/* Per-rank trace buffers and the Chrome trace-event writer and merger. */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_impl.h"
#include "core/check.h"

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

dt_status dt_trace_start(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    if (!ctx->trace) {
        if (!(ctx->trace = calloc(1, sizeof *ctx->trace)))
            return dt_error(DT_ERR_NOMEM, "dt_trace_start: out of memory");
        pthread_mutex_init(&ctx->trace->mu, NULL);
    }
    pthread_mutex_lock(&ctx->trace->mu);
    ctx->trace->n = ctx->trace->dropped = 0;
    ctx->trace->on = 1;
    pthread_mutex_unlock(&ctx->trace->mu);
    return DT_OK;
}

dt_status dt_trace_stop(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    if (ctx->trace) ctx->trace->on = 0;
    return DT_OK;
}

void dt_trace_free(dt_ctx *ctx) {
    if (!ctx->trace) return;
    pthread_mutex_destroy(&ctx->trace->mu);
    free(ctx->trace->ev);
    free(ctx->trace);
    ctx->trace = NULL;
}

void dt_trace_record(dt_ctx *ctx, dt_lane lane, const char *name, double t0_us,
                     const char *fmt, ...) {
    struct dt_trace *t = ctx->trace;
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

dt_status dt_trace_write(dt_ctx *ctx, const char *path) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(path);
    FILE *f = fopen(path, "w");
    if (!f) return dt_error(DT_ERR_SYSTEM, "dt_trace_write: cannot open \"%s\" for writing", path);
    int r = ctx->rank;
    fprintf(f, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", r, r);
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", r, r);
    if (ctx->trace) pthread_mutex_lock(&ctx->trace->mu);
    size_t n = ctx->trace ? ctx->trace->n : 0;
    /* The first three rows always; the pipeline's only on a rank that ran one. */
    int rows = DT_LANE_PIPELINE;
    for (size_t i = 0; i < n; i++)
        if (ctx->trace->ev[i].lane == DT_LANE_PIPELINE) rows = DT_LANE_COUNT;
    for (int l = 0; l < rows; l++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                r, l, lane_names[l]);
    for (size_t i = 0; i < n; i++) {
        const event *e = &ctx->trace->ev[i];
        fprintf(f, ",\n{\"name\":\"");
        put_json(f, e->name);
        fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
                   "\"args\":{\"detail\":\"", lane_names[e->lane], e->ts, e->dur, r, e->lane);
        put_json(f, e->detail);
        fprintf(f, "\"}}");
    }
    if (ctx->trace) pthread_mutex_unlock(&ctx->trace->mu);
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

dt_status dt_comm_stats_print(const dt_comm_stats *stats, const char *title, FILE *f) {
    DT_ARG_NOT_NULL(stats);
    DT_ARG_NOT_NULL(f);
    const dt_comm_stats s = *stats;
    fprintf(f, "%s:\n  %-15s %-10s %6s %8s %14s %14s %12s\n", title ? title : "communication",
            "collective", "mesh dims", "group", "calls", "bytes in", "bytes out", "time us");
    for (int i = 0; i < s.nentries; i++) {
        const dt_comm_stats_entry *e = &s.entries[i];
        fprintf(f, "  %-15s %-10s %6d %8llu %14llu %14llu %12.1f\n", dt_coll_kind_name(e->kind),
                e->group, e->group_size, (unsigned long long)e->calls,
                (unsigned long long)e->bytes_in, (unsigned long long)e->bytes_out, e->time_us);
    }
    if (!s.nentries) fprintf(f, "  (no collectives)\n");
    static const char *const cache_names[DT_CACHE_KIND_COUNT] = {
        [DT_CACHE_STRATEGY] = "strategy", [DT_CACHE_PLAN] = "plan"};
    uint64_t any = 0;
    for (int k = 0; k < DT_CACHE_KIND_COUNT; k++)
        any |= s.caches[k].hits | s.caches[k].misses | s.caches[k].evictions;
    if (any) {
        fprintf(f, "  %-15s %12s %12s %12s\n", "cache", "hits", "misses", "evictions");
        for (int k = 0; k < DT_CACHE_KIND_COUNT; k++)
            fprintf(f, "  %-15s %12llu %12llu %12llu\n", cache_names[k],
                    (unsigned long long)s.caches[k].hits, (unsigned long long)s.caches[k].misses,
                    (unsigned long long)s.caches[k].evictions);
    }
    return DT_OK;
}
