/* How many ranks of the local runtime (threads of this process) run now. Kernels that would
 * use every core by themselves (OpenBLAS's GEMM) read it: the ranks already share the cores.
 * Plain process state; the runtime that starts ranks counts them here. */
#ifndef DT_CORE_RANKS_H
#define DT_CORE_RANKS_H

/* delta > 0: ranks start; delta < 0: they stopped. Thread-safe. */
void dt_process_ranks_add(int delta);
/* The ranks running now in this process (0 outside any dt_local_run). */
int dt_process_ranks(void);

#endif
