/* FSDP's low-precision all-gathers: float8's scales (one small all_reduce MAX per unit) and
 * the packing of shards into e4m3 bytes and back; bf16's rounding and widening
 * (nn/fsdp_float8.h). fsdp.c owns the buffers and the gather itself. */
#include <math.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "core/float8.h"
#include "core/half.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/fsdp_float8.h"

dt_status dt_fsdp8_pack(int n, dt_tensor *const *params, const size_t *off, float *scale,
                        uint8_t *dst) {
    dt_mesh *mesh = params[0]->mesh;
    unsigned mask = 0;
    for (int p = 0; p < n; p++)
        for (int m = 0; m < mesh->ndim; m++)
            if (params[p]->placements[m].kind == DT_PLACEMENT_SHARD) mask |= 1u << m;
    float *amax = malloc(sizeof(float) * (size_t)n);
    if (!amax) return dt_error(DT_ERR_NOMEM, "fsdp: out of memory for float8 scales");
    for (int p = 0; p < n; p++) {
        const float *x = params[p]->data;
        float a = 0.0f;
        for (size_t i = 0; i < params[p]->local_numel; i++) { /* NaN skipped, as fmaxf does */
            float v = fabsf(x[i]);
            a = v > a ? v : a; /* (vectorised, where fmaxf is not) */
        }
        amax[p] = a;
    }
    dt_comm *comm;
    dt_status st = dt_mesh_lane_comm(mesh, mask, 0, &comm);
    if (st == DT_OK) st = dt_all_reduce(comm, amax, amax, (size_t)n, DT_F32, DT_REDUCE_MAX);
    for (int p = 0; p < n && st == DT_OK; p++) {
        scale[p] = (float)(448.0 / fmax((double)amax[p], 1e-12));
        const float *x = params[p]->data;
        uint8_t *d = dst + off[p];
        for (size_t i = 0; i < params[p]->local_numel; i++) d[i] = dt_f32_to_f8e4m3(x[i] * scale[p]);
    }
    free(amax);
    return st;
}

dt_status dt_fsdp8_widen(const dt_mem_ops *mem, int n, const size_t *off, const size_t *len,
                         size_t slot, int nslots, const float *scale, void **buf) {
    const uint8_t *src = *buf;
    float *dst = mem->alloc(slot * (size_t)nslots * sizeof(float));
    if (!dst) return dt_error(DT_ERR_NOMEM, "fsdp: out of memory to widen a float8 gather");
    for (int p = 0; p < n; p++) {
        float tab[256]; /* every code's value / scale: the same rounding as per element */
        for (int c = 0; c < 256; c++) tab[c] = dt_f8e4m3_to_f32((uint8_t)c) / scale[p];
        for (int r = 0; r < nslots; r++) {
            size_t base = (size_t)r * slot + off[p];
            for (size_t i = 0; i < len[p]; i++) dst[base + i] = tab[src[base + i]];
        }
    }
    mem->free(*buf);
    *buf = dst;
    return DT_OK;
}

dt_status dt_fsdp8_check(int p, const dt_tensor *w, const char *option) {
    if (w->dtype == DT_F32 && w->device.kind == DT_DEVICE_CPU) return DT_OK;
    return dt_error(DT_ERR_UNSUPPORTED, "dt_fsdp_add_unit: params[%d] is %s on device kind %d; "
                    "%s takes f32 parameters in host memory", p, dt_dtype_name(w->dtype),
                    (int)w->device.kind, option);
}

void dt_fsdp_bf16_pack(int n, dt_tensor *const *params, const size_t *off, uint16_t *dst) {
    for (int p = 0; p < n; p++) {
        const float *x = params[p]->data;
        uint16_t *d = dst + off[p];
        for (size_t i = 0; i < params[p]->local_numel; i++) d[i] = dt_f32_to_bf16(x[i]);
    }
}

dt_status dt_fsdp_bf16_widen(const dt_mem_ops *mem, size_t count, void **buf) {
    const uint16_t *src = *buf;
    float *dst = mem->alloc(count * sizeof(float));
    if (!dst) return dt_error(DT_ERR_NOMEM, "fsdp: out of memory to widen a bf16 gather");
    /* the padding between segments widens too: bf16 zeros are f32 zeros */
    for (size_t i = 0; i < count; i++) dst[i] = dt_bf16_to_f32(src[i]);
    mem->free(*buf);
    *buf = dst;
    return DT_OK;
}
