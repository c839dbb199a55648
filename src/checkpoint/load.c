/* dt_checkpoint_load and the read-only calls (blob, check, latest). Each rank reads, for each
 * target tensor, only the parts of the chunks that overlap its shard: the overlap is read as
 * runs of contiguous bytes (one pread per run, or copies out of a mapping when the runs are
 * many, short and dense: chunks.c) and pasted into the local shard. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/ckpt_impl.h"
#include "core/box.h"
#include "core/check.h"
#include "core/device.h"
#include "dtensor/agree.h"
#include "dtensor/comm.h"

static const char *const load_fn = "dt_checkpoint_load";

/* Fills this rank's shard of target (on host, shape info->local_shape) from t's chunks: the
 * overlap of each, verified in whole blocks (verify > 0: every block of each overlapping
 * chunk), or, with verification off, only the overlap's bytes. */
static dt_status load_shard(ck_files *fs, const ck_tensor *t, const dt_tensor_info *info,
                            char *host, const dt_checkpoint_load_options *o) {
    int nd = t->ndim;
    for (int ci = 0; ci < t->nchunks; ci++) {
        const ck_chunk *c = &t->chunks[ci];
        int64_t ext[DT_MAX_NDIM], s[DT_MAX_NDIM], dst_off[DT_MAX_NDIM];
        int empty = 0;
        for (int d = 0; d < nd; d++) {
            int64_t a = c->offset[d] > info->local_offset[d] ? c->offset[d] : info->local_offset[d];
            int64_t b1 = c->offset[d] + c->shape[d],
                    b2 = info->local_offset[d] + info->local_shape[d];
            int64_t b = b1 < b2 ? b1 : b2;
            if (b <= a) empty = 1;
            ext[d] = b - a;
            s[d] = a - c->offset[d], dst_off[d] = a - info->local_offset[d];
        }
        if (empty || c->end == c->begin) continue;
        if (o->verify == DT_CHECKPOINT_VERIFY_OFF)
            DT_CHECK(ck_read_box(fs, t, c, s, ext, host, info->local_shape, dst_off, o->max_gap,
                                 load_fn));
        else
            DT_CHECK(ck_read_verified(fs, t, c, s, ext, host, info->local_shape, dst_off,
                                      o->verify == DT_CHECKPOINT_VERIFY_CHUNKS, load_fn));
    }
    return DT_OK;
}

/* A Partial target holds the value on coordinate 0 of each P(sum) dim and zeros elsewhere
 * (tensor.h's convention); the other reductions hold the value everywhere. */
static int holds_zeros(const dt_tensor_info *info) {
    for (int d = 0; d < info->mesh_ndim; d++)
        if (info->placements[d].kind == DT_PLACEMENT_PARTIAL &&
            info->placements[d].op == DT_REDUCE_SUM && dt_mesh_coord(info->mesh, d) != 0)
            return 1;
    return 0;
}

static dt_status check_target(const ck_tensor *t, const char *name, const dt_tensor_info *info) {
    if (t->dtype != info->dtype)
        return dt_error(DT_ERR_DTYPE, "%s: tensor \"%s\" is %s in the checkpoint, %s here", load_fn,
                        name, dt_dtype_name(t->dtype), dt_dtype_name(info->dtype));
    int same = t->ndim == info->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = t->shape[d] == info->shape[d];
    if (!same) {
        char a[128], b[128];
        dt_shape_text(t->shape, t->ndim, a, sizeof a);
        dt_shape_text(info->shape, info->ndim, b, sizeof b);
        return dt_error(DT_ERR_SHAPE, "%s: tensor \"%s\" has shape %s in the checkpoint, %s here",
                        load_fn, name, a, b);
    }
    return DT_OK;
}

