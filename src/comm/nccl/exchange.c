/* dt_comm_exchange_boxes for the NCCL backend: the boxes are packed where the arrays live (on
 * the GPU with the CUDA memory table, queued on the compute stream; on the host with the CPU
 * one), exchanged with one all_to_allv and unpacked there. The generic fallback packs on the
 * host only, which device arrays cannot take. Counted once, by comm.c. */
#include <stdlib.h>

#include "comm/nccl/nccl_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "core/device.h"

/* A dtype of the given element size, for moving bytes through a typed all_to_allv. */
static dt_dtype carrier(size_t es) {
    return es == 2 ? DT_F16 : es == 8 ? DT_F64 : DT_F32;
}

dt_status nc_exchange_boxes(dt_comm *c, int ndim, size_t es, const void *src,
                            const int64_t *src_shape, const dt_box *send, void *dst,
                            const int64_t *dst_shape, const dt_box *recv) {
    nc_world *w = nc(c)->w;
    int n = c->size;
    if (w->ctx.dev.cuda && dt_cuda_current() != w->ctx.dev.cuda) dt_cuda_bind(w->ctx.dev.cuda);
    size_t *v = malloc(sizeof *v * 4 * (size_t)n);
    if (!v) return dt_error(DT_ERR_NOMEM, "exchange_boxes: out of memory");
    size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n, stotal = 0, rtotal = 0;
    for (int k = 0; k < n; k++) {
        sd[k] = stotal;
        rd[k] = rtotal;
        stotal += sc[k] = dt_shape_numel(send[k].ext, ndim);
        rtotal += rc[k] = dt_shape_numel(recv[k].ext, ndim);
    }
    dt_device_kind ks = stotal ? dt_mem_kind_of(src) : DT_DEVICE_CUDA;
    dt_device_kind kd = rtotal ? dt_mem_kind_of(dst) : ks;
    if (!stotal) ks = kd;
    char *sbuf = NULL, *rbuf = NULL;
    const dt_mem_ops *m = dt_mem_ops_of(ks);
    dt_status st = DT_OK;
    if (ks != kd || !m) {
        st = dt_error(DT_ERR_DEVICE,
                      "exchange_boxes: the source array is in %s memory and the "
                      "destination in %s memory",
                      ks == DT_DEVICE_CUDA ? "GPU" : "host", kd == DT_DEVICE_CUDA ? "GPU" : "host");
        goto out;
    }
    sbuf = m->alloc(stotal * es);
    rbuf = m->alloc(rtotal * es);
    if ((!sbuf && stotal) || (!rbuf && rtotal)) {
        st = dt_error(DT_ERR_NOMEM, "exchange_boxes: out of memory for %zu + %zu packed bytes",
                      stotal * es, rtotal * es);
        goto out;
    }
    for (int k = 0; k < n && st == DT_OK; k++)
        if (sc[k])
            st = m->box_copy(sbuf + sd[k] * es, send[k].ext, NULL, src, src_shape, send[k].off,
                             send[k].ext, ndim, es);
    if (st == DT_OK) st = nc_all_to_allv(c, sbuf, sc, sd, rbuf, rc, rd, carrier(es));
    for (int k = 0; k < n && st == DT_OK; k++)
        if (rc[k])
            st = m->box_copy(dst, dst_shape, recv[k].off, rbuf + rd[k] * es, recv[k].ext, NULL,
                             recv[k].ext, ndim, es);
out:
    /* The CUDA table frees in compute-stream order: after the unpacking queued above. */
    if (m) {
        m->free(rbuf);
        m->free(sbuf);
    }
    free(v);
    if (st != DT_OK && !dt_failed(&w->fail)) nc_fail(w, st, dt_last_error());
    return st;
}
