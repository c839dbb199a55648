/* Tiled block checksums: a chunk seen as R rows of W bytes (W: its last dim's extent in bytes),
 * each row cut into `bands` column bands on element boundaries, rows grouped `rows` at a time;
 * a tile (row group x band) is hashed as one XXH3-64 stream over its row segments. The geometry,
 * the hashes of a chunk in memory, and the verified read of a box (each touched tile read and
 * checked in whole: row segments of the touched bands only). No ranks or metadata text here. */
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
#include "core/box.h"
#include "core/check.h"

/* Bands are at least min(this, block_bytes / 8) wide: a page or more each for the default
 * blocks, and several to a block for small ones (which tests use to cut tiny tensors). */
#define CK_BAND_MIN ((uint64_t)4 << 10)

void ck_tile_geometry(int nd, const int64_t *shape, size_t es, uint64_t block_bytes,
                      int64_t *bands_out, int64_t *rows_out) {
    *bands_out = 0, *rows_out = 0;
    if (nd < 2 || dt_shape_numel(shape, nd) == 0) return;
    uint64_t w = (uint64_t)shape[nd - 1] * es, nb = 1;
    uint64_t least = block_bytes / 8 < CK_BAND_MIN ? block_bytes / 8 : CK_BAND_MIN;
    least = least ? least : 1;
    while (nb * 2 <= CK_BANDS_MAX && nb * 2 <= (uint64_t)shape[nd - 1] && w / (nb * 2) >= least)
        nb *= 2;
    if (nb == 1) return; /* one band: contiguous blocks of block_bytes serve as well */
    uint64_t band = ((uint64_t)shape[nd - 1] + nb - 1) / nb * es;
    *bands_out = (int64_t)nb;
    *rows_out = block_bytes / band > 1 ? (int64_t)(block_bytes / band) : 1;
}

/* Band k's first element: k * C / nb (a split of C into 2, 4, ... nb parts falls on these). */
static int64_t band_lo(int64_t c, int64_t nb, int64_t k) {
    return k * c / nb;
}

/* The band holding element x. */
static int64_t band_of(int64_t c, int64_t nb, int64_t x) {
    int64_t k = x * nb / c;
    while (k + 1 < nb && band_lo(c, nb, k + 1) <= x)
        k++;
    while (k > 0 && band_lo(c, nb, k) > x)
        k--;
    return k;
}

dt_status ck_tile_hashes(const void *data, int nd, const int64_t *shape, size_t es, int64_t bands,
                         int64_t rows, uint64_t *out, const char *fn) {
    XXH3_state_t *s3 = XXH3_createState();
    if (!s3) return dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    int64_t c = shape[nd - 1], nrows = 1;
    for (int d = 0; d < nd - 1; d++)
        nrows *= shape[d];
    uint64_t w = (uint64_t)c * es;
    for (int64_t r0 = 0; c && r0 < nrows; r0 += rows)
        for (int64_t k = 0; k < bands; k++) {
            uint64_t lo = (uint64_t)band_lo(c, bands, k) * es,
                     hi = (uint64_t)band_lo(c, bands, k + 1) * es;
            XXH3_64bits_reset(s3);
            for (int64_t r = r0; r < r0 + rows && r < nrows; r++)
                XXH3_64bits_update(s3, (const char *)data + (uint64_t)r * w + lo,
                                   (size_t)(hi - lo));
            *out++ = XXH3_64bits_digest(s3);
        }
    XXH3_freeState(s3);
    return DT_OK;
}

/* A box [s, s+e) of a chunk and where its rows go in dst. */
typedef struct tbox {
    int nd;
    const int64_t *shape, *s, *e, *dst_off;
    int64_t dstride[DT_MAX_NDIM];
    size_t es;
} tbox;

/* Row r (dims before the last, flattened) in the box: 1, and where its part goes in dst. */
static int row_in_box(const tbox *b, int64_t r, size_t *dpos_out) {
    int64_t dpos = b->dst_off[b->nd - 1] * b->dstride[b->nd - 1];
    for (int d = b->nd - 2; d >= 0; d--) {
        int64_t i = r % b->shape[d];
        r /= b->shape[d];
        if (i < b->s[d] || i >= b->s[d] + b->e[d]) return 0;
        dpos += (b->dst_off[d] + i - b->s[d]) * b->dstride[d];
    }
    *dpos_out = (size_t)dpos * b->es;
    return 1;
}

/* What the verified read of one chunk needs across its row groups. */
typedef struct tread {
    const ck_tensor *t;
    const ck_chunk *c;
    tbox b;
    int fd, any; /* any: the box has elements */
    const char *path, *fn;
    char *dst, *buf;
    int64_t nb, kb0, kb1, ncols;
    uint64_t w, tlo, thi, cs, ce; /* row bytes; touched bands' bytes; the box's bytes */
    XXH3_state_t **st;            /* one per touched band */
    uint64_t file_bytes;          /* what the metadata says c's file holds */
    char *map;                    /* the file's bytes [map_lo, map_hi), or NULL */
    uint64_t map_lo, map_hi;
    int no_map;
} tread;

