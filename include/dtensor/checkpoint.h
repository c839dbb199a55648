/* Distributed checkpoints: every rank writes the shards it owns, any mesh reads them back.
 *
 * A checkpoint is a directory: one safetensors file per rank that owns data
 * (rank-00003.safetensors: JSON header + raw little-endian data, one entry per local chunk,
 * keyed by the tensor's name, so Python's safetensors opens it), blob.bin (the user's bytes:
 * step, RNG state, data position) and metadata.json, which maps every tensor (name, dtype,
 * global shape, the placements and mesh it was saved from) to its chunks (global offset,
 * shape, file, byte range, xxh64 checksum). A shard replicated over mesh dims is written once,
 * by the rank at coordinate 0 of those dims; Partial tensors are reduced first.
 *
 * Crash safety: files are written into "<dir>.partial", each fsynced; the directory is then
 * renamed to dir and metadata.json written last (through a fsynced temporary and a rename).
 * A directory is a complete checkpoint exactly when its metadata.json exists, so a crash at
 * any point leaves the previous checkpoint as it was and the new one reported incomplete.
 *
 * Loading reads, on each rank, only the byte ranges of the chunks that overlap its shard of
 * each target tensor (no rank ever holds a full tensor, no collective): any source mesh and
 * placements onto any target mesh and placements, uneven shards and 1 <-> N ranks included.
 *
 * Tensor names: 1 to DT_CHECKPOINT_NAME_MAX printable ASCII characters, no space, '"' or '\\'.
 * The files are read with POSIX I/O: on the UCX runtime the directory must be on a filesystem
 * every rank sees. */
#ifndef DTENSOR_CHECKPOINT_H
#define DTENSOR_CHECKPOINT_H

#include "dtensor/runtime.h"
#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CHECKPOINT_NAME_MAX 255

/* Points of a save at which the progress callback is called (on the rank named). */
typedef enum dt_checkpoint_stage {
    DT_CHECKPOINT_STAGED = 0, /* every rank: shards reduced and snapshotted */
    DT_CHECKPOINT_RANK_FILE,  /* every rank: its data file is written and fsynced */
    DT_CHECKPOINT_RENAMED,    /* rank 0: the directory is in place, metadata.json not yet */
    DT_CHECKPOINT_COMPLETE,   /* rank 0: metadata.json is written; the checkpoint is complete */
} dt_checkpoint_stage;

typedef void (*dt_checkpoint_progress_fn)(void *arg, dt_checkpoint_stage stage, int rank);

typedef struct dt_checkpoint_save_options {
    const void *blob; /* rank 0's bytes are saved as blob.bin (nullable) */
    size_t blob_bytes;
    /* > 0: after a save, complete checkpoints beside dir whose names are dir's with another
     * trailing number ("step-7" beside "step-12") are deleted but the keep_last highest
     * numbers, as are incomplete ones with lower numbers. 0 keeps everything. */
    int keep_last;
    dt_checkpoint_progress_fn progress; /* nullable; on the rank's thread (the writer's for
                                         * RANK_FILE of an async save) */
    void *progress_arg;
} dt_checkpoint_save_options;

typedef struct dt_checkpoint_load_options {
    /* Strict (as PyTorch's strict=True): a tensor missing from the checkpoint, or a
     * checkpoint tensor not asked for, is an error naming it. Otherwise missing tensors are
     * left as they are and extra ones ignored. Shape and dtype mismatches are always errors. */
    int strict;
    /* Read every chunk that overlaps this rank's shards in full to check its checksum. Off,
     * only the chunks read in full anyway (a shard that covers them) are checked. */
    int verify;
    /* 0 (default): read the bytes of each overlap, one pread per contiguous run; when the
     * runs are many, short (under 64 KiB) and fill at least half of the file range they span
     * (a shard that cuts the saved rows), that range is mapped instead and the runs copied out
     * of it (the data file must not be truncated while it loads: that raises SIGBUS, as with
     * any reader that maps files). > 0: runs at most max_gap bytes apart in a file are read
     * with one pread of the span covering them (more bytes read, far fewer calls: for file
     * systems where each request is costly). */
    size_t max_gap;
} dt_checkpoint_load_options;

/* Saves n named tensors (arrays borrowed) and the blob into dir, replacing a checkpoint
 * there. Collective over the world of ctx: every rank calls it; each rank passes the tensors
 * of the meshes it belongs to (ranks of a pipeline stage may pass other tensors than the
 * rest), every rank of a tensor's mesh passes it under the same name in the same order.
 * Blocks until the checkpoint is complete. opts nullable (defaults: no blob, keep all).
 * DT_ERR_ARG for a bad or repeated name, DT_ERR_IO when a file cannot be written (every rank
 * then fails; dir keeps its previous content). */
