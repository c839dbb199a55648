/* dt_checkpoint_save and its asynchronous form. Three phases: stage (collective: Partial
 * tensors reduced, this rank's owned shards snapshotted or pinned), write (this rank's data
 * file, fsynced; on a background thread when asynchronous), finish (collective: the chunk
 * records gathered, rank 0 renames the directory into place and writes metadata.json last). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "checkpoint/ckpt_impl.h"
#include "core/check.h"
#include "dtensor/agree.h"
#include "dtensor/comm.h"
#include "dtensor/redistribute.h"
#include "redistribute/redistribute_impl.h"

struct dt_checkpoint_pending {
    dt_ctx *ctx;
    dt_comm *world;
    char dir[4096], partial[4200];
    int rank;
    dt_checkpoint_save_options opts;
    void *blob;
    uint64_t blob_hash;
    int nrec;
    ck_rec *recs;
    const void **data; /* per record: its chunk's bytes in host memory */
    void **owned;      /* per record: a staging copy to free, or NULL */
    dt_tensor **held;  /* per record: the tensor whose memory data points into, or NULL */
    uint64_t block_bytes, *blocks; /* this rank's block checksums, in record order */
    int64_t nblocks;
    pthread_t thread;
    int threaded;
    dt_status wst;
    char werr[1024];
};

static const char *const save_fn = "dt_checkpoint_save";

static void progress(const dt_checkpoint_pending *p, dt_checkpoint_stage stage) {
    if (p->opts.progress) p->opts.progress(p->opts.progress_arg, stage, p->rank);
}

/* Every rank learns whether any failed, and why: the failing ranks keep their own message;
 * the others fail with DT_ERR_ABORTED quoting the lowest failing rank's. */
static dt_status agree(dt_comm *world, dt_status mine, int rank, const char *what) {
    int64_t v = mine == DT_OK ? INT64_MAX : rank, low;
    char keep[1024], why[512] = "";
    snprintf(keep, sizeof keep, "%s", dt_last_error());
    dt_status st = dt_all_reduce(world, &v, &low, 1, DT_I64, DT_REDUCE_MIN);
    if (st != DT_OK) return st;
    if (low == INT64_MAX) return DT_OK;
    if (low == rank) snprintf(why, sizeof why, "%.511s", keep);
    st = dt_broadcast(world, why, sizeof why / 4, DT_I32, (int)low);
    if (mine != DT_OK) return dt_error(mine, "%s", keep);
    if (st != DT_OK) return st;
    why[sizeof why - 1] = '\0';
    return dt_error(DT_ERR_ABORTED, "%s: rank %lld failed while %s: %s", save_fn, (long long)low,
                    what, why);
}

static void mesh_text(dt_mesh *mesh, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int d = 0; d < dt_mesh_ndim(mesh) && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s=%d", d ? "," : "",
                                dt_mesh_dim_name(mesh, d), dt_mesh_dim_size(mesh, d));
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static dt_status check_args(dt_ctx *ctx, const char *dir, const char *const *names,
                            dt_tensor *const *tensors, int n) {
    DT_ARG(ctx != NULL, "%s: argument ctx is NULL", save_fn);
    DT_ARG(dir && *dir && strlen(dir) < 4000, "%s: argument dir is NULL, empty or too long",
           save_fn);
    DT_ARG(n >= 0, "%s: argument n = %d is negative", save_fn, n);
    DT_ARG(n == 0 || (names && tensors), "%s: argument names or tensors is NULL", save_fn);
    for (int i = 0; i < n; i++) {
        DT_ARG(names[i] && ck_name_ok(names[i]),
               "%s: name %d (\"%.64s\") is not 1 to %d printable characters without space, '\"' "
               "or '\\'",
               save_fn, i, names[i] ? names[i] : "(null)", DT_CHECKPOINT_NAME_MAX);
        DT_ARG(tensors[i] != NULL, "%s: tensor %d (\"%s\") is NULL", save_fn, i, names[i]);
    }
    const char **sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    if (!sorted) return dt_error(DT_ERR_NOMEM, "%s: out of memory for %d names", save_fn, n);
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    if (n > 1) qsort(sorted, (size_t)n, sizeof *sorted, name_cmp);
    for (int i = 1; i < n; i++)
        if (strcmp(sorted[i], sorted[i - 1]) == 0) {
            dt_status st =
                dt_error(DT_ERR_ARG, "%s: name \"%s\" is given twice", save_fn, sorted[i]);
            free(sorted);
            return st;
        }
    free(sorted);
    return DT_OK;
}

static void pending_free(dt_checkpoint_pending *p) {
    if (!p) return;
    for (int i = 0; i < p->nrec; i++)
        free(p->owned[i]), dt_tensor_release(p->held[i]);
    free(p->recs), free(p->data), free(p->owned), free(p->held), free(p->blob), free(p->blocks);
    free(p);
}

