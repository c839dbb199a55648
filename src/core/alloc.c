/* Size-class cache of large host blocks. Blocks below 64 KiB go straight to malloc (aligned
 * by hand: posix_memalign takes glibc's slow path on every call, bypassing its per-thread
 * cache, which cost a small op's dispatch a few hundred nanoseconds); larger
 * ones are rounded up to a class (four per power of two, so at most 25% is wasted) and kept
 * on a free list when freed, up to a total of DT_HOST_CACHE_MB (default 1024) megabytes.
 * The cache starts at 64 KiB because glibc maps blocks from 128 KiB with mmap and returns
 * freed heap tops to the kernel: a training step's activations then came back as fresh
 * zeroed pages every step (page faults were a fifth of a 1-rank step's CPU time).
 * A 64-byte header keeps the class. Blocks from 4 MiB on are 2 MiB-aligned and asked to be
 * backed by transparent huge pages (a large copy or a strided read then walks 512x fewer page
 * tables); where the kernel refuses (THP off, not Linux) they are plain pages, and
 * DT_HUGE_PAGES=0 turns the request off. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/alloc.h"

#define HEADER 64
#define MIN_SHIFT 16 /* 64 KiB */
#define MAX_CLASS (4 * (40 - MIN_SHIFT))
#define HUGE_MIN ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct block {
    struct block *next;
    int cls;   /* 0 = plain malloc */
    void *raw; /* cls 0: what malloc returned */
} block;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static block *free_lists[MAX_CLASS + 1];
static size_t cached_bytes, cache_limit = (size_t)-1;

static size_t limit(void) {
    if (cache_limit == (size_t)-1) {
        const char *env = getenv("DT_HOST_CACHE_MB");
        cache_limit = (env ? (size_t)strtoull(env, NULL, 10) : 1024) << 20;
    }
    return cache_limit;
}

/* Class c >= 1 holds (4 + (c-1) % 4) / 4 * 2^(MIN_SHIFT + (c-1) / 4) bytes. */
static size_t class_size(int c) {
    return ((size_t)(4 + (c - 1) % 4) << (MIN_SHIFT + (c - 1) / 4)) / 4;
}

static int class_of(size_t bytes) {
    for (int c = 1; c <= MAX_CLASS; c++)
        if (class_size(c) >= bytes) return c;
    return -1;
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

/* A small block: malloc'd with room to put the header and the data on HEADER boundaries. */
static block *small_block(size_t size) {
    char *raw = malloc(size + 2 * HEADER);
    if (!raw) return NULL;
    block *b = (block *)(((uintptr_t)raw + HEADER) & ~(uintptr_t)(HEADER - 1));
    b->raw = raw;
    return b;
}

void *dt_host_alloc(size_t bytes) {
    int cls = bytes < ((size_t)1 << MIN_SHIFT) ? 0 : class_of(bytes);
    if (cls < 0) return NULL;
    block *b = NULL;
    if (cls) {
        pthread_mutex_lock(&mu);
        if ((b = free_lists[cls])) {
            free_lists[cls] = b->next;
            cached_bytes -= class_size(cls);
        }
        pthread_mutex_unlock(&mu);
    }
    if (!b && !cls && !(b = small_block(bytes ? bytes : 1))) return NULL;
    if (!b) {
        size_t size = class_size(cls);
        if (!(b = huge_block(size + HEADER)) &&
            posix_memalign((void **)&b, HEADER, size + HEADER) != 0)
            return NULL;
    }
    b->cls = cls;
    return (char *)b + HEADER;
}

void *dt_host_calloc(size_t bytes) {
    void *p = dt_host_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void dt_host_free(void *p) {
    if (!p) return;
    block *b = (block *)((char *)p - HEADER);
    if (b->cls) {
        pthread_mutex_lock(&mu);
        if (cached_bytes + class_size(b->cls) <= limit()) {
            b->next = free_lists[b->cls];
            free_lists[b->cls] = b;
            cached_bytes += class_size(b->cls);
            b = NULL;
        }
        pthread_mutex_unlock(&mu);
    } else {
        b = b->raw;
    }
    free(b);
}

void dt_host_cache_trim(void) {
    pthread_mutex_lock(&mu);
    for (int c = 0; c <= MAX_CLASS; c++)
        while (free_lists[c]) {
            block *b = free_lists[c];
            free_lists[c] = b->next;
            free(b);
        }
    cached_bytes = 0;
    pthread_mutex_unlock(&mu);
}
