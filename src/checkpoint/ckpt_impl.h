/* What the checkpoint files hold, as C structs shared by save, load and the dtensor-ckpt tool:
 * a safetensors entry, the metadata of a checkpoint, and the file-system steps (fsync,
 * renames, removal) that make a save crash safe. No ranks or tensors here. */
#ifndef DT_CHECKPOINT_IMPL_H
#define DT_CHECKPOINT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "dtensor/checkpoint.h"

#define CK_META_FILE "metadata.json"
#define CK_BLOB_FILE "blob.bin"
#define CK_FORMAT    "dtensor-checkpoint"
#define CK_FILE_MAX  64 /* a data file's name, with its NUL */
#define CK_TEXT_MAX  96 /* placements and mesh text */
/* Bounds on untrusted metadata: more is refused as malformed. */
#define CK_MAX_TENSORS (1 << 20)
#define CK_MAX_CHUNKS  (1 << 16) /* per tensor */

/* One entry of a safetensors header: a dense row-major array at [begin, end) of the data
 * section (after the header). offset: where it starts in its tensor (metadata only). */
typedef struct ck_st_entry {
    char name[DT_CHECKPOINT_NAME_MAX + 1];
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    uint64_t begin, end;
} ck_st_entry;

typedef struct ck_chunk {
    int file;            /* index into ck_meta.files */
    uint64_t begin, end; /* byte range in that file (absolute) */
    uint64_t hash;       /* XXH64 (seed 0) of those bytes */
    int64_t offset[DT_MAX_NDIM], shape[DT_MAX_NDIM];
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
} ck_meta;

/* One chunk (or, from a tensor mesh's rank 0, a chunk-less entry that still names the tensor)
 * as every rank sends it to rank 0: fixed size, gathered as int64 words. */
typedef struct ck_rec {
    char name[DT_CHECKPOINT_NAME_MAX + 1];
    char placements[CK_TEXT_MAX], mesh[CK_TEXT_MAX];
    int32_t dtype, ndim, has_chunk, rank;
    int64_t shape[DT_MAX_NDIM], offset[DT_MAX_NDIM], chunk_shape[DT_MAX_NDIM];
    uint64_t begin, end, hash, file_bytes;
} ck_rec;
_Static_assert(sizeof(ck_rec) % 8 == 0, "ck_rec is gathered as int64 words");
#define CK_REC_WORDS (sizeof(ck_rec) / 8)

/* The metadata of a save from every rank's records (records.c): tensors that agree on dtype
and shape across ranks, files named by rank. 0 or -1 with err. */
int ck_meta_from_records(const ck_rec *recs, int nrec, ck_meta *out, char *err, size_t errcap);

/* rank_file.c: writes the data file at path for the records with a chunk, asking chunk(arg, i,
 * scratch, &data) for record i's bytes (scratch: a buffer of the largest chunk's size when
 * scratch is set, else NULL), hashing them into the record as they are written, then fsync.
 * Sets begin, end and hash of those records and file_bytes of all. No file without chunks. */
typedef dt_status (*ck_chunk_fn)(void *arg, int i, void *scratch, const void **data_out);
dt_status ck_write_rank_file(const char *path, ck_rec *recs, int nrec, ck_chunk_fn chunk, void *arg,
                             int scratch, const char *fn);

/* safetensors.c ------------------------------------------------------------------------------ */
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

/* meta.c ------------------------------------------------------------------------------------- */
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

/* Reading chunks back (chunks.c), shared by loading and the tool. The data files of a
 * checkpoint, opened on first use and checked against the sizes the metadata records. */
typedef struct ck_files {
    const char *dir;
    const ck_meta *m;
    int *fd; /* m->nfiles entries, -1 until opened */
} ck_files;
dt_status ck_files_fd(ck_files *fs, int f, const char *fn, int *fd_out);
/* A whole chunk into dst, its checksum checked (DT_ERR_IO naming the tensor when it fails). */
dt_status ck_read_chunk(ck_files *fs, const ck_tensor *t, const ck_chunk *c, void *dst,
                        const char *fn);
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

/* fs.c --------------------------------------------------------------------------------------- */
/* Whole-file helpers with DT_ERR_IO messages naming fn and the path. */
dt_status ck_write_file(const char *path, const void *data, size_t bytes, const char *fn);
dt_status ck_read_file(const char *path, char **data_out, size_t *bytes_out, size_t max,
                       const char *fn);
dt_status ck_write_all(int fd, const void *data, size_t bytes, const char *path, const char *fn);
dt_status ck_pread_all(int fd, void *dst, size_t bytes, uint64_t off, const char *path,
                       const char *fn);
dt_status ck_fsync_dir(const char *dir, const char *fn);
dt_status ck_mkdirs(const char *dir, const char *fn);
/* 1 when path is a directory holding nothing but a checkpoint's files (metadata, blob, rank
 * files, their temporaries): the only directories a save replaces or rotation deletes. */
int ck_is_ours(const char *path);
/* An empty directory at partial: a stale one of a save that never finished is removed, anything
 * else there is an error. */
dt_status ck_fresh_dir(const char *partial, const char *fn);
/* rm -rf (no error when absent). */
dt_status ck_remove_tree(const char *path, const char *fn);
/* "a/b/step-12" -> parent "a/b", base "step-12". */
void ck_split_path(const char *path, char *parent, size_t pcap, char *base, size_t bcap);
/* base = prefix + digits: the number and prefix length; -1 when base has no trailing number. */
int64_t ck_trailing_number(const char *base, size_t *prefix_len);
/* Makes the files in partial a complete checkpoint at dir: m checked as a loader will check
 * it, partial fsynced and renamed to dir (a checkpoint already there moved aside to dir.old
 * until the end), renamed(arg) called (nullable), then metadata.json written last. */
dt_status ck_publish(const ck_meta *m, const char *partial, const char *dir,
                     void (*renamed)(void *), void *arg, const char *fn);
/* The keep_last rotation of dt_checkpoint_save_options beside dir. */
dt_status ck_rotate(const char *dir, int keep_last, const char *fn);

#endif
