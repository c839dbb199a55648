/* Ranks as fibers, and the waits that let them take turns.
 *
 * When a local run has more ranks than the process has cores, the OS slices the rank threads
 * wherever it likes: a rank preempted a millisecond before a collective keeps its peers waiting
 * while a core idles, and every hand-over between ranks costs a futex wake. Instead the local
 * runtime may start one thread per core and run its ranks on those threads as fibers: a rank
 * runs until it waits (dt_wait_word), and then its core's thread switches, in user space, to
 * the next of its ranks that can go on.
 *
 * Every wait of the library that a rank may reach while its peers run goes through
 * dt_wait_word, and every store that ends such a wait is followed by dt_wake_word. On an
 * ordinary thread they are a futex wait and wake.
 *
 * Fibers on one thread share its thread-local variables, so each variable that holds a rank's
 * state across a wait is declared with DT_FIBER_LOCAL: a switch saves the values of the fiber
 * that stops and restores those of the one that goes on. */
#ifndef DT_CORE_FIBER_H
#define DT_CORE_FIBER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dtensor/status.h"

/* Until *word != seen, or CLOCK_MONOTONIC passes deadline_ns (0: no deadline). It may return
 * early, as a futex does: the caller checks its condition again. */
void dt_wait_word(_Atomic uint32_t *word, uint32_t seen, int64_t deadline_ns);

/* After a store to *word that may end a dt_wait_word on it (sequentially consistent, as
 * atomic_store and atomic_fetch_add are by default). */
void dt_wake_word(_Atomic uint32_t *word);

/* The plain futex under both, for threads that must block their own thread even when they run
 * a fiber (the intra-op pool's workers and callers): a wait until *word != seen or the
 * deadline (0: none), which may return early, and a wake of every waiter. */
void dt_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t deadline_ns);
void dt_futex_wake(_Atomic uint32_t *word);

/* A fiber that has run for SLICE since it last waited lets its thread's other fibers run
 * first (the library calls it as each collective starts): a rank that loops on collectives that
 * never wait, say on a group of its own, would otherwise keep a peer it shares a thread with
 * from ever running. Nothing on an ordinary thread. */
void dt_fiber_turn(void);

typedef struct dt_fiber dt_fiber;

/* Runs fn(arg, i) for i in [0, n) as fibers on `threads` threads (fiber i on thread
 * i * threads / n) and returns once every fiber has returned. Fails, with nothing run, when
 * the stacks or threads cannot be had. */
dt_status dt_fibers_run(int n, int threads, void (*fn)(void *arg, int i), void *arg);

/* The calling fiber, or NULL on an ordinary thread. */
dt_fiber *dt_fiber_self(void);

/* Starts fn(arg) as another fiber on the calling fiber's thread (a rank's communication
 * thread); dt_fiber_join waits for it to return and frees it. */
dt_status dt_fiber_spawn(void (*fn)(void *arg), void *arg, dt_fiber **out);
void dt_fiber_join(dt_fiber *f);

/* A thread-local variable that belongs to the fiber, not to the thread (file scope, after the
 * variable's definition). `resume`, when not NULL, runs after the value is restored. */
void dt_fiber_local(void *(*addr)(void), size_t size, void (*resume)(void));
#define DT_FIBER_LOCAL_RESUME(var, resume)                                                       \
    static void *var##_fiber_addr(void) { return (void *)&var; }                                 \
    __attribute__((constructor)) static void var##_fiber_local(void) {                           \
        dt_fiber_local(var##_fiber_addr, sizeof var, resume);                                    \
    }
#define DT_FIBER_LOCAL(var) DT_FIBER_LOCAL_RESUME(var, NULL)

#endif
