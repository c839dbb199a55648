/* The dense MoE reference of test_moe.c: one token at a time, all experts on one rank, in
 * f64, with gradients by hand (checked against central differences of its own forward). */
#ifndef DT_TEST_MOE_REF_H
#define DT_TEST_MOE_REF_H

#include <stdint.h>

#include "dtensor/moe.h"

#define E    8
#define D    4
#define H    6
#define ALL  3 /* the expert every token picks */
#define NONE 6 /* the expert no token picks */

/* Uniform in [-1, 1), from (seed, i) by splitmix64: no ties among the logits. */
double moe_rnd(uint64_t seed, uint64_t i);

typedef struct ref {
    int64_t N;
    dt_moe_opts o;
    double *x, *rw, *w1, *w2, *w3; /* (N, D), (E, D), (E, D, H), (E, H, D), (E, D, H) */
    int64_t *choice;               /* (N, k) */
    double *score, *gate;          /* (N, E), (N, k) */
    unsigned char *keep;           /* (N, k): kept by the capacity */
} ref;

/* Scores, the top-k (larger score first, ties to the lower expert) and the gates. */
void moe_ref_route(ref *r);
/* out (N, D) and sum(out * wgt) with the keep mask as it is. */
double moe_ref_forward(ref *r, const double *wgt, double *out);
/* d sum(out * wgt) / d (x, rw, w1, w2, w3), by hand. */
void moe_ref_gradients(ref *r, const double *wgt, double *g[5]);
/* The reference's gradients against central differences of its own forward. */
void moe_ref_check_fd(ref *r, const double *wgt, double *const g[5]);

#endif
