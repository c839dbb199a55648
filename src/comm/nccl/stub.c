/* The NCCL runtime's entry points in a build without CUDA or without NCCL: they exist, and
 * say so. */
#include "core/check.h"
#include "dtensor/nccl.h"

int dt_nccl_available(void) {
    return 0;
}

dt_status dt_nccl_run(dt_spmd_fn fn, void *arg) {
    (void)fn;
    (void)arg;
    return dt_error(DT_ERR_UNSUPPORTED, "dt_nccl_run: this build of dtensor has no NCCL runtime "
                                        "(reconfigure with -Dcuda=enabled where nvcc and NCCL "
                                        "are installed)");
}

dt_status dt_nccl_set_timeout(dt_ctx *ctx, double seconds) {
    (void)ctx;
    (void)seconds;
    return dt_error(DT_ERR_UNSUPPORTED, "dt_nccl_set_timeout: this build of dtensor has no NCCL "
                                        "runtime");
}
