/* The communication thread behind async calls: a FIFO of tasks and one pthread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/worker.h"
#include "core/check.h"
#include "core/fiber.h"

typedef struct task {
    struct task *next;
    dt_task_fn fn;
    void *arg;
} task;

struct dt_worker {
    pthread_t thread;
    dt_fiber *fiber; /* instead of the thread, when the rank is a fiber */
    pthread_mutex_t mu;
    _Atomic uint32_t queued; /* bumped after each submit and the stop */
    task *head, *tail;
    int stop;
    dt_ctx *ctx;
};

static _Thread_local const dt_worker *running; /* the worker whose task runs here */
DT_FIBER_LOCAL(running)

static void worker_loop(void *p) {
    dt_worker *w = p;
    running = w;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop) {
            const uint32_t seen = atomic_load(&w->queued); /* under mu: a later submit moves it */
            pthread_mutex_unlock(&w->mu);
            dt_wait_word(&w->queued, seen, 0);
            pthread_mutex_lock(&w->mu);
        }
        if (!w->head) break;
        task *t = w->head;
        w->head = t->next;
        if (!w->head) w->tail = NULL;
        pthread_mutex_unlock(&w->mu);
        dt_ctx_bind(w->ctx); /* the rank's GPU streams, when it has one (set at any time) */
        t->fn(t->arg);
        free(t);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

static void *worker_main(void *p) {
    worker_loop(p);
    return NULL;
}

dt_status dt_worker_create(dt_ctx *ctx, dt_worker **worker_out) {
    dt_worker *w = calloc(1, sizeof *w);
    if (!w) return dt_error(DT_ERR_NOMEM, "communication thread: out of memory");
    w->ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    if (dt_fiber_self()) {
        dt_status st = dt_fiber_spawn(worker_loop, w, &w->fiber);
        if (st != DT_OK) {
            pthread_mutex_destroy(&w->mu);
            free(w);
            return st;
        }
    } else if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return dt_error(DT_ERR_SYSTEM, "communication thread: pthread_create failed");
    }
    *worker_out = w;
    return DT_OK;
}

/* After a change to the queue or the stop flag, made under mu. */
static void kick(dt_worker *w) {
    atomic_fetch_add(&w->queued, 1);
    dt_wake_word(&w->queued);
}

dt_status dt_worker_submit(dt_worker *w, dt_task_fn fn, void *arg) {
    task *t = malloc(sizeof *t);
    if (!t) return dt_error(DT_ERR_NOMEM, "communication thread: out of memory");
    *t = (task){.fn = fn, .arg = arg};
    pthread_mutex_lock(&w->mu);
    if (w->tail) w->tail->next = t;
    else w->head = t;
    w->tail = t;
    pthread_mutex_unlock(&w->mu);
    kick(w);
    return DT_OK;
}

void dt_completion_init(dt_completion *c) { memset(c, 0, sizeof *c); }

void dt_completion_signal(dt_completion *c, dt_status st) {
    c->status = st;
    if (st != DT_OK) snprintf(c->message, sizeof c->message, "%s", dt_last_error());
    atomic_store(&c->done, 1);
    dt_wake_word(&c->done);
}

dt_status dt_completion_wait(dt_completion *c) {
    while (!atomic_load(&c->done)) dt_wait_word(&c->done, 0, 0);
    if (c->status != DT_OK) dt_error(c->status, "%s", c->message);
    return c->status;
}

int dt_completion_done(dt_completion *c) { return (int)atomic_load(&c->done); }

int dt_worker_is_current(const dt_worker *w) { return w && running == w; }

void dt_worker_destroy(dt_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_mutex_unlock(&w->mu);
    kick(w);
    if (w->fiber)
        dt_fiber_join(w->fiber);
    else
        pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
