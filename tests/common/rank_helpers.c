#include <stdarg.h>
#include <stdlib.h>

#include <time.h>

#include "rank_helpers.h"

int t_sentinel;

double t_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dt_status t_keep_msg(t_rank_msgs *m, dt_ctx *ctx, dt_status st) {
    if (st != DT_OK) snprintf(m->msg[dt_ctx_rank(ctx)], sizeof m->msg[0], "%s", dt_last_error());
    return st;
}

uint64_t t_issued(dt_ctx *ctx, dt_coll_kind kind) {
    dt_comm_stats s;
    dt_comm_stats_get(ctx, &s);
    return s.calls[kind];
}

uint64_t t_issued_total(dt_ctx *ctx) {
    dt_comm_stats s;
    dt_comm_stats_get(ctx, &s);
    uint64_t n = 0;
    for (int k = 0; k < DT_COLL_KIND_COUNT; k++) n += s.calls[k];
    return n;
}

void t_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

dt_status t_fail(const char *file, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_error_set(DT_ERR_ARG, "test failure at %s:%d: %s", file, line, msg);
}

double t_value(uint64_t seed, size_t i) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (double)(int64_t)(x % 33) - 16.0;
}

void t_fill(dt_dtype dtype, void *buf, size_t count, uint64_t seed) {
    for (size_t i = 0; i < count; i++) {
        double v = t_value(seed, i);
        dt_convert_from_f64(dtype, &v, (char *)buf + i * dt_dtype_size(dtype), 1);
    }
}

FILE *t_open_conformance(const char *name, char *path, size_t cap) {
    const char *src = getenv("DT_SOURCE_DIR");
    snprintf(path, cap, "%s/../shared/conformance/%s", src ? src : "..", name);
    FILE *f = fopen(path, "r");
    if (f) return f;
    snprintf(path, cap, "%s/tests/conformance/%s", src ? src : "..", name);
    return fopen(path, "r");
}

int t_parse_dims(const char *text, int *out, int max) {
    int n = 0;
    for (const char *p = text; *p && n < max;) {
        out[n++] = (int)strtol(p, (char **)&p, 10);
        if (*p == 'x' || *p == ',') p++;
        else if (*p) return -1;
    }
    return n;
}

int t_split_tabs(char *line, char **cols, int max) {
    int n = 0;
    for (char *p = line; n < max;) {
        cols[n++] = p;
        char *tab = strchr(p, '\t');
        if (!tab) {
            p[strcspn(p, "\n")] = '\0';
            break;
        }
        *tab = '\0';
        p = tab + 1;
    }
    return n;
}

double t_get(dt_dtype dtype, const void *buf, size_t i) {
    double v;
    dt_convert_to_f64(dtype, (const char *)buf + i * dt_dtype_size(dtype), &v, 1);
    return v;
}
