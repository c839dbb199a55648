/* Requests of the non-blocking calls (dtensor/runtime.h): one type for collectives and
 * redistributes. Each kind embeds dt_request first and fills in run and destroy; the
 * communication thread runs it, dt_request_wait hands over out and destroys it. */
#ifndef DT_COMM_REQUEST_H
#define DT_COMM_REQUEST_H

#include "comm/flight.h"
#include "comm/worker.h"

struct dt_request {
    dt_completion done;
    dt_status (*run)(dt_request *r);  /* on the communication thread */
    void (*destroy)(dt_request *r);   /* frees r and what it holds (not out) */
    dt_status (*finish)(dt_request *r); /* nullable: on the waiting thread, before out is
                                           handed over (autograd records a redistribute's
                                           node there) */
    void *out;                          /* the result, when the work makes one (opaque here) */
    void (*out_release)(void *out);     /* frees a result nobody takes (set with out) */
    dt_comm_site site; /* the issuer's (comm/flight.h), set by dt_request_submit, in force while
                          run runs */
    int64_t trace_id;  /* the last collective run recorded in the rank's trace; 0: none */
};

/* dt_request_wait, also giving the trace id of the last collective the request ran (0 when
 * it recorded none), so that the tensors filled from its buffers can name it. */
dt_status dt_request_wait_traced(dt_request *request, dt_tensor **out, int64_t *trace_id);

/* Queues r (its run and destroy set) on ctx's communication thread, started when needed. On
 * failure r is destroyed. */
dt_status dt_request_submit(dt_ctx *ctx, dt_request *r);

#endif
