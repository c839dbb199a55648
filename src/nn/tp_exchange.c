/* dt_tp_exchange_start: one shifted exchange as a request on the communication thread (the
 * pattern of comm/async.c's non-blocking collectives, a send and a receive instead of one
 * collective call). */
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "comm/request.h"
#include "core/check.h"
#include "nn/tp_exchange.h"

typedef struct exchange_request {
    dt_request base;
    dt_comm *comm;
    int shift;
    const void *send;
    void *recv;
    size_t send_count, recv_count;
    dt_dtype dtype;
} exchange_request;

/* me's position along its cycle of +shift (mod n), which starts at me % gcd(n, shift). */
static int position(int me, int shift, int n) {
    int g = n, b = shift;
    while (b) {
        int t = g % b;
        g = b, b = t;
    }
    int k = 0;
    for (int at = me % g; at != me; at = (at + shift) % n)
        k++;
    return k;
}

static dt_status run(dt_request *base) {
    exchange_request *r = (exchange_request *)base;
    int me = dt_comm_rank(r->comm), n = dt_comm_size(r->comm);
    int to = (me + r->shift) % n, from = (me - r->shift + n) % n;
    dt_status st;
    if (position(me, r->shift, n) % 2 == 0) {
        st = dt_send(r->comm, r->send, r->send_count, r->dtype, to);
        if (st == DT_OK) st = dt_recv(r->comm, r->recv, r->recv_count, r->dtype, from);
    } else {
        st = dt_recv(r->comm, r->recv, r->recv_count, r->dtype, from);
        if (st == DT_OK) st = dt_send(r->comm, r->send, r->send_count, r->dtype, to);
    }
    return st;
}

static void destroy(dt_request *base) {
    free(base);
}

dt_status dt_tp_exchange_start(dt_comm *comm, int shift, const void *send, size_t send_count,
                               void *recv, size_t recv_count, dt_dtype dtype, dt_request **out) {
    DT_ASSERT(comm && shift > 0 && shift < dt_comm_size(comm));
    exchange_request *r = calloc(1, sizeof *r);
    if (!r) return dt_error(DT_ERR_NOMEM, "async tp exchange: out of memory");
    *r = (exchange_request){.base = {.run = run, .destroy = destroy},
                            .comm = comm,
                            .shift = shift,
                            .send = send,
                            .recv = recv,
                            .send_count = send_count,
                            .recv_count = recv_count,
                            .dtype = dtype};
    DT_CHECK(dt_request_submit(comm->ctx, &r->base));
    *out = &r->base;
    return DT_OK;
}
