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

/* The runs of a box, in order: an odometer over its dims before the folded contiguous run. */
#define RUNS_AHEAD 4
typedef struct box_runs {
    int64_t idx[DT_MAX_NDIM];
    int inner;
    const int64_t *box;
} box_runs;

/* Moves to the next run; 0 past the last. */
static int runs_next(box_runs *r) {
    int d = r->inner - 1;
    while (d >= 0 && ++r->idx[d] == r->box[d]) r->idx[d--] = 0;
    return d >= 0;
}

static int64_t runs_offset(const box_runs *r, const int64_t *stride, int64_t base) {
    for (int d = 0; d < r->inner; d++) base += r->idx[d] * stride[d];
    return base;
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
     * lines: it will not be read again while it is still in the cache. Short runs of a large
     * box are read RUNS_AHEAD runs ahead with software prefetches: the hardware prefetchers
     * stop at each 4 KiB page, so a strided read of 1 KiB pieces otherwise waits on its lines. */
    const size_t total = dt_shape_numel(box, ndim) * elem_size;
    const int stream = run_bytes >= 256 && total >= DT_STREAM_MIN_BYTES;
    const int ahead = stream && run_bytes <= 4096;
    box_runs cur = {.inner = inner, .box = box}, pf = cur;
    int pf_more = ahead;
    for (int k = 0; k < RUNS_AHEAD && pf_more; k++) {
        dt_prefetch(sbase + (size_t)runs_offset(&pf, sstride, base_s) * elem_size, run_bytes);
        pf_more = runs_next(&pf);
    }
    do {
        if (pf_more) {
            dt_prefetch(sbase + (size_t)runs_offset(&pf, sstride, base_s) * elem_size, run_bytes);
            pf_more = runs_next(&pf);
        }
        char *to = dbase + (size_t)runs_offset(&cur, dstride, base_d) * elem_size;
        const char *from = sbase + (size_t)runs_offset(&cur, sstride, base_s) * elem_size;
        if (stream)
            dt_copy_stream_unfenced(to, from, run_bytes);
        else
            memcpy(to, from, run_bytes);
    } while (runs_next(&cur));
    if (stream) dt_stream_fence();
}

/* Elements [first, first + count) of a box in its row-major order, between the box (extent
 * box at off in the dense array arr of shape shape) and the dense buffer buf; runs are the
 * trailing dims the box covers whole in arr, folded as dt_box_copy folds them. */
static void box_range(char *arr, const int64_t *shape, const int64_t *off, const int64_t *box,
                      int ndim, size_t es, size_t first, size_t count, char *buf, int unpack,
                      int stream) {
    if (!count) return;
    int64_t stride[DT_MAX_NDIM], idx[DT_MAX_NDIM] = {0};
    for (int d = ndim - 1; d >= 0; d--)
        stride[d] = d == ndim - 1 ? 1 : stride[d + 1] * shape[d + 1];
    int inner = ndim;
    size_t run = 1;
    while (inner > 0) {
        int d = --inner;
        run *= (size_t)box[d];
        if (box[d] != shape[d]) break;
    }
    size_t outer = first / run, w = first % run;
    for (int d = inner - 1; d >= 0; d--) {
        idx[d] = (int64_t)(outer % (size_t)box[d]);
        outer /= (size_t)box[d];
    }
    int64_t base = 0;
    for (int d = 0; d < ndim; d++) base += (off ? off[d] : 0) * stride[d];
    box_runs r = {.inner = inner, .box = box};
    memcpy(r.idx, idx, sizeof idx);
    for (;;) {
        size_t len = run - w < count ? run - w : count;
        char *a = arr + ((size_t)runs_offset(&r, stride, base) + w) * es;
        if (unpack && stream && len * es >= 256) /* as dt_box_copy: whole cache lines */
            dt_copy_stream_unfenced(a, buf, len * es);
        else if (unpack)
            memcpy(a, buf, len * es);
        else
            memcpy(buf, a, len * es);
        buf += len * es;
        count -= len;
        w = 0;
        if (!count || !runs_next(&r)) break;
    }
}

void dt_box_pack_range(void *buf, const void *src, const int64_t *shape, const int64_t *off,
                       const int64_t *box, int ndim, size_t es, size_t first, size_t count) {
    box_range((char *)src, shape, off, box, ndim, es, first, count, buf, 0, 0);
}

void dt_box_unpack_range(void *dst, const int64_t *shape, const int64_t *off, const int64_t *box,
                         int ndim, size_t es, size_t first, size_t count, const void *buf,
                         int stream) {
    box_range(dst, shape, off, box, ndim, es, first, count, (char *)buf, 1, stream);
}
