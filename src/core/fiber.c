/* Ranks as fibers (core/fiber.h). Each thread keeps its fibers in an array and runs them in
 * turn; a fiber that waits records the word it waits on and switches back to its thread's
 * loop, which runs the next fiber whose word has changed (or whose deadline passed). When none
 * can go on, the thread polls a little and then sleeps on the process's doorbell, a futex word
 * that every dt_wake_word rings while fibers run: a waker stores its word, then rings; the
 * thread reads the bell before it looks at its fibers' words, so a store it missed has moved
 * the bell and the sleep returns at once. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/fiber.h"
#include "core/spin.h"

#if defined(__SANITIZE_ADDRESS__)
#define DT_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DT_FIBER_ASAN 1
#endif
#endif
#ifdef DT_FIBER_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                     size_t *size_old);
#endif

#define STACK_BYTES ((size_t)8 << 20) /* a thread's default */
#define MAX_LOCALS 32
/* Polls of the fibers' words before a thread with nothing to run sleeps: a peer on another
 * core is often a few microseconds from its store, and waking from a futex costs this much
 * several times over on a VM. */
#define IDLE_POLLS 4096
/* dt_fiber_turn's slice: longer than a training step's stretch between two collectives, so
 * that a turn seldom splits one. */
#define SLICE_NS (10 * 1000 * 1000)

typedef struct fiber_local {
    void *(*addr)(void);
    size_t size, offset;
    void (*resume)(void);
} fiber_local;

static fiber_local locals[MAX_LOCALS];
static int nlocals;
static size_t locals_bytes;

typedef struct runner runner;

struct dt_fiber {
    ucontext_t uc;
    char *stack; /* mmap'd, STACK_BYTES plus a guard page below */
    void (*fn)(void *);
    void *arg;
    runner *on;
    _Atomic uint32_t *word; /* what it waits for; NULL: it can run */
    uint32_t seen;
    int64_t deadline_ns;
    int64_t resumed_ns; /* when it last began to run, for dt_fiber_turn */
    int done;
    _Atomic uint32_t joined; /* set by the runner once done and off its array */
    unsigned char *saved;    /* its fiber-local values while it does not run */
#ifdef DT_FIBER_ASAN
    void *fake_stack;
#endif
};

struct runner {
    pthread_t thread;
    ucontext_t loop;
    dt_fiber **fibers;
    int n, cap, next;
#ifdef DT_FIBER_ASAN
    const void *loop_bottom;
    size_t loop_size;
    void *fake_stack;
#endif
};

static _Thread_local dt_fiber *self;
static atomic_int fibers_live;  /* runs in progress: wakes ring the bell */
static _Atomic uint32_t bell;    /* futex word */
static _Atomic uint32_t sleepers;
static _Atomic uint32_t thread_waiters; /* ordinary threads in dt_wait_word's futex wait */

void dt_fiber_local(void *(*addr)(void), size_t size, void (*resume)(void)) {
    if (nlocals == MAX_LOCALS) abort(); /* a build error in all but name: raise MAX_LOCALS */
    locals[nlocals++] = (fiber_local){addr, size, locals_bytes, resume};
    locals_bytes += (size + 15) & ~(size_t)15;
}

void dt_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t deadline_ns) {
    struct timespec ts, *rel = NULL;
    if (deadline_ns) {
        int64_t left = deadline_ns - dt_now_ns();
        if (left <= 0) return;
        ts = (struct timespec){.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
        rel = &ts;
    }
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, rel, NULL, 0);
}

void dt_futex_wake(_Atomic uint32_t *word) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

dt_fiber *dt_fiber_self(void) { return self; }

void dt_wake_word(_Atomic uint32_t *word) {
    /* The caller's store came first: a thread counted after this load compares the word in
     * its futex call and sees the store. */
    if (atomic_load(&thread_waiters)) dt_futex_wake(word);
    if (!atomic_load(&fibers_live)) return;
    atomic_fetch_add(&bell, 1);
    if (atomic_load(&sleepers)) dt_futex_wake(&bell);
}

/* From a fiber to its runner's loop, and back when the loop picks it again. */
static void to_loop(dt_fiber *f) {
#ifdef DT_FIBER_ASAN
    __sanitizer_start_switch_fiber(&f->fake_stack, f->on->loop_bottom, f->on->loop_size);
#endif
    swapcontext(&f->uc, &f->on->loop);
#ifdef DT_FIBER_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, NULL, NULL);
#endif
}

