/* The caching allocator: exact size classes, one free list per class holding blocks of any
 * stream (a class's list is short in practice: a model allocates few distinct sizes), and a
 * hash of the blocks in use so that put finds a block's class and stream from its pointer. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/cache_alloc.h"

#define SMALL_LIMIT ((size_t)1 << 20)
#define SMALL_STEP 512
#define NSMALL ((int)(SMALL_LIMIT / SMALL_STEP))
#define NLARGE (4 * (64 - 20))
#define NBUCKETS 4096 /* in-use hash */

typedef struct block {
    struct block *next;
    void *ptr;
    size_t size;
    void *stream;
} block;

struct dt_cache_alloc {
    pthread_mutex_t mu;
    dt_cache_backend be;
    block *free_lists[NSMALL + NLARGE];
    block *in_use[NBUCKETS];
    dt_memory_stats stats;
};

static int class_of(size_t rounded) {
    if (rounded <= SMALL_LIMIT) return (int)(rounded / SMALL_STEP) - 1;
    int lg = 63 - __builtin_clzll((unsigned long long)(rounded - 1)); /* 2^lg < r <= 2^(lg+1) */
    size_t quarter = (size_t)1 << (lg - 2);
    int q = (int)((rounded - ((size_t)1 << lg)) / quarter); /* 1..4 */
    return (int)NSMALL + 4 * (lg - 20) + q - 1;
}

size_t dt_cache_alloc_round(size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes <= SMALL_LIMIT) return (bytes + SMALL_STEP - 1) / SMALL_STEP * SMALL_STEP;
    int lg = 63 - __builtin_clzll((unsigned long long)(bytes - 1));
    if (lg >= 62) return 0; /* no class: the request fails */
    size_t quarter = (size_t)1 << (lg - 2);
    return (bytes + quarter - 1) / quarter * quarter;
}

static size_t hash(const void *p) {
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0xed5ad4bbu;
    x ^= x >> 11;
    return x % NBUCKETS;
}

dt_cache_alloc *dt_cache_alloc_create(dt_cache_backend backend) {
    dt_cache_alloc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        free(a);
        return NULL;
    }
    a->be = backend;
    return a;
}

/* Frees the cached blocks; mu held. */
static void empty_locked(dt_cache_alloc *a) {
    for (int c = 0; c < NSMALL + NLARGE; c++) {
        while (a->free_lists[c]) {
            block *b = a->free_lists[c];
            a->free_lists[c] = b->next;
            a->be.raw_free(a->be.user, b->ptr);
            a->stats.cached -= b->size;
            a->stats.device_frees++;
            free(b);
        }
    }
}

void dt_cache_alloc_destroy(dt_cache_alloc *a) {
    if (!a) return;
    empty_locked(a);
    for (int h = 0; h < NBUCKETS; h++) {
        while (a->in_use[h]) {
            block *b = a->in_use[h];
            a->in_use[h] = b->next;
            a->be.raw_free(a->be.user, b->ptr);
            free(b);
        }
    }
    pthread_mutex_destroy(&a->mu);
    free(a);
}

void *dt_cache_alloc_get(dt_cache_alloc *a, size_t bytes, void *stream) {
    size_t size = dt_cache_alloc_round(bytes);
    if (!size) return NULL;
    int cls = class_of(size);
    pthread_mutex_lock(&a->mu);
    a->stats.requests++;
    block *b = NULL;
    for (block **pp = &a->free_lists[cls]; *pp; pp = &(*pp)->next) {
        if ((*pp)->stream == stream) {
            b = *pp;
            *pp = b->next;
            a->stats.cached -= b->size;
            break;
        }
    }
    if (!b) {
        void *p = a->be.raw_alloc(a->be.user, size);
        if (!p) {
            empty_locked(a); /* blocks cached for other sizes or streams may make room */
            p = a->be.raw_alloc(a->be.user, size);
        }
        if (p) b = malloc(sizeof *b);
        if (!b) {
            if (p) a->be.raw_free(a->be.user, p);
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
        *b = (block){.ptr = p, .size = size, .stream = stream};
        a->stats.device_allocs++;
    }
    size_t h = hash(b->ptr);
    b->next = a->in_use[h];
    a->in_use[h] = b;
    a->stats.in_use += size;
    if (a->stats.in_use > a->stats.peak) a->stats.peak = a->stats.in_use;
    pthread_mutex_unlock(&a->mu);
    return b->ptr;
}

int dt_cache_alloc_put(dt_cache_alloc *a, void *p) {
    pthread_mutex_lock(&a->mu);
    for (block **pp = &a->in_use[hash(p)]; *pp; pp = &(*pp)->next) {
        block *b = *pp;
        if (b->ptr != p) continue;
        *pp = b->next;
        int cls = class_of(b->size);
        b->next = a->free_lists[cls];
        a->free_lists[cls] = b;
        a->stats.in_use -= b->size;
        a->stats.cached += b->size;
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    pthread_mutex_unlock(&a->mu);
    return -1;
}

void dt_cache_alloc_empty(dt_cache_alloc *a) {
    pthread_mutex_lock(&a->mu);
    empty_locked(a);
    pthread_mutex_unlock(&a->mu);
}

void dt_cache_alloc_stats(dt_cache_alloc *a, dt_memory_stats *stats_out) {
    pthread_mutex_lock(&a->mu);
    *stats_out = a->stats;
    pthread_mutex_unlock(&a->mu);
}