/* Touched bands narrower than this, that leave the rest of the row out, are hashed and copied
 * out of a mapping of the file (a pread each would cost more than the bytes), mapped
 * CK_TILE_WINDOW at a time; the other bands' pages are mapped too, as the unverified path's
 * mapping of short runs does (the kernel reads ahead as much). */
#define CK_TILE_MAP_MAX ((uint64_t)64 << 10)
#define CK_TILE_WINDOW  ((uint64_t)64 << 20)

/* The file's [flo, fhi) in x->map, mapped afresh when it is not: *out NULL when mapping fails
 * (then pread). The file's size is checked before each mapping, so a truncated file is an error
 * rather than a SIGBUS (one truncated while it is copied still raises it). */
static dt_status window(tread *x, uint64_t flo, uint64_t fhi, const char **out) {
    *out = NULL;
    if (x->no_map) return DT_OK;
    if (!x->map || flo < x->map_lo || fhi > x->map_hi) {
        if (x->map) munmap(x->map, (size_t)(x->map_hi - x->map_lo)), x->map = NULL;
        DT_CHECK(ck_size_agrees(x->fd, x->file_bytes, x->path, x->fn));
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        x->map_lo = flo / page * page;
        x->map_hi = x->map_lo + CK_TILE_WINDOW > fhi ? x->map_lo + CK_TILE_WINDOW : fhi;
        if (x->map_hi > x->c->end) x->map_hi = x->c->end;
        void *m = mmap(NULL, (size_t)(x->map_hi - x->map_lo), PROT_READ, MAP_SHARED | MAP_POPULATE,
                       x->fd, (off_t)x->map_lo);
        if (m == MAP_FAILED) return x->no_map = 1, DT_OK;
        x->map = m;
    }
    *out = x->map + (flo - x->map_lo);
    return DT_OK;
}

/* Row r's bytes [p, q) (inside the touched bands) at src: into the touched bands' streams, and
 * the box's part of them to dst (unless they were read there). */
static void take(tread *x, int64_t r, uint64_t p, uint64_t q, const char *src, int copy) {
    for (int64_t k = x->kb0; k <= x->kb1; k++) {
        uint64_t lo = (uint64_t)band_lo(x->ncols, x->nb, k) * x->b.es,
                 hi = (uint64_t)band_lo(x->ncols, x->nb, k + 1) * x->b.es;
        lo = lo > p ? lo : p, hi = hi < q ? hi : q;
        if (lo < hi) XXH3_64bits_update(x->st[k - x->kb0], src + (lo - p), (size_t)(hi - lo));
    }
    size_t dpos;
    if (!copy || !x->any || !row_in_box(&x->b, r, &dpos)) return;
    uint64_t lo = x->cs > p ? x->cs : p, hi = x->ce < q ? x->ce : q;
    if (lo < hi) memcpy(x->dst + dpos + (lo - x->cs), src + (lo - p), (size_t)(hi - lo));
}

/* Rows [r0, r1) of the touched bands, read and hashed: out of a mapping when they are narrow
 * (CK_TILE_MAP_MAX), else straight into dst where a row's part is the box's (bands aligned with
 * it), else through the buffer, CK_TILE_PIECE at a time (whole rows together when the bands span
 * the row). The box's bytes are copied out as they are hashed: on a failure dst holds some of
 * the box (ck_read_verified's contract). */
static dt_status read_group(tread *x, int64_t r0, int64_t r1) {
    uint64_t seg = x->thi - x->tlo;
    for (int64_t r = r0; r < r1;) {
        uint64_t at = x->c->begin + (uint64_t)r * x->w + x->tlo;
        size_t dpos;
        const char *src = NULL;
        if (seg < CK_TILE_MAP_MAX && seg < x->w) DT_CHECK(window(x, at, at + seg, &src));
        if (src) { /* narrow bands: hashed and copied out of the mapping */
            take(x, r, x->tlo, x->thi, src, 1);
            r++;
            continue;
        }
        int in = x->any && row_in_box(&x->b, r, &dpos);
        if (in && x->cs == x->tlo && x->ce == x->thi) { /* the row's part is the box's */
            int64_t n = 1; /* and the next rows', when they follow it in the file and in dst */
            size_t next;
            while (seg == x->w && r + n < r1 && (uint64_t)(n + 1) * seg <= CK_TILE_PIECE &&
                   row_in_box(&x->b, r + n, &next) && next == dpos + (size_t)((uint64_t)n * seg))
                n++;
            char *to = x->dst + dpos;
            DT_CHECK(ck_pread_all(x->fd, to, (size_t)(seg * (uint64_t)n), at, x->path, x->fn));
            for (int64_t i = 0; i < n; i++)
                take(x, r + i, x->tlo, x->thi, to + (uint64_t)i * seg, 0);
            r += n;
            continue;
        }
        if (seg == x->w && seg < CK_TILE_PIECE) { /* whole rows: several in one read */
            int64_t n = (int64_t)(CK_TILE_PIECE / seg);
            n = n < r1 - r ? n : r1 - r;
            DT_CHECK(ck_pread_all(x->fd, x->buf, (size_t)(seg * (uint64_t)n), at, x->path, x->fn));
            for (int64_t i = 0; i < n; i++)
                take(x, r + i, 0, seg, x->buf + (uint64_t)i * seg, 1);
            r += n;
            continue;
        }
        for (uint64_t p = x->tlo; p < x->thi; p += CK_TILE_PIECE) {
            uint64_t q = p + CK_TILE_PIECE < x->thi ? p + CK_TILE_PIECE : x->thi;
            DT_CHECK(
                ck_pread_all(x->fd, x->buf, (size_t)(q - p), at + (p - x->tlo), x->path, x->fn));
            take(x, r, p, q, x->buf, 1);
        }
        r++;
    }
    return DT_OK;
}

