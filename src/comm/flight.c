/* The flight recorder (flight.h). */
#include <stdio.h>
#include <string.h>

#include "comm/flight.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/fiber.h"

_Thread_local const char *dt_comm_caller_tls;
_Thread_local const char *dt_comm_module_tls;
_Thread_local int dt_comm_backward_tls;
DT_FIBER_LOCAL(dt_comm_caller_tls)
DT_FIBER_LOCAL(dt_comm_module_tls)
DT_FIBER_LOCAL(dt_comm_backward_tls)

void dt_flight_begin(dt_comm *comm, const dt_coll_fp *fp, int peer) {
    struct dt_flight *f = comm->ctx->flight;
    if (!f) return;
    uint64_t id = atomic_fetch_add_explicit(&f->n, 1, memory_order_relaxed);
    dt_flight_entry *e = &f->ring[id % DT_FLIGHT_LEN];
    const char *who = dt_comm_caller_tls ? dt_comm_caller_tls : "";
    e->fp = *fp;
    e->peer = peer;
    e->start_us = comm->issued_us;
    e->end_us = 0;
    memcpy(e->label, comm->label, sizeof e->label);
    size_t k = 0; /* on every collective: no snprintf */
    for (; k + 1 < sizeof e->caller && who[k]; k++) e->caller[k] = who[k];
    e->caller[k] = '\0';
    comm->flight_id = (int64_t)id;
}

void dt_flight_end(dt_comm *comm, double now_us) {
    struct dt_flight *f = comm->ctx->flight;
    if (!f || comm->flight_id < 0) return;
    uint64_t n = atomic_load_explicit(&f->n, memory_order_relaxed);
    if (n - (uint64_t)comm->flight_id <= DT_FLIGHT_LEN)
        f->ring[comm->flight_id % DT_FLIGHT_LEN].end_us = now_us;
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
        uint64_t n = atomic_load(&f->n);
        uint64_t first = n > (uint64_t)k ? n - (uint64_t)k : 0;
        if (n - first > DT_FLIGHT_LEN) first = n - DT_FLIGHT_LEN;
        for (uint64_t i = first; i < n; i++) {
            dt_flight_entry e = f->ring[i % DT_FLIGHT_LEN]; /* may be being rewritten */
            e.label[sizeof e.label - 1] = e.caller[sizeof e.caller - 1] = '\0';
            char s[256];
            dt_flight_entry_str(&e, now, s, sizeof s);
            /* Group labels and op names are identifiers: a quote, backslash or control
             * character (a garbled entry) is dropped rather than escaped. */
            if (len + strlen(s) + 4 >= cap) break;
            if (i > first) buf[len++] = ',';
            buf[len++] = '"';
            for (const char *p = s; *p; p++)
                if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) buf[len++] = *p;
            buf[len++] = '"';
        }
    }
    buf[len++] = ']';
    buf[len] = '\0';
}
