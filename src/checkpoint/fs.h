/* File-system steps of a checkpoint (fs.c): whole writes and reads, fsync, mkdir -p, rm -rf,
 * and keep_last rotation, and the names of a checkpoint's files. Knows nothing of what the
 * files hold. */
#ifndef DT_CHECKPOINT_FS_H
#define DT_CHECKPOINT_FS_H

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
/* The keep_last rotation of dt_checkpoint_save_options beside dir. */
dt_status ck_rotate(const char *dir, int keep_last, const char *fn);

#endif
