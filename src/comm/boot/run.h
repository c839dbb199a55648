/* The part of dt_ucx_run and dt_nccl_run after their own setup: run the SPMD function, tell
 * the others when it failed, drain the communication thread, wait for every rank's return,
 * tear down, and make the status the caller gets. Knows nothing of either transport. */
#ifndef DT_COMM_BOOT_RUN_H
#define DT_COMM_BOOT_RUN_H

#include <stddef.h>

#include "dtensor/runtime.h"

typedef struct dt_proc_world {
    void *w;     /* the runtime's world, passed to the hooks */
    dt_ctx *ctx; /* its rank context; NULL when setup failed before it existed */
    int rank;    /* this rank, once the environment was read */
    int size;    /* 0 when the environment named no world */
    /* Reports this rank's failure to the others, before the communication thread is drained
     * (queued work must not wait for this rank). */
    void (*fail)(void *w, dt_status st, const char *msg);
    /* Waits for every rank's return; *rank_out = the first failed rank (-1: none) with its
     * status and message. NULL when the world cannot (no control plane came up). */
    void (*finish)(void *w, int *rank_out, dt_status *st_out, char *msg, size_t cap);
    void (*teardown)(void *w);
} dt_proc_world;

/* Runs fn when setup_st is DT_OK, then finishes as above; returns the rank's own failure, or
 * else the first failure of any rank, as "rank R: message". */
dt_status dt_proc_run(const dt_proc_world *pw, dt_status setup_st, dt_spmd_fn fn, void *arg);

#endif
