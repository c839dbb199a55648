/* What save, load and the dtensor-ckpt tool share above the three file-level parts (fs.h,
 * safetensors.h, meta.h): the records ranks gather, the rank file writer, chunk reading, and
 * publishing a save. No ranks or tensors here. */
#ifndef DT_CHECKPOINT_IMPL_H
#define DT_CHECKPOINT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/fs.h"
#include "checkpoint/meta.h"
#include "checkpoint/safetensors.h"

/* One chunk (or, from a tensor mesh's rank 0, a chunk-less entry that still names the tensor)
 * as every rank sends it to rank 0: fixed size, gathered as int64 words. */
typedef struct ck_rec {
    char name[DT_CHECKPOINT_NAME_MAX + 1];
    char placements[CK_TEXT_MAX], mesh[CK_TEXT_MAX];
    int32_t dtype, ndim, has_chunk, rank;
    int64_t shape[DT_MAX_NDIM], offset[DT_MAX_NDIM], chunk_shape[DT_MAX_NDIM];
    uint64_t begin, end, hash, file_bytes;
    uint64_t block_bytes, nblocks; /* its block checksums: nblocks, in the rank's block list */
    uint64_t bands, rows;          /* its tiles (ck_chunk's); 0: contiguous blocks */
} ck_rec;
_Static_assert(sizeof(ck_rec) % 8 == 0, "ck_rec is gathered as int64 words");
#define CK_REC_WORDS (sizeof(ck_rec) / 8)

/* The metadata of a save from every rank's records (records.c): tensors that agree on dtype
 * and shape across ranks, files named by rank, block checksums taken in record order from
 * blocks (every record's nblocks of them, back to back). 0 or -1 with err. */
int ck_meta_from_records(const ck_rec *recs, int nrec, const uint64_t *blocks, ck_meta *out,
                         char *err, size_t errcap);

/* rank_file.c: writes the data file at path for the records with a chunk, asking chunk(arg, i,
 * scratch, &data) for record i's bytes (scratch: a buffer of the largest chunk's size when
 * scratch is set, else NULL), hashing them into the record as they are written, then fsync.
 * Sets begin, end, hash, block_bytes and nblocks of those records and file_bytes of all; the
 * block checksums (XXH3-64 of each block_bytes piece of each chunk, in record order) go to
 * *blocks_out (malloc'd, *nblocks_out of them; set whatever the status). No file without
 * chunks. */
typedef dt_status (*ck_chunk_fn)(void *arg, int i, void *scratch, const void **data_out);
dt_status ck_write_rank_file(const char *path, ck_rec *recs, int nrec, ck_chunk_fn chunk, void *arg,
                             int scratch, uint64_t block_bytes, uint64_t **blocks_out,
                             int64_t *nblocks_out, const char *fn);

/* Reading chunks back (chunks.c), shared by loading and the tool. The data files of a
 * checkpoint, opened on first use and checked against the sizes the metadata records. */
typedef struct ck_files {
    const char *dir;
    const ck_meta *m;
    int *fd;     /* m->nfiles entries, -1 until opened */
    int headers; /* on opening a file, check its safetensors header against m */
} ck_files;
dt_status ck_files_fd(ck_files *fs, int f, const char *fn, int *fd_out);
/* DT_OK when the file open at fd holds bytes bytes, DT_ERR_IO naming path otherwise. */
dt_status ck_size_agrees(int fd, uint64_t bytes, const char *path, const char *fn);
/* A whole chunk into dst, its checksum checked (DT_ERR_IO naming the tensor when it fails). */
dt_status ck_read_chunk(ck_files *fs, const ck_tensor *t, const ck_chunk *c, void *dst,
                        const char *fn);
/* The runs of the box [s, s+e) of a chunk in file order: elements contiguous in both the
 * chunk and dst (a dense array of shape dst_shape, the box at dst_off). A run covers the
 * trailing dims the box spans in full on both sides and the extent of the first dim before
 * them (dim k); count runs of run bytes each. */
