/* Sub-box copy: the innermost run that is contiguous in both arrays is one memcpy, and an
 * odometer walks the outer dimensions. */
#include <stdio.h>
#include <string.h>

#include "core/box.h"
#include "core/copy.h"
#include "dtensor/types.h"

size_t dt_shape_numel(const int64_t *shape, int ndim) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

int dt_shape_size(const int64_t *shape, int ndim, size_t elem_size, int64_t *numel_out,
                  int64_t *bytes_out) {
    int64_t n = 1, bytes;
    int zero = 0;
    for (int d = 0; d < ndim; d++) zero |= shape[d] == 0;
    /* An empty tensor's size is 0 whatever its other extents; only the nonzero ones
     * can overflow. */
    for (int d = 0; d < ndim && !zero; d++)
        if (__builtin_mul_overflow(n, shape[d], &n)) return 0;
    if (zero) n = 0;
    if (__builtin_mul_overflow(n, (int64_t)elem_size, &bytes)) return 0;
    if (numel_out) *numel_out = n;
    if (bytes_out) *bytes_out = bytes;
    return 1;
}

void dt_shape_text(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

void dt_box_copy(void *dst, const int64_t *dst_shape, const int64_t *dst_off, const void *src,
                 const int64_t *src_shape, const int64_t *src_off, const int64_t *box, int ndim,
                 size_t elem_size) {
    if (dt_shape_numel(box, ndim) == 0) return;
    int64_t dstride[DT_MAX_NDIM], sstride[DT_MAX_NDIM];
    for (int d = ndim - 1; d >= 0; d--) {
        dstride[d] = d == ndim - 1 ? 1 : dstride[d + 1] * dst_shape[d + 1];
        sstride[d] = d == ndim - 1 ? 1 : sstride[d + 1] * src_shape[d + 1];
    }
    /* Fold trailing dims the box covers whole in both arrays into one contiguous run. */
    int inner = ndim;
    size_t run = 1;
    while (inner > 0) {
        int d = inner - 1;
        run *= (size_t)box[d];
        inner = d;
        if (box[d] != dst_shape[d] || box[d] != src_shape[d]) break;
    }
    size_t run_bytes = run * elem_size;
    char *dbase = (char *)dst;
    const char *sbase = (const char *)src;
    int64_t base_d = 0, base_s = 0;
    for (int d = 0; d < ndim; d++) {
        base_d += (dst_off ? dst_off[d] : 0) * dstride[d];
        base_s += (src_off ? src_off[d] : 0) * sstride[d];
    }
    /* A large box goes out with streaming stores (core/copy.h) when its runs span whole cache
     * lines: it will not be read again while it is still in the cache. */
    int stream = run_bytes >= 256 && dt_shape_numel(box, ndim) * elem_size >= DT_STREAM_MIN_BYTES;
    int64_t idx[DT_MAX_NDIM] = {0};
    for (;;) {
        int64_t od = base_d, os = base_s;
        for (int d = 0; d < inner; d++) {
            od += idx[d] * dstride[d];
            os += idx[d] * sstride[d];
        }
        char *to = dbase + (size_t)od * elem_size;
        const char *from = sbase + (size_t)os * elem_size;
        if (stream)
            dt_copy_stream_unfenced(to, from, run_bytes);
        else
            memcpy(to, from, run_bytes);
        int d = inner - 1;
        while (d >= 0 && ++idx[d] == box[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    if (stream) dt_stream_fence();
}
