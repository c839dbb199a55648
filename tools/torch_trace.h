/* PyTorch profiler traces (torch.profiler's export_chrome_trace JSON, plain or gzip) converted
 * into dtensor's trace schema, so a PyTorch run and a dtensor run open side by side. Independent
 * of the library: it reads and writes JSON only (jansson, zlib). */
#ifndef DT_TORCH_TRACE_H
#define DT_TORCH_TRACE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Converts one torch.profiler trace per rank (in_paths[0 .. n_in-1]) into one merged dtensor
 * trace at out_path: pid = the rank (the file's distributedInfo.rank, else its position),
 * lanes (tid) 0 ops, 1 compute, 2 comm (collectives run on the rank's thread), 4 comm thread
 * (collectives gloo runs on its own threads), 5 steps (ProfilerStep#N); every event carries
 * args.id (unique per rank), collectives kind/group/group_size/bytes_in/bytes_out/seq. Times
 * are microseconds from the earliest event of all the files. Blocks (file I/O); no state.
 * Returns 0, or nonzero with a message in err (errcap bytes, NUL-terminated) naming the file
 * and what is wrong with it; out_path is then not written. */
int dt_torch_trace_convert(const char *const *in_paths, int n_in, const char *out_path, char *err,
                           size_t errcap);

#ifdef __cplusplus
}
#endif

#endif
