/* Host buffers for tensor data, tensor shells and collective scratch. Freed blocks are kept on
 * free lists by size class (a rank's own arena for every size, shared lists from 64 KiB for
 * threads that run no rank) and handed out again, so steady-state ops do not pay the kernel's
 * page faults (a fresh 64 MiB buffer costs more to fault in than to fill). Thread-safe: any
 * thread may free any block. */
#ifndef DT_CORE_ALLOC_H
#define DT_CORE_ALLOC_H

#include <stddef.h>

/* bytes of uninitialised memory, 64-byte aligned (bytes 0 gives a valid 1-byte block);
 * NULL when out of memory. */
void *dt_host_alloc(size_t bytes);
/* The same, zeroed. */
void *dt_host_calloc(size_t bytes);
/* Returns a block from dt_host_alloc/dt_host_calloc; NULL is fine. */
void dt_host_free(void *p);
/* Gives the shared lists' cached blocks, and the calling thread's arena's, back to the
 * system. */
void dt_host_cache_trim(void);

/* A rank's arena (comm makes one per rank context and binds it to the thread that runs the
 * rank): the blocks its thread allocates come from it, and go back to it when freed by any
 * thread, kept by size class until the arena closes, so that a steady-state step reuses its
 * temporaries' pages instead of faulting in fresh ones. */
typedef struct dt_host_arena dt_host_arena;

/* NULL when out of memory or DT_HOST_ARENA=0 (the thread then uses the shared lists and
 * malloc: slower, still correct). */
dt_host_arena *dt_host_arena_create(void);
/* Makes a (NULL: none) the calling thread's arena; returns the previous one. A thread may
 * have one bound at a time; an arena is bound to one thread at a time. */
dt_host_arena *dt_host_arena_bind(dt_host_arena *a);
/* The thread's bound arena (alloc.c's; read it through dt_host_arena_current). */
extern _Thread_local dt_host_arena *dt_host_bound;

/* The calling thread's arena (NULL: none): a rank's thread holds its context's, so callers
 * can tell their rank's own thread from any other. */
static inline dt_host_arena *dt_host_arena_current(void) {
    return dt_host_bound;
}
/* Bytes on a's free lists (its owner thread's view). */
size_t dt_host_arena_cached(const dt_host_arena *a);
/* Unbinds a from the calling thread, gives its free blocks back to the system and ends it;
 * blocks still in use go to the system when freed, the last one frees the arena. Call it on
 * the thread a is bound to or after that thread unbound it (and was joined). NULL is fine. */
void dt_host_arena_close(dt_host_arena *a);

#endif
