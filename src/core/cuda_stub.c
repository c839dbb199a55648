/* The device calls of a build without CUDA: no GPU is ever visible. */
#include "core/check.h"
#include "dtensor/device.h"

int dt_cuda_device_count(void) { return 0; }

void *dt_cuda_current_stream(void) { return NULL; }

dt_status dt_device_memory_stats(dt_device device, dt_memory_stats *out) {
    DT_ARG_NOT_NULL(out);
    return dt_error(DT_ERR_UNSUPPORTED, "dt_device_memory_stats: device kind %d: %s",
                    (int)device.kind, "this build has no CUDA");
}

dt_status dt_device_empty_cache(dt_device device) {
    return dt_error(DT_ERR_UNSUPPORTED, "dt_device_empty_cache: device kind %d: %s",
                    (int)device.kind, "this build has no CUDA");
}
