/* Internal error plumbing: set the thread-local message and propagate statuses.
 * Only library code includes this; the public side is dtensor/status.h. */
#ifndef DT_CORE_CHECK_H
#define DT_CORE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "dtensor/status.h"

/* Records "<fmt...>" as this thread's last error and returns st (dtensor/status.h). */
#define dt_error dt_error_set

/* Prefixes the current last error with "prefix: " (keeps the original cause). */
void dt_error_prefix(const char *prefix);

#define DT_CHECK(call)                                                                             \
    do {                                                                                           \
        dt_status dt_st_ = (call);                                                                 \
        if (dt_st_ != DT_OK) return dt_st_;                                                        \
    } while (0)

#define DT_CHECK_GOTO(call, st, label)                                                             \
    do {                                                                                           \
        (st) = (call);                                                                             \
        if ((st) != DT_OK) goto label;                                                             \
    } while (0)

/* Argument check: returns DT_ERR_ARG naming the function and argument. */
#define DT_ARG(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) return dt_error(DT_ERR_ARG, __VA_ARGS__);                                     \
    } while (0)

#define DT_ARG_NOT_NULL(p)                                                                         \
    DT_ARG((p) != NULL, "%s: argument %s is NULL", __func__, #p)

/* Internal invariant; a failure is a library bug, never bad input. */
#define DT_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "dtensor: internal invariant failed: %s (%s:%d)\n", #cond, __FILE__,   \
                    __LINE__);                                                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
