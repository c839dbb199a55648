/* Status names and the thread-local last-error message. */
#include <stdarg.h>
#include <string.h>

#include "core/check.h"
#include "core/fiber.h"

#define DT_ERROR_MAX 512

static _Thread_local char last_error[DT_ERROR_MAX];
DT_FIBER_LOCAL(last_error)

const char *dt_status_str(dt_status status) {
    switch (status) {
    case DT_OK: return "DT_OK";
    case DT_ERR_ARG: return "DT_ERR_ARG";
    case DT_ERR_NOMEM: return "DT_ERR_NOMEM";
    case DT_ERR_SHAPE: return "DT_ERR_SHAPE";
    case DT_ERR_DTYPE: return "DT_ERR_DTYPE";
    case DT_ERR_PLACEMENT: return "DT_ERR_PLACEMENT";
    case DT_ERR_MESH: return "DT_ERR_MESH";
    case DT_ERR_PARSE: return "DT_ERR_PARSE";
    case DT_ERR_COMM: return "DT_ERR_COMM";
    case DT_ERR_ABORTED: return "DT_ERR_ABORTED";
    case DT_ERR_PEER_EXITED: return "DT_ERR_PEER_EXITED";
    case DT_ERR_UNSUPPORTED: return "DT_ERR_UNSUPPORTED";
    case DT_ERR_SIZE: return "DT_ERR_SIZE";
    case DT_ERR_SYSTEM: return "DT_ERR_SYSTEM";
    case DT_ERR_DEVICE: return "DT_ERR_DEVICE";
    case DT_ERR_IO: return "DT_ERR_IO";
    }
    return "DT_ERR_UNKNOWN";
}

const char *dt_last_error(void) { return last_error; }

dt_status dt_error_set(dt_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

void dt_error_prefix(const char *prefix) {
    char tmp[DT_ERROR_MAX];
    size_t n = strlen(prefix);
    if (n > DT_ERROR_MAX / 2) n = DT_ERROR_MAX / 2;
    memcpy(tmp, prefix, n);
    tmp[n] = ':';
    tmp[n + 1] = ' ';
    size_t rest = strnlen(last_error, DT_ERROR_MAX - n - 3);
    memcpy(tmp + n + 2, last_error, rest);
    tmp[n + 2 + rest] = '\0';
    memcpy(last_error, tmp, sizeof tmp);
}
