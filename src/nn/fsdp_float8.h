/* FSDP's low-precision parameter all-gathers: float8 (dt_fsdp_options.float8_all_gather, as
 * torchtitan's enable_fsdp_float8_all_gather: each shard cast to e4m3 under its whole
 * parameter's tensorwise scale, gathered as bytes, widened after) and bf16 (bf16_all_gather:
 * rounded, gathered, widened). Host memory only. */
#ifndef DT_NN_FSDP_FLOAT8_H
#define DT_NN_FSDP_FLOAT8_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "dtensor/tensor.h"

/* DT_ERR_UNSUPPORTED unless params[p] (w) is f32 in host memory (option: the option's name
 * for the message). */
dt_status dt_fsdp8_check(int p, const dt_tensor *w, const char *option);

/* scale[p] = 448 / max(amax_p, 1e-12) (f64, rounded to f32: dt_float8_scale_tensorwise's),
 * amax_p = max |x| over all of params[p]: each rank's shard, then one all_reduce MAX of the n
 * values over the mesh dims that shard any of them (a dim that replicates a parameter gives
 * its max again). Then each f32 shard, times its scale, rounded to e4m3 into dst at off[p].
 * Collective over those dims (lane 0); blocks. */
dt_status dt_fsdp8_pack(int n, dt_tensor *const *params, const size_t *off, float *scale,
                        uint8_t *dst);

/* *buf (e4m3 codes, freed with mem) replaced by the f32 codes / scale: nslots slots of slot
 * codes each, parameter p's segment of each slot being the len[p] codes at off[p]. */
dt_status dt_fsdp8_widen(const dt_mem_ops *mem, int n, const size_t *off, const size_t *len,
                         size_t slot, int nslots, const float *scale, void **buf);

/* bf16_all_gather (torchtitan's mixed_precision_param = bfloat16): each f32 shard rounded to
 * bf16 (nearest, ties to even) into dst at off[p]. Local. */
void dt_fsdp_bf16_pack(int n, dt_tensor *const *params, const size_t *off, uint16_t *dst);

/* *buf (count bf16 values, freed with mem) replaced by the same values in f32 (exact). */
dt_status dt_fsdp_bf16_widen(const dt_mem_ops *mem, size_t count, void **buf);

#endif
