/* Host buffers for tensor data and collective scratch: per-rank arenas of size classes, and
 * shared lists for threads that run no rank. Must not know what a rank is (comm binds them).
 *
 * Size classes: four per power of two (at most 25% wasted), from 64 bytes. A 64-byte header
 * keeps the class and the arena a block returns to. Why arenas: glibc maps blocks from 128 KiB
 * with mmap and returns freed heap tops to the kernel (madvise), so a training step's
 * temporaries came back as fresh zeroed pages every step (page faults were a fifth of a
 * 1-rank step's CPU time). A rank's arena keeps every block it freed, small or large, on its
 * own lists (no lock: only the rank's thread touches them) until the rank ends, so a steady
 * state step reuses the same pages. A block freed by another thread goes back through the
 * arena's locked "remote" list. Up to DT_HOST_CACHE_MB (default 1024) megabytes per arena, and
 * as many on the shared lists, which cache only blocks from 64 KiB (below that glibc's own
 * per-thread cache is as fast: posix_memalign is not, it takes glibc's slow path each call).
 * Blocks from 4 MiB on are 2 MiB-aligned and asked to be backed by transparent huge pages (a
 * large copy or a strided read then walks 512x fewer page tables); where the kernel refuses
 * (THP off, not Linux) they are plain pages, and DT_HUGE_PAGES=0 turns the request off. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"
#include "core/fiber.h"

#define HEADER           64
#define MIN_SHIFT        6  /* the smallest class: 64 bytes */
#define SHARED_MIN_CLASS 41 /* class_of(64 KiB): the shared lists start there */
#define NCLASS           (1 + 4 * (44 - MIN_SHIFT))
#define HUGE_MIN         ((size_t)4 << 20)
#define HUGE_PAGE        ((size_t)2 << 20)

typedef struct block {
    struct block *next;
    dt_host_arena *arena; /* whose lists take it back; NULL: the shared lists */
    int cls;              /* 0: plain malloc, not cached */
    size_t size;          /* class_size(cls), kept: the free path must not divide */
    void *raw;            /* what malloc returned (cls 0) */
} block;
_Static_assert(sizeof(block) <= HEADER, "the block header outgrew its room");

/* The owner thread (the one it is bound to) alone touches lists, cached and owner_out; close
 * comes after the owner unbound it (the caller's join or the same thread), so it reads them
 * without a lock too. The blocks still out then are owner_out - remote_frees. */
struct dt_host_arena {
    block *lists[NCLASS];
    size_t cached;           /* bytes on lists */
    long owner_out;          /* blocks handed out, less those the owner freed */
    pthread_mutex_t mu;      /* guards the rest */
    _Atomic(block *) remote; /* freed by other threads, for the owner to take back */
    long remote_frees;       /* blocks freed by other threads before close */
    long out_after_close;    /* blocks still out after close: the last one frees the arena */
    int closed;
};

_Thread_local dt_host_arena *dt_host_bound;
DT_FIBER_LOCAL(dt_host_bound)

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static block *shared_lists[NCLASS];
static size_t shared_cached;
static _Atomic size_t cache_limit = (size_t)-1;

static size_t limit(void) {
    size_t l = atomic_load_explicit(&cache_limit, memory_order_relaxed);
    if (l == (size_t)-1) { /* every thread computes the same */
        const char *env = getenv("DT_HOST_CACHE_MB");
        l = (env ? (size_t)strtoull(env, NULL, 10) : 1024) << 20;
        atomic_store_explicit(&cache_limit, l, memory_order_relaxed);
    }
    return l;
}

/* Class c >= 1 holds (4 + (c-1) % 4) / 4 * 2^(MIN_SHIFT + (c-1) / 4) bytes. */
static size_t class_size(int c) {
    unsigned k = (unsigned)c - 1;
    return ((size_t)(4 + (k & 3)) << (MIN_SHIFT + (k >> 2))) >> 2;
}

/* The smallest class that holds bytes; -1 when none does. */
static int class_of(size_t bytes) {
    if (bytes <= ((size_t)1 << MIN_SHIFT)) return 1;
    int lg = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^lg < bytes <= 2^(lg+1) */
    size_t quarter = (size_t)1 << (lg - 2);
    int c = 1 + 4 * (lg - MIN_SHIFT) + (int)((bytes - ((size_t)1 << lg) + quarter - 1) >> (lg - 2));
    return c < NCLASS ? c : -1;
}

static int huge_wanted(void) {
    static int wanted = -1; /* a benign race: every thread computes the same */
    if (wanted < 0) {
        const char *env = getenv("DT_HUGE_PAGES");
        wanted = !(env && env[0] == '0');
    }
    return wanted;
}

/* A block of at least len bytes on huge pages where the kernel grants them; NULL when len is
 * small, huge pages are off, or the aligned allocation failed (the caller falls back). */