DT_API dt_status dt_checkpoint_save(dt_ctx *ctx, const char *dir, const char *const *names,
                                    dt_tensor *const *tensors, int n,
                                    const dt_checkpoint_save_options *opts);

/* An asynchronous save: reduces Partial tensors and copies this rank's shards to host staging
 * buffers (collective, blocks for that much), then writes its file on a background thread and
 * returns; the tensors may change from then on. The caller owns *out and must pass it to
 * dt_checkpoint_wait (collective), which finishes the checkpoint. Same arguments as the
 * synchronous save; no other call on ctx's collectives may overlap the wait. */
typedef struct dt_checkpoint_pending dt_checkpoint_pending;
DT_API dt_status dt_checkpoint_save_async(dt_ctx *ctx, const char *dir, const char *const *names,
                                          dt_tensor *const *tensors, int n,
                                          const dt_checkpoint_save_options *opts,
                                          dt_checkpoint_pending **out);
/* Waits for this rank's writer, then makes the checkpoint complete (metadata, rename,
 * rotation). Collective over the world; blocks; frees pending whatever it returns. */
DT_API dt_status dt_checkpoint_wait(dt_checkpoint_pending *pending);

/* Loads n named tensors from dir into the given tensors' local shards, in place, whatever
 * mesh and placements they have (a Partial target: the value on coordinate 0 of a P(sum)
 * dim, zeros elsewhere; the value everywhere for the other reductions). Not collective; each
 * rank reads only what it needs. opts nullable (strict, no extra verification).
 * DT_ERR_IO for an incomplete checkpoint or a file that is missing, short or corrupt (a
 * checksum that does not match), DT_ERR_PARSE for a malformed header or metadata, and
 * DT_ERR_ARG / DT_ERR_SHAPE / DT_ERR_DTYPE naming the tensor for strict mismatches. Names,
 * shapes and dtypes are checked before any tensor changes; after an I/O or checksum error the
 * tensors' contents are unspecified (chunks are read straight into the shards). */
DT_API dt_status dt_checkpoint_load(const char *dir, const char *const *names,
                                    dt_tensor *const *tensors, int n,
                                    const dt_checkpoint_load_options *opts);

/* The blob: copies min(cap, size) bytes into buf (nullable when cap is 0), *bytes_out = its
 * size. Checks its checksum. DT_ERR_ARG, *bytes_out untouched, when the checkpoint was saved
 * without a blob (an empty blob is a blob: DT_OK with size 0). Not collective. */
DT_API dt_status dt_checkpoint_blob(const char *dir, void *buf, size_t cap, size_t *bytes_out);

/* DT_OK when dir is a complete checkpoint whose metadata parses and whose files all exist
 * with the sizes it records; DT_ERR_IO ("incomplete: ...") or DT_ERR_PARSE otherwise. With
 * checksums set, also checks each file's own safetensors header against the metadata and
 * reads every chunk to check its checksum. Not collective. */
DT_API dt_status dt_checkpoint_check(const char *dir, int checksums);

/* The complete checkpoint with the highest trailing number among the entries of root whose
 * names are prefix followed by digits ("step-" -> "root/step-12"), as a path into buf.
 * DT_ERR_IO when there is none, DT_ERR_SIZE when buf is too small. Not collective. */
DT_API dt_status dt_checkpoint_latest(const char *root, const char *prefix, char *buf, size_t cap);

/* For export: one safetensors file at out_path with every tensor of the checkpoint in full,
 * in name order (written to out_path.tmp, fsynced, renamed). Reads and checks every chunk;
 * holds one full tensor in memory at a time. Not collective. */
DT_API dt_status dt_checkpoint_consolidate(const char *dir, const char *out_path);

/* From one safetensors file (a Hugging Face export, a consolidated checkpoint) to a sharded
 * checkpoint at dir, as if saved by the ranks of mesh (text as dt_mesh_create_str: "2x2",
 * "dp=2,tp=2") with placements (text, one per mesh dim) for every tensor: a Shard(d) on a
 * tensor with fewer than d+1 dims is Replicate for it. Partial placements are DT_ERR_PLACEMENT.
 * Writes the rank files one at a time, reading from in_path only each chunk's bytes; needs
 * no ranks. Crash safe as a save. Not collective. */
DT_API dt_status dt_checkpoint_convert(const char *in_path, const char *dir, const char *mesh,
                                       const char *placements);

#ifdef __cplusplus
}
#endif
#endif
