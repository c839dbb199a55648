/* Non-blocking collectives: a request carries the call's arguments to the rank's
 * communication thread, which runs the blocking collective; the caller waits on the request.
 * Order per communicator is kept: while requests are pending on it, blocking calls queue too. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/worker.h"
#include "core/check.h"

struct dt_comm_request {
    dt_completion done;
    dt_comm *comm;
    dt_call_fn run;
    dt_call a; /* a copy: the caller's block may go before the request runs */
};

static void run_request(void *p) {
    dt_comm_request *r = p;
    dt_status st = r->run(r->comm, &r->a);
    atomic_fetch_sub(&r->comm->pending, 1);
    dt_completion_signal(&r->done, st);
}

dt_status dt_comm_submit(dt_comm *comm, dt_call_fn run, const dt_call *a, dt_comm_request **out) {
    dt_ctx *ctx = comm->ctx;
    if (!ctx->worker) DT_CHECK(dt_worker_create(ctx, &ctx->worker));
    dt_comm_request *r = calloc(1, sizeof *r);
    if (!r) return dt_error(DT_ERR_NOMEM, "non-blocking collective: out of memory");
    dt_completion_init(&r->done);
    r->comm = comm;
    r->run = run;
    r->a = *a;
    comm->had_requests = true;
    atomic_fetch_add(&comm->pending, 1);
    dt_status st = dt_worker_submit(ctx->worker, run_request, r);
    if (st != DT_OK) {
        atomic_fetch_sub(&comm->pending, 1);
        dt_completion_signal(&r->done, st);
        dt_completion_wait(&r->done);
        free(r);
        return st;
    }
    *out = r;
    return DT_OK;
}

dt_status dt_comm_wait(dt_comm_request *request) {
    DT_ARG_NOT_NULL(request);
    dt_status st = dt_completion_wait(&request->done);
    free(request);
    return st;
}

int dt_comm_test(const dt_comm_request *request) {
    return request ? dt_completion_done((dt_completion *)&request->done) : -1;
}

int dt_comm_in_order(dt_comm *comm, dt_call_fn run, const dt_call *a, dt_status *st) {
    /* On the comm thread itself (running a request) the call is already in order. */
    if (!atomic_load(&comm->pending) || dt_worker_is_current(comm->ctx->worker)) return 0;
    dt_comm_request *r;
    *st = dt_comm_submit(comm, run, a, &r);
    if (*st == DT_OK) *st = dt_comm_wait(r);
    return 1;
}

#define START_CHECKS()                                                                             \
    do {                                                                                           \
        DT_ARG(comm != NULL, "%s: argument comm is NULL", __func__);                               \
        DT_ARG(request_out != NULL, "%s: argument request_out is NULL", __func__);                 \
    } while (0)

dt_status dt_all_reduce_start(dt_comm *comm, const void *send, void *recv, size_t count,
                              dt_dtype dtype, dt_reduce_op op, dt_comm_request **request_out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype, .op = op};
    return dt_comm_submit(comm, dt_call_all_reduce, &a, request_out);
}

dt_status dt_all_gather_start(dt_comm *comm, const void *send, void *recv, size_t count,
                              dt_dtype dtype, dt_comm_request **request_out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype};
    return dt_comm_submit(comm, dt_call_all_gather, &a, request_out);
}

dt_status dt_reduce_scatter_start(dt_comm *comm, const void *send, void *recv, size_t count,
                                  dt_dtype dtype, dt_reduce_op op, dt_comm_request **request_out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype, .op = op};
    return dt_comm_submit(comm, dt_call_reduce_scatter, &a, request_out);
}

dt_status dt_all_to_all_start(dt_comm *comm, const void *send, void *recv, size_t count,
                              dt_dtype dtype, dt_comm_request **request_out) {
    START_CHECKS();
    dt_call a = {.send = send, .recv = recv, .count = count, .dtype = dtype};
    return dt_comm_submit(comm, dt_call_all_to_all, &a, request_out);
}