void dt_wait_word(_Atomic uint32_t *word, uint32_t seen, int64_t deadline_ns) {
    dt_fiber *f = self;
    if (!f) {
        atomic_fetch_add(&thread_waiters, 1);
        dt_futex_wait(word, seen, deadline_ns);
        atomic_fetch_sub(&thread_waiters, 1);
        return;
    }
    f->word = word;
    f->seen = seen;
    f->deadline_ns = deadline_ns;
    to_loop(f);
}

void dt_fiber_turn(void) {
    dt_fiber *f = self;
    if (f && dt_now_ns() - f->resumed_ns >= SLICE_NS) dt_wait_word(&f->joined, 1, 0); /* at once */
}

static void locals_save(dt_fiber *f) {
    for (int i = 0; i < nlocals; i++)
        memcpy(f->saved + locals[i].offset, locals[i].addr(), locals[i].size);
}

static void locals_restore(const dt_fiber *f) {
    for (int i = 0; i < nlocals; i++) {
        memcpy(locals[i].addr(), f->saved + locals[i].offset, locals[i].size);
        if (locals[i].resume) locals[i].resume();
    }
}

static void trampoline(void) {
    dt_fiber *f = self;
#ifdef DT_FIBER_ASAN
    __sanitizer_finish_switch_fiber(NULL, &f->on->loop_bottom, &f->on->loop_size);
#endif
    f->fn(f->arg);
    f->done = 1;
#ifdef DT_FIBER_ASAN
    __sanitizer_start_switch_fiber(NULL, f->on->loop_bottom, f->on->loop_size);
#endif
    setcontext(&f->on->loop);
}

static void fiber_free(dt_fiber *f) {
    if (!f) return;
    if (f->stack) munmap(f->stack, STACK_BYTES + (size_t)getpagesize());
    free(f->saved);
    free(f);
}

static dt_status fiber_new(void (*fn)(void *), void *arg, dt_fiber **out) {
    const size_t page = (size_t)getpagesize();
    dt_fiber *f = calloc(1, sizeof *f);
    if (!f) return dt_error(DT_ERR_NOMEM, "fiber: out of memory");
    f->fn = fn;
    f->arg = arg;
    f->saved = calloc(1, locals_bytes ? locals_bytes : 1);
    void *s = mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    f->stack = s == MAP_FAILED ? NULL : s;
    if (!f->saved || !f->stack || mprotect(f->stack, page, PROT_NONE) != 0 ||
        getcontext(&f->uc) != 0) {
        fiber_free(f);
        return dt_error(DT_ERR_NOMEM, "fiber: no %zu-byte stack (%s)", STACK_BYTES,
                        strerror(errno));
    }
    f->uc.uc_stack.ss_sp = f->stack + page;
    f->uc.uc_stack.ss_size = STACK_BYTES;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, trampoline, 0);
    *out = f;
    return DT_OK;
}

static dt_status runner_add(runner *r, dt_fiber *f) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 4;
        dt_fiber **grown = realloc(r->fibers, sizeof *grown * (size_t)cap);
        if (!grown) return dt_error(DT_ERR_NOMEM, "fiber: out of memory");
        r->fibers = grown;
        r->cap = cap;
    }
    f->on = r;
    r->fibers[r->n++] = f;
    return DT_OK;
}

static int can_run(const dt_fiber *f, int64_t *now) {
    if (!f->word || atomic_load(f->word) != f->seen) return 1;
    if (!f->deadline_ns) return 0;
    if (!*now) *now = dt_now_ns();
    return *now >= f->deadline_ns;
}

static void run(runner *r, dt_fiber *f) {
    f->word = NULL;
    f->resumed_ns = dt_now_ns();
    locals_restore(f);
    self = f;
#ifdef DT_FIBER_ASAN
    __sanitizer_start_switch_fiber(&r->fake_stack, f->stack + getpagesize(), STACK_BYTES);
#endif
    swapcontext(&r->loop, &f->uc);
#ifdef DT_FIBER_ASAN
    __sanitizer_finish_switch_fiber(r->fake_stack, NULL, NULL);
#endif
    self = NULL;
    locals_save(f);
}

/* Takes a finished fiber off the array; its joiner (or dt_fibers_run) frees it. */
static void retire(runner *r, int i) {
    dt_fiber *f = r->fibers[i];
    memmove(&r->fibers[i], &r->fibers[i + 1], sizeof *r->fibers * (size_t)(r->n - i - 1));
    r->n--;
    if (r->next > i) r->next--;
    atomic_store(&f->joined, 1);
    dt_wake_word(&f->joined);
}