static block *huge_block(size_t len) {
#ifdef MADV_HUGEPAGE
    if (len < HUGE_MIN || !huge_wanted()) return NULL;
    len = (len + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p;
    if (posix_memalign(&p, HUGE_PAGE, len) != 0) return NULL;
    (void)madvise(p, len, MADV_HUGEPAGE); /* refused: plain pages, same memory */
    return p;
#else
    (void)len;
    (void)huge_wanted;
    return NULL;
#endif
}

/* A new block of size bytes after its header, on HEADER boundaries. Below the huge-page size
 * malloc'd with room to align by hand: posix_memalign takes glibc's slow path on every call. */
static block *fresh_block(size_t size) {
    block *b = huge_block(size + HEADER);
    if (b) {
        b->raw = b;
        return b;
    }
    char *raw = malloc(size + 2 * HEADER);
    if (!raw) return NULL;
    b = (block *)(((uintptr_t)raw + HEADER) & ~(uintptr_t)(HEADER - 1));
    b->raw = raw;
    return b;
}

/* Takes back what other threads freed into a's lists; the owner thread only. */
static void take_remote(dt_host_arena *a) {
    pthread_mutex_lock(&a->mu);
    block *b = atomic_exchange(&a->remote, NULL);
    pthread_mutex_unlock(&a->mu);
    while (b) {
        block *next = b->next;
        b->next = a->lists[b->cls];
        a->lists[b->cls] = b;
        a->cached += b->size;
        b = next;
    }
}

void *dt_host_alloc(size_t bytes) {
    int cls = class_of(bytes);
    if (cls < 0) return NULL;
    dt_host_arena *a = dt_host_bound;
    block *b = NULL;
    if (a) {
        if (!a->lists[cls] && atomic_load_explicit(&a->remote, memory_order_relaxed))
            take_remote(a);
        if ((b = a->lists[cls])) {
            a->lists[cls] = b->next;
            a->cached -= b->size;
        }
    } else if (cls >= SHARED_MIN_CLASS) {
        pthread_mutex_lock(&shared_mu);
        if ((b = shared_lists[cls])) {
            shared_lists[cls] = b->next;
            shared_cached -= b->size;
        }
        pthread_mutex_unlock(&shared_mu);
    } else {
        cls = 0; /* small and no arena: glibc's per-thread cache */
    }
    if (!b) {
        size_t size = cls ? class_size(cls) : bytes ? bytes : 1;
        if (!(b = fresh_block(size))) return NULL;
        b->size = size;
    }
    if (a) a->owner_out++;
    b->cls = cls;
    b->arena = a;
    return (char *)b + HEADER;
}

void *dt_host_calloc(size_t bytes) {
    void *p = dt_host_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

static void arena_free(dt_host_arena *a) {
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* A block of arena a freed by a thread a is not bound to. */
static void remote_free(dt_host_arena *a, block *b) {
    pthread_mutex_lock(&a->mu);
    if (!a->closed) {
        b->next = atomic_load_explicit(&a->remote, memory_order_relaxed);
        atomic_store_explicit(&a->remote, b, memory_order_relaxed);
        a->remote_frees++;
        pthread_mutex_unlock(&a->mu);
        return;
    }
    int last = --a->out_after_close == 0;
    pthread_mutex_unlock(&a->mu);
    free(b->raw);
    if (last) arena_free(a);
}

void dt_host_free(void *p) {
    if (!p) return;
    block *b = (block *)((char *)p - HEADER);
    dt_host_arena *a = b->arena;
    if (a && a == dt_host_bound) {
        if (a->cached + b->size <= limit()) {
            b->next = a->lists[b->cls];
            a->lists[b->cls] = b;
            a->cached += b->size;
        } else {
            free(b->raw);
        }
        a->owner_out--;
        return;
    }
    if (a) {
        remote_free(a, b);
        return;
    }
    if (b->cls) {
        pthread_mutex_lock(&shared_mu);
        if (shared_cached + b->size <= limit()) {
            b->next = shared_lists[b->cls];
            shared_lists[b->cls] = b;
            shared_cached += b->size;
            b = NULL;
        }
        pthread_mutex_unlock(&shared_mu);
        if (!b) return;
    }
    free(b->raw);
}

/* Frees every block on lists[]. */
static void free_lists(block **lists) {
    for (int c = 0; c < NCLASS; c++)
        while (lists[c]) {
            block *b = lists[c];
            lists[c] = b->next;
            free(b->raw);
        }
}

void dt_host_cache_trim(void) {
    pthread_mutex_lock(&shared_mu);
    free_lists(shared_lists);
    shared_cached = 0;
    pthread_mutex_unlock(&shared_mu);
    if (dt_host_bound) {
        take_remote(dt_host_bound);
        free_lists(dt_host_bound->lists);
        dt_host_bound->cached = 0;
    }
}

dt_host_arena *dt_host_arena_create(void) {
    const char *env = getenv("DT_HOST_ARENA"); /* 0: none, to measure what it saves */
    if (env && env[0] == '0') return NULL;
    dt_host_arena *a = calloc(1, sizeof *a);
    if (a && pthread_mutex_init(&a->mu, NULL) != 0) {
        free(a);
        a = NULL;
    }
    return a;
}

dt_host_arena *dt_host_arena_bind(dt_host_arena *a) {
    dt_host_arena *prev = dt_host_bound;
    dt_host_bound = a;
    return prev;
}

size_t dt_host_arena_cached(const dt_host_arena *a) {
    return a ? a->cached : 0;
}

void dt_host_arena_close(dt_host_arena *a) {
    if (!a) return;
    if (dt_host_bound == a) dt_host_bound = NULL;
    free_lists(a->lists);
    pthread_mutex_lock(&a->mu);
    block *b = atomic_exchange(&a->remote, NULL);
    a->closed = 1;
    a->out_after_close = a->owner_out - a->remote_frees;
    int last = a->out_after_close == 0;
    pthread_mutex_unlock(&a->mu);
    while (b) {
        block *next = b->next;
        free(b->raw);
        b = next;
    }
    if (last) arena_free(a);
}
