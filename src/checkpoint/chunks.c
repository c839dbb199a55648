/* Reading a checkpoint's chunks: whole (checksummed) or only a box of them, unchecked (for a
 * load with verification off and for convert: pread per run, or copied out of a mapping when
 * the runs are many, short and dense); opening the data files, their sizes and headers checked.
 * Verified reads of a box are blocks.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/ckpt_impl.h"
#include "core/check.h"

/* A data file holds the bytes the metadata says it does (a truncated or grown file is
 * corrupt). */
dt_status ck_size_agrees(int fd, uint64_t bytes, const char *path, const char *fn) {
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return dt_error(DT_ERR_IO, "%s: cannot stat %s: %s", fn, path, strerror(errno));
    if ((uint64_t)sb.st_size != bytes)
        return dt_error(DT_ERR_IO,
                        "%s: %s is %lld bytes, the metadata says %llu (truncated or "
                        "overwritten)",
                        fn, path, (long long)sb.st_size, (unsigned long long)bytes);
    return DT_OK;
}

/* File f's own safetensors header (what Python reads) names each of its chunks as the metadata
 * does: same name, dtype, shape and byte range. */
static dt_status header_agrees(const ck_meta *m, const char *dir, int f, const char *fn) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, m->files[f].name);
    ck_st_entry *e;
    int n, found = 0;
    dt_status rd = ck_st_read(path, &e, &n, NULL);
    if (rd != DT_OK) {
        dt_error_prefix(fn);
        return rd;
    }
    dt_status st = DT_OK;
    for (int i = 0; i < m->ntensors && st == DT_OK; i++) {
        const ck_tensor *t = &m->tensors[i];
        for (int c = 0; c < t->nchunks && st == DT_OK; c++) {
            const ck_chunk *k = &t->chunks[c];
            if (k->file != f) continue;
            found++;
            /* the entries tile the data in order of begin (ck_st_parse): search by begin */
            int lo = 0, hi = n;
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (e[mid].begin < k->begin)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            const ck_st_entry *x = lo < n ? &e[lo] : NULL;
            int ok = x && !strcmp(x->name, t->name) && x->begin == k->begin && x->end == k->end &&
                     x->dtype == t->dtype && x->ndim == t->ndim &&
                     !memcmp(x->shape, k->shape, (size_t)t->ndim * sizeof k->shape[0]);
            if (!ok)
                st = dt_error(DT_ERR_IO,
                              "%s: the header of %s does not describe tensor \"%s\"'s "
                              "chunk at byte %llu as the metadata does",
                              fn, path, t->name, (unsigned long long)k->begin);
        }
    }
    if (st == DT_OK && found != n)
        st = dt_error(DT_ERR_IO, "%s: %s holds %d entries, the metadata %d", fn, path, n, found);
    free(e);
    return st;
}

/* The data files of a checkpoint, opened on first use; each checked against the size the
 * metadata records (a truncated or grown file is corrupt) and, with fs->headers, its own
 * safetensors header against the metadata. */