static dt_status load_all(ck_files *fs, const ck_meta *m, const char *const *names,
                          dt_tensor *const *tensors, int n, const dt_checkpoint_load_options *o) {
    for (int i = 0; i < n; i++)
        DT_ARG(names[i] && tensors[i], "%s: name or tensor %d is NULL", load_fn, i);
    char *asked = calloc((size_t)m->ntensors + 1, 1);
    if (!asked) return dt_error(DT_ERR_NOMEM, "%s: out of memory", load_fn);
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++) { /* every check before any tensor changes */
        const ck_tensor *t = ck_meta_find(m, names[i]);
        dt_tensor_info info;
        st = dt_tensor_info_get(tensors[i], &info);
        if (st == DT_OK && !t && o->strict)
            st = dt_error(DT_ERR_ARG, "%s: tensor \"%s\" is not in the checkpoint %s", load_fn,
                          names[i], fs->dir);
        if (st == DT_OK && t) st = check_target(t, names[i], &info), asked[t - m->tensors] = 1;
    }
    for (int i = 0; i < m->ntensors && st == DT_OK && o->strict; i++)
        if (!asked[i])
            st = dt_error(DT_ERR_ARG,
                          "%s: the checkpoint holds tensor \"%s\", which was not asked "
                          "for (strict)",
                          load_fn, m->tensors[i].name);
    free(asked);
    for (int i = 0; i < n && st == DT_OK; i++) {
        const ck_tensor *t = ck_meta_find(m, names[i]);
        if (!t) continue;
        dt_tensor_info info;
        DT_CHECK(dt_tensor_info_get(tensors[i], &info));
        if (info.local_bytes == 0) continue;
        int on_host = info.device.kind == DT_DEVICE_CPU;
        char *host = on_host ? info.local_data : malloc(info.local_bytes);
        if (!host) return dt_error(DT_ERR_NOMEM, "%s: out of memory for \"%s\"", load_fn, t->name);
        if (holds_zeros(&info))
            memset(host, 0, info.local_bytes);
        else
            st = load_shard(fs, t, &info, host, o);
        if (st == DT_OK && !on_host)
            st = dt_mem_transfer(info.local_data, info.device.kind, host, DT_DEVICE_CPU,
                                 info.local_bytes);
        if (!on_host) free(host);
    }
    return st;
}

static dt_status load_here(const char *dir, const char *const *names, dt_tensor *const *tensors,
                           int n, const dt_checkpoint_load_options *o) {
    DT_ARG(dir && *dir, "%s: argument dir is NULL or empty", load_fn);
    DT_ARG(n >= 0 && (n == 0 || (names && tensors)), "%s: n = %d with names or tensors NULL",
           load_fn, n);
    DT_ARG(o->verify >= DT_CHECKPOINT_VERIFY_OFF && o->verify <= DT_CHECKPOINT_VERIFY_CHUNKS,
           "%s: opts->verify = %d is not DT_CHECKPOINT_VERIFY_OFF (-1), _BLOCKS (0) or _CHUNKS (1)",
           load_fn, o->verify);
    ck_meta m;
    DT_CHECK(ck_meta_read(dir, &m, load_fn));
    ck_files fs = {
        .dir = dir, .m = &m, .fd = malloc(((size_t)m.nfiles + 1) * sizeof(int)), .headers = 1};
    dt_status st = DT_OK;
    if (!fs.fd) st = dt_error(DT_ERR_NOMEM, "%s: out of memory", load_fn);
    for (int f = 0; fs.fd && f < m.nfiles; f++)
        fs.fd[f] = -1;
    if (st == DT_OK) st = load_all(&fs, &m, names, tensors, n, o);
    for (int f = 0; fs.fd && f < m.nfiles; f++)
        if (fs.fd[f] >= 0) close(fs.fd[f]);
    free(fs.fd);
    ck_meta_free(&m);
    return st;
}

/* The world a collective load agrees over: opts->ctx's, else that of the first tensor's mesh. */
static dt_status load_world(const dt_checkpoint_load_options *o, dt_tensor *const *tensors, int n,
                            dt_comm **out) {
    dt_ctx *ctx = o->ctx;
    for (int i = 0; !ctx && tensors && i < n; i++) {
        dt_tensor_info info;
        if (tensors[i] && dt_tensor_info_get(tensors[i], &info) == DT_OK)
            ctx = dt_mesh_ctx(info.mesh);
    }
    DT_ARG(ctx != NULL,
           "%s: a collective load (opts->no_dist = 0) with no tensor and opts->ctx NULL has no "
           "world to agree over",
           load_fn);
    return dt_ctx_world_comm(ctx, out);
}

/* Every rank returns the same outcome: the lowest failing rank's status and its message, naming
 * that rank. Every rank gets here, whatever failed before it. */
static dt_status load_agree(dt_comm *world, dt_status mine) {
    int rank = dt_comm_rank(world);
    int64_t v = mine == DT_OK ? INT64_MAX : rank, low;
    struct {
        int32_t status;
        char msg[1020];
    } why = {.status = mine};
    if (mine != DT_OK) {
        const char *e = dt_last_error(), *skip = "dt_checkpoint_load: ";
        if (!strncmp(e, skip, strlen(skip))) e += strlen(skip);
        snprintf(why.msg, sizeof why.msg, "%s", e);
    }
    DT_CHECK(dt_all_reduce(world, &v, &low, 1, DT_I64, DT_REDUCE_MIN));
    if (low == INT64_MAX) return DT_OK;
    _Static_assert(sizeof why % 4 == 0, "broadcast as int32 words");
    DT_CHECK(dt_broadcast(world, &why, sizeof why / 4, DT_I32, (int)low));
    why.msg[sizeof why.msg - 1] = '\0';
    return dt_error((dt_status)why.status, "%s: rank %lld failed: %s", load_fn, (long long)low,
                    why.msg);
}

