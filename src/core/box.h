/* Copies of rectangular sub-boxes between dense row-major arrays: the only data movement the
 * tensor layer needs to cut shards out of, and paste them into, larger tensors. */
#ifndef DT_CORE_BOX_H
#define DT_CORE_BOX_H

#include <stddef.h>
#include <stdint.h>

/* Copies the box of extent box[] from src (shape src_shape, box starting at src_off) to dst
 * (shape dst_shape, box starting at dst_off). Offsets may be NULL (all zero). Callers check
 * that the box fits in both. */
void dt_box_copy(void *dst, const int64_t *dst_shape, const int64_t *dst_off, const void *src,
                 const int64_t *src_shape, const int64_t *src_off, const int64_t *box, int ndim,
                 size_t elem_size);

/* Number of elements of a shape (1 for ndim 0). */
size_t dt_shape_numel(const int64_t *shape, int ndim);

#endif
