/* Pipeline schedules as data: the actions one stage runs, in order (dtensor/pipeline.h). The
 * executor (pipeline.c) runs these lists and nothing else, so a test that simulates every
 * stage's list against the others checks the schedule the ranks run. */
#include <ctype.h>

#include "core/check.h"
#include "nn/pipeline_impl.h"

const char *dt_pipeline_schedule_name(dt_pipeline_schedule schedule) {
    switch (schedule) {
    case DT_PIPELINE_AFAB:
        return "afab";
    case DT_PIPELINE_1F1B:
        return "1f1b";
    case DT_PIPELINE_INTERLEAVED_1F1B:
        return "interleaved_1f1b";
    default:
        return "?";
    }
}

/* a and b equal, case and '_' ignored */
static int same_name(const char *a, const char *b) {
    for (;; a++, b++) {
        while (*a == '_')
            a++;
        while (*b == '_')
            b++;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
        if (!*a) return 1;
    }
}

dt_status dt_pipeline_schedule_parse(const char *name, dt_pipeline_schedule *out) {
    DT_ARG_NOT_NULL(name);
    DT_ARG_NOT_NULL(out);
    if (same_name(name, "gpipe")) return *out = DT_PIPELINE_AFAB, DT_OK;
    for (int k = 0; k < DT_PIPELINE_SCHEDULE_COUNT; k++)
        if (same_name(name, dt_pipeline_schedule_name((dt_pipeline_schedule)k)))
            return *out = (dt_pipeline_schedule)k, DT_OK;
    return dt_error(DT_ERR_ARG,
                    "dt_pipeline_schedule_parse: argument name = \"%s\" is not a schedule (want "
                    "afab, 1f1b or interleaved_1f1b)",
                    name);
}

typedef struct builder {
    dt_pipeline_action *a;
    int n, cap, stage, nstages;
} builder;

static void emit(builder *b, dt_pipeline_op op, int micro, int peer) {
    if (b->a && b->n < b->cap)
        b->a[b->n] =
            (dt_pipeline_action){.op = op, .micro = micro, .peer = peer, .chunk = b->stage};
    b->n++;
}

/* Sends and receives exist only towards a neighbour that exists. */
static int first(const builder *b) {
    return b->stage == 0;
}
static int last(const builder *b) {
    return b->stage == b->nstages - 1;
}

static void recv_act(builder *b, int i) {
    if (!first(b)) emit(b, DT_PIPE_RECV_ACT, i, b->stage - 1);
}
static void send_act(builder *b, int i) {
    if (!last(b)) emit(b, DT_PIPE_SEND_ACT, i, b->stage + 1);
}
static void recv_grad(builder *b, int i) {
    if (!last(b)) emit(b, DT_PIPE_RECV_GRAD, i, b->stage + 1);
}
static void send_grad(builder *b, int i) {
    if (!first(b)) emit(b, DT_PIPE_SEND_GRAD, i, b->stage - 1);
}

static void afab(builder *b, int m) {
    for (int i = 0; i < m; i++) {
        recv_act(b, i);
        emit(b, DT_PIPE_FORWARD, i, -1);
        send_act(b, i);
    }
    for (int i = 0; i < m; i++) {
        recv_grad(b, i);
        emit(b, DT_PIPE_BACKWARD, i, -1);
        send_grad(b, i);
    }
}

/* Megatron-LM's forward_backward_pipelining_without_interleaving. Its paired calls
 * (send_forward_recv_backward on stage s meets send_backward_recv_forward on stage s + 1) are
 * exchanges: the lower stage sends first, the upper one receives first. */
static void one_f_one_b(builder *b, int m) {
    int p = b->nstages, s = b->stage;
    int warmup = p - s - 1 < m ? p - s - 1 : m, rest = m - warmup;
    for (int i = 0; i < warmup; i++) {
        recv_act(b, i);
        emit(b, DT_PIPE_FORWARD, i, -1);
        send_act(b, i);
    }
    if (rest > 0) recv_act(b, warmup);
    for (int k = 0; k < rest; k++) {
        emit(b, DT_PIPE_FORWARD, warmup + k, -1);
        send_act(b, warmup + k); /* exchange with stage s + 1: we are the lower */
        recv_grad(b, k);
        emit(b, DT_PIPE_BACKWARD, k, -1);
        if (k < rest - 1) recv_act(b, warmup + k + 1); /* exchange with stage s - 1: the upper */
        send_grad(b, k);
    }
    for (int k = rest; k < m; k++) {
        recv_grad(b, k);
        emit(b, DT_PIPE_BACKWARD, k, -1);
        send_grad(b, k);
    }
}

dt_status dt_pipeline_schedule_build(dt_pipeline_schedule schedule, int nstages, int nvirtual,
                                     int nmicro, int stage, dt_pipeline_action *actions, int cap,
                                     int *n_out) {
    DT_ARG_NOT_NULL(n_out);
    DT_ARG((unsigned)schedule < DT_PIPELINE_SCHEDULE_COUNT,
           "dt_pipeline_schedule_build: argument schedule = %d is not a schedule", (int)schedule);
    DT_ARG(nstages >= 1, "dt_pipeline_schedule_build: argument nstages = %d (want >= 1)", nstages);
    DT_ARG(nvirtual >= 1, "dt_pipeline_schedule_build: argument nvirtual = %d (want >= 1)",
           nvirtual);
    DT_ARG(nvirtual == 1 || schedule == DT_PIPELINE_INTERLEAVED_1F1B,
           "dt_pipeline_schedule_build: argument nvirtual = %d needs schedule interleaved_1f1b, "
           "not %s (one stage per rank)",
           nvirtual, dt_pipeline_schedule_name(schedule));
    DT_ARG(nvirtual == 1 || nstages >= 2,
           "dt_pipeline_schedule_build: argument nvirtual = %d needs nstages >= 2, not %d",
           nvirtual, nstages);
    DT_ARG(nmicro >= 1, "dt_pipeline_schedule_build: argument nmicro = %d (want >= 1)", nmicro);
    DT_ARG(nvirtual == 1 || nmicro % nstages == 0,
           "dt_pipeline_schedule_build: argument nmicro = %d is not a multiple of nstages = %d "
           "(interleaved 1F1B with nvirtual = %d runs micro-batches in rounds of nstages)",
           nmicro, nstages, nvirtual);
    DT_ARG(stage >= 0 && stage < nstages,
           "dt_pipeline_schedule_build: argument stage = %d is not in [0, %d)", stage, nstages);
    builder b = {.a = actions, .cap = cap, .stage = stage, .nstages = nstages};
    if (nvirtual > 1)
        DT_CHECK(dt_pipe_interleaved(nstages, nvirtual, nmicro, stage, actions, cap, &b.n));
    else if (schedule == DT_PIPELINE_AFAB)
        afab(&b, nmicro);
    else /* 1F1B, and interleaved 1F1B with one chunk per rank, which is 1F1B */
        one_f_one_b(&b, nmicro);
    DT_ARG(!actions || cap >= b.n,
           "dt_pipeline_schedule_build: argument cap = %d is below the %d actions", cap, b.n);
    *n_out = b.n;
    return DT_OK;
}
