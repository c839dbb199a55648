/* What tests may ask of the UCX runtime's hierarchical collectives (hier.c) without UCX's
 * headers: built in every configuration (stub.c answers in builds without UCX). */
#ifndef DT_COMM_UCX_HIER_H
#define DT_COMM_UCX_HIER_H

#include "dtensor/comm.h"

/* Hierarchical all_reduces this rank has run so far on any communicator of c's world; -1 when
 * c is not a UCX communicator (or the build has no UCX). */
long dt_ucx_hier_runs(const dt_comm *c);

#endif