/* The record of tensor t (already reduced when it was Partial) on this rank, if this rank
 * writes its shard or is its mesh's rank 0; *rec_used = 0 when it has none. */
static dt_status stage_one(dt_checkpoint_pending *p, const char *name, dt_tensor *orig,
                           dt_tensor *t, int async, int *rec_used) {
    dt_tensor_info info, oinfo;
    DT_CHECK(dt_tensor_info_get(t, &info));
    DT_CHECK(dt_tensor_info_get(orig, &oinfo));
    int writer = 1;
    for (int d = 0; d < info.mesh_ndim; d++)
        if (info.placements[d].kind == DT_PLACEMENT_REPLICATE && dt_mesh_coord(info.mesh, d) != 0)
            writer = 0;
    int has_chunk = writer && info.local_numel > 0;
    *rec_used = 0;
    if (!has_chunk && dt_mesh_rank(info.mesh) != 0) return DT_OK;
    if (!ck_st_dtype_name(info.dtype))
        return dt_error(DT_ERR_DTYPE,
                        "%s: tensor \"%s\" has dtype %s, which has no safetensors "
                        "name",
                        save_fn, name, dt_dtype_name(info.dtype));
    int k = p->nrec;
    ck_rec *r = &p->recs[k];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    dt_placements_format(oinfo.placements, oinfo.mesh_ndim, r->placements, sizeof r->placements);
    mesh_text(info.mesh, r->mesh, sizeof r->mesh);
    r->dtype = (int32_t)info.dtype, r->ndim = info.ndim, r->has_chunk = has_chunk;
    r->rank = p->rank;
    for (int d = 0; d < info.ndim; d++) {
        r->shape[d] = info.shape[d];
        r->offset[d] = info.local_offset[d];
        r->chunk_shape[d] = info.local_shape[d];
    }
    p->data[k] = NULL, p->owned[k] = NULL, p->held[k] = NULL;
    if (has_chunk) {
        if (!async && info.device.kind == DT_DEVICE_CPU) { /* written from the shard itself */
            DT_CHECK(dt_tensor_retain(t));
            p->held[k] = t;
            p->data[k] = info.local_data;
        } else {
            void *copy = malloc(info.local_bytes);
            if (!copy)
                return dt_error(DT_ERR_NOMEM, "%s: out of memory staging \"%s\" (%zu bytes)",
                                save_fn, name, info.local_bytes);
            dt_status st = dt_tensor_local_to_host(t, copy, info.local_bytes);
            if (st != DT_OK) {
                free(copy);
                return st;
            }
            p->owned[k] = copy, p->data[k] = copy;
        }
    }
    p->nrec++;
    *rec_used = 1;
    return DT_OK;
}

/* Reduces a Partial tensor to Replicate on those mesh dims (collective over its mesh). */
static dt_status reduced(dt_tensor *t, dt_tensor **out) {
    dt_tensor_info info;
    DT_CHECK(dt_tensor_info_get(t, &info));
    dt_placement pl[DT_MESH_MAX_NDIM];
    int partial = 0;
    for (int d = 0; d < info.mesh_ndim; d++) {
        pl[d] = info.placements[d];
        if (pl[d].kind == DT_PLACEMENT_PARTIAL) pl[d] = dt_replicate(), partial = 1;
    }
    if (!partial) {
        DT_CHECK(dt_tensor_retain(t));
        *out = t;
        return DT_OK;
    }
    /* Saving records nothing: the pure move, not the differentiable dt_tensor_redistribute. */
    const dt_plan *plan;
    DT_CHECK(dt_redistribute_prepare("dt_checkpoint_save", t, info.mesh_ndim, pl, &plan));
    return dt_redistribute_execute(t, plan, out);
}

