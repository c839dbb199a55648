/* The safetensors format of a rank's data file (safetensors.c): its header written and
 * parsed. Reads files through fs.h only. */
#ifndef DT_CHECKPOINT_SAFETENSORS_H
#define DT_CHECKPOINT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/fs.h"

/* One entry of a safetensors header: a dense row-major array at [begin, end) of the data
 * section (after the header). offset: where it starts in its tensor (metadata only). */
typedef struct ck_st_entry {
    char name[DT_CHECKPOINT_NAME_MAX + 1];
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    uint64_t begin, end;
} ck_st_entry;

/* "F32", "BF16", ... (safetensors' names); NULL for others. */
const char *ck_st_dtype_name(dt_dtype dtype);
int ck_st_dtype_parse(const char *name, dt_dtype *out);
/* The file's first bytes: u64 little-endian header length, the JSON header (padded with
 * spaces to a multiple of 8 bytes, as the Python library writes it) for n entries; offsets
 * (nullable, ndim each) go into __metadata__ as "<name>": "[o0,o1]". malloc'd; NULL when out
 * of memory. */
char *ck_st_header(const ck_st_entry *e, int n, const int64_t (*offsets)[DT_MAX_NDIM],
                   size_t *len_out);
/* Parses a header (the JSON, without the length prefix) of a file whose data section holds
 * data_bytes: entries in data order, each checked (dtype, shape, size = numel * element size,
 * inside the data, no overlap; __metadata__ skipped). malloc'd into *out. 0 or -1 with err. */
int ck_st_parse(const char *json, size_t len, uint64_t data_bytes, ck_st_entry **out, int *n_out,
                char *err, size_t errcap);
/* Reads a safetensors file's header: entries (begin/end made absolute) and the file size. */
dt_status ck_st_read(const char *path, ck_st_entry **out, int *n_out, uint64_t *file_bytes_out);

#endif
