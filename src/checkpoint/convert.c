/* Checkpoints to and from single safetensors files, without ranks: consolidate (every tensor
 * in full, for export) and convert (a full file cut into the rank files a mesh would save). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/ckpt_impl.h"
#include "core/box.h"
#include "core/check.h"

static dt_status consolidate_into(const ck_meta *m, ck_files *fs, int fd, const char *path,
                                  const char *fn) {
    ck_st_entry *e = calloc((size_t)m->ntensors + 1, sizeof *e);
    if (!e) return dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    uint64_t cursor = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const ck_tensor *t = &m->tensors[i];
        snprintf(e[i].name, sizeof e[i].name, "%s", t->name);
        e[i].dtype = t->dtype, e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        e[i].begin = cursor;
        cursor += dt_shape_numel(t->shape, t->ndim) * dt_dtype_size(t->dtype);
        e[i].end = cursor;
    }
    size_t hlen;
    char *hdr = ck_st_header(e, m->ntensors, NULL, &hlen);
    dt_status st = hdr ? ck_write_all(fd, hdr, hlen, path, fn)
                       : dt_error(DT_ERR_NOMEM, "%s: out of memory for a header", fn);
    free(hdr);
    for (int i = 0; i < m->ntensors && st == DT_OK; i++) {
        const ck_tensor *t = &m->tensors[i];
        size_t es = dt_dtype_size(t->dtype), bytes = (size_t)(e[i].end - e[i].begin);
        char *full = malloc(bytes + 1);
        if (!full) st = dt_error(DT_ERR_NOMEM, "%s: out of memory for \"%s\"", fn, t->name);
        for (int c = 0; c < t->nchunks && st == DT_OK; c++) {
            const ck_chunk *k = &t->chunks[c];
            char *buf = malloc((size_t)(k->end - k->begin) + 1);
            st = buf ? ck_read_chunk(fs, t, k, buf, fn)
                     : dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
            if (st == DT_OK)
                dt_box_copy(full, t->shape, k->offset, buf, k->shape, NULL, k->shape, t->ndim, es);
            free(buf);
        }
        if (st == DT_OK) st = ck_write_all(fd, full, bytes, path, fn);
        free(full);
    }
    free(e);
    return st;
}

dt_status dt_checkpoint_consolidate(const char *dir, const char *out_path) {
    const char *fn = "dt_checkpoint_consolidate";
    DT_ARG(dir && out_path && *out_path, "%s: dir or out_path is NULL or empty", fn);
    ck_meta m;
    DT_CHECK(ck_meta_read(dir, &m, fn));
    ck_files fs = {.dir = dir, .m = &m, .fd = malloc(((size_t)m.nfiles + 1) * sizeof(int))};
    for (int f = 0; fs.fd && f < m.nfiles; f++)
        fs.fd[f] = -1;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    int fd = fs.fd ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    dt_status st = !fs.fd ? dt_error(DT_ERR_NOMEM, "%s: out of memory", fn)
                   : fd < 0
                       ? dt_error(DT_ERR_IO, "%s: cannot create %s: %s", fn, tmp, strerror(errno))
                       : consolidate_into(&m, &fs, fd, tmp, fn);
    if (st == DT_OK && fsync(fd) != 0)
        st = dt_error(DT_ERR_IO, "%s: cannot fsync %s: %s", fn, tmp, strerror(errno));
    if (fd >= 0) close(fd);
    if (st == DT_OK && rename(tmp, out_path) != 0)
        st = dt_error(DT_ERR_IO, "%s: cannot rename %s: %s", fn, tmp, strerror(errno));
    if (st != DT_OK && fd >= 0) unlink(tmp);
    for (int f = 0; fs.fd && f < m.nfiles; f++)
        if (fs.fd[f] >= 0) close(fs.fd[f]);
    free(fs.fd);
    ck_meta_free(&m);
    return st;
}

/* --- convert ---------------------------------------------------------------------------- */

typedef struct conv {
    ck_files fs;
    ck_meta src;    /* the input as a checkpoint of one file: one chunk per tensor, no checksums */
    int *tensor_of; /* per record: its tensor in src */
    ck_rec *recs;
    const char *fn;
} conv;

