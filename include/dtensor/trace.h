/* Seeing what runs: per-rank traces of op dispatches, redistribute plans, collectives and
 * local kernels in the Chrome trace-event format (opens in Perfetto and chrome://tracing),
 * one process row per rank with separate rows for ops, compute and communication.
 *
 * Recording costs one branch per event when off, and a clock read and an append when on.
 * Setting DT_TRACE=prefix in the environment traces every rank of dt_local_run and writes
 * prefix.json (all ranks merged) when the run ends. */
#ifndef DTENSOR_TRACE_H
#define DTENSOR_TRACE_H

#include "dtensor/status.h"

typedef struct dt_ctx dt_ctx;

#ifdef __cplusplus
extern "C" {
#endif

/* Starts (or restarts, clearing what was recorded) and stops recording on this rank. */
DT_API dt_status dt_trace_start(dt_ctx *ctx);
DT_API dt_status dt_trace_stop(dt_ctx *ctx);

/* Marks training steps: closes the open step span (an event named "step" on the steps row,
 * tid 5) and opens the span of step (none when step < 0); the events that begin inside a
 * span carry its step. Call it at the start of every step and once with -1 after the last
 * (dt_trace_stop closes an open span too). Nothing is recorded while tracing is off. Not
 * collective; does not block. */
DT_API dt_status dt_trace_step(dt_ctx *ctx, int step);

/* Describes the run in this rank's trace file (a "dt_run" metadata event): name, the
 * measured sgemm GFLOP/s of this machine (>= 0; 0: not measured) and the layout's text
 * (both strings copied; NULL is ""). Kept across dt_trace_start. Not collective. */
DT_API dt_status dt_trace_set_run_info(dt_ctx *ctx, const char *name, double gflops,
                                       const char *layout);

/* Writes this rank's events as a Chrome trace JSON array to path (the events' fields are
 * described in docs/tracing.md). */
DT_API dt_status dt_trace_write(dt_ctx *ctx, const char *path);

/* Merges Chrome trace files (as written by dt_trace_write, one per rank or process) into
 * out_path. */
DT_API dt_status dt_trace_merge(const char *const *paths, int n, const char *out_path);

/* Renders a trace file (one rank's or merged) as a self-contained HTML page that works
 * offline: ranks as lanes with rows for ops, compute and communication on one time axis,
 * hover for details, per-rank communication totals and compute/communication overlap. */
DT_API dt_status dt_trace_render_html(const char *trace_path, const char *html_path);

#ifdef __cplusplus
}
#endif
#endif
