/* Recording trace events from any layer. Everything checks ctx->trace first, so recording
 * costs one branch when off. */
#ifndef DT_COMM_TRACE_IMPL_H
#define DT_COMM_TRACE_IMPL_H

#include "comm/comm_impl.h"
#include "core/clock.h"
#include "dtensor/trace.h"

/* DT_LANE_PIPELINE: a pipeline stage's forward, backward and idle spans (nn/pipeline.c). */
typedef enum dt_lane {
    DT_LANE_OPS = 0,
    DT_LANE_COMPUTE,
    DT_LANE_COMM,
    DT_LANE_PIPELINE,
    DT_LANE_COUNT
} dt_lane;

/* An event on lane from t0 to now, with a detail text (printf-style). */
void dt_trace_record(dt_ctx *ctx, dt_lane lane, const char *name, double t0_us,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Frees a rank's trace (context teardown). */
void dt_trace_free(dt_ctx *ctx);

#endif
