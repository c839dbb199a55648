/* Verified reads: the part of a chunk a shard needs, read in whole checksummed blocks. Every
 * block the box touches is read in full (the edges of a partial range cost the rest of their
 * block) and checked against its XXH3-64 in the metadata; a chunk of a checkpoint without block
 * checksums is one block, checked against its whole-chunk XXH64. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>
#ifdef DT_HAVE_XXH_DISPATCH /* XXH3 with AVX2 / AVX-512 where the CPU has them (meson.build) */
#include <xxh_x86dispatch.h>
#endif

#include "checkpoint/ckpt_impl.h"
#include "core/check.h"

/* The most bytes read with one pread: several small blocks, or a piece of a large one (then
 * hashed as a stream). Small enough that a piece is still in L2 when it is hashed and its runs
 * copied out (256 KiB took 10-15% less CPU than 1 MiB on this machine's 2 MiB L2). */
#define CK_PIECE ((uint64_t)256 << 10)

static dt_status block_fails(const ck_tensor *t, const ck_chunk *c, uint64_t b, uint64_t lo,
                             uint64_t hi, uint64_t got, uint64_t want, int legacy, const char *path,
                             const char *fn) {
    if (legacy)
        return dt_error(DT_ERR_IO,
                        "%s: tensor \"%s\": the chunk at byte %llu of %s fails its checksum "
                        "(xxh64 %016llx, expected %016llx)",
                        fn, t->name, (unsigned long long)c->begin, path, (unsigned long long)got,
                        (unsigned long long)want);
    return dt_error(DT_ERR_IO,
                    "%s: tensor \"%s\": block %llu (bytes %llu-%llu) of the chunk at byte %llu of "
                    "%s fails its checksum (xxh3 %016llx, expected %016llx)",
                    fn, t->name, (unsigned long long)b, (unsigned long long)(c->begin + lo),
                    (unsigned long long)(c->begin + hi), (unsigned long long)c->begin, path,
                    (unsigned long long)got, (unsigned long long)want);
}

dt_status ck_check_blocks(const ck_tensor *t, const ck_chunk *c, uint64_t block_bytes,
                          const void *bytes, const char *path, const char *fn) {
    uint64_t total = c->end - c->begin;
    if (c->bands) { /* tiles: hashed afresh, compared in order */
        uint64_t *h = malloc((size_t)c->nblocks * sizeof *h + 1);
        if (!h) return dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
        dt_status st = ck_tile_hashes(bytes, t->ndim, c->shape, dt_dtype_size(t->dtype), c->bands,
                                      c->rows, h, fn);
        for (int64_t b = 0; st == DT_OK && b < c->nblocks; b++)
            if (h[b] != c->blocks[b])
                st = dt_error(DT_ERR_IO,
                              "%s: tensor \"%s\": tile %lld (rows %lld-, band %lld of %lld) of "
                              "the chunk at byte %llu of %s fails its checksum (xxh3 %016llx, "
                              "expected %016llx)",
                              fn, t->name, (long long)b, (long long)(b / c->bands * c->rows),
                              (long long)(b % c->bands), (long long)c->bands,
                              (unsigned long long)c->begin, path, (unsigned long long)h[b],
                              (unsigned long long)c->blocks[b]);
        free(h);
        return st;
    }
    for (int64_t b = 0; block_bytes && b < c->nblocks; b++) {
        uint64_t lo = (uint64_t)b * block_bytes,
                 n = total - lo < block_bytes ? total - lo : block_bytes;
        uint64_t h = XXH3_64bits((const char *)bytes + lo, (size_t)n);
        if (h != c->blocks[b])
            return block_fails(t, c, (uint64_t)b, lo, lo + n, h, c->blocks[b], 0, path, fn);
    }
    return DT_OK;
}

/* Pieces that many short runs share (a target that cuts the saved rows) are hashed and copied
 * out of a mapping of the file, in windows of this many bytes (no copy into a buffer first),
 * where mapping works; the edge blocks of long runs are read into a buffer. */
#define CK_VMAP_WINDOW  ((uint64_t)64 << 20)
#define CK_VMAP_RUN_MAX ((size_t)64 << 10)

/* One read of the chunk's bytes [lo, hi) (relative to its begin) and the runs' parts in it. */
typedef struct reader {
    int fd;
    const ck_chunk *c;
    const char *path, *fn;
    uint64_t file_bytes;
    ck_runs r;
    int have; /* a current run: [at, at + r.run) in the file, at dpos in dst */
    uint64_t at;
    size_t dpos;
    char *dst, *buf;
    char *map; /* the file's bytes [map_lo, map_hi), or NULL */
    uint64_t map_lo, map_hi;
    int no_map;
} reader;

