/* Environment parsing shared by the UCX runtime and its stub (env.c). */
#ifndef DT_COMM_UCX_ENV_H
#define DT_COMM_UCX_ENV_H

#include <stddef.h>

#include "dtensor/ucx.h"

/* Group ranks travel in 16 bits of a message tag. */
#define DT_UX_MAX_RANKS 65535

/* A number of seconds >= 0 from env var name, dflt when unset or empty. */
dt_status dt_ux_env_seconds(const char *name, double dflt, double *out);
/* A byte count from env var name, dflt when unset or empty. */
dt_status dt_ux_env_bytes(const char *name, size_t dflt, size_t *out);

#endif
