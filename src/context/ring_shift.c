/* dt_ring_shift_start: one ring step as a request on the communication thread (the pattern of
 * comm/async.c's non-blocking collectives, with a send and a receive instead of one call). */
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "comm/request.h"
#include "context/ring.h"
#include "core/check.h"

typedef struct shift_request {
    dt_request base;
    dt_comm *comm;
    const double *send;
    double *recv;
    size_t send_count, recv_count;
} shift_request;

/* Counted as one send and one recv on the group. */
static dt_status run(dt_request *base) {
    shift_request *r = (shift_request *)base;
    int me = dt_comm_rank(r->comm), n = dt_comm_size(r->comm);
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    dt_status st = DT_OK;
    if (me % 2 == 0) {
        st = dt_send(r->comm, r->send, r->send_count, DT_F64, next);
        if (st == DT_OK) st = dt_recv(r->comm, r->recv, r->recv_count, DT_F64, prev);
    } else {
        st = dt_recv(r->comm, r->recv, r->recv_count, DT_F64, prev);
        if (st == DT_OK) st = dt_send(r->comm, r->send, r->send_count, DT_F64, next);
    }
    return st;
}

static void destroy(dt_request *base) { free(base); }

dt_status dt_ring_shift_start(dt_comm *comm, const double *send, size_t send_count, double *recv,
                              size_t recv_count, dt_request **out) {
    shift_request *r = calloc(1, sizeof *r);
    if (!r) return dt_error(DT_ERR_NOMEM, "ring shift: out of memory");
    *r = (shift_request){.base = {.run = run, .destroy = destroy}, .comm = comm, .send = send,
                         .recv = recv, .send_count = send_count, .recv_count = recv_count};
    DT_CHECK(dt_request_submit(comm->ctx, &r->base));
    *out = &r->base;
    return DT_OK;
}
