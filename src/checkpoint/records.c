/* From the chunk records every rank sent at the end of a save to the metadata rank 0 writes:
 * records grouped by tensor name, checked to agree on dtype and shape, files named by rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt_impl.h"

static int rec_cmp(const void *a, const void *b) {
    const ck_rec *x = *(const ck_rec *const *)a, *y = *(const ck_rec *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

static int file_of(const ck_meta *m, int rank) {
    char want[CK_FILE_MAX];
    snprintf(want, sizeof want, "rank-%05d.safetensors", rank);
    for (int f = 0; f < m->nfiles; f++)
        if (strcmp(m->files[f].name, want) == 0) return f;
    return -1;
}

int ck_meta_from_records(const ck_rec *recs, int nrec, const uint64_t *blocks, ck_meta *out,
                         char *err, size_t errcap) {
    ck_meta m = {0};
    const ck_rec **by = calloc((size_t)nrec + 1, sizeof *by);
    uint64_t *first = calloc((size_t)nrec + 1, sizeof *first); /* record i's first block */
    m.files = calloc((size_t)nrec + 1, sizeof *m.files);
    m.tensors = calloc((size_t)nrec + 1, sizeof *m.tensors);
    int rc = -1;
    if (!by || !m.files || !m.tensors || !first) {
        snprintf(err, errcap, "out of memory for %d records", nrec);
        goto done;
    }
    for (int i = 0; i < nrec; i++) {
        if (i) first[i] = first[i - 1] + recs[i - 1].nblocks;
        if (!recs[i].has_chunk) continue;
        if (!m.block_bytes) m.block_bytes = recs[i].block_bytes;
        if (recs[i].block_bytes != m.block_bytes || !m.block_bytes) {
            snprintf(err, errcap, "rank %d checksums blocks of %llu bytes, another of %llu",
                     recs[i].rank, (unsigned long long)recs[i].block_bytes,
                     (unsigned long long)m.block_bytes);
            goto done;
        }
    }
    if (!m.block_bytes) m.block_bytes = CK_BLOCK_DEFAULT; /* no chunks: any size will do */
    for (int i = 0; i < nrec; i++)
        by[i] = &recs[i];
    if (nrec > 1) qsort(by, (size_t)nrec, sizeof *by, rec_cmp);
    for (int i = 0; i < nrec; i++) /* one file per rank that wrote a chunk, in rank order */
        if (by[i]->has_chunk && file_of(&m, by[i]->rank) < 0) {
            ck_file *f = &m.files[m.nfiles++];
            snprintf(f->name, sizeof f->name, "rank-%05d.safetensors", by[i]->rank);
            f->bytes = by[i]->file_bytes;
        }
    for (int i = 0; i < nrec;) {
        int j = i;
        while (j < nrec && strcmp(by[j]->name, by[i]->name) == 0)
            j++;
        const ck_rec *r = by[i];
        ck_tensor *t = &m.tensors[m.ntensors++];
        snprintf(t->name, sizeof t->name, "%s", r->name);
        snprintf(t->placements, sizeof t->placements, "%s", r->placements);
        snprintf(t->mesh, sizeof t->mesh, "%s", r->mesh);
        t->dtype = (dt_dtype)r->dtype, t->ndim = r->ndim;
        memcpy(t->shape, r->shape, sizeof t->shape);
        t->chunks = calloc((size_t)(j - i), sizeof *t->chunks);
        if (!t->chunks) {
            snprintf(err, errcap, "out of memory");
            goto done;
        }
        for (int k = i; k < j; k++) {
            const ck_rec *q = by[k];
            if (q->dtype != r->dtype || q->ndim != r->ndim ||
                memcmp(q->shape, r->shape, (size_t)r->ndim * sizeof r->shape[0]) != 0) {
                snprintf(err, errcap,
                         "tensor \"%s\" has another dtype or shape on rank %d than "
                         "on rank %d",
                         r->name, q->rank, r->rank);
                goto done;
            }
            if (!q->has_chunk) continue;
            ck_chunk *c = &t->chunks[t->nchunks++];
            c->file = file_of(&m, q->rank);
            c->begin = q->begin, c->end = q->end, c->hash = q->hash;
            c->nblocks = (int64_t)q->nblocks;
            c->bands = (int64_t)q->bands, c->rows = (int64_t)q->rows;
            c->blocks = malloc((size_t)q->nblocks * sizeof *c->blocks + 1);
            if (!c->blocks) {
                snprintf(err, errcap, "out of memory");
                goto done;
            }
            memcpy(c->blocks, blocks + first[q - recs], (size_t)q->nblocks * sizeof *c->blocks);
            memcpy(c->offset, q->offset, sizeof c->offset);
            memcpy(c->shape, q->chunk_shape, sizeof c->shape);
        }
        i = j;
    }
    rc = 0;
done:
    free(by), free(first);
    if (rc)
        ck_meta_free(&m);
    else
        *out = m;
    return rc;
}