typedef struct ck_runs {
    int nd, k, done;
    int64_t stride[DT_MAX_NDIM], dstride[DT_MAX_NDIM], idx[DT_MAX_NDIM];
    const int64_t *s, *e, *dst_off;
    uint64_t begin;
    size_t es, run, count;
} ck_runs;
void ck_runs_init(ck_runs *r, const ck_chunk *c, int nd, size_t es, const int64_t *s,
                  const int64_t *e, const int64_t *dst_shape, const int64_t *dst_off);
/* The next run: where it starts in the file and in dst (bytes); 0 after the last. */
int ck_runs_next(ck_runs *r, uint64_t *at_out, size_t *dpos_out);

/* blocks.c: the box [s, s+e) of chunk c into dst as ck_read_box places it, reading every
 * block of the chunk the box touches (all: every block of the chunk) in whole and checking
 * each against its checksum (a checkpoint without block checksums: the whole chunk against
 * its xxh64) before the call returns DT_OK. DT_ERR_IO naming the tensor, block, chunk and
 * file when one fails (dst then holds some of the box). *read_out (nullable) += bytes read. */
dt_status ck_read_verified(ck_files *fs, const ck_tensor *t, const ck_chunk *c, const int64_t *s,
                           const int64_t *e, char *dst, const int64_t *dst_shape,
                           const int64_t *dst_off, int all, const char *fn);
/* Checks bytes (the chunk's whole data) against c's block checksums (none: DT_OK). */
dt_status ck_check_blocks(const ck_tensor *t, const ck_chunk *c, uint64_t block_bytes,
                          const void *bytes, const char *path, const char *fn);

/* The box [s, s+e) of chunk c (s relative to the chunk) into the box at dst_off of dst (a
 * dense array of shape dst_shape), reading only those bytes, straight into dst: one pread per
 * run of elements contiguous in both, or, for many short runs that fill at least half the
 * file range they span, a copy of each out of a mapping of that range (the file's size checked
 * against the metadata before each mapping). max_gap > 0: runs at most max_gap bytes apart in
 * the file are read with one pread of the span that covers them (up to 64 MiB), through a
 * buffer. Not checksummed. */
dt_status ck_read_box(ck_files *fs, const ck_tensor *t, const ck_chunk *c, const int64_t *s,
                      const int64_t *e, char *dst, const int64_t *dst_shape, const int64_t *dst_off,
                      size_t max_gap, const char *fn);

/* tiles.c: tiled block checksums (ck_chunk.bands, .rows). */
/* The tiles save gives a chunk of this shape: *bands_out column bands, the largest power of two
 * at most CK_BANDS_MAX and the last dim's extent with bands at least min(4 KiB, block_bytes / 8)
 * wide; *rows_out = max(1, block_bytes / the widest band's bytes) rows a tile; both 0
 * (contiguous blocks) for a chunk under 2 dims, empty, or too narrow for two bands. */
void ck_tile_geometry(int nd, const int64_t *shape, size_t es, uint64_t block_bytes,
                      int64_t *bands_out, int64_t *rows_out);
/* The tiles' XXH3-64 of a chunk's bytes in memory (dense, row-major), in metadata order. */
dt_status ck_tile_hashes(const void *data, int nd, const int64_t *shape, size_t es, int64_t bands,
                         int64_t rows, uint64_t *out, const char *fn);
/* ck_read_verified for a tiled chunk: reads the row segments of every tile the box touches
 * (all: every tile), checks each tile, and places the box in dst. */
#define CK_TILE_PIECE ((uint64_t)256 << 10) /* the most bytes one pread takes */
dt_status ck_read_tiled(ck_files *fs, const ck_tensor *t, const ck_chunk *c, const int64_t *s,
                        const int64_t *e, char *dst, const int64_t *dst_shape,
                        const int64_t *dst_off, int all, const char *fn);

/* publish.c: */
/* Makes the files in partial a complete checkpoint at dir: m checked as a loader will check
 * it, partial fsynced and renamed to dir (a checkpoint already there moved aside to dir.old
 * until the end), renamed(arg) called (nullable), then metadata.json written last. */
dt_status ck_publish(const ck_meta *m, const char *partial, const char *dir,
                     void (*renamed)(void *), void *arg, const char *fn);
#endif
