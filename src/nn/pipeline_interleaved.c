/* The interleaved 1F1B schedule (dtensor/pipeline.h) as data. Each rank's computations come in
 * Megatron-LM's order (forward_backward_pipelining_with_interleaving); where its messages go
 * in that list comes from simulating every rank at once: forwards take one time unit,
 * backwards two, and a message passes when both its ranks are between computations. The
 * events of that run form one global order and each rank's list is its part of it, so with
 * blocking (rendezvous) messages the earliest unfinished event always has every rank it
 * involves at it: the lists cannot deadlock, whatever the real durations. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "nn/pipeline_impl.h"

enum { COST_F = 1, COST_B = 2 };

typedef struct comp {
    dt_pipeline_op op; /* DT_PIPE_FORWARD or DT_PIPE_BACKWARD */
    int chunk, micro;
} comp;

/* Rank s's 2 v m computations. Forward k runs chunk (k mod p v) / p of the rank, micro-batch
 * (k / (p v)) p + k mod p: p micro-batches through each of the rank's chunks in turn; backward
 * k the same with the chunks in reverse. Warm-up: (v - 1) p + p - s - 1 forwards. */
static void rank_order(int p, int v, int m, int s, comp *out) {
    int total = v * m, warm = (v - 1) * p + p - s - 1, n = 0;
    if (warm > total) warm = total;
#define AT(k, fwd)                                                                                 \
    (comp) {                                                                                       \
        .op = (fwd) ? DT_PIPE_FORWARD : DT_PIPE_BACKWARD,                                          \
        .chunk = ((fwd) ? (k) % (p * v) / p : v - 1 - (k) % (p * v) / p) * p + s,                  \
        .micro = (k) / (p * v) * p + (k) % p                                                       \
    }
    for (int k = 0; k < warm; k++)
        out[n++] = AT(k, 1);
    for (int k = 0; k < total - warm; k++) {
        out[n++] = AT(k + warm, 1);
        out[n++] = AT(k, 0);
    }
    for (int k = total - warm; k < total; k++)
        out[n++] = AT(k, 0);
#undef AT
}

typedef struct msg {
    int act; /* 1: chunk's output to chunk + 1; 0: chunk's input gradient to chunk - 1 */
    int chunk, micro, to;
} msg;

typedef struct sim {
    int p, v, m, C, stage;
    comp *order;    /* p lists of 2 v m */
    int *pc, *busy; /* per rank: next computation; the time its running one ends, -1: none */
    comp *running;
    msg *queue; /* per rank, 2 v m slots: messages made, not yet passed, in order */
    int *nqueue;
    unsigned char *have_act, *have_grad; /* C m: chunk's input / output gradient is there */
    dt_pipeline_action *a;
    int n, cap;
} sim;

static void emit(sim *S, int rank, dt_pipeline_op op, int chunk, int micro, int peer) {
    if (rank != S->stage) return;
    if (S->a && S->n < S->cap)
        S->a[S->n] = (dt_pipeline_action){.op = op, .micro = micro, .peer = peer, .chunk = chunk};
    S->n++;
}

static int ready(const sim *S, int r) {
    const comp *c = &S->order[(size_t)r * 2 * S->v * S->m + S->pc[r]];
    if (c->op == DT_PIPE_FORWARD) return c->chunk == 0 || S->have_act[c->chunk * S->m + c->micro];
    return c->chunk == S->C - 1 || S->have_grad[c->chunk * S->m + c->micro];
}

