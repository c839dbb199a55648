/* Reading a checkpoint's chunks: whole (checksummed) or only a box of them (for a shard that
 * overlaps part of a chunk). Shared by dt_checkpoint_load, dt_checkpoint_check and the tool. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/ckpt_impl.h"
#include "core/check.h"

/* The data files of a checkpoint, opened on first use; each checked against the size the
 * metadata records (a truncated or grown file is corrupt). */
dt_status ck_files_fd(ck_files *fs, int f, const char *fn, int *fd_out) {
    if (fs->fd[f] >= 0) {
        *fd_out = fs->fd[f];
        return DT_OK;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fs->dir, fs->m->files[f].name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dt_error(DT_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != fs->m->files[f].bytes) {
        close(fd);
        return dt_error(DT_ERR_IO,
                        "%s: %s is %lld bytes, the metadata says %llu (truncated or "
                        "overwritten)",
                        fn, path, (long long)sb.st_size, (unsigned long long)fs->m->files[f].bytes);
    }
    *fd_out = fs->fd[f] = fd;
    return DT_OK;
}

dt_status ck_read_chunk(ck_files *fs, const ck_tensor *t, const ck_chunk *c, void *dst,
                        const char *fn) {
    int fd;
    DT_CHECK(ck_files_fd(fs, c->file, fn, &fd));
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fs->dir, fs->m->files[c->file].name);
    DT_CHECK(ck_pread_all(fd, dst, (size_t)(c->end - c->begin), c->begin, path, fn));
    uint64_t h = XXH64(dst ? (const void *)dst : "", (size_t)(c->end - c->begin), 0);
    if (h != c->hash)
        return dt_error(DT_ERR_IO,
                        "%s: tensor \"%s\": the chunk at byte %llu of %s fails its "
                        "checksum (xxh64 %016llx, expected %016llx)",
                        fn, t->name, (unsigned long long)c->begin, path, (unsigned long long)h,
                        (unsigned long long)c->hash);
    return DT_OK;
}

/* The box [s, s+e) of chunk c (s relative to the chunk) into dst, packed: one pread per run
 * of bytes that are contiguous in the file. */
/* Runs waiting to be read with one pread of the span that covers them. */
typedef struct ck_span {
    uint64_t src[256];
    size_t dst[256];
    int n;
    size_t run;
    char *buf;
    size_t cap;
} ck_span;

static dt_status span_flush(ck_span *sp, int fd, char *dst, const char *path, const char *fn) {
    if (sp->n == 0) return DT_OK;
    if (sp->n == 1) {
        sp->n = 0;
        return ck_pread_all(fd, dst + sp->dst[0], sp->run, sp->src[0], path, fn);
    }
    size_t bytes = (size_t)(sp->src[sp->n - 1] - sp->src[0]) + sp->run;
    if (bytes > sp->cap) {
        free(sp->buf);
        if (!(sp->buf = malloc(bytes)))
            return sp->cap = 0,
                   dt_error(DT_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, bytes);
        sp->cap = bytes;
    }
    DT_CHECK(ck_pread_all(fd, sp->buf, bytes, sp->src[0], path, fn));
    for (int i = 0; i < sp->n; i++)
        memcpy(dst + sp->dst[i], sp->buf + (sp->src[i] - sp->src[0]), sp->run);
    sp->n = 0;
    return DT_OK;
}

dt_status ck_read_box(ck_files *fs, const ck_tensor *t, const ck_chunk *c, const int64_t *s,
                      const int64_t *e, char *dst, const int64_t *dst_shape, const int64_t *dst_off,
                      size_t max_gap, const char *fn) {
    int fd, nd = t->ndim;
    DT_CHECK(ck_files_fd(fs, c->file, fn, &fd));
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fs->dir, fs->m->files[c->file].name);
    size_t es = dt_dtype_size(t->dtype);
    int64_t stride[DT_MAX_NDIM], dstride[DT_MAX_NDIM];
    int64_t acc = 1, dacc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        stride[d] = acc, acc *= c->shape[d];
        dstride[d] = dacc, dacc *= dst_shape[d];
    }
    /* a run: the trailing dims the box spans in full in both the chunk and dst, and the
     * extent of the first dim before them; contiguous on both sides */
    int k = nd - 1;
    while (k > 0 && e[k] == c->shape[k] && e[k] == dst_shape[k])
        k--;
    ck_span sp = {.run = (size_t)(nd ? e[k] * stride[k] : 1) * es};
    int64_t idx[DT_MAX_NDIM] = {0};
    dt_status st = DT_OK;
    for (;;) {
        int64_t src = 0, dpos = 0;
        for (int d = 0; d < nd; d++) {
            int64_t i = d < k ? idx[d] : 0;
            src += (s[d] + i) * stride[d];
            dpos += (dst_off[d] + i) * dstride[d];
        }
        uint64_t at = c->begin + (uint64_t)src * es; /* increasing from run to run */
        if (sp.n && (sp.n == 256 || at - (sp.src[sp.n - 1] + sp.run) > max_gap ||
                     at + sp.run - sp.src[0] > ((uint64_t)64 << 20)))
            st = span_flush(&sp, fd, dst, path, fn);
        if (st != DT_OK) break;
        sp.src[sp.n] = at, sp.dst[sp.n++] = (size_t)dpos * es;
        if (max_gap == 0) st = span_flush(&sp, fd, dst, path, fn);
        int d = k - 1;
        while (d >= 0 && ++idx[d] == e[d])
            idx[d--] = 0;
        if (d < 0 || st != DT_OK) break;
    }
    if (st == DT_OK) st = span_flush(&sp, fd, dst, path, fn);
    free(sp.buf);
    return st;
}
