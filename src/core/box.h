/* Copies of rectangular sub-boxes between dense row-major arrays: the only data movement the
 * tensor layer needs to cut shards out of, and paste them into, larger tensors. */
#ifndef DT_CORE_BOX_H
#define DT_CORE_BOX_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/types.h"

/* A sub-box of a dense row-major array: where it starts and how far it extends per dim. */
typedef struct dt_box {
    int64_t off[DT_MAX_NDIM], ext[DT_MAX_NDIM];
} dt_box;

/* Copies the box of extent box[] from src (shape src_shape, box starting at src_off) to dst
 * (shape dst_shape, box starting at dst_off). Offsets may be NULL (all zero). Callers check
 * that the box fits in both. */
void dt_box_copy(void *dst, const int64_t *dst_shape, const int64_t *dst_off, const void *src,
                 const int64_t *src_shape, const int64_t *src_off, const int64_t *box, int ndim,
                 size_t elem_size);

/* Elements [first, first + count) of a box (extent box at off in the dense array of shape
 * shape; off may be NULL), in the box's row-major order, packed into the dense buf or
 * unpacked out of it: a box sent piece by piece through a fixed buffer. stream: unpack runs of
 * 256 bytes or more with streaming stores, unfenced (the caller fences: dt_stream_fence).
 * Callers check bounds. */
void dt_box_pack_range(void *buf, const void *src, const int64_t *shape, const int64_t *off,
                       const int64_t *box, int ndim, size_t es, size_t first, size_t count);
void dt_box_unpack_range(void *dst, const int64_t *shape, const int64_t *off, const int64_t *box,
                         int ndim, size_t es, size_t first, size_t count, const void *buf,
                         int stream);

/* Number of elements of a shape (1 for ndim 0). Unchecked: for shapes already accepted by
 * dt_shape_size, or parts of them. */
size_t dt_shape_numel(const int64_t *shape, int ndim);

/* The one checked size product: elements and bytes (elem_size each) of a shape of
 * non-negative extents. 0 when either overflows int64 (then the outputs are untouched);
 * numel_out and bytes_out are nullable. Every shape that enters the library goes through
 * it, so the unchecked products of its parts cannot wrap. */
int dt_shape_size(const int64_t *shape, int ndim, size_t elem_size, int64_t *numel_out,
                  int64_t *bytes_out);

/* "[2,3,4]" into buf (truncated to cap, NUL-terminated). */
void dt_shape_text(const int64_t *shape, int ndim, char *buf, size_t cap);

#endif
