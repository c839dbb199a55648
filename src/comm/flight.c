/* The flight recorder (flight.h). */
#include <stdio.h>
#include <string.h>

#include "comm/flight.h"
#include "core/check.h"
#include "core/clock.h"

static _Thread_local const char *caller;

const char *dt_comm_caller_swap(const char *name) {
    const char *prev = caller;
    caller = name;
    return prev;
}

const char *dt_comm_caller(void) { return caller; }

void dt_flight_begin(dt_comm *comm, const dt_coll_fp *fp, int peer) {
    dt_ctx *ctx = comm->ctx;
    struct dt_flight *f = ctx->flight;
    if (!f) return;
    double now = dt_now_us();
    pthread_mutex_lock(&ctx->stats_mu);
    dt_flight_entry *e = &f->ring[f->n % DT_FLIGHT_LEN];
    *e = (dt_flight_entry){.fp = *fp, .peer = peer, .start_us = now};
    memcpy(e->label, comm->label, sizeof e->label);
    snprintf(e->caller, sizeof e->caller, "%s", caller ? caller : "");
    comm->flight_id = (int64_t)f->n++;
    pthread_mutex_unlock(&ctx->stats_mu);
}

void dt_flight_end_locked(dt_comm *comm) {
    struct dt_flight *f = comm->ctx->flight;
    if (!f || comm->flight_id < 0 || f->n - (uint64_t)comm->flight_id > DT_FLIGHT_LEN) return;
    f->ring[comm->flight_id % DT_FLIGHT_LEN].end_us = dt_now_us();
    comm->flight_id = -1;
}

void dt_flight_entry_str(const dt_flight_entry *e, double now_us, char *buf, size_t cap) {
    char call[112];
    if (e->peer >= 0)
        snprintf(call, sizeof call, "%s rank %d (%lld B)",
                 e->fp.kind == DT_COLL_SEND ? "send to" : "recv from", e->peer,
                 (long long)e->fp.count);
    else
        dt_coll_fp_str(&e->fp, call, sizeof call);
    int n = snprintf(buf, cap, "%s on %s%s%s", call, e->label, e->caller[0] ? " by " : "",
                     e->caller);
    if (n < 0 || (size_t)n >= cap) return;
    if (e->end_us > 0)
        snprintf(buf + n, cap - (size_t)n, ": %.3f ms", (e->end_us - e->start_us) / 1e3);
    else
        snprintf(buf + n, cap - (size_t)n, ": not completed (%.1f s)",
                 (now_us - e->start_us) / 1e6);
}

void dt_flight_json(dt_ctx *ctx, int k, char *buf, size_t cap) {
    size_t len = 0;
    if (cap < 3) return;
    buf[len++] = '[';
    struct dt_flight *f = ctx ? ctx->flight : NULL;
    if (f) {
        double now = dt_now_us();
        pthread_mutex_lock(&ctx->stats_mu);
        uint64_t first = f->n > (uint64_t)k ? f->n - (uint64_t)k : 0;
        if (f->n - first > DT_FLIGHT_LEN) first = f->n - DT_FLIGHT_LEN;
        for (uint64_t i = first; i < f->n; i++) {
            char s[256];
            dt_flight_entry_str(&f->ring[i % DT_FLIGHT_LEN], now, s, sizeof s);
            /* The strings hold no quotes or backslashes: group labels and op names are
             * identifiers. Anything else is dropped rather than escaped. */
            if (len + strlen(s) + 4 >= cap) break;
            if (i > first) buf[len++] = ',';
            buf[len++] = '"';
            for (const char *p = s; *p; p++)
                if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) buf[len++] = *p;
            buf[len++] = '"';
        }
        pthread_mutex_unlock(&ctx->stats_mu);
    }
    buf[len++] = ']';
    buf[len] = '\0';
}
