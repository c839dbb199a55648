/* A rank's communication thread: runs submitted tasks one at a time, in submission order,
 * so non-blocking collectives issued in the same order on every rank match up. */
#ifndef DT_COMM_WORKER_H
#define DT_COMM_WORKER_H

#include "dtensor/status.h"

typedef struct dt_worker dt_worker;
typedef void (*dt_task_fn)(void *arg);

dt_status dt_worker_create(dt_worker **worker_out);
/* Queues fn(arg); it runs after every task submitted before it. */
dt_status dt_worker_submit(dt_worker *w, dt_task_fn fn, void *arg);
/* 1 when called on w's own thread. */
int dt_worker_is_current(const dt_worker *w);
/* Runs what is queued, then stops and frees the thread. NULL is fine. */
void dt_worker_destroy(dt_worker *w);

#endif