/* rd->map covering the file's [flo, fhi), mapped afresh when it does not; NULL when mapping
 * fails (then pread). The file's size is checked before each mapping: a truncated file is an
 * error, not a SIGBUS (one truncated while it is copied still raises it, as for any reader
 * that maps files). */
static dt_status mapped(reader *rd, uint64_t flo, uint64_t fhi, const char **out) {
    *out = NULL;
    if (rd->no_map) return DT_OK;
    if (!rd->map || flo < rd->map_lo || fhi > rd->map_hi) {
        if (rd->map) munmap(rd->map, (size_t)(rd->map_hi - rd->map_lo)), rd->map = NULL;
        DT_CHECK(ck_size_agrees(rd->fd, rd->file_bytes, rd->path, rd->fn));
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        rd->map_lo = flo / page * page;
        rd->map_hi = rd->map_lo + CK_VMAP_WINDOW > fhi ? rd->map_lo + CK_VMAP_WINDOW : fhi;
        if (rd->map_hi > rd->c->end) rd->map_hi = rd->c->end;
        void *m = mmap(NULL, (size_t)(rd->map_hi - rd->map_lo), PROT_READ,
                       MAP_SHARED | MAP_POPULATE, rd->fd, (off_t)rd->map_lo);
        if (m == MAP_FAILED) return rd->no_map = 1, DT_OK;
        rd->map = m;
    }
    *out = rd->map + (flo - rd->map_lo);
    return DT_OK;
}

/* Reads [lo, hi) (relative): *data_out gets its bytes, straight in dst when one run covers the
 * piece (*copy_out = 0), else in a mapping or rd->buf, for copy_runs once they are hashed (in
 * cache then, and never copied when they fail). */
static dt_status piece(reader *rd, uint64_t lo, uint64_t hi, const char **data_out, int *copy_out) {
    uint64_t flo = rd->c->begin + lo, fhi = rd->c->begin + hi;
    *copy_out = 0;
    if (rd->have && rd->at <= flo && rd->at + rd->r.run >= fhi) {
        char *at = rd->dst + rd->dpos + (flo - rd->at);
        DT_CHECK(ck_pread_all(rd->fd, at, (size_t)(hi - lo), flo, rd->path, rd->fn));
        if (rd->at + rd->r.run == fhi) rd->have = ck_runs_next(&rd->r, &rd->at, &rd->dpos);
        *data_out = at;
        return DT_OK;
    }
    const char *src = NULL;
    if (rd->r.run < CK_VMAP_RUN_MAX) DT_CHECK(mapped(rd, flo, fhi, &src));
    if (!src) {
        DT_CHECK(ck_pread_all(rd->fd, rd->buf, (size_t)(hi - lo), flo, rd->path, rd->fn));
        src = rd->buf;
    }
    *data_out = src, *copy_out = 1;
    return DT_OK;
}

/* The runs' parts in the piece [lo, hi) (relative) from its bytes src to dst. */
static void copy_runs(reader *rd, uint64_t lo, uint64_t hi, const char *src) {
    uint64_t flo = rd->c->begin + lo, fhi = rd->c->begin + hi;
    while (rd->have && rd->at < fhi) {
        uint64_t a = rd->at > flo ? rd->at : flo, end = rd->at + rd->r.run;
        uint64_t b = end < fhi ? end : fhi;
        memcpy(rd->dst + rd->dpos + (a - rd->at), src + (a - flo), (size_t)(b - a));
        if (end > fhi) break;
        rd->have = ck_runs_next(&rd->r, &rd->at, &rd->dpos);
    }
}

/* The blocks a box's runs touch (a bit each). */
static void mark_touched(ck_runs r, const ck_chunk *c, uint64_t bsz, unsigned char *touched) {
    uint64_t at;
    size_t dpos;
    while (ck_runs_next(&r, &at, &dpos))
        for (uint64_t b = (at - c->begin) / bsz; b <= (at + r.run - 1 - c->begin) / bsz; b++)
            touched[b / 8] |= (unsigned char)(1u << (b % 8));
}

static int is_touched(const unsigned char *touched, uint64_t b) {
    return touched[b / 8] >> (b % 8) & 1;
}

