/* A bounded map from keys (arrays of 64-bit words) to values: the one cache behind op
 * dispatch's strategies and redistribute's plans. Holds at most `capacity` entries; an insert
 * past that evicts by CLOCK, a one-bit approximation of least-recently-used, so a hit only
 * sets a bit (the hit path is a hash, a short chain walk and a word compare). Counts hits,
 * misses and evictions. Not thread-safe: one thread at a time (the rank's).
 *
 * Eviction calls the value's destructor: a value a caller may still hold after a later insert
 * must be reference-counted by its owner (the destructor then drops the cache's reference). */
#ifndef DT_CORE_LRU_H
#define DT_CORE_LRU_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/types.h"

typedef struct dt_lru_entry {
    struct dt_lru_entry *next; /* bucket chain */
    uint64_t hash;
    void *value;
    unsigned nwords;
    unsigned used;  /* the clock bit: set by a hit, cleared as the hand passes */
    uint64_t key[]; /* nwords */
} dt_lru_entry;

typedef struct dt_lru {
    dt_lru_entry **buckets;
    size_t mask;         /* buckets - 1, a power of two minus one */
    dt_lru_entry **ring; /* the live entries, [0, count); the clock hand walks it */
    size_t count, ring_cap, hand, capacity;
    void (*free_value)(void *);
    dt_cache_stats stats;  /* entries and capacity kept current */
    dt_cache_stats *total; /* nullable: hits, misses and evictions are added here too */
} dt_lru;

/* capacity >= 1. free_value (nullable) runs on each value evicted or left at destroy. */
dt_status dt_lru_create(size_t capacity, void (*free_value)(void *), dt_cache_stats *total,
                        dt_lru **lru_out);
/* Frees every entry (running free_value on each value). NULL is fine. */
void dt_lru_destroy(dt_lru *c);

/* The hash a key is stored and looked up under: two FNV-style lanes (half the dependent
 * multiplies of one), then murmur3's finaliser, since the low bits pick the bucket. */
static inline uint64_t dt_lru_hash(const uint64_t *key, unsigned nwords) {
    uint64_t a = 0xcbf29ce484222325ull, b = 0x9e3779b97f4a7c15ull;
    unsigned i = 0;
    for (; i + 1 < nwords; i += 2) {
        a = (a ^ key[i]) * 0x100000001b3ull;
        b = (b ^ key[i + 1]) * 0x100000001b3ull;
    }
    if (i < nwords) a = (a ^ key[i]) * 0x100000001b3ull;
    uint64_t h = a ^ (b ^ nwords) * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* Counts a hit of entry e (live in c) and returns its value: what dt_lru_get does on a hit,
 * for a caller that remembers e from an earlier lookup (valid while c->stats.evictions has
 * not moved: only an eviction frees an entry before the cache is destroyed). */
static inline void *dt_lru_hit(dt_lru *c, dt_lru_entry *e) {
    e->used = 1;
    c->stats.hits++;
    if (c->total) c->total->hits++;
    return e->value;
}

/* The entry stored under key, or NULL (a miss). Counts the hit or the miss. */
static inline dt_lru_entry *dt_lru_get_entry(dt_lru *c, const uint64_t *key, unsigned nwords,
                                             uint64_t hash) {
    for (dt_lru_entry *e = c->buckets[hash & c->mask]; e; e = e->next) {
        if (e->hash != hash || e->nwords != nwords) continue;
        uint64_t diff = 0; /* no early exit: keys that share a hash are equal but for a fluke */
        for (unsigned i = 0; i < nwords; i++)
            diff |= e->key[i] ^ key[i];
        if (diff) continue;
        dt_lru_hit(c, e);
        return e;
    }
    c->stats.misses++;
    if (c->total) c->total->misses++;
    return NULL;
}

/* The value stored under key, or NULL (a miss). Counts the hit or the miss. */
static inline void *dt_lru_get(dt_lru *c, const uint64_t *key, unsigned nwords, uint64_t hash) {
    dt_lru_entry *e = dt_lru_get_entry(c, key, nwords, hash);
    return e ? e->value : NULL;
}

/* Stores value (not NULL) under a key that is not present (after a miss), evicting one entry
 * first when full. On failure (DT_ERR_NOMEM) nothing changes and value is not freed. */
dt_status dt_lru_put(dt_lru *c, const uint64_t *key, unsigned nwords, uint64_t hash, void *value);
/* The same, and the new entry in *entry_out (set only on success). */
dt_status dt_lru_put_entry(dt_lru *c, const uint64_t *key, unsigned nwords, uint64_t hash,
                           void *value, dt_lru_entry **entry_out);

/* From now on at most capacity (>= 1) entries; evicts down to it at once. */
dt_status dt_lru_set_capacity(dt_lru *c, size_t capacity);

#endif