dt_status ck_files_fd(ck_files *fs, int f, const char *fn, int *fd_out) {
    if (fs->fd[f] >= 0) {
        *fd_out = fs->fd[f];
        return DT_OK;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fs->dir, fs->m->files[f].name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dt_error(DT_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    dt_status st = ck_size_agrees(fd, fs->m->files[f].bytes, path, fn);
    if (st == DT_OK && fs->headers) st = header_agrees(fs->m, fs->dir, f, fn);
    if (st != DT_OK) {
        close(fd);
        return st;
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
    return ck_check_blocks(t, c, fs->m->block_bytes, dst, path, fn);
}

/* The runs of a box in file order (ckpt_impl.h's ck_runs). */
void ck_runs_init(ck_runs *r, const ck_chunk *c, int nd, size_t es, const int64_t *s,
                  const int64_t *e, const int64_t *dst_shape, const int64_t *dst_off) {
    *r = (ck_runs){.nd = nd, .s = s, .e = e, .dst_off = dst_off, .begin = c->begin, .es = es};
    int64_t acc = 1, dacc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        r->stride[d] = acc, acc *= c->shape[d];
        r->dstride[d] = dacc, dacc *= dst_shape[d];
    }
    int k = nd - 1;
    while (k > 0 && e[k] == c->shape[k] && e[k] == dst_shape[k])
        k--;
    r->k = k < 0 ? 0 : k;
    r->run = (size_t)(nd ? e[r->k] * r->stride[r->k] : 1) * es;
    r->count = 1;
    for (int d = 0; d < r->k; d++)
        r->count *= (size_t)e[d];
}

/* Where the run at index idx (dims before k) starts: in the file and in dst (bytes). */
static uint64_t run_at(const ck_runs *r, const int64_t *idx, size_t *dpos_out) {
    int64_t src = 0, dpos = 0;
    for (int d = 0; d < r->nd; d++) {
        int64_t i = d < r->k ? idx[d] : 0;
        src += (r->s[d] + i) * r->stride[d];
        dpos += (r->dst_off[d] + i) * r->dstride[d];
    }
    if (dpos_out) *dpos_out = (size_t)dpos * r->es;
    return r->begin + (uint64_t)src * r->es;
}

/* The next run (increasing file offsets); 0 after the last. */
int ck_runs_next(ck_runs *r, uint64_t *at_out, size_t *dpos_out) {
    if (r->done) return 0;
    *at_out = run_at(r, r->idx, dpos_out);
    int d = r->k - 1;
    while (d >= 0 && ++r->idx[d] == r->e[d])
        r->idx[d--] = 0;
    r->done = d < 0;
    return 1;
}

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

/* One pread per run, or (max_gap > 0) per span of runs at most max_gap apart. */
static dt_status box_pread(int fd, ck_runs *r, char *dst, size_t max_gap, const char *path,
                           const char *fn) {
    ck_span sp = {.run = r->run};
    uint64_t at;
    size_t dpos;
    dt_status st = DT_OK;
    while (st == DT_OK && ck_runs_next(r, &at, &dpos)) {
        if (sp.n && (sp.n == 256 || at - (sp.src[sp.n - 1] + sp.run) > max_gap ||
                     at + sp.run - sp.src[0] > ((uint64_t)64 << 20)))
            st = span_flush(&sp, fd, dst, path, fn);
        if (st != DT_OK) break;
        sp.src[sp.n] = at, sp.dst[sp.n++] = dpos;
        if (max_gap == 0) st = span_flush(&sp, fd, dst, path, fn);
    }
    if (st == DT_OK) st = span_flush(&sp, fd, dst, path, fn);
    free(sp.buf);
    return st;
}

/* Many short runs that fill most of the file range they span (a target that splits the
 * saved rows): a system call per run would cost more than copying it, so that range is
 * mapped and the runs copied out of the page cache (CK_MAP_WINDOW bytes mapped at a time).
 * At most twice the box's bytes are mapped, which is what the kernel may read ahead anyway. */
#define CK_MAP_RUN_MAX ((size_t)64 << 10)
#ifndef CK_MAP_WINDOW /* set smaller at build time to test the window changes */
#define CK_MAP_WINDOW ((uint64_t)64 << 20)
#endif

/* 1 when r's runs are worth mapping; *end_out: where the last one ends in the file. */
static int map_pays(const ck_runs *r, uint64_t *end_out) {
    if (r->count < 8 || r->run >= CK_MAP_RUN_MAX) return 0;
    int64_t last[DT_MAX_NDIM] = {0};
    for (int d = 0; d < r->k; d++)
        last[d] = r->e[d] - 1;
    *end_out = run_at(r, last, NULL) + r->run;
    return (uint64_t)r->count * r->run * 2 >= *end_out - run_at(r, r->idx, NULL);
}

/* The file was checked against the metadata's size when it was opened (ck_files_fd) and is
 * checked again here, before each window is mapped: a truncated file is an error, never a
 * SIGBUS. (A file truncated by another process while it is being copied still raises SIGBUS,
 * as with any reader that maps files.) Where mapping fails (a file system without mmap), the
 * remaining runs are read with pread. */
static dt_status box_map(int fd, uint64_t file_bytes, uint64_t end, ck_runs *r, char *dst,
                         const char *path, const char *fn) {
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), lo = 0, hi = 0, at;
    char *map = NULL;
    int no_map = 0;
    size_t dpos;
    if (end > file_bytes) /* never: metadata.c keeps every chunk inside its file */
        return dt_error(DT_ERR_IO, "%s: %s: byte %llu is past its end", fn, path,
                        (unsigned long long)end);
    dt_status st = DT_OK;
    while (st == DT_OK && ck_runs_next(r, &at, &dpos)) {
        if (!no_map && (!map || at + r->run > hi)) {
            if (map) munmap(map, (size_t)(hi - lo)), map = NULL;
            DT_CHECK(ck_size_agrees(fd, file_bytes, path, fn));
            lo = at / page * page;
            hi = lo + CK_MAP_WINDOW > at + r->run ? lo + CK_MAP_WINDOW : at + r->run;
            hi = hi < end ? hi : end;
            map =
                mmap(NULL, (size_t)(hi - lo), PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)lo);
            if (map == MAP_FAILED) map = NULL, no_map = 1;
        }
        if (map)
            memcpy(dst + dpos, map + (at - lo), r->run);
        else
            st = ck_pread_all(fd, dst + dpos, r->run, at, path, fn);
    }
    if (map) munmap(map, (size_t)(hi - lo));
    return st;
}

dt_status ck_read_box(ck_files *fs, const ck_tensor *t, const ck_chunk *c, const int64_t *s,
                      const int64_t *e, char *dst, const int64_t *dst_shape, const int64_t *dst_off,
                      size_t max_gap, const char *fn) {
    int fd;
    DT_CHECK(ck_files_fd(fs, c->file, fn, &fd));
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fs->dir, fs->m->files[c->file].name);
    ck_runs r;
    ck_runs_init(&r, c, t->ndim, dt_dtype_size(t->dtype), s, e, dst_shape, dst_off);
    if (r.count == 0) return DT_OK;
    uint64_t end;
    if (max_gap == 0 && map_pays(&r, &end))
        return box_map(fd, fs->m->files[c->file].bytes, end, &r, dst, path, fn);
    return box_pread(fd, &r, dst, max_gap, path, fn);
}
