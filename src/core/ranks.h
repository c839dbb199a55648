/* How many ranks of the local runtime (threads of this process) run now. Kernels that would
 * use every core by themselves (OpenBLAS's GEMM) read it: the ranks already share the cores.
 * Plain process state; the runtime that starts ranks counts them here. */
#ifndef DT_CORE_RANKS_H
#define DT_CORE_RANKS_H

/* delta > 0: ranks start; delta < 0: they stopped. Thread-safe. Calls the watcher, if one is
 * set, with the new count. */
void dt_process_ranks_add(int delta);
/* Sets the function told every new count (ops' CPU GEMM, which fits OpenBLAS's threads to it
 * when ranks start, as they start). Core knows nothing of what it does. */
void dt_process_ranks_watch(void (*fn)(int running));
/* The ranks running now in this process (0 outside any dt_local_run). */
int dt_process_ranks(void);

#endif
