/* A rank's communication thread: runs submitted tasks one at a time, in submission order,
 * so non-blocking collectives issued in the same order on every rank match up. For a rank run
 * as a fiber (core/fiber.h) it is a fiber beside the rank's, on the same thread. */
#ifndef DT_COMM_WORKER_H
#define DT_COMM_WORKER_H

#include <stdatomic.h>
#include <stdint.h>

#include "dtensor/runtime.h"
#include "dtensor/status.h"

typedef struct dt_worker dt_worker;
typedef void (*dt_task_fn)(void *arg);

/* Tasks run with ctx's GPU (if any) bound to the thread. */
dt_status dt_worker_create(dt_ctx *ctx, dt_worker **worker_out);
/* Queues fn(arg); it runs after every task submitted before it. */
dt_status dt_worker_submit(dt_worker *w, dt_task_fn fn, void *arg);
/* A one-shot completion between a task on the comm thread and the caller waiting for it: the
 * task's status travels with the error message of the thread that failed. */
typedef struct dt_completion {
    _Atomic uint32_t done; /* set after status and message (core/fiber.h's word) */
    dt_status status;
    char message[512];
} dt_completion;

void dt_completion_init(dt_completion *c);
/* Marks c done with st (and, when st is not DT_OK, the calling thread's last error). */
void dt_completion_signal(dt_completion *c, dt_status st);
/* Waits until c is done, sets the status's message on the calling thread and returns the
 * status. */
dt_status dt_completion_wait(dt_completion *c);
int dt_completion_done(dt_completion *c);

/* 1 when called by w's tasks. */
int dt_worker_is_current(const dt_worker *w);
/* Runs what is queued, then stops and frees the thread. NULL is fine. */
void dt_worker_destroy(dt_worker *w);

#endif
