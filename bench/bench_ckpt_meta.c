/* Reading a large checkpoint's metadata.json: 100,000 chunks by default (1,000 f32 tensors of
 * 100 row chunks of 64 x 8192, each chunk in its own rank's file with two 1 MiB block
 * checksums, as a 100-rank save of a 2 GiB-per-rank model writes them). Times jansson's parse
 * alone (ck_json_load: the document tree and the nesting and integer checks) and the whole
 * reader (ck_meta_parse: that, then every chunk checked against its tensor and file and the
 * chunks' tiling), next to writing the same text (ck_meta_format) in the same run. Each
 * figure is the median (min-max) of REPS rounds, each round running all three once; the
 * parsed metadata is checked against what was written (every checksum, bit-exactly).
 * DT_BENCH_CHUNKS: the number of chunks (a multiple of 100, default 100000). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "checkpoint/json.h"
#include "checkpoint/meta.h"

#define REPS    7
#define PER     100 /* chunks per tensor, one per file */
#define ROWS    64
#define COLS    8192
#define NBLOCKS 2 /* ROWS * COLS * 4 bytes / CK_BLOCK_DEFAULT */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The metadata of ntensors tensors of PER chunks each; 0 or -1 when out of memory. */
static int make_meta(ck_meta *m, int ntensors) {
    const uint64_t chunk_bytes = (uint64_t)ROWS * COLS * 4;
    uint64_t seed = 20261206;
    m->block_bytes = CK_BLOCK_DEFAULT;
    m->nfiles = PER;
    m->files = calloc(PER, sizeof *m->files);
    m->tensors = calloc((size_t)ntensors, sizeof *m->tensors);
    if (!m->files || !m->tensors) return -1;
    for (int f = 0; f < PER; f++) {
        snprintf(m->files[f].name, sizeof m->files[f].name, "rank-%05d.safetensors", f);
        m->files[f].bytes = 4096 + (uint64_t)ntensors * chunk_bytes;
    }
    for (int t = 0; t < ntensors; t++, m->ntensors++) {
        ck_tensor *x = &m->tensors[t];
        snprintf(x->name, sizeof x->name, "layers.%04d.weight", t);
        x->dtype = DT_F32, x->ndim = 2;
        x->shape[0] = (int64_t)PER * ROWS, x->shape[1] = COLS;
        snprintf(x->placements, sizeof x->placements, "S(0)");
        snprintf(x->mesh, sizeof x->mesh, "%d", PER);
        x->chunks = calloc(PER, sizeof *x->chunks);
        if (!x->chunks) return -1;
        for (int c = 0; c < PER; c++, x->nchunks++) {
            ck_chunk *k = &x->chunks[c];
            k->file = c;
            k->begin = 4096 + (uint64_t)t * chunk_bytes, k->end = k->begin + chunk_bytes;
            k->hash = splitmix(&seed);
            k->offset[0] = (int64_t)c * ROWS, k->shape[0] = ROWS, k->shape[1] = COLS;
            k->blocks = malloc(NBLOCKS * sizeof *k->blocks);
            if (!k->blocks) return -1;
            k->nblocks = NBLOCKS;
            for (int b = 0; b < NBLOCKS; b++)
                k->blocks[b] = splitmix(&seed);
        }
    }
    return 0;
}

/* Whether the parsed metadata holds every chunk's range and checksums as written. */
static int same_meta(const ck_meta *a, const ck_meta *b) {
    if (a->ntensors != b->ntensors || a->nfiles != b->nfiles) return 0;
    for (int t = 0; t < a->ntensors; t++) {
        const ck_tensor *x = &a->tensors[t], *y = ck_meta_find(b, x->name);
        if (!y || y->nchunks != x->nchunks) return 0;
        for (int c = 0; c < x->nchunks; c++) {
            const ck_chunk *p = &x->chunks[c], *q = &y->chunks[c];
            if (p->begin != q->begin || p->end != q->end || p->hash != q->hash ||
                p->nblocks != q->nblocks ||
                memcmp(p->blocks, q->blocks, (size_t)p->nblocks * sizeof *p->blocks))
                return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    long nchunks = getenv("DT_BENCH_CHUNKS") ? atol(getenv("DT_BENCH_CHUNKS")) : 100000;
    if (nchunks < PER || nchunks % PER)
        return fprintf(stderr, "bench_ckpt_meta: DT_BENCH_CHUNKS=%ld is not a multiple of %d\n",
                       nchunks, PER),
               1;
    ck_meta m = {0};
    if (make_meta(&m, (int)(nchunks / PER)))
        return fprintf(stderr, "bench_ckpt_meta: out of memory\n"), 1;
    double tf[REPS], tj[REPS], tp[REPS];
    size_t len = 0;
    char err[300];
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = bench_now();
        char *text = ck_meta_format(&m, &len);
        tf[rep] = bench_now() - t0;
        if (!text) return fprintf(stderr, "bench_ckpt_meta: out of memory\n"), 1;
        t0 = bench_now();
        json_t *doc = ck_json_load(text, len, err, sizeof err);
        tj[rep] = bench_now() - t0;
        json_decref(doc);
        ck_meta back;
        t0 = bench_now();
        int rc = ck_meta_parse(text, len, &back, err, sizeof err);
        tp[rep] = bench_now() - t0;
        free(text);
        if (!doc || rc) return fprintf(stderr, "bench_ckpt_meta: %s\n", err), 1;
        int same = same_meta(&m, &back);
        ck_meta_free(&back);
        if (!same) return fprintf(stderr, "bench_ckpt_meta: parsed metadata differs\n"), 1;
    }
    ck_meta_free(&m);
    bench_stat f = bench_stat_of(tf, REPS), j = bench_stat_of(tj, REPS),
               p = bench_stat_of(tp, REPS);
    const char *names[2] = {"metadata.json read (ck_meta_parse)", "metadata.json jansson parse"};
    bench_stat rows[2] = {p, j};
    for (int r = 0; r < 2; r++)
        printf(table ? "%s, %ld chunks, %.1f MB\t%.1f ms (%.1f-%.1f)\tformat %.1f ms (%.1f-%.1f)"
                       "\t%.0f%%\n"
                     : "%-36s %ld chunks, %.1f MB  %7.1f ms (%.1f-%.1f)   format %6.1f ms "
                       "(%.1f-%.1f)   %4.0f%%\n",
               names[r], nchunks, (double)len / 1e6, 1e3 * rows[r].med, 1e3 * rows[r].min,
               1e3 * rows[r].max, 1e3 * f.med, 1e3 * f.min, 1e3 * f.max, 100 * f.med / rows[r].med);
    return 0;
}