static dt_status tile_fails(const tread *x, int64_t g, int64_t k, int64_t r0, int64_t r1,
                            uint64_t got, uint64_t want) {
    return dt_error(DT_ERR_IO,
                    "%s: tensor \"%s\": tile %lld (rows %lld-%lld, band %lld of %lld) of the chunk "
                    "at byte %llu of %s fails its checksum (xxh3 %016llx, expected %016llx)",
                    x->fn, x->t->name, (long long)(g * x->nb + k), (long long)r0, (long long)r1 - 1,
                    (long long)k, (long long)x->nb, (unsigned long long)x->c->begin, x->path,
                    (unsigned long long)got, (unsigned long long)want);
}

/* Row group g has a row in the box. */
static int group_touched(const tread *x, int64_t r0, int64_t r1) {
    size_t dpos;
    for (int64_t r = r0; r < r1; r++)
        if (row_in_box(&x->b, r, &dpos)) return 1;
    return 0;
}

dt_status ck_read_tiled(ck_files *fs, const ck_tensor *t, const ck_chunk *c, const int64_t *s,
                        const int64_t *e, char *dst, const int64_t *dst_shape,
                        const int64_t *dst_off, int all, const char *fn) {
    int nd = t->ndim;
    tread x = {.t = t, .c = c, .fn = fn, .dst = dst, .nb = c->bands, .ncols = c->shape[nd - 1]};
    x.b = (tbox){.nd = nd,
                 .shape = c->shape,
                 .s = s,
                 .e = e,
                 .dst_off = dst_off,
                 .es = dt_dtype_size(t->dtype)};
    int64_t acc = 1, nrows = 1;
    for (int d = nd - 1; d >= 0; d--)
        x.b.dstride[d] = acc, acc *= dst_shape[d];
    for (int d = 0; d < nd - 1; d++)
        nrows *= c->shape[d];
    x.any = dt_shape_numel(e, nd) > 0;
    if (c->end == c->begin || (!x.any && !all)) return DT_OK;
    x.w = (uint64_t)x.ncols * x.b.es;
    x.kb0 = 0, x.kb1 = x.nb - 1;
    if (x.any) {
        x.cs = (uint64_t)s[nd - 1] * x.b.es, x.ce = (uint64_t)(s[nd - 1] + e[nd - 1]) * x.b.es;
        if (!all)
            x.kb0 = band_of(x.ncols, x.nb, s[nd - 1]),
            x.kb1 = band_of(x.ncols, x.nb, s[nd - 1] + e[nd - 1] - 1);
    }
    x.tlo = (uint64_t)band_lo(x.ncols, x.nb, x.kb0) * x.b.es;
    x.thi = (uint64_t)band_lo(x.ncols, x.nb, x.kb1 + 1) * x.b.es;
    DT_CHECK(ck_files_fd(fs, c->file, fn, &x.fd));
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", fs->dir, fs->m->files[c->file].name);
    x.path = path, x.file_bytes = fs->m->files[c->file].bytes;
    int64_t nst = x.kb1 - x.kb0 + 1;
    x.st = calloc((size_t)nst, sizeof *x.st);
    x.buf = malloc((size_t)CK_TILE_PIECE);
    dt_status st = x.st && x.buf ? DT_OK : dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t k = 0; st == DT_OK && k < nst; k++)
        if (!(x.st[k] = XXH3_createState())) st = dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t g = 0, r0 = 0; st == DT_OK && r0 < nrows; g++, r0 += c->rows) {
        int64_t r1 = r0 + c->rows < nrows ? r0 + c->rows : nrows;
        if (!all && !group_touched(&x, r0, r1)) continue;
        for (int64_t k = 0; k < nst; k++)
            XXH3_64bits_reset(x.st[k]);
        st = read_group(&x, r0, r1);
        for (int64_t k = x.kb0; st == DT_OK && k <= x.kb1; k++) {
            uint64_t h = XXH3_64bits_digest(x.st[k - x.kb0]), want = c->blocks[g * x.nb + k];
            if (h != want) st = tile_fails(&x, g, k, r0, r1, h, want);
        }
    }
    for (int64_t k = 0; x.st && k < nst; k++)
        XXH3_freeState(x.st[k]);
    if (x.map) munmap(x.map, (size_t)(x.map_hi - x.map_lo));
    free(x.st), free(x.buf);
    return st;
}