static dt_status conv_chunk(void *arg, int i, void *scratch, const void **data_out) {
    conv *c = arg;
    const ck_rec *r = &c->recs[i];
    const ck_tensor *t = &c->src.tensors[c->tensor_of[i]];
    int64_t zero[DT_MAX_NDIM] = {0};
    DT_CHECK(ck_read_box(&c->fs, t, &t->chunks[0], r->offset, r->chunk_shape, scratch,
                         r->chunk_shape, zero, 0, c->fn));
    *data_out = scratch;
    return DT_OK;
}

/* The input's entries as a one-file checkpoint. */
static dt_status conv_source(conv *c, const char *in_path, char *parent, size_t pcap) {
    ck_st_entry *e;
    int n;
    uint64_t fbytes;
    DT_CHECK(ck_st_read(in_path, &e, &n, &fbytes));
    c->src.files = calloc(1, sizeof *c->src.files);
    c->src.tensors = calloc((size_t)n + 1, sizeof *c->src.tensors);
    if (!c->src.files || !c->src.tensors) {
        free(e);
        return dt_error(DT_ERR_NOMEM, "%s: out of memory", c->fn);
    }
    c->src.nfiles = 1;
    ck_split_path(in_path, parent, pcap, c->src.files[0].name, sizeof c->src.files[0].name);
    c->src.files[0].bytes = fbytes;
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++) {
        ck_tensor *t = &c->src.tensors[c->src.ntensors++];
        if (!ck_name_ok(e[i].name))
            st = dt_error(DT_ERR_ARG,
                          "%s: tensor name \"%s\" in %s is not a checkpoint name "
                          "(printable, no space, '\"' or '\\')",
                          c->fn, e[i].name, in_path);
        snprintf(t->name, sizeof t->name, "%s", e[i].name);
        t->dtype = e[i].dtype, t->ndim = e[i].ndim;
        memcpy(t->shape, e[i].shape, sizeof t->shape);
        t->chunks = calloc(1, sizeof *t->chunks);
        if (!t->chunks) {
            st = dt_error(DT_ERR_NOMEM, "%s: out of memory", c->fn);
            break;
        }
        t->nchunks = 1;
        t->chunks[0] = (ck_chunk){.file = 0, .begin = e[i].begin, .end = e[i].end};
        memcpy(t->chunks[0].shape, e[i].shape, sizeof t->shape);
    }
    free(e);
    return st;
}

/* The records of mesh rank `rank` (coordinate coord), as a save would make them. */
static dt_status conv_records(conv *c, int mesh_ndim, const int *mshape, const int *coord,
                              const char *mesh_text, const dt_placement *pl, int rank, int *nrec) {
    *nrec = 0;
    for (int i = 0; i < c->src.ntensors; i++) {
        const ck_tensor *t = &c->src.tensors[i];
        dt_placement tp[DT_MESH_MAX_NDIM];
        int writer = 1, first = 1;
        for (int d = 0; d < mesh_ndim; d++) {
            tp[d] = pl[d];
            if (tp[d].kind == DT_PLACEMENT_SHARD && (tp[d].dim >= t->ndim || tp[d].dim < -t->ndim))
                tp[d] = dt_replicate();
            if (tp[d].kind == DT_PLACEMENT_REPLICATE && coord[d] != 0) writer = 0;
            first &= coord[d] == 0;
        }
        DT_CHECK(dt_placements_normalize(tp, mesh_ndim, t->ndim));
        ck_rec *r = &c->recs[*nrec];
        memset(r, 0, sizeof *r);
        DT_CHECK(dt_shard_layout(mesh_ndim, mshape, coord, t->ndim, t->shape, tp, r->chunk_shape,
                                 r->offset));
        r->has_chunk = writer && dt_shape_numel(r->chunk_shape, t->ndim) > 0;
        if (!r->has_chunk && !first) continue;
        snprintf(r->name, sizeof r->name, "%s", t->name);
        dt_placements_format(tp, mesh_ndim, r->placements, sizeof r->placements);
        snprintf(r->mesh, sizeof r->mesh, "%s", mesh_text);
        r->dtype = (int32_t)t->dtype, r->ndim = t->ndim, r->rank = rank;
        memcpy(r->shape, t->shape, sizeof r->shape);
        c->tensor_of[(*nrec)++] = i;
    }
    return DT_OK;
}

