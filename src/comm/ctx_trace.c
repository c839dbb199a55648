/* A rank's trace and communication summary as the public API sees them: the context owns its
 * recorder (trace/trace_impl.h), which it hands plain events. */
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "dtensor/trace.h"

dt_status dt_trace_start(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    if (!ctx->trace) DT_CHECK(dt_trace_create(&ctx->trace));
    dt_trace_on(ctx->trace, 1);
    return DT_OK;
}

dt_status dt_trace_stop(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    if (ctx->trace) dt_trace_on(ctx->trace, 0);
    return DT_OK;
}

dt_status dt_trace_step(dt_ctx *ctx, int step) {
    DT_ARG_NOT_NULL(ctx);
    dt_trace_set_step(ctx->trace, step < 0 ? -1 : step);
    return DT_OK;
}

dt_status dt_trace_set_run_info(dt_ctx *ctx, const char *name, double gflops,
                                const char *layout) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG(gflops >= 0 && gflops < 1e12, "dt_trace_set_run_info: argument gflops = %g is not a "
                                         "measured rate (>= 0)", gflops);
    if (!ctx->trace) DT_CHECK(dt_trace_create(&ctx->trace));
    dt_trace_put_run(ctx->trace, name, gflops, layout);
    return DT_OK;
}

dt_status dt_trace_write(dt_ctx *ctx, const char *path) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(path);
    return dt_trace_save(ctx->trace, ctx->rank, path);
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