static dt_status stage(dt_ctx *ctx, const char *dir, const char *const *names,
                       dt_tensor *const *tensors, int n, const dt_checkpoint_save_options *opts,
                       int async, dt_checkpoint_pending **out) {
    DT_CHECK(check_args(ctx, dir, names, tensors, n));
    dt_checkpoint_pending *p = calloc(1, sizeof *p);
    if (!p) return dt_error(DT_ERR_NOMEM, "%s: out of memory", save_fn);
    p->ctx = ctx, p->rank = dt_ctx_rank(ctx);
    if (opts) p->opts = *opts;
    p->block_bytes = p->opts.block_bytes ? (uint64_t)p->opts.block_bytes : CK_BLOCK_DEFAULT;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    snprintf(p->dir, sizeof p->dir, "%.*s", (int)dl, dir);
    snprintf(p->partial, sizeof p->partial, "%s.partial", p->dir);
    dt_status st = dt_ctx_world_comm(ctx, &p->world);
    if (st != DT_OK) {
        free(p);
        return st;
    }
    p->recs = calloc((size_t)n + 1, sizeof *p->recs);
    p->data = calloc((size_t)n + 1, sizeof *p->data);
    p->owned = calloc((size_t)n + 1, sizeof *p->owned);
    p->held = calloc((size_t)n + 1, sizeof *p->held);
    if (!p->recs || !p->data || !p->owned || !p->held)
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for %d tensors", save_fn, n);
    if (p->block_bytes > CK_BLOCK_MAX)
        st = dt_error(DT_ERR_ARG, "%s: block_bytes = %llu is over %llu", save_fn,
                      (unsigned long long)p->block_bytes, (unsigned long long)CK_BLOCK_MAX);
    if (st == DT_OK && p->rank == 0 && p->opts.blob_bytes) {
        if (!p->opts.blob)
            st = dt_error(DT_ERR_ARG, "%s: blob is NULL with blob_bytes = %zu", save_fn,
                          p->opts.blob_bytes);
        else if (!(p->blob = malloc(p->opts.blob_bytes)))
            st = dt_error(DT_ERR_NOMEM, "%s: out of memory for the blob", save_fn);
        else
            memcpy(p->blob, p->opts.blob, p->opts.blob_bytes);
    }
    if (st == DT_OK && p->rank == 0) { /* a stale .partial is a save that never finished */
        char parent[4096], base[256];
        ck_split_path(p->dir, parent, sizeof parent, base, sizeof base);
        st = ck_mkdirs(parent, save_fn);
        if (st == DT_OK) st = ck_fresh_dir(p->partial, save_fn);
    }
    st = agree(p->world, st, p->rank, "creating the directory");
    /* Every rank runs every tensor's reduction even after a local failure: the others wait in
     * those collectives. */
    for (int i = 0; i < n; i++) {
        dt_tensor *r = NULL;
        dt_status si = reduced(tensors[i], &r);
        if (si == DT_OK && st == DT_OK) {
            int used;
            si = stage_one(p, names[i], tensors[i], r, async, &used);
        }
        dt_tensor_release(r);
        if (st == DT_OK && si != DT_OK) {
            dt_error_prefix(names[i]);
            st = si;
        }
    }
    st = agree(p->world, st, p->rank, "staging its shards");
    if (st != DT_OK) {
        pending_free(p);
        return st;
    }
    progress(p, DT_CHECKPOINT_STAGED);
    *out = p;
    return DT_OK;
}

static dt_status chunk_of(void *arg, int i, void *scratch, const void **data_out) {
    (void)scratch;
    *data_out = ((const dt_checkpoint_pending *)arg)->data[i];
    return DT_OK;
}

/* This rank's data file (and rank 0's blob), fsynced. Touches no communicator, so it may run on
 * a background thread. */
static dt_status write_rank(dt_checkpoint_pending *p) {
    if (p->rank == 0 && p->blob) {
        char path[4300];
        snprintf(path, sizeof path, "%s/%s", p->partial, CK_BLOB_FILE);
        p->blob_hash = XXH64(p->blob ? p->blob : "", p->opts.blob_bytes, 0);
        DT_CHECK(ck_write_file(path, p->blob, p->opts.blob_bytes, save_fn));
    }
    char path[4300];
    snprintf(path, sizeof path, "%s/rank-%05d.safetensors", p->partial, p->rank);
    return ck_write_rank_file(path, p->recs, p->nrec, chunk_of, p, 0, p->block_bytes, &p->blocks,
                              &p->nblocks, save_fn);
}

static void *writer_main(void *arg) {
    dt_checkpoint_pending *p = arg;
    p->wst = write_rank(p);
    if (p->wst != DT_OK)
        snprintf(p->werr, sizeof p->werr, "%s", dt_last_error());
    else
        progress(p, DT_CHECKPOINT_RANK_FILE);
    return NULL;
}

/* Rank 0: the metadata from everyone's records, the directory renamed into place, then
 * metadata.json, then rotation. */
static void on_renamed(void *arg) {
    progress(arg, DT_CHECKPOINT_RENAMED);
}

static dt_status publish(dt_checkpoint_pending *p, const ck_rec *all, int nall,
                         const uint64_t *blocks) {
    ck_meta m = {0};
    char err[512];
    if (ck_meta_from_records(all, nall, blocks, &m, err, sizeof err))
        return dt_error(DT_ERR_ARG, "%s: %s", save_fn, err);
    if (p->blob) m.has_blob = 1, m.blob_bytes = p->opts.blob_bytes, m.blob_hash = p->blob_hash;
    dt_status st = ck_publish(&m, p->partial, p->dir, on_renamed, p, save_fn);
    ck_meta_free(&m);
    if (st == DT_OK) progress(p, DT_CHECKPOINT_COMPLETE);
    if (st == DT_OK) st = ck_rotate(p->dir, p->opts.keep_last, save_fn);
    return st;
}

