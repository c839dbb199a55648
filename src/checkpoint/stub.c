/* The checkpoint calls in a build without xxHash (libxxhash-dev), which checksums every chunk:
 * they exist, and say so. */
#include <stdlib.h>

#include "core/check.h"
#include "dtensor/checkpoint.h"

#define CK_NONE(fn)                                                                                \
    dt_error(DT_ERR_UNSUPPORTED,                                                                   \
             "%s: this build of dtensor has no checkpoints (install "                              \
             "libxxhash-dev and reconfigure)",                                                     \
             fn)

dt_status dt_checkpoint_save(dt_ctx *ctx, const char *dir, const char *const *names,
                             dt_tensor *const *tensors, int n,
                             const dt_checkpoint_save_options *opts) {
    (void)ctx, (void)dir, (void)names, (void)tensors, (void)n, (void)opts;
    return CK_NONE("dt_checkpoint_save");
}

dt_status dt_checkpoint_save_async(dt_ctx *ctx, const char *dir, const char *const *names,
                                   dt_tensor *const *tensors, int n,
                                   const dt_checkpoint_save_options *opts,
                                   dt_checkpoint_pending **out) {
    (void)ctx, (void)dir, (void)names, (void)tensors, (void)n, (void)opts, (void)out;
    return CK_NONE("dt_checkpoint_save_async");
}

dt_status dt_checkpoint_wait(dt_checkpoint_pending *pending) {
    (void)pending;
    return CK_NONE("dt_checkpoint_wait");
}

dt_status dt_checkpoint_load(const char *dir, const char *const *names, dt_tensor *const *tensors,
                             int n, const dt_checkpoint_load_options *opts) {
    (void)dir, (void)names, (void)tensors, (void)n, (void)opts;
    return CK_NONE("dt_checkpoint_load");
}

dt_status dt_checkpoint_blob(const char *dir, void *buf, size_t cap, size_t *bytes_out) {
    (void)dir, (void)buf, (void)cap, (void)bytes_out;
    return CK_NONE("dt_checkpoint_blob");
}

dt_status dt_checkpoint_check(const char *dir, int checksums) {
    (void)dir, (void)checksums;
    return CK_NONE("dt_checkpoint_check");
}

dt_status dt_checkpoint_latest(const char *root, const char *prefix, char *buf, size_t cap) {
    (void)root, (void)prefix, (void)buf, (void)cap;
    return CK_NONE("dt_checkpoint_latest");
}

dt_status dt_checkpoint_consolidate(const char *dir, const char *out_path) {
    (void)dir, (void)out_path;
    return CK_NONE("dt_checkpoint_consolidate");
}

dt_status dt_checkpoint_convert(const char *in_path, const char *dir, const char *mesh,
                                const char *placements) {
    (void)in_path, (void)dir, (void)mesh, (void)placements;
    return CK_NONE("dt_checkpoint_convert");
}
