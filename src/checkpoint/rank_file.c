/* A rank's data file: the safetensors header of its chunks (global offsets in __metadata__),
 * the chunks back to back, each hashed as it is written, then fsync. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#ifdef DT_HAVE_XXH_DISPATCH /* XXH3 with AVX2 / AVX-512 where the CPU has them (meson.build) */
#include <xxh_x86dispatch.h>
#endif

#include "checkpoint/ckpt_impl.h"
#include "core/box.h"
#include "core/check.h"

dt_status ck_write_rank_file(const char *path, ck_rec *recs, int nrec, ck_chunk_fn chunk, void *arg,
                             int scratch, uint64_t block_bytes, uint64_t **blocks_out,
                             int64_t *nblocks_out, const char *fn) {
    int nchunks = 0;
    size_t most = 0;
    for (int i = 0; i < nrec; i++) {
        if (!recs[i].has_chunk) continue;
        nchunks++;
        size_t b = dt_shape_numel(recs[i].chunk_shape, recs[i].ndim) *
                   dt_dtype_size((dt_dtype)recs[i].dtype);
        most = b > most ? b : most;
    }
    *blocks_out = NULL, *nblocks_out = 0;
    uint64_t nblocks = 0;
    for (int i = 0; i < nrec; i++) {
        ck_rec *r = &recs[i];
        r->block_bytes = block_bytes, r->nblocks = 0, r->bands = 0, r->rows = 0;
        if (!r->has_chunk) continue;
        size_t es = dt_dtype_size((dt_dtype)r->dtype);
        int64_t bands, rows;
        ck_tile_geometry(r->ndim, r->chunk_shape, es, block_bytes, &bands, &rows);
        r->bands = (uint64_t)bands, r->rows = (uint64_t)rows;
        r->nblocks =
            bands ? (uint64_t)ck_tile_count(r->ndim, r->chunk_shape, bands, rows)
                  : (dt_shape_numel(r->chunk_shape, r->ndim) * es + block_bytes - 1) / block_bytes;
        nblocks += recs[i].nblocks;
    }
    if (nchunks == 0) return DT_OK;
    uint64_t *blocks = malloc((size_t)nblocks * sizeof *blocks + 1);
    if (!blocks)
        return dt_error(DT_ERR_NOMEM, "%s: out of memory for %llu block checksums", fn,
                        (unsigned long long)nblocks);
    *blocks_out = blocks, *nblocks_out = (int64_t)nblocks;
    ck_st_entry *e = calloc((size_t)nchunks, sizeof *e);
    int64_t(*offs)[DT_MAX_NDIM] = calloc((size_t)nchunks, sizeof *offs);
    int *idx = calloc((size_t)nchunks, sizeof *idx);
    void *buf = scratch ? malloc(most + 1) : NULL;
    dt_status st = DT_OK;
    char *hdr = NULL;
    size_t hlen = 0;
    int fd = -1;
    if (!e || !offs || !idx || (scratch && !buf)) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for %d chunks", fn, nchunks);
        goto done;
    }
    uint64_t cursor = 0;
    for (int i = 0, c = 0; i < nrec; i++) {
        const ck_rec *r = &recs[i];
        if (!r->has_chunk) continue;
        snprintf(e[c].name, sizeof e[c].name, "%s", r->name);
        e[c].dtype = (dt_dtype)r->dtype, e[c].ndim = r->ndim;
        memcpy(e[c].shape, r->chunk_shape, sizeof e[c].shape);
        memcpy(offs[c], r->offset, sizeof offs[c]);
        uint64_t bytes = dt_shape_numel(r->chunk_shape, r->ndim) * dt_dtype_size(e[c].dtype);
        e[c].begin = cursor, e[c].end = cursor + bytes;
        cursor += bytes;
        idx[c++] = i;
    }
    if (!(hdr = ck_st_header(e, nchunks, (const int64_t(*)[DT_MAX_NDIM])offs, &hlen))) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for a header", fn);
        goto done;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = dt_error(DT_ERR_IO, "%s: cannot create %s: %s", fn, path, strerror(errno));
        goto done;
    }
    st = ck_write_all(fd, hdr, hlen, path, fn);
    for (int c = 0; c < nchunks && st == DT_OK; c++) {
        ck_rec *r = &recs[idx[c]];
        size_t bytes = (size_t)(e[c].end - e[c].begin);
        const void *data;
        st = chunk(arg, idx[c], buf, &data);
        if (st != DT_OK) break;
        r->hash = XXH64(data ? data : "", bytes, 0); /* no data for 0 bytes */
        if (r->bands)
            st = ck_tile_hashes(data, r->ndim, r->chunk_shape, dt_dtype_size(e[c].dtype),
                                (int64_t)r->bands, (int64_t)r->rows, blocks, fn);
        else
            for (uint64_t b = 0; b < r->nblocks; b++) {
                uint64_t lo = b * block_bytes,
                         n = bytes - lo < block_bytes ? bytes - lo : block_bytes;
                blocks[b] = XXH3_64bits((const char *)data + lo, (size_t)n);
            }
        blocks += r->nblocks;
        if (st != DT_OK) break;
        r->begin = hlen + e[c].begin, r->end = hlen + e[c].end;
        st = ck_write_all(fd, data, bytes, path, fn);
    }
    if (st == DT_OK && fsync(fd) != 0)
        st = dt_error(DT_ERR_IO, "%s: cannot fsync %s: %s", fn, path, strerror(errno));
    for (int i = 0; i < nrec; i++)
        recs[i].file_bytes = hlen + cursor;
done:
    if (fd >= 0) close(fd);
    free(e), free(offs), free(idx), free(hdr), free(buf);
    return st;
}
