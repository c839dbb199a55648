/* The bounded cache of lru.h: chained buckets that double as entries arrive, and a ring of
 * the live entries for the clock hand. Only inserts and capacity changes come here; lookups
 * are inline in the header. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/lru.h"

#define FIRST_BUCKETS 64

dt_status dt_lru_create(size_t capacity, void (*free_value)(void *), dt_cache_stats *total,
                        dt_lru **lru_out) {
    DT_ARG(capacity >= 1, "dt_lru_create: argument capacity = %zu must be at least 1", capacity);
    dt_lru *c = calloc(1, sizeof *c);
    dt_lru_entry **buckets = calloc(FIRST_BUCKETS, sizeof *buckets);
    if (!c || !buckets) {
        free(c);
        free(buckets);
        return dt_error(DT_ERR_NOMEM, "cache: out of memory");
    }
    *c = (dt_lru){.buckets = buckets,
                  .mask = FIRST_BUCKETS - 1,
                  .capacity = capacity,
                  .free_value = free_value,
                  .total = total};
    c->stats.capacity = capacity;
    *lru_out = c;
    return DT_OK;
}

void dt_lru_destroy(dt_lru *c) {
    if (!c) return;
    for (size_t i = 0; i < c->count; i++) {
        if (c->free_value) c->free_value(c->ring[i]->value);
        free(c->ring[i]);
    }
    free(c->ring);
    free(c->buckets);
    free(c);
}

/* The entry the hand picks: the first whose bit is clear, clearing bits on the way (a full
 * turn at most, after which the first one visited is clear). */
static size_t clock_victim(dt_lru *c) {
    if (c->hand >= c->count) c->hand = 0;
    while (c->ring[c->hand]->used) {
        c->ring[c->hand]->used = 0;
        if (++c->hand == c->count) c->hand = 0;
    }
    return c->hand;
}

/* Unlinks and frees the entry in ring[slot], leaving the slot for the caller to fill. */
static void evict_at(dt_lru *c, size_t slot) {
    dt_lru_entry *e = c->ring[slot];
    dt_lru_entry **p = &c->buckets[e->hash & c->mask];
    while (*p != e)
        p = &(*p)->next;
    *p = e->next;
    if (c->free_value) c->free_value(e->value);
    free(e);
    c->stats.evictions++;
    if (c->total) c->total->evictions++;
}

/* Doubles the buckets once there are more entries than buckets. Failing to is harmless:
 * chains just grow longer. */
static void maybe_grow(dt_lru *c) {
    size_t n = c->mask + 1;
    if (c->count < n) return;
    dt_lru_entry **b = calloc(2 * n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < c->count; i++) {
        dt_lru_entry *e = c->ring[i];
        e->next = b[e->hash & (2 * n - 1)];
        b[e->hash & (2 * n - 1)] = e;
    }
    free(c->buckets);
    c->buckets = b;
    c->mask = 2 * n - 1;
}

dt_status dt_lru_put(dt_lru *c, const uint64_t *key, unsigned nwords, uint64_t hash, void *value) {
    dt_lru_entry *e;
    return dt_lru_put_entry(c, key, nwords, hash, value, &e);
}

dt_status dt_lru_put_entry(dt_lru *c, const uint64_t *key, unsigned nwords, uint64_t hash,
                           void *value, dt_lru_entry **entry_out) {
    dt_lru_entry *e = malloc(sizeof *e + sizeof(uint64_t) * nwords);
    if (!e) return dt_error(DT_ERR_NOMEM, "cache: out of memory");
    if (c->count == c->ring_cap && c->count < c->capacity) {
        size_t cap = c->ring_cap ? 2 * c->ring_cap : 16;
        if (cap > c->capacity) cap = c->capacity;
        dt_lru_entry **ring = realloc(c->ring, sizeof *ring * cap);
        if (!ring) {
            free(e);
            return dt_error(DT_ERR_NOMEM, "cache: out of memory");
        }
        c->ring = ring;
        c->ring_cap = cap;
    }
    *e = (dt_lru_entry){.hash = hash, .value = value, .nwords = nwords};
    memcpy(e->key, key, sizeof(uint64_t) * nwords);
    if (c->count >= c->capacity) { /* the new entry takes the victim's slot; the hand moves on */
        size_t slot = clock_victim(c);
        evict_at(c, slot);
        c->ring[slot] = e;
        c->hand = slot + 1;
    } else {
        c->ring[c->count++] = e;
    }
    e->next = c->buckets[hash & c->mask];
    c->buckets[hash & c->mask] = e;
    c->stats.entries = c->count;
    maybe_grow(c);
    *entry_out = e;
    return DT_OK;
}

dt_status dt_lru_set_capacity(dt_lru *c, size_t capacity) {
    DT_ARG(capacity >= 1, "cache capacity = %zu must be at least 1", capacity);
    while (c->count > capacity) {
        size_t slot = clock_victim(c);
        evict_at(c, slot);
        c->ring[slot] = c->ring[--c->count]; /* the last entry fills the hole */
    }
    c->stats.entries = c->count;
    c->capacity = capacity;
    c->stats.capacity = capacity;
    return DT_OK;
}