/* Every rank's records and block checksums gathered (counts first, as pairs of words), then
 * rank 0 publishes. */
static dt_status finish(dt_checkpoint_pending *p, dt_status wst) {
    dt_status st = agree(p->world, wst, p->rank, "writing its file");
    if (st != DT_OK) return st;
    int size = dt_comm_size(p->world);
    int64_t mine[2] = {p->nrec, p->nblocks}, *counts = calloc((size_t)size * 2, sizeof *counts);
    size_t *words = calloc((size_t)size, sizeof *words),
           *bwords = calloc((size_t)size, sizeof *bwords);
    ck_rec *all = NULL;
    uint64_t *blocks = NULL;
    if (!counts || !words || !bwords) st = dt_error(DT_ERR_NOMEM, "%s: out of memory", save_fn);
    st = agree(p->world, st, p->rank, "gathering records");
    if (st == DT_OK) st = dt_all_gather(p->world, mine, counts, 2, DT_I64);
    int64_t total = 0, tblocks = 0;
    for (int r = 0; st == DT_OK && r < size; r++) {
        total += counts[2 * r], words[r] = (size_t)counts[2 * r] * CK_REC_WORDS;
        tblocks += counts[2 * r + 1], bwords[r] = (size_t)counts[2 * r + 1];
    }
    if (st == DT_OK) {
        all = calloc((size_t)total + 1, sizeof *all);
        blocks = calloc((size_t)tblocks + 1, sizeof *blocks);
        st = agree(p->world,
                   all && blocks ? DT_OK
                                 : dt_error(DT_ERR_NOMEM,
                                            "%s: out of memory for %lld records and %lld block "
                                            "checksums",
                                            save_fn, (long long)total, (long long)tblocks),
                   p->rank, "gathering records");
    }
    if (st == DT_OK)
        st = dt_all_gatherv(p->world, p->nrec ? (void *)p->recs : (void *)all, all, words, NULL,
                            DT_I64);
    if (st == DT_OK)
        st = dt_all_gatherv(p->world, p->nblocks ? (void *)p->blocks : (void *)blocks, blocks,
                            bwords, NULL, DT_I64);
    if (st == DT_OK) {
        dt_status pub = p->rank == 0 ? publish(p, all, (int)total, blocks) : DT_OK;
        st = agree(p->world, pub, p->rank, "publishing the checkpoint");
    }
    free(counts), free(words), free(bwords), free(all), free(blocks);
    return st;
}

dt_status dt_checkpoint_save(dt_ctx *ctx, const char *dir, const char *const *names,
                             dt_tensor *const *tensors, int n,
                             const dt_checkpoint_save_options *opts) {
    dt_checkpoint_pending *p;
    DT_CHECK(dt_agree_checkpoint(save_fn, ctx, dir, names, tensors, n)); /* DT_DEBUG_ARGS */
    DT_CHECK(stage(ctx, dir, names, tensors, n, opts, 0, &p));
    dt_status wst = write_rank(p);
    if (wst == DT_OK) progress(p, DT_CHECKPOINT_RANK_FILE);
    dt_status st = finish(p, wst);
    pending_free(p);
    return st;
}

dt_status dt_checkpoint_save_async(dt_ctx *ctx, const char *dir, const char *const *names,
                                   dt_tensor *const *tensors, int n,
                                   const dt_checkpoint_save_options *opts,
                                   dt_checkpoint_pending **out) {
    DT_ARG(out != NULL, "dt_checkpoint_save_async: argument out is NULL");
    dt_checkpoint_pending *p;
    DT_CHECK(dt_agree_checkpoint("dt_checkpoint_save_async", ctx, dir, names, tensors, n));
    DT_CHECK(stage(ctx, dir, names, tensors, n, opts, 1, &p));
    if (pthread_create(&p->thread, NULL, writer_main, p) != 0) {
        p->wst = write_rank(p); /* no thread to be had: write now */
        if (p->wst != DT_OK)
            snprintf(p->werr, sizeof p->werr, "%s", dt_last_error());
        else
            progress(p, DT_CHECKPOINT_RANK_FILE);
    } else {
        p->threaded = 1;
    }
    *out = p;
    return DT_OK;
}

dt_status dt_checkpoint_wait(dt_checkpoint_pending *pending) {
    DT_ARG(pending != NULL, "dt_checkpoint_wait: argument pending is NULL");
    if (pending->threaded) pthread_join(pending->thread, NULL);
    if (pending->wst != DT_OK) dt_error(pending->wst, "%s", pending->werr);
    dt_status st = finish(pending, pending->wst);
    pending_free(pending);
    return st;
}