/* The earliest deadline among the waiting fibers (0: none), for the sleep. */
static int64_t first_deadline(const runner *r) {
    int64_t first = 0;
    for (int i = 0; i < r->n; i++) {
        int64_t d = r->fibers[i]->deadline_ns;
        if (r->fibers[i]->word && d && (!first || d < first)) first = d;
    }
    return first;
}

static void *runner_main(void *p) {
    runner *r = p;
    /* The thread's own fiber-local values, back once its fibers are done. */
    unsigned char own[locals_bytes ? locals_bytes : 1];
    for (int i = 0; i < nlocals; i++)
        memcpy(own + locals[i].offset, locals[i].addr(), locals[i].size);
    int polls = 0;
    while (r->n > 0) {
        uint32_t rung = atomic_load(&bell);
        int64_t now = 0;
        int picked = -1;
        for (int k = 0; k < r->n && picked < 0; k++) {
            int i = (r->next + k) % r->n;
            if (can_run(r->fibers[i], &now)) picked = i;
        }
        if (picked >= 0) {
            polls = 0;
            dt_fiber *f = r->fibers[picked];
            r->next = (picked + 1) % r->n;
            run(r, f);
            if (f->done) retire(r, picked);
            continue;
        }
        if (++polls < IDLE_POLLS) {
            dt_cpu_relax();
            continue;
        }
        polls = 0;
        atomic_fetch_add(&sleepers, 1);
        if (atomic_load(&bell) == rung) dt_futex_wait(&bell, rung, first_deadline(r));
        atomic_fetch_sub(&sleepers, 1);
    }
    for (int i = 0; i < nlocals; i++)
        memcpy(locals[i].addr(), own + locals[i].offset, locals[i].size);
    return NULL;
}

typedef struct start {
    void (*fn)(void *, int);
    void *arg;
    int i;
} start;

static void start_main(void *p) {
    start *s = p;
    s->fn(s->arg, s->i);
}

dt_status dt_fibers_run(int n, int threads, void (*fn)(void *arg, int i), void *arg) {
    DT_ARG(n >= 1 && threads >= 1, "dt_fibers_run: n = %d, threads = %d", n, threads);
    if (threads > n) threads = n;
    runner *rs = calloc((size_t)threads, sizeof *rs);
    start *ss = calloc((size_t)n, sizeof *ss);
    dt_fiber **fs = calloc((size_t)n, sizeof *fs);
    dt_fiber **first = malloc(sizeof *first * (size_t)n); /* room for every fiber (below) */
    dt_status st = rs && ss && fs && first ? DT_OK : dt_error(DT_ERR_NOMEM, "fiber: out of memory");
    if (st == DT_OK) rs[0] = (runner){.fibers = first, .cap = n};
    else free(first);
    for (int i = 0; st == DT_OK && i < n; i++) {
        ss[i] = (start){fn, arg, i};
        st = fiber_new(start_main, &ss[i], &fs[i]);
        if (st == DT_OK) st = runner_add(&rs[(int64_t)i * threads / n], fs[i]);
    }
    if (st == DT_OK) {
        /* The calling thread runs the first array; a thread that does not start leaves its
         * fibers to it, before it starts. */
        atomic_fetch_add(&fibers_live, 1);
        int started = 1;
        for (; started < threads; started++)
            if (pthread_create(&rs[started].thread, NULL, runner_main, &rs[started]) != 0) break;
        for (int t = started; t < threads; t++)
            for (int k = 0; k < rs[t].n; k++) runner_add(&rs[0], rs[t].fibers[k]); /* has room */
        runner_main(&rs[0]);
        for (int t = 1; t < started; t++) pthread_join(rs[t].thread, NULL);
        atomic_fetch_sub(&fibers_live, 1);
    }
    for (int i = 0; fs && i < n; i++) fiber_free(fs[i]);
    for (int t = 0; rs && t < threads; t++) free(rs[t].fibers);
    free(rs);
    free(ss);
    free(fs);
    return st;
}

dt_status dt_fiber_spawn(void (*fn)(void *arg), void *arg, dt_fiber **out) {
    DT_ARG(self != NULL, "dt_fiber_spawn: the caller is not a fiber");
    dt_fiber *f;
    DT_CHECK(fiber_new(fn, arg, &f));
    dt_status st = runner_add(self->on, f);
    if (st != DT_OK) {
        fiber_free(f);
        return st;
    }
    *out = f;
    return DT_OK;
}

void dt_fiber_join(dt_fiber *f) {
    while (!atomic_load(&f->joined)) dt_wait_word(&f->joined, 0, 0);
    fiber_free(f);
}
