/* Non-blocking collectives: a request carries the call's arguments to the rank's
 * communication thread, which runs the blocking collective; the caller waits on the request.
 * Order per communicator is kept: while requests are pending on it, blocking calls queue too. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/flight.h"
#include "comm/request.h"
#include "comm/worker.h"
#include "core/check.h"

typedef struct comm_request {
    dt_request base;
    dt_comm *comm;
    dt_call_fn run;
    dt_call a; /* a copy: the caller's block may go before the request runs */
} comm_request;

static void run_task(void *p) {
    dt_request *r = p;
    dt_comm_site prev = dt_comm_site_swap(r->site);
    dt_trace_last_coll_tls = 0;
    dt_status st = r->run(r);
    r->trace_id = dt_trace_last_coll_tls;
    dt_comm_site_swap(prev);
    dt_completion_signal(&r->done, st);
}

dt_status dt_request_submit(dt_ctx *ctx, dt_request *r) {
    dt_completion_init(&r->done);
    r->site = dt_comm_site_get();
    dt_status st = ctx->worker ? DT_OK : dt_worker_create(ctx, &ctx->worker);
    if (st == DT_OK) st = dt_worker_submit(ctx->worker, run_task, r);
    if (st != DT_OK) r->destroy(r);
    return st;
}

dt_status dt_request_wait(dt_request *request, dt_tensor **out) {
    return dt_request_wait_traced(request, out, NULL);
}

dt_status dt_request_wait_traced(dt_request *request, dt_tensor **out, int64_t *trace_id) {
    DT_ARG_NOT_NULL(request);
    dt_status st = dt_completion_wait(&request->done);
    if (trace_id) *trace_id = request->trace_id; /* written before the completion's signal */
    if (st == DT_OK && request->finish) st = request->finish(request);
    /* The result is whatever the work made (a redistribute's tensor); comm only hands it on. */
    if (st == DT_OK && out)
        *out = (dt_tensor *)request->out;
    else if (request->out)
        request->out_release(request->out);
    request->destroy(request);
    return st;
}

int dt_request_test(const dt_request *request) {
    return request ? dt_completion_done((dt_completion *)&request->done) : -1;
}

static dt_status run_call(dt_request *r) {
    comm_request *c = (comm_request *)r;
    dt_status st = c->run(c->comm, &c->a);
    atomic_fetch_sub(&c->comm->pending, 1);
    return st;
}

static void call_destroy(dt_request *r) { free(r); }

dt_status dt_comm_submit(dt_comm *comm, dt_call_fn run, const dt_call *a, dt_request **out) {
    comm_request *r = calloc(1, sizeof *r);
    if (!r) return dt_error(DT_ERR_NOMEM, "non-blocking collective: out of memory");
    r->base.run = run_call, r->base.destroy = call_destroy;
    r->comm = comm;
    r->run = run;
    r->a = *a;
    comm->had_requests = true;
    atomic_fetch_add(&comm->pending, 1);
    dt_status st = dt_request_submit(comm->ctx, &r->base);
    if (st != DT_OK) {
        atomic_fetch_sub(&comm->pending, 1);
        return st;
    }
    *out = &r->base;
    return DT_OK;
}

int dt_comm_in_order(dt_comm *comm, dt_call_fn run, const dt_call *a, dt_status *st) {
    /* On the comm thread itself (running a request) the call is already in order. */
    if (!atomic_load(&comm->pending) || dt_worker_is_current(comm->ctx->worker)) return 0;
    dt_request *r;
    *st = dt_comm_submit(comm, run, a, &r);
    if (*st == DT_OK) *st = dt_request_wait(r, NULL);
    return 1;
}

#define START_CHECKS()                                                                             \
    do {                                                                                           \
        DT_ARG(comm != NULL, "%s: argument comm is NULL", __func__);                               \
        DT_ARG(out != NULL, "%s: argument out is NULL", __func__);                                 \
    } while (0)

dt_status dt_all_reduce_start(dt_comm *comm, const void *send, void *recv, size_t count,
                              dt_dtype dtype, dt_reduce_op op, dt_request **out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype, .op = op};
    return dt_comm_submit(comm, dt_call_all_reduce, &a, out);
}

dt_status dt_all_gather_start(dt_comm *comm, const void *send, void *recv, size_t count,
                              dt_dtype dtype, dt_request **out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype};
    return dt_comm_submit(comm, dt_call_all_gather, &a, out);
}

dt_status dt_reduce_scatter_start(dt_comm *comm, const void *send, void *recv, size_t count,
                                  dt_dtype dtype, dt_reduce_op op, dt_request **out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype, .op = op};
    return dt_comm_submit(comm, dt_call_reduce_scatter, &a, out);
}

dt_status dt_all_to_all_start(dt_comm *comm, const void *send, void *recv, size_t count,
                              dt_dtype dtype, dt_request **out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype};
    return dt_comm_submit(comm, dt_call_all_to_all, &a, out);
}