dt_status dt_checkpoint_load(const char *dir, const char *const *names, dt_tensor *const *tensors,
                             int n, const dt_checkpoint_load_options *opts) {
    dt_checkpoint_load_options o = {.strict = 1};
    if (opts) o = *opts;
    DT_CHECK(dt_agree_checkpoint(load_fn, NULL, dir, names, tensors, n)); /* DT_DEBUG_ARGS */
    dt_comm *world = NULL;
    if (!o.no_dist) DT_CHECK(load_world(&o, tensors, n, &world));
    dt_status st = load_here(dir, names, tensors, n, &o);
    return world ? load_agree(world, st) : st;
}

dt_status dt_checkpoint_blob(const char *dir, void *buf, size_t cap, size_t *bytes_out) {
    const char *fn = "dt_checkpoint_blob";
    DT_ARG(dir && bytes_out && (buf || cap == 0),
           "%s: dir or bytes_out NULL, or buf NULL with "
           "cap %zu",
           fn, cap);
    ck_meta m;
    DT_CHECK(ck_meta_read(dir, &m, fn));
    if (!m.has_blob) {
        ck_meta_free(&m);
        return dt_error(DT_ERR_ARG, "%s: %s holds no blob (it was saved without one)", fn, dir);
    }
    dt_status st = DT_OK;
    char path[4200], *data = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", dir, CK_BLOB_FILE);
    st = ck_read_file(path, &data, &len, (size_t)m.blob_bytes, fn);
    if (st == DT_OK && (len != m.blob_bytes || XXH64(data ? data : "", len, 0) != m.blob_hash))
        st = dt_error(DT_ERR_IO, "%s: %s does not match its size or checksum", fn, path);
    if (st == DT_OK) {
        if (len && cap) /* buf may be NULL when cap is 0 */
            memcpy(buf, data, len < cap ? len : cap);
        *bytes_out = len;
    }
    free(data);
    ck_meta_free(&m);
    return st;
}

dt_status dt_checkpoint_check(const char *dir, int checksums) {
    const char *fn = "dt_checkpoint_check";
    DT_ARG(dir && *dir, "%s: argument dir is NULL or empty", fn);
    ck_meta m;
    DT_CHECK(ck_meta_read(dir, &m, fn));
    ck_files fs = {.dir = dir,
                   .m = &m,
                   .fd = malloc(((size_t)m.nfiles + 1) * sizeof(int)),
                   .headers = checksums};
    dt_status st = fs.fd ? DT_OK : dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    for (int f = 0; fs.fd && f < m.nfiles; f++)
        fs.fd[f] = -1;
    for (int f = 0; st == DT_OK && f < m.nfiles; f++) {
        int fd;
        st = ck_files_fd(&fs, f, fn, &fd);
    }
    for (int i = 0; st == DT_OK && checksums && i < m.ntensors; i++)
        for (int c = 0; st == DT_OK && c < m.tensors[i].nchunks; c++) {
            const ck_chunk *k = &m.tensors[i].chunks[c];
            void *buf = malloc((size_t)(k->end - k->begin) + 1);
            st = buf ? ck_read_chunk(&fs, &m.tensors[i], k, buf, fn)
                     : dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
            free(buf);
        }
    for (int f = 0; fs.fd && f < m.nfiles; f++)
        if (fs.fd[f] >= 0) close(fs.fd[f]);
    free(fs.fd);
    int has_blob = m.has_blob;
    ck_meta_free(&m);
    if (st == DT_OK && has_blob) {
        size_t len;
        st = dt_checkpoint_blob(dir, NULL, 0, &len);
    }
    return st;
}

dt_status dt_checkpoint_latest(const char *root, const char *prefix, char *buf, size_t cap) {
    const char *fn = "dt_checkpoint_latest";
    DT_ARG(root && prefix && buf, "%s: root, prefix or buf is NULL", fn);
    DIR *d = opendir(root);
    if (!d) return dt_error(DT_ERR_IO, "%s: cannot list %s: %s", fn, root, strerror(errno));
    int64_t best = -1;
    char best_name[256] = "";
    size_t plen = strlen(prefix);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t pl;
        int64_t num = ck_trailing_number(e->d_name, &pl);
        if (num <= best || pl != plen || strncmp(e->d_name, prefix, plen) != 0) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s/%s", root, e->d_name, CK_META_FILE);
        if (access(path, F_OK) != 0) continue;
        best = num;
        snprintf(best_name, sizeof best_name, "%s", e->d_name);
    }
    closedir(d);
    if (best < 0)
        return dt_error(DT_ERR_IO, "%s: no complete checkpoint %s<number> in %s", fn, prefix, root);
    int need = snprintf(buf, cap, "%s/%s", root, best_name);
    if (need < 0 || (size_t)need >= cap)
        return dt_error(DT_ERR_SIZE, "%s: the path needs %d bytes, cap is %zu", fn, need + 1, cap);
    return DT_OK;
}
