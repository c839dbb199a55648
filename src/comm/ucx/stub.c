/* The UCX runtime's entry points in a build without UCX: they exist, and say so. */
#include "comm/ucx/hier.h"
#include "core/check.h"
#include "dtensor/ucx.h"

int dt_ucx_available(void) {
    return 0;
}

dt_status dt_ucx_run(dt_spmd_fn fn, void *arg) {
    (void)fn;
    (void)arg;
    return dt_error(DT_ERR_UNSUPPORTED, "dt_ucx_run: this build of dtensor has no UCX runtime "
                                        "(install libucx-dev and reconfigure with -Ducx=enabled)");
}

dt_status dt_ucx_set_timeout(dt_ctx *ctx, double seconds) {
    (void)ctx;
    (void)seconds;
    return dt_error(DT_ERR_UNSUPPORTED, "dt_ucx_set_timeout: this build of dtensor has no UCX "
                                        "runtime");
}

long dt_ucx_hier_runs(const dt_comm *c) {
    (void)c;
    return -1;
}
