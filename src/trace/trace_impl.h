/* The trace layer: a per-rank recorder of plain events (a lane, a name, a span and a detail
 * text) and its Chrome trace writer. It knows nothing of ranks' contexts or communicators:
 * the layers above hand it events (comm through dt_trace_record in comm/comm_impl.h). */
#ifndef DT_TRACE_IMPL_H
#define DT_TRACE_IMPL_H

#include <stddef.h>

#include "core/clock.h"
#include "dtensor/status.h"

/* DT_LANE_PIPELINE: a pipeline stage's forward, backward and idle spans (nn/pipeline.c). */
typedef enum dt_lane {
    DT_LANE_OPS = 0,
    DT_LANE_COMPUTE,
    DT_LANE_COMM,
    DT_LANE_PIPELINE,
    DT_LANE_COUNT
} dt_lane;

typedef struct dt_trace dt_trace;

/* A recorder, off until dt_trace_on; destroy takes NULL. */
dt_status dt_trace_create(dt_trace **out);
void dt_trace_destroy(dt_trace *t);
/* on 1 clears what was recorded and starts; 0 stops. */
void dt_trace_on(dt_trace *t, int on);
/* An event on lane from t0 to now, with a detail text (printf-style); nothing when t is NULL
 * or off. Thread-safe (a rank's thread and its communication thread both record). */
void dt_trace_add(dt_trace *t, dt_lane lane, const char *name, double t0_us, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Writes t's events (t may be NULL: none) as the process row of rank to path. */
dt_status dt_trace_save(const dt_trace *t, int rank, const char *path);

#endif