dt_status ck_read_verified(ck_files *fs, const ck_tensor *t, const ck_chunk *c, const int64_t *s,
                           const int64_t *e, char *dst, const int64_t *dst_shape,
                           const int64_t *dst_off, int all, const char *fn) {
    if (c->bands) return ck_read_tiled(fs, t, c, s, e, dst, dst_shape, dst_off, all, fn);
    uint64_t total = c->end - c->begin;
    int legacy = fs->m->block_bytes == 0;
    uint64_t bsz = legacy ? total : fs->m->block_bytes;
    reader rd = {.c = c, .fn = fn, .dst = dst};
    ck_runs_init(&rd.r, c, t->ndim, dt_dtype_size(t->dtype), s, e, dst_shape, dst_off);
    if (rd.r.run == 0) rd.r.count = 0;
    if (total == 0 || (rd.r.count == 0 && !all)) return DT_OK;
    if (!legacy && c->nblocks != (int64_t)((total + bsz - 1) / bsz)) /* meta.c checks it */
        return dt_error(DT_ERR_IO, "%s: tensor \"%s\": a chunk without its block checksums", fn,
                        t->name);
    DT_CHECK(ck_files_fd(fs, c->file, fn, &rd.fd));
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fs->dir, fs->m->files[c->file].name);
    rd.path = path, rd.file_bytes = fs->m->files[c->file].bytes;
    uint64_t nblocks = (total + bsz - 1) / bsz;
    unsigned char *touched = calloc((size_t)(nblocks + 7) / 8 + 1, 1);
    rd.buf = malloc((size_t)(CK_PIECE < total ? CK_PIECE : total) + 1);
    XXH3_state_t *s3 = NULL;
    XXH64_state_t *s64 = NULL;
    dt_status st = DT_OK;
    if (!touched || !rd.buf) st = dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    if (st == DT_OK && rd.r.count) {
        mark_touched(rd.r, c, bsz, touched);
        rd.have = ck_runs_next(&rd.r, &rd.at, &rd.dpos);
    }
    if (all) memset(touched, 0xff, (size_t)(nblocks + 7) / 8);
    for (uint64_t b = 0; st == DT_OK && b < nblocks;) {
        if (!is_touched(touched, b)) {
            b++;
            continue;
        }
        uint64_t lo = b * bsz, nb = b + 1, hi = lo + bsz < total ? lo + bsz : total;
        if (!legacy && bsz <= CK_PIECE) { /* whole blocks: as many touched ones as fit a piece */
            while (nb < nblocks && is_touched(touched, nb) && (nb + 1) * bsz - lo <= CK_PIECE)
                hi = (nb + 1) * bsz < total ? (nb + 1) * bsz : total, nb++;
            const char *data;
            int copy;
            st = piece(&rd, lo, hi, &data, &copy);
            for (uint64_t k = b; st == DT_OK && k < nb; k++) {
                uint64_t klo = k * bsz, khi = klo + bsz < total ? klo + bsz : total;
                uint64_t h = XXH3_64bits(data + (klo - lo), (size_t)(khi - klo));
                if (h != c->blocks[k])
                    st = block_fails(t, c, k, klo, khi, h, c->blocks[k], 0, path, fn);
            }
            if (st == DT_OK && copy) copy_runs(&rd, lo, hi, data);
        } else { /* one large block in pieces, hashed as a stream */
            if (!s3 && !s64 &&
                !(legacy ? (void *)(s64 = XXH64_createState()) : (void *)(s3 = XXH3_createState())))
                st = dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
            if (st == DT_OK) legacy ? (void)XXH64_reset(s64, 0) : (void)XXH3_64bits_reset(s3);
            for (uint64_t p = lo; st == DT_OK && p < hi; p += CK_PIECE) {
                uint64_t q = p + CK_PIECE < hi ? p + CK_PIECE : hi;
                const char *data;
                int copy;
                st = piece(&rd, p, q, &data, &copy);
                if (st == DT_OK)
                    legacy ? (void)XXH64_update(s64, data, (size_t)(q - p))
                           : (void)XXH3_64bits_update(s3, data, (size_t)(q - p));
                if (st == DT_OK && copy) copy_runs(&rd, p, q, data);
            }
            uint64_t h = st != DT_OK ? 0 : legacy ? XXH64_digest(s64) : XXH3_64bits_digest(s3);
            uint64_t want = legacy ? c->hash : c->blocks[b];
            if (st == DT_OK && h != want)
                st = block_fails(t, c, b, lo, hi, h, want, legacy, path, fn);
        }
        b = nb;
    }
    if (rd.map) munmap(rd.map, (size_t)(rd.map_hi - rd.map_lo));
    XXH3_freeState(s3), XXH64_freeState(s64);
    free(touched), free(rd.buf);
    return st;
}