dt_status dt_checkpoint_convert(const char *in_path, const char *dir, const char *mesh,
                                const char *placements) {
    const char *fn = "dt_checkpoint_convert";
    DT_ARG(in_path && dir && *dir && mesh && placements,
           "%s: in_path, dir, mesh or placements is NULL", fn);
    int mshape[DT_MESH_MAX_NDIM], mnd, np;
    char mnames[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    dt_placement pl[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_mesh_parse(mesh, mshape, mnames, &mnd));
    DT_CHECK(dt_placements_parse(placements, pl, DT_MESH_MAX_NDIM, &np));
    DT_ARG(np == mnd, "%s: %d placements (\"%s\") for a mesh of %d dims", fn, np, placements, mnd);
    int world = 1;
    char mesh_text[CK_TEXT_MAX];
    size_t ml = 0;
    for (int d = 0; d < mnd; d++) {
        DT_ARG(mshape[d] >= 1 && mshape[d] <= 65536 && world <= 65536 / mshape[d],
               "%s: mesh \"%s\" is not 1 to 65536 ranks", fn, mesh);
        if (pl[d].kind == DT_PLACEMENT_PARTIAL)
            return dt_error(DT_ERR_PLACEMENT, "%s: placement %d is Partial; a file holds values",
                            fn, d);
        world *= mshape[d];
        ml += (size_t)snprintf(mesh_text + ml, sizeof mesh_text - ml, "%s%s=%d", d ? "," : "",
                               mnames[d], mshape[d]);
    }
    conv c = {.fn = fn};
    char parent[4096], partial[4200], path[4300];
    dt_status st = conv_source(&c, in_path, parent, sizeof parent);
    c.fs = (ck_files){.dir = parent, .m = &c.src, .fd = (int[]){-1}};
    ck_rec *all = NULL;
    int nall = 0;
    uint64_t *blocks = NULL;
    int64_t nblocks = 0;
    if (st == DT_OK) {
        all = calloc((size_t)world * (size_t)c.src.ntensors + 1, sizeof *all);
        c.tensor_of = calloc((size_t)c.src.ntensors + 1, sizeof *c.tensor_of);
        if (!all || !c.tensor_of) st = dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
    }
    snprintf(partial, sizeof partial, "%s.partial", dir);
    if (st == DT_OK) {
        char dparent[4096], base[256];
        ck_split_path(dir, dparent, sizeof dparent, base, sizeof base);
        st = ck_mkdirs(dparent, fn);
    }
    if (st == DT_OK) st = ck_fresh_dir(partial, fn);
    for (int rank = 0; rank < world && st == DT_OK; rank++) {
        int coord[DT_MESH_MAX_NDIM], rest = rank, nrec;
        for (int d = mnd - 1; d >= 0; d--)
            coord[d] = rest % mshape[d], rest /= mshape[d];
        c.recs = all + nall;
        st = conv_records(&c, mnd, mshape, coord, mesh_text, pl, rank, &nrec);
        snprintf(path, sizeof path, "%s/rank-%05d.safetensors", partial, rank);
        uint64_t *rb = NULL;
        int64_t nrb = 0;
        if (st == DT_OK)
            st = ck_write_rank_file(path, c.recs, nrec, conv_chunk, &c, 1, CK_BLOCK_DEFAULT, &rb,
                                    &nrb, fn);
        if (st == DT_OK && nrb) { /* every rank's block checksums, in record order */
            uint64_t *grown = realloc(blocks, (size_t)(nblocks + nrb) * sizeof *blocks);
            if (!grown) st = dt_error(DT_ERR_NOMEM, "%s: out of memory", fn);
            if (grown) blocks = grown, memcpy(blocks + nblocks, rb, (size_t)nrb * sizeof *rb);
            nblocks += nrb;
        }
        free(rb);
        nall += nrec;
    }
    ck_meta m = {0};
    char err[512];
    if (st == DT_OK && ck_meta_from_records(all, nall, blocks, &m, err, sizeof err))
        st = dt_error(DT_ERR_ARG, "%s: %s", fn, err);
    if (st == DT_OK) st = ck_publish(&m, partial, dir, NULL, NULL, fn);
    ck_meta_free(&m);
    if (c.fs.fd[0] >= 0) close(c.fs.fd[0]);
    ck_meta_free(&c.src);
    free(all), free(c.tensor_of), free(blocks);
    return st;
}
