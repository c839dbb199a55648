/* The random redistribution cases of the property suite, without Criterion: test_redistribute_
 * property runs them on CPU ranks, gpu_check on ranks of one GPU. For each case:
 * full_tensor(redistribute(x)) == x exactly, and (for targets without Partial) each rank's
 * shard equals the shard distribute(x, target) gives, computed without redistribute. */
#ifndef DT_TEST_PROPERTY_CASES_H
#define DT_TEST_PROPERTY_CASES_H

#include "rank_helpers.h"

typedef struct sweep {
    const char *mesh; /* "2x2" */
    int nranks;
    uint64_t seed;    /* every rank draws the same cases from it */
    int cases;
    int cuda;         /* ranks compute on the GPU */
} sweep;

/* SPMD body running s->cases random cases on s->mesh (arg: sweep). */
dt_status property_body(dt_ctx *ctx, void *arg);

#endif
