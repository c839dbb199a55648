/* Status codes and error messages shared by every dtensor call.
 * Every public call returns a dt_status; on failure a thread-local message names the
 * argument and the value at fault. Nothing in the library exits or aborts on bad input. */
#ifndef DTENSOR_STATUS_H
#define DTENSOR_STATUS_H

/* Marks the public API: the shared library is built with hidden visibility and exports only
 * what carries this. */
#define DT_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_status {
    DT_OK = 0,
    DT_ERR_ARG = -1,          /* an argument is NULL, out of range or inconsistent */
    DT_ERR_NOMEM = -2,        /* an allocation failed */
    DT_ERR_SHAPE = -3,        /* shapes do not agree or are invalid */
    DT_ERR_DTYPE = -4,        /* unknown dtype, or dtypes that do not agree */
    DT_ERR_PLACEMENT = -5,    /* a placement is invalid for this tensor or mesh */
    DT_ERR_MESH = -6,         /* an invalid device mesh, dimension name or sub-mesh */
    DT_ERR_PARSE = -7,        /* malformed text (placements, mesh shapes) */
    DT_ERR_COMM = -8,         /* ranks disagree on a collective's arguments */
    DT_ERR_ABORTED = -9,      /* another rank failed; this collective cannot complete */
    DT_ERR_PEER_EXITED = -10, /* a peer returned before joining this collective */
    DT_ERR_UNSUPPORTED = -11, /* valid, but not supported (yet) by this build or backend */
    DT_ERR_SIZE = -12,        /* an output buffer is too small */
    DT_ERR_SYSTEM = -13,      /* the operating system refused (threads, locks) */
    DT_ERR_DEVICE = -14,      /* a GPU error (CUDA, cuBLAS, NCCL), or data on the wrong device */
    DT_ERR_IO = -15,          /* a file cannot be read or written, or is incomplete or corrupt */
} dt_status;

/* Short constant name of a status, e.g. "DT_ERR_SHAPE". Never NULL. */
DT_API const char *dt_status_str(dt_status status);

/* The calling thread's last error message, e.g.
 * "dt_mesh_create: shape 2x3 has 6 ranks but the world has 4".
 * Kept until the next failing call on this thread; "" when none failed yet. Never NULL. */
DT_API const char *dt_last_error(void);

/* Records a printf-style message as the calling thread's last error and returns status.
 * For code built on dtensor (an SPMD body, say) to report its own failures the same way:
 * dt_local_run passes a failing rank's last error on to its caller. */
DT_API dt_status dt_error_set(dt_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
