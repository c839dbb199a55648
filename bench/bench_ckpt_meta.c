/* Reading a large checkpoint's metadata.json: 100,000 chunks by default (1,000 f32 tensors of
 * 100 row chunks of 64 x 8192, each chunk in its own rank's file with two 1 MiB block
 * checksums, as a 100-rank save of a 2 GiB-per-rank model writes them). Times the library's
 * JSON parse alone (ck_json_parse and ck_json_free) next to jansson's of the same text
 * (json_loadb, duplicates refused, and json_decref: linked into this bench only, the reference
 * that kept the hand-written reader), then the whole reader (ck_meta_parse: the parse, every
 * chunk checked against its tensor and file, the chunks' tiling) next to writing the same
 * text (ck_meta_format). Each figure is the median (min-max) of BENCH_REPS interleaved rounds,
 * each running all four once (the two parsers in alternating order), in wall clock and in the
 * thread's CPU time (the figure to read on a loaded machine); the parsed metadata is checked
 * against what was written (every checksum, bit-exactly), jansson's tensor count against it.
 * DT_BENCH_CHUNKS: the number of chunks (a multiple of 100, default 100000). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "checkpoint/json.h"
#include "checkpoint/meta.h"

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

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

enum { T_OURS, T_JANSSON, T_READ, T_FORMAT, T_COUNT };

typedef struct timing {
    double wall[T_COUNT][BENCH_REPS], cpu[T_COUNT][BENCH_REPS];
} timing;

/* One round: the text written, parsed by both parsers (first by `first`), read whole. 0, or
 * -1 with a message in err. */
static int round_once(const ck_meta *m, int rep, timing *tm, size_t *len, char *err,
                      size_t errcap) {
    double w = bench_now(), c = cpu_now();
    char *text = ck_meta_format(m, len);
    tm->wall[T_FORMAT][rep] = bench_now() - w, tm->cpu[T_FORMAT][rep] = cpu_now() - c;
    if (!text) return snprintf(err, errcap, "out of memory"), -1;
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        int which = (k + rep) % 2 ? T_JANSSON : T_OURS;
        w = bench_now(), c = cpu_now();
        if (which == T_OURS) {
            ck_json doc;
            rc = ck_json_parse(text, *len, &doc, err, errcap);
            if (!rc) ck_json_free(&doc);
        } else {
            json_error_t je;
            json_t *doc = json_loadb(text, *len, JSON_REJECT_DUPLICATES, &je);
            size_t n = json_array_size(json_object_get(doc, "tensors"));
            json_decref(doc);
            if (n != (size_t)m->ntensors) {
                snprintf(err, errcap, "jansson read %zu tensors: %s", n, je.text);
                rc = -1;
            }
        }
        tm->wall[which][rep] = bench_now() - w, tm->cpu[which][rep] = cpu_now() - c;
    }
    ck_meta back;
    w = bench_now(), c = cpu_now();
    if (!rc) rc = ck_meta_parse(text, *len, &back, err, errcap);
    tm->wall[T_READ][rep] = bench_now() - w, tm->cpu[T_READ][rep] = cpu_now() - c;
    free(text);
    if (rc) return -1;
    int same = same_meta(m, &back);
    ck_meta_free(&back);
    return same ? 0 : (snprintf(err, errcap, "parsed metadata differs"), -1);
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
    static timing tm;
    size_t len = 0;
    char err[300];
    for (int rep = 0; rep < BENCH_REPS; rep++)
        if (round_once(&m, rep, &tm, &len, err, sizeof err))
            return fprintf(stderr, "bench_ckpt_meta: %s\n", err), 1;
    ck_meta_free(&m);
    bench_stat w[T_COUNT], c[T_COUNT];
    for (int t = 0; t < T_COUNT; t++)
        w[t] = bench_stat_of(tm.wall[t], BENCH_REPS), c[t] = bench_stat_of(tm.cpu[t], BENCH_REPS);
    /* rows: case, its reference in the same rounds, and the ratio reference / case */
    const struct {
        const char *name, *ref;
        int t, r;
    } rows[2] = {
        {"metadata.json JSON parse (ck_json_parse)", "jansson json_loadb", T_OURS, T_JANSSON},
        {"metadata.json whole read (ck_meta_parse)", "format", T_READ, T_FORMAT}};
    for (int i = 0; i < 2; i++) {
        int t = rows[i].t, r = rows[i].r;
        if (table)
            printf("%s, %ld chunks, %.1f MB, CPU\t%.1f ms (%.1f-%.1f)\t%s %.1f ms (%.1f-%.1f)"
                   "\t%.2fx\n",
                   rows[i].name, nchunks, (double)len / 1e6, 1e3 * c[t].med, 1e3 * c[t].min,
                   1e3 * c[t].max, rows[i].ref, 1e3 * c[r].med, 1e3 * c[r].min, 1e3 * c[r].max,
                   c[r].med / c[t].med);
        else
            printf("%-42s %ld chunks, %.1f MB: CPU %6.1f ms (%.1f-%.1f), wall %6.1f ms "
                   "(%.1f-%.1f)\n  %-40s CPU %6.1f ms (%.1f-%.1f), wall %6.1f ms (%.1f-%.1f)"
                   "   ratio (CPU) %.2fx\n",
                   rows[i].name, nchunks, (double)len / 1e6, 1e3 * c[t].med, 1e3 * c[t].min,
                   1e3 * c[t].max, 1e3 * w[t].med, 1e3 * w[t].min, 1e3 * w[t].max, rows[i].ref,
                   1e3 * c[r].med, 1e3 * c[r].min, 1e3 * c[r].max, 1e3 * w[r].med, 1e3 * w[r].min,
                   1e3 * w[r].max, c[r].med / c[t].med);
    }
    return 0;
}
