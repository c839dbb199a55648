/* The trace layer: a per-rank recorder of plain events (a lane, a name, a span, a detail text
 * and the structured args of docs/tracing.md: id, deps, module, step, op, and a collective's
 * kind, group, bytes, placements and sequence number) and its Chrome trace writer. It knows
 * nothing of ranks' contexts or communicators: the layers above hand it events. */
#ifndef DT_TRACE_IMPL_H
#define DT_TRACE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "dtensor/status.h"

/* The thread ids of a rank's process row. DT_LANE_PIPELINE: a pipeline stage's forward,
 * backward and idle spans (nn/pipeline.c); DT_LANE_COMM_THREAD: collectives run on the rank's
 * communication thread; DT_LANE_STEP: the training steps (dt_trace_step). */
typedef enum dt_lane {
    DT_LANE_OPS = 0,
    DT_LANE_COMPUTE,
    DT_LANE_COMM,
    DT_LANE_PIPELINE,
    DT_LANE_COMM_THREAD,
    DT_LANE_STEP,
    DT_LANE_COUNT
} dt_lane;

/* The most deps one event keeps (an op's inputs rarely come from more collectives). */
#define DT_TRACE_MAX_DEPS 8

/* The structured args of one event, all optional (zero: absent). Strings are copied. */
typedef struct dt_trace_args {
    const int64_t *deps; /* ids of events of this trace it waited for through data */
    int ndeps;
    const char *op, *module;
    /* A collective's (kind non-NULL): comm identifies its communicator alike on every member,
     * seq counts the collectives issued on it (from 0), peer is a send's or receive's world
     * rank (-1 otherwise), from and to the placements of the mesh dims it moved. */
    const char *kind, *group, *from, *to;
    int group_size, peer;
    size_t bytes_in, bytes_out;
    int64_t seq;
    uint64_t comm;
} dt_trace_args;

typedef struct dt_trace dt_trace;

/* A recorder, off until dt_trace_on; destroy takes NULL. */
dt_status dt_trace_create(dt_trace **out);
void dt_trace_destroy(dt_trace *t);
/* on 1 clears what was recorded and starts; 0 closes an open step span and stops. Ids keep
 * growing across restarts, so an id kept from before (a tensor's) is never taken for a new
 * event's. */
void dt_trace_on(dt_trace *t, int on);
/* An event on lane from t0 to now, with a detail text (printf-style); nothing when t is NULL
 * or off. Thread-safe (a rank's thread and its communication thread both record). */
void dt_trace_add(dt_trace *t, dt_lane lane, const char *name, double t0_us, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same with args (nullable); returns the event's id, 0 when nothing was recorded. */
int64_t dt_trace_add_args(dt_trace *t, dt_lane lane, const char *name, double t0_us,
                          const dt_trace_args *a, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Whether t records now (NULL: no); a hint without the lock, for skipping work before an
 * event that dt_trace_add_args would drop anyway. */
int dt_trace_is_on(const dt_trace *t);
/* The lane of event id of t's current recording, -1 when id is not one of them. */
int dt_trace_lane_of(dt_trace *t, int64_t id);
/* The id of the newest event recorded (0 when none). */
int64_t dt_trace_last_id(dt_trace *t);
/* Closes the open step span (an event on DT_LANE_STEP) and opens step (none when step < 0);
 * events that begin inside a span carry its step. */
void dt_trace_set_step(dt_trace *t, int64_t step);
/* The run's description in the written file (dt_run metadata); name and layout copied. */
void dt_trace_put_run(dt_trace *t, const char *name, double gflops, const char *layout);
/* Writes t's events (t may be NULL: none) as the process row of rank to path. */
dt_status dt_trace_save(const dt_trace *t, int rank, const char *path);

/* The collective most recently recorded by this thread (0: none), and what the layers above
 * say of the next collectives this thread issues: the event that produced their input and the
 * placements they move between (redistribute sets them around each step). Thread-locals: a
 * rank's thread and its communication thread each issue their own. */
typedef struct dt_trace_coll_site {
    int64_t input;
    const char *from, *to;
} dt_trace_coll_site;
extern _Thread_local int64_t dt_trace_last_coll_tls;
extern _Thread_local dt_trace_coll_site dt_trace_coll_tls;

#endif