/* Passes, in order, every queued message whose two ranks are both between computations. */
static void pass_messages(sim *S) {
    int p = S->p, cap = 2 * S->v * S->m;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int r = 0; r < p; r++) {
            if (S->busy[r] >= 0) continue;
            msg *q = &S->queue[(size_t)r * cap];
            for (int k = 0; k < S->nqueue[r];) {
                msg x = q[k];
                if (S->busy[x.to] >= 0) {
                    k++;
                    continue;
                }
                memmove(&q[k], &q[k + 1], sizeof *q * (size_t)(S->nqueue[r] - k - 1));
                S->nqueue[r]--;
                int into = x.act ? x.chunk + 1 : x.chunk - 1, at = into * S->m + x.micro;
                emit(S, r, x.act ? DT_PIPE_SEND_ACT : DT_PIPE_SEND_GRAD, x.chunk, x.micro, x.to);
                emit(S, x.to, x.act ? DT_PIPE_RECV_ACT : DT_PIPE_RECV_GRAD, into, x.micro, r);
                (x.act ? S->have_act : S->have_grad)[at] = 1;
                moved = 1;
            }
        }
    }
}

static dt_status run(sim *S) {
    int p = S->p, n = 2 * S->v * S->m;
    for (int r = 0; r < p; r++)
        S->busy[r] = -1;
    /* Megatron's order is feasible (each computation's inputs come from computations earlier in
     * their ranks' orders), so some rank computes in every span of COST_B units: the run ends
     * within this many */
    long limit = (long)(COST_F + COST_B) * n * p + 8;
    for (long t = 0;; t++) {
        DT_ASSERT(t <= limit);
        for (int r = 0; r < p; r++) {
            if (S->busy[r] < 0 || S->busy[r] > t) continue;
            comp c = S->running[r];
            S->busy[r] = -1;
            msg *q = &S->queue[(size_t)r * n];
            if (c.op == DT_PIPE_FORWARD && c.chunk < S->C - 1)
                q[S->nqueue[r]++] = (msg){1, c.chunk, c.micro, (r + 1) % p};
            if (c.op == DT_PIPE_BACKWARD && c.chunk > 0)
                q[S->nqueue[r]++] = (msg){0, c.chunk, c.micro, (r + p - 1) % p};
        }
        pass_messages(S);
        int left = 0;
        for (int r = 0; r < p; r++) {
            if (S->busy[r] < 0 && S->pc[r] < n && ready(S, r)) {
                comp c = S->order[(size_t)r * n + S->pc[r]++];
                S->running[r] = c;
                S->busy[r] = (int)t + (c.op == DT_PIPE_FORWARD ? COST_F : COST_B);
                emit(S, r, c.op, c.chunk, c.micro, -1);
            }
            left += S->pc[r] < n || S->busy[r] >= 0 || S->nqueue[r] > 0;
        }
        if (!left) return DT_OK;
    }
}

dt_status dt_pipe_interleaved(int p, int v, int m, int stage, dt_pipeline_action *actions, int cap,
                              int *n_out) {
    size_t n = (size_t)(2 * v * m), P = (size_t)p;
    sim S = {.p = p, .v = v, .m = m, .C = p * v, .stage = stage, .a = actions, .cap = cap};
    S.order = malloc(sizeof *S.order * P * n);
    S.queue = malloc(sizeof *S.queue * P * n);
    S.running = calloc(P, sizeof *S.running);
    S.pc = calloc(P, sizeof *S.pc);
    S.busy = calloc(P, sizeof *S.busy);
    S.nqueue = calloc(P, sizeof *S.nqueue);
    S.have_act = calloc(P * n, 1);
    S.have_grad = calloc(P * n, 1);
    dt_status st = DT_OK;
    if (!S.order || !S.queue || !S.running || !S.pc || !S.busy || !S.nqueue || !S.have_act ||
        !S.have_grad)
        st = dt_error(DT_ERR_NOMEM, "dt_pipeline_schedule_build: out of memory");
    for (int r = 0; st == DT_OK && r < p; r++)
        rank_order(p, v, m, r, &S.order[(size_t)r * n]);
    if (st == DT_OK) st = run(&S);
    if (st == DT_OK) *n_out = S.n;
    free(S.order), free(S.queue), free(S.running), free(S.pc), free(S.busy), free(S.nqueue);
    free(S.have_act), free(S.have_grad);
    return st;
}
