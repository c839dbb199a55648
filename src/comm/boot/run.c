/* The shared end of the one-process-per-rank runtimes (run.h). */
#include <stdio.h>

#include "comm/boot/run.h"
#include "comm/comm_impl.h"
#include "comm/worker.h"
#include "core/alloc.h"
#include "core/check.h"

dt_status dt_proc_run(const dt_proc_world *pw, dt_status st, dt_spmd_fn fn, void *arg) {
    char msg[512] = "";
    /* The rank's temporaries reuse its own blocks; teardown closes the arena. */
    dt_host_arena *prev = dt_host_arena_bind(pw->ctx ? pw->ctx->arena : NULL);
    if (st == DT_OK) {
        st = fn(pw->ctx, arg);
        if (st != DT_OK && dt_last_error()[0] == '\0')
            dt_error(st, "the SPMD function returned %s", dt_status_str(st));
    }
    if (st != DT_OK) {
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        pw->fail(pw->w, st, msg);
    }
    /* The communication thread finishes what was queued before this rank counts as gone. */
    if (pw->ctx) {
        dt_worker_destroy(pw->ctx->worker);
        pw->ctx->worker = NULL;
    }
    dt_host_arena_bind(prev);
    int frank = -1;
    dt_status fst = DT_OK;
    char fmsg[512] = "";
    if (pw->finish) pw->finish(pw->w, &frank, &fst, fmsg, sizeof fmsg);
    int rank = pw->rank, known = pw->size > 0;
    pw->teardown(pw->w);
    if (st != DT_OK && !known) return dt_error(st, "%s", msg);
    if (st != DT_OK) return dt_error(st, "rank %d: %s", rank, msg);
    if (frank >= 0) return dt_error(fst, "rank %d: %s", frank, fmsg);
    return DT_OK;
}
