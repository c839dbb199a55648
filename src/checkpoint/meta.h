/* The metadata of a checkpoint (meta.c): tensors, their chunks and the files that hold them,
 * as C structs, formatted and parsed as metadata.json. Reads files through fs.h only. */
#ifndef DT_CHECKPOINT_META_H
#define DT_CHECKPOINT_META_H

#include "checkpoint/fs.h"

typedef struct ck_chunk {
    int file;            /* index into ck_meta.files */
    uint64_t begin, end; /* byte range in that file (absolute) */
    uint64_t hash;       /* XXH64 (seed 0) of those bytes */
    int64_t offset[DT_MAX_NDIM], shape[DT_MAX_NDIM];
    /* XXH3-64 (seed 0) of each ck_meta.block_bytes piece of [begin, end), the last one shorter;
     * ceil((end - begin) / block_bytes) of them (malloc'd; NULL when block_bytes is 0) */
    uint64_t *blocks;
    int64_t nblocks;
    /* > 0 (tiled blocks, 2026-12-06): blocks are tiles of `rows` rows x one of `bands` column
     * bands (tiles.c), listed row group by row group, bands in order; 0: contiguous blocks of
     * ck_meta.block_bytes */
    int64_t bands, rows;
} ck_chunk;

typedef struct ck_tensor {
    char name[DT_CHECKPOINT_NAME_MAX + 1];
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    char placements[CK_TEXT_MAX], mesh[CK_TEXT_MAX]; /* as saved; for people */
    int nchunks;
    ck_chunk *chunks;
} ck_tensor;

typedef struct ck_file {
    char name[CK_FILE_MAX];
    uint64_t bytes;
} ck_file;

typedef struct ck_meta {
    int ntensors; /* sorted by name */
    ck_tensor *tensors;
    int nfiles;
    ck_file *files;
    int has_blob;
    uint64_t blob_bytes, blob_hash;
    /* > 0: every chunk lists its blocks' checksums. 0: a checkpoint written before block
     * checksums (2026-12-06): each chunk is one block, checked against its whole-chunk hash. */
    uint64_t block_bytes;
} ck_meta;

#define CK_BLOCK_DEFAULT ((uint64_t)1 << 20)
#define CK_BLOCK_MAX     ((uint64_t)1 << 40)
#define CK_BANDS_MAX     64

/* How many tiles a chunk of this shape has: ceil(rows of it / rows) x bands. */
int64_t ck_tile_count(int nd, const int64_t *shape, int64_t bands, int64_t rows);
int ck_name_ok(const char *name);
/* The JSON text of m (malloc'd, NUL-terminated). */
char *ck_meta_format(const ck_meta *m, size_t *len_out);
/* Parses and checks metadata: every chunk inside its tensor and its file, sizes that match,
 * chunks that tile the tensor exactly (disjoint, covering it). 0 or -1 with err. */
int ck_meta_parse(const char *text, size_t len, ck_meta *out, char *err, size_t errcap);
/* Reads dir/metadata.json: DT_ERR_IO "incomplete" when it is absent, DT_ERR_PARSE when bad. */
dt_status ck_meta_read(const char *dir, ck_meta *out, const char *fn);
void ck_meta_free(ck_meta *m);
const ck_tensor *ck_meta_find(const ck_meta *m, const char *name);

#endif
