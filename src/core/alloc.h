/* Host buffers for tensor data and collective scratch. Large blocks are kept on free lists by
 * size class and handed out again, so steady-state ops do not pay the kernel's page faults
 * (a fresh 64 MiB buffer costs more to fault in than to fill). Thread-safe. */
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
/* Gives cached blocks back to the system. */
void dt_host_cache_trim(void);

#endif
