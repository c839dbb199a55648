/* The communication thread behind async calls: a FIFO of tasks and one pthread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/worker.h"
#include "core/check.h"

typedef struct task {
    struct task *next;
    dt_task_fn fn;
    void *arg;
} task;

struct dt_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *head, *tail;
    int stop;
    dt_ctx *ctx;
};

static void *worker_main(void *p) {
    dt_worker *w = p;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
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
    return NULL;
}

dt_status dt_worker_create(dt_ctx *ctx, dt_worker **worker_out) {
    dt_worker *w = calloc(1, sizeof *w);
    if (!w) return dt_error(DT_ERR_NOMEM, "communication thread: out of memory");
    w->ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return dt_error(DT_ERR_SYSTEM, "communication thread: pthread_create failed");
    }
    *worker_out = w;
    return DT_OK;
}

dt_status dt_worker_submit(dt_worker *w, dt_task_fn fn, void *arg) {
    task *t = malloc(sizeof *t);
    if (!t) return dt_error(DT_ERR_NOMEM, "communication thread: out of memory");
    *t = (task){.fn = fn, .arg = arg};
    pthread_mutex_lock(&w->mu);
    if (w->tail) w->tail->next = t;
    else w->head = t;
    w->tail = t;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return DT_OK;
}

void dt_completion_init(dt_completion *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

void dt_completion_signal(dt_completion *c, dt_status st) {
    pthread_mutex_lock(&c->mu);
    c->status = st;
    if (st != DT_OK) snprintf(c->message, sizeof c->message, "%s", dt_last_error());
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

dt_status dt_completion_wait(dt_completion *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    if (c->status != DT_OK) dt_error(c->status, "%s", c->message);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    return c->status;
}

int dt_completion_done(dt_completion *c) {
    pthread_mutex_lock(&c->mu);
    int done = c->done;
    pthread_mutex_unlock(&c->mu);
    return done;
}

int dt_worker_is_current(const dt_worker *w) {
    return w && pthread_equal(pthread_self(), w->thread);
}

void dt_worker_destroy(dt_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
