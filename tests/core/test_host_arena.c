/* The per-rank host arena (core/alloc.h): freed blocks come back for the next request of
 * their class on the owner thread, blocks freed by other threads return to their arena, and an
 * arena closed with blocks still out frees them as they come back (ASan builds check that
 * nothing leaks or is touched after its free). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"

/* Sizes of distinct classes: tiny, just past a class edge, and past the huge-page threshold. */
static const size_t sizes[] = {
    1, 65, 1000, 4096, 65536, 100000, (size_t)1 << 20, ((size_t)4 << 20) + 1, (size_t)24 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

Test(host_arena, freed_blocks_come_back_on_the_owner_thread) {
    dt_host_arena *a = dt_host_arena_create();
    cr_assert_not_null(a);
    cr_assert_null(dt_host_arena_bind(a));
    void *p[NSIZES];
    for (size_t i = 0; i < NSIZES; i++) {
        p[i] = dt_host_alloc(sizes[i]);
        cr_assert_not_null(p[i], "size %zu", sizes[i]);
        cr_assert_eq((uintptr_t)p[i] % 64, 0, "size %zu: %p is not 64-byte aligned", sizes[i],
                     p[i]);
        memset(p[i], 0xab, sizes[i]); /* the whole request is usable (ASan checks the end) */
    }
    cr_assert_eq(dt_host_arena_cached(a), 0);
    for (size_t i = 0; i < NSIZES; i++)
        dt_host_free(p[i]);
    size_t cached = dt_host_arena_cached(a);
    size_t asked = 0;
    for (size_t i = 0; i < NSIZES; i++)
        asked += sizes[i];
    /* every block is kept, each at most 25% over its request (64 bytes at least) */
    cr_assert(cached >= asked && cached <= asked + asked / 4 + 64 * NSIZES,
              "cached %zu bytes for %zu asked", cached, asked);
    /* each size gets its own block back */
    for (size_t i = 0; i < NSIZES; i++) {
        void *q = dt_host_alloc(sizes[i]);
        cr_assert_eq(q, p[i], "size %zu: a fresh block, not its own", sizes[i]);
    }
    cr_assert_eq(dt_host_arena_cached(a), 0, "%zu bytes left cached", dt_host_arena_cached(a));
    void *z = dt_host_calloc(0);
    cr_assert_not_null(z, "calloc(0) gave NULL");
    dt_host_free(z);
    for (size_t i = 0; i < NSIZES; i++)
        dt_host_free(p[i]);
    cr_assert_eq(dt_host_arena_bind(NULL), a);
    dt_host_arena_bind(a);
    dt_host_arena_close(a);
    cr_assert_null(dt_host_arena_bind(NULL), "close left the arena bound");
}

typedef struct handoff {
    void **blocks;
    int n;
} handoff;

static void *free_all(void *p) {
    handoff *h = p;
    for (int i = 0; i < h->n; i++)
        dt_host_free(h->blocks[i]);
    return NULL;
}

Test(host_arena, blocks_freed_by_another_thread_return_to_their_arena) {
    dt_host_arena *a = dt_host_arena_create();
    dt_host_arena_bind(a);
    void *blocks[8];
    for (int i = 0; i < 8; i++)
        blocks[i] = dt_host_alloc(3000);
    handoff h = {blocks, 8};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, free_all, &h), 0);
    pthread_join(t, NULL);
    cr_assert_eq(dt_host_arena_cached(a), 0, "another thread's frees went to the owner's lists");
    /* the owner takes them back on its next request of the class */
    void *q = dt_host_alloc(3000);
    int found = 0;
    for (int i = 0; i < 8; i++)
        found |= q == blocks[i];
    cr_assert(found, "the block after remote frees is a fresh one");
    cr_assert_eq(dt_host_arena_cached(a), 7 * 3072, "cached %zu", dt_host_arena_cached(a));
    dt_host_free(q);
    dt_host_arena_close(a);
}

Test(host_arena, blocks_out_at_close_are_freed_when_they_come_back) {
    dt_host_arena *a = dt_host_arena_create();
    dt_host_arena_bind(a);
    void *blocks[6];
    for (int i = 0; i < 6; i++)
        blocks[i] = dt_host_alloc((size_t)1000 << i);
    dt_host_free(blocks[5]);
    dt_host_arena_close(a);
    /* one back on this (now unbound) thread, the rest on another */
    dt_host_free(blocks[0]);
    handoff h = {blocks + 1, 4};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, free_all, &h), 0);
    pthread_join(t, NULL);
    /* without an arena: small blocks from malloc, large ones from the shared lists */
    void *s = dt_host_alloc(100), *l = dt_host_alloc(1 << 20);
    cr_assert(s && l);
    memset(s, 1, 100), memset(l, 1, 1 << 20);
    dt_host_free(s), dt_host_free(l);
    dt_host_cache_trim();
}
