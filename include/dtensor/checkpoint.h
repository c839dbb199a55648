/* Distributed checkpoints: every rank writes the shards it owns, any mesh reads them back.
 *
 * A checkpoint is a directory: one safetensors file per rank that owns data
 * (rank-00003.safetensors: JSON header + raw little-endian data, one entry per local chunk,
 * keyed by the tensor's name, so Python's safetensors opens it), blob.bin (the user's bytes:
 * step, RNG state, data position) and metadata.json, which maps every tensor (name, dtype,
 * global shape, the placements and mesh it was saved from) to its chunks (global offset,
 * shape, file, byte range, xxh64 checksum of the chunk and XXH3-64 checksums of its blocks).
 * A shard replicated over mesh dims is written once, by the rank at coordinate 0 of those
 * dims; Partial tensors are reduced first.
 *
 * Crash safety: files are written into "<dir>.partial", each fsynced; the directory is then
 * renamed to dir and metadata.json written last (through a fsynced temporary and a rename).
 * A directory is a complete checkpoint exactly when its metadata.json exists, so a crash at
 * any point leaves the previous checkpoint as it was and the new one reported incomplete.
 *
 * Loading reads, on each rank, only the checksummed blocks of the chunks that overlap its
 * shard of each target tensor, checking each (no rank ever holds a full tensor; one small
 * collective makes every rank agree on the outcome): any source mesh and placements onto any
 * target mesh and placements, uneven shards and 1 <-> N ranks included.
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
    /* Each chunk is checksummed in blocks of about this many bytes (XXH3-64 each, listed in
     * metadata.json), so that a load that reads part of a chunk checks only the blocks it
     * touches: contiguous byte ranges for 1-D and narrow chunks, tiles (a group of rows x one
     * of up to 64 column bands) for chunks whose rows hold two bands of at least
     * min(4 KiB, block_bytes / 8), so that a split of the last dim reads only its bands
     * (docs/checkpoints.md). 0: 1 MiB. At most 2^40; every rank passes the same. */
    size_t block_bytes;
} dt_checkpoint_save_options;

/* What a load checks (dt_checkpoint_load_options.verify). Every load also checks each data
 * file it opens: its size and its safetensors header against metadata.json. */
enum dt_checkpoint_verify {
    /* Trust the data: only the overlaps' bytes are read, no checksum is checked (max_gap
     * applies). For data known to be intact (just written, or checked once with
     * dt_checkpoint_check): corrupt bytes load silently. */
    DT_CHECKPOINT_VERIFY_OFF = -1,
    /* The default: every block (dt_checkpoint_save_options.block_bytes) that an overlap
     * touches is read in whole and checked against its checksum, the edges of a partial range
     * included; bytes no block of this rank's overlaps holds are not read. A checkpoint written
     * without block checksums (before 2026-12-06) has one block per chunk: every chunk an
     * overlap touches is read and checked in whole. */
    DT_CHECKPOINT_VERIFY_BLOCKS = 0,
    /* Every block of every chunk that overlaps this rank's shards (as dt_checkpoint_check does
     * for those chunks). */
    DT_CHECKPOINT_VERIFY_CHUNKS = 1,
};

typedef struct dt_checkpoint_load_options {
    /* Strict (as PyTorch's strict=True): a tensor missing from the checkpoint, or a
     * checkpoint tensor not asked for, is an error naming it. Otherwise missing tensors are
     * left as they are and extra ones ignored. Shape and dtype mismatches are always errors. */
    int strict;
    /* enum dt_checkpoint_verify: 0 (DT_CHECKPOINT_VERIFY_BLOCKS) checks every block read. */
    int verify;
    /* With verify = DT_CHECKPOINT_VERIFY_OFF only (verified reads read whole blocks):
     * 0 (default): read the bytes of each overlap, one pread per contiguous run; when the
     * runs are many, short (under 64 KiB) and fill at least half of the file range they span
     * (a shard that cuts the saved rows), that range is mapped instead and the runs copied out
     * of it (the data file must not be truncated while it loads: that raises SIGBUS, as with
     * any reader that maps files). > 0: runs at most max_gap bytes apart in a file are read
     * with one pread of the span covering them (more bytes read, far fewer calls: for file
     * systems where each request is costly). */
    size_t max_gap;
    /* 0 (default): collective over the world (as PyTorch DCP's load): every rank calls it,
     * and every rank returns the same status and message (the lowest failing rank's, naming
     * that rank, and the tensor and file at fault). 1: each rank loads on its own and returns
     * its own outcome (PyTorch's no_dist=True). */
    int no_dist;
    /* The world a collective load agrees over (nullable: the context of the first tensor's
     * mesh; needed on a rank that passes no tensors). */
    dt_ctx *ctx;
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
 * dim, zeros elsewhere; the value everywhere for the other reductions). Each rank reads only
 * the blocks its shards need, checking each (opts->verify). Collective over the world unless
 * opts->no_dist: every rank calls it (with its own tensors, or none and opts->ctx set), blocks
 * until every rank has loaded, and all return the same status: a failure on any rank fails
 * every rank with the message "dt_checkpoint_load: rank R failed: ..." naming the tensor and
 * file. opts nullable (strict, verify blocks, collective).
 * DT_ERR_IO for an incomplete checkpoint or a file that is missing, short or corrupt (a
 * checksum or safetensors header that does not match the metadata), DT_ERR_PARSE for a
 * malformed header or metadata, and DT_ERR_ARG / DT_ERR_SHAPE / DT_ERR_DTYPE naming the tensor
 * for strict mismatches. Names, shapes and dtypes are checked before any of this rank's tensors
 * change (other ranks may have loaded theirs when one rank's check fails); after an I/O or
 * checksum error the tensors' contents are unspecified (blocks are read straight into the
 * shards and checked there). */
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
 * reads every chunk to check its checksums (the whole chunk's and each block's). Not
 * collective. */
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
