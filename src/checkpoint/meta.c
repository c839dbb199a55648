/* metadata.json: the map from every tensor (name, dtype, global shape) to its chunks (global
 * offset, shape, file, byte range, checksum). Writer, and a reader that checks everything a
 * loader will rely on: chunks inside their tensor and file, sizes that match, and chunks that
 * tile each tensor exactly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/json.h"
#include "checkpoint/meta.h"
#include "checkpoint/safetensors.h"
#include "core/box.h"
#include "core/check.h"
#include "core/text.h"

int ck_name_ok(const char *name) {
    size_t n = 0;
    for (; name[n]; n++)
        if (name[n] <= ' ' || name[n] > '~' || name[n] == '"' || name[n] == '\\') return 0;
    return n > 0 && n <= DT_CHECKPOINT_NAME_MAX;
}

/* A data file's name as metadata may give it: no path separators, no "..", no leading dot. */
static int file_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= CK_FILE_MAX || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

int64_t ck_tile_count(int nd, const int64_t *shape, int64_t bands, int64_t rows) {
    int64_t r = 1;
    for (int d = 0; d < nd - 1; d++)
        r *= shape[d];
    if (shape[nd - 1] == 0) r = 0;
    return r == 0 ? 0 : ((r - 1) / rows + 1) * bands; /* rows may be any int64 from 1 */
}

static void put_ints(dt_text *t, const int64_t *v, int n) {
    dt_text_put(t, "[");
    for (int i = 0; i < n; i++)
        dt_text_put(t, "%s%lld", i ? "," : "", (long long)v[i]);
    dt_text_put(t, "]");
}

static void meta_text(dt_text *t, const ck_meta *m) {
    dt_text_put(t, "{\"format\":\"%s\",\"version\":1,", CK_FORMAT);
    if (m->block_bytes) dt_text_put(t, "\"block_bytes\":%llu,", (unsigned long long)m->block_bytes);
    dt_text_put(t, "\n\"files\":[");
    for (int f = 0; f < m->nfiles; f++)
        dt_text_put(t, "%s{\"name\":\"%s\",\"bytes\":%llu}", f ? "," : "", m->files[f].name,
                    (unsigned long long)m->files[f].bytes);
    dt_text_put(t, "],\n\"blob\":");
    if (m->has_blob)
        dt_text_put(t, "{\"bytes\":%llu,\"xxh64\":\"%016llx\"}", (unsigned long long)m->blob_bytes,
                    (unsigned long long)m->blob_hash);
    else
        dt_text_put(t, "null");
    dt_text_put(t, ",\n\"tensors\":[");
    for (int i = 0; i < m->ntensors; i++) {
        const ck_tensor *x = &m->tensors[i];
        dt_text_put(t, "%s\n{\"name\":\"%s\",\"dtype\":\"%s\",\"shape\":", i ? "," : "", x->name,
                    ck_st_dtype_name(x->dtype));
        put_ints(t, x->shape, x->ndim);
        dt_text_put(t, ",\"placements\":\"%s\",\"mesh\":\"%s\",\"chunks\":[", x->placements,
                    x->mesh);
        for (int c = 0; c < x->nchunks; c++) {
            const ck_chunk *k = &x->chunks[c];
            dt_text_put(
                t, "%s{\"file\":%d,\"begin\":%llu,\"end\":%llu,\"xxh64\":\"%016llx\",\"offset\":",
                c ? "," : "", k->file, (unsigned long long)k->begin, (unsigned long long)k->end,
                (unsigned long long)k->hash);
            put_ints(t, k->offset, x->ndim);
            dt_text_put(t, ",\"shape\":");
            put_ints(t, k->shape, x->ndim);
            if (m->block_bytes && k->bands)
                dt_text_put(t, ",\"block_bands\":%lld,\"block_rows\":%lld", (long long)k->bands,
                            (long long)k->rows);
            if (m->block_bytes) {
                dt_text_put(t, ",\"block_xxh3\":[");
                for (int64_t b = 0; b < k->nblocks; b++)
                    dt_text_put(t, "%s\"%016llx\"", b ? "," : "", (unsigned long long)k->blocks[b]);
                dt_text_put(t, "]");
            }
            dt_text_put(t, "}");
        }
        dt_text_put(t, "]}");
    }
    dt_text_put(t, "\n]}\n");
}

char *ck_meta_format(const ck_meta *m, size_t *len_out) {
    dt_text count = {0};
    meta_text(&count, m);
    char *buf = malloc(count.len + 1);
    if (!buf) return NULL;
    dt_text t = {.buf = buf, .cap = count.len + 1};
    meta_text(&t, m);
    *len_out = t.len;
    return buf;
}

void ck_meta_free(ck_meta *m) {
    for (int i = 0; m->tensors && i < m->ntensors; i++) {
        for (int c = 0; m->tensors[i].chunks && c < m->tensors[i].nchunks; c++)
            free(m->tensors[i].chunks[c].blocks);
        free(m->tensors[i].chunks);
    }
    free(m->tensors), free(m->files);
    memset(m, 0, sizeof *m);
}

static int tensor_cmp(const void *a, const void *b) {
    return strcmp(((const ck_tensor *)a)->name, ((const ck_tensor *)b)->name);
}

const ck_tensor *ck_meta_find(const ck_meta *m, const char *name) {
    ck_tensor key;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, m->tensors, (size_t)m->ntensors, sizeof key, tensor_cmp);
}

static int boxes_overlap(const ck_chunk *a, const ck_chunk *b, int ndim) {
    for (int d = 0; d < ndim; d++)
        if (a->offset[d] >= b->offset[d] + b->shape[d] ||
            b->offset[d] >= a->offset[d] + a->shape[d])
            return 0;
    return 1;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(err, errcap, __VA_ARGS__);                                                        \
        return -1;                                                                                 \
    } while (0)

/* A chunk's block checksums: all or nothing, as the checkpoint's block_bytes says. */
static int parse_blocks(const ck_json *doc, const ck_jnode *v, const ck_meta *m, const ck_tensor *x,
                        ck_chunk *k, char *err, size_t errcap) {
    const ck_jnode *arr = ck_json_get(doc, v, "block_xxh3");
    if (!m->block_bytes) {
        if (arr || ck_json_get(doc, v, "block_bands"))
            FAIL("tensor \"%s\": a chunk lists block checksums, the checkpoint no block size",
                 x->name);
        return 0;
    }
    const ck_jnode *nb = ck_json_get(doc, v, "block_bands"),
                   *nr = ck_json_get(doc, v, "block_rows");
    if (!nb != !nr)
        FAIL("tensor \"%s\": the chunk at byte %llu has one of block_bands and block_rows", x->name,
             (unsigned long long)k->begin);
    if (nb) { /* tiles (tiles.c) */
        if (nb->type != CK_JINT || nb->num < 2 || nb->num > CK_BANDS_MAX ||
            (nb->num & (nb->num - 1)) || x->ndim < 2 || nb->num > k->shape[x->ndim - 1] ||
            nr->type != CK_JINT || nr->num < 1)
            FAIL("tensor \"%s\": the chunk at byte %llu has block_bands that are not a power of "
                 "two from 2 to %d (and at most its last dim's extent, of 2 or more dims) or "
                 "block_rows under 1",
                 x->name, (unsigned long long)k->begin, CK_BANDS_MAX);
        k->bands = nb->num, k->rows = nr->num;
    }
    uint64_t want = k->bands ? (uint64_t)ck_tile_count(x->ndim, k->shape, k->bands, k->rows)
                             : (k->end - k->begin + m->block_bytes - 1) / m->block_bytes;
    if (!arr || arr->type != CK_JARR || (uint64_t)arr->count != want)
        FAIL("tensor \"%s\": the chunk at byte %llu does not list its %llu block checksums",
             x->name, (unsigned long long)k->begin, (unsigned long long)want);
    k->blocks = malloc((size_t)want * sizeof *k->blocks + 1);
    if (!k->blocks) FAIL("tensor \"%s\": out of memory", x->name);
    k->nblocks = (int64_t)want;
    int64_t b = 0;
    for (int i = arr->first; i >= 0; i = doc->nodes[i].next)
        if (ck_json_hex64(&doc->nodes[i], &k->blocks[b++]))
            FAIL(
                "tensor \"%s\": block checksum %lld of the chunk at byte %llu is not 16 hex digits",
                x->name, (long long)(b - 1), (unsigned long long)k->begin);
    return 0;
}

static int parse_chunk(const ck_json *doc, const ck_jnode *v, const ck_meta *m, ck_tensor *x,
                       ck_chunk *k, char *err, size_t errcap) {
    const ck_jnode *f = ck_json_get(doc, v, "file"), *b = ck_json_get(doc, v, "begin"),
                   *e = ck_json_get(doc, v, "end");
    if (!f || f->type != CK_JINT || f->num < 0 || f->num >= m->nfiles)
        FAIL("tensor \"%s\": a chunk names no file of the list", x->name);
    k->file = (int)f->num;
    if (!b || !e || b->type != CK_JINT || e->type != CK_JINT || b->num < 0 || e->num < b->num ||
        (uint64_t)e->num > m->files[k->file].bytes)
        FAIL("tensor \"%s\": a chunk's byte range is outside %s", x->name, m->files[k->file].name);
    k->begin = (uint64_t)b->num, k->end = (uint64_t)e->num;
    if (ck_json_hex64(ck_json_get(doc, v, "xxh64"), &k->hash))
        FAIL("tensor \"%s\": a chunk has no xxh64 checksum", x->name);
    if (ck_json_ints(doc, ck_json_get(doc, v, "offset"), k->offset, DT_MAX_NDIM, INT64_MIN,
                     INT64_MAX) != x->ndim ||
        ck_json_ints(doc, ck_json_get(doc, v, "shape"), k->shape, DT_MAX_NDIM, INT64_MIN,
                     INT64_MAX) != x->ndim)
        FAIL("tensor \"%s\": a chunk's offset or shape is not %d integers", x->name, x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (k->offset[d] < 0 || k->shape[d] < 0)
            FAIL("tensor \"%s\": a chunk's %s[%d] = %lld is negative", x->name,
                 k->offset[d] < 0 ? "offset" : "shape", d,
                 (long long)(k->offset[d] < 0 ? k->offset[d] : k->shape[d]));
    for (int d = 0; d < x->ndim; d++)
        if (k->offset[d] > x->shape[d] || k->shape[d] > x->shape[d] - k->offset[d])
            FAIL("tensor \"%s\": a chunk lies outside the tensor along dim %d", x->name, d);
    if ((uint64_t)dt_shape_numel(k->shape, x->ndim) * dt_dtype_size(x->dtype) != k->end - k->begin)
        FAIL("tensor \"%s\": a chunk's byte range does not match its shape", x->name);
    return parse_blocks(doc, v, m, x, k, err, errcap);
}

static int parse_tensor(const ck_json *doc, const ck_jnode *v, const ck_meta *m, ck_tensor *x,
                        char *err, size_t errcap) {
    const ck_jnode *nm = ck_json_get(doc, v, "name"), *dt = ck_json_get(doc, v, "dtype");
    const ck_jnode *pl = ck_json_get(doc, v, "placements"), *me = ck_json_get(doc, v, "mesh");
    const ck_jnode *ch = ck_json_get(doc, v, "chunks");
    if (!nm || nm->type != CK_JSTR || !ck_name_ok(nm->str)) FAIL("a tensor has no valid name");
    strcpy(x->name, nm->str);
    if (!dt || dt->type != CK_JSTR || ck_st_dtype_parse(dt->str, &x->dtype))
        FAIL("tensor \"%s\": missing or unsupported dtype", x->name);
    x->ndim = ck_json_ints(doc, ck_json_get(doc, v, "shape"), x->shape, DT_MAX_NDIM, 0, INT64_MAX);
    int64_t numel;
    if (x->ndim < 0 || !dt_shape_size(x->shape, x->ndim, dt_dtype_size(x->dtype), &numel, NULL))
        FAIL("tensor \"%s\": bad shape", x->name);
    snprintf(x->placements, sizeof x->placements, "%s", pl && pl->type == CK_JSTR ? pl->str : "?");
    snprintf(x->mesh, sizeof x->mesh, "%s", me && me->type == CK_JSTR ? me->str : "?");
    if (!ch || ch->type != CK_JARR || ch->count > CK_MAX_CHUNKS)
        FAIL("tensor \"%s\": no chunk list (or over %d chunks)", x->name, CK_MAX_CHUNKS);
    x->chunks = calloc((size_t)ch->count + 1, sizeof *x->chunks);
    if (!x->chunks) FAIL("tensor \"%s\": out of memory", x->name);
    uint64_t covered = 0;
    for (int k = ch->first; k >= 0; k = doc->nodes[k].next) {
        ck_chunk *c = &x->chunks[x->nchunks];
        int rc = parse_chunk(doc, &doc->nodes[k], m, x, c, err, errcap);
        x->nchunks++; /* counted either way, so that ck_meta_free frees its blocks */
        if (rc) return -1;
        for (int j = 0; j < x->nchunks - 1; j++)
            if (boxes_overlap(c, &x->chunks[j], x->ndim))
                FAIL("tensor \"%s\": chunks %d and %d overlap", x->name, j, x->nchunks - 1);
        covered += dt_shape_numel(c->shape, x->ndim);
    }
    if (covered != (uint64_t)numel)
        FAIL("tensor \"%s\": its chunks cover %llu of %lld elements", x->name,
             (unsigned long long)covered, (long long)numel);
    return 0;
}

static int parse_doc(const ck_json *doc, ck_meta *m, char *err, size_t errcap) {
    const ck_jnode *root = &doc->nodes[0];
    const ck_jnode *fmt = ck_json_get(doc, root, "format"),
                   *ver = ck_json_get(doc, root, "version");
    if (!fmt || fmt->type != CK_JSTR || strcmp(fmt->str, CK_FORMAT) != 0)
        FAIL("not a %s metadata file", CK_FORMAT);
    if (!ver || ver->type != CK_JINT || ver->num != 1) FAIL("unsupported version (1 expected)");
    const ck_jnode *bb = ck_json_get(doc, root, "block_bytes");
    if (bb && (bb->type != CK_JINT || bb->num < 1 || (uint64_t)bb->num > CK_BLOCK_MAX))
        FAIL("block_bytes is not an integer from 1 to %llu", (unsigned long long)CK_BLOCK_MAX);
    m->block_bytes = bb ? (uint64_t)bb->num : 0;
    const ck_jnode *files = ck_json_get(doc, root, "files");
    if (!files || files->type != CK_JARR) FAIL("no file list");
    m->files = calloc((size_t)files->count + 1, sizeof *m->files);
    if (!m->files) FAIL("out of memory");
    for (int k = files->first; k >= 0; k = doc->nodes[k].next) {
        const ck_jnode *nm = ck_json_get(doc, &doc->nodes[k], "name"),
                       *by = ck_json_get(doc, &doc->nodes[k], "bytes");
        if (!nm || nm->type != CK_JSTR || !file_name_ok(nm->str) || !by || by->type != CK_JINT ||
            by->num < 0)
            FAIL("file %d: bad name or size", m->nfiles);
        strcpy(m->files[m->nfiles].name, nm->str);
        m->files[m->nfiles++].bytes = (uint64_t)by->num;
    }
    const ck_jnode *blob = ck_json_get(doc, root, "blob");
    if (blob && blob->type == CK_JOBJ) {
        const ck_jnode *by = ck_json_get(doc, blob, "bytes");
        if (!by || by->type != CK_JINT || by->num < 0 ||
            ck_json_hex64(ck_json_get(doc, blob, "xxh64"), &m->blob_hash))
            FAIL("bad blob entry");
        m->has_blob = 1, m->blob_bytes = (uint64_t)by->num;
    } else if (!blob || blob->type != CK_JNULL) {
        FAIL("bad blob entry");
    }
    const ck_jnode *ts = ck_json_get(doc, root, "tensors");
    if (!ts || ts->type != CK_JARR || ts->count > CK_MAX_TENSORS)
        FAIL("no tensor list (or over %d tensors)", CK_MAX_TENSORS);
    m->tensors = calloc((size_t)ts->count + 1, sizeof *m->tensors);
    if (!m->tensors) FAIL("out of memory");
    for (int k = ts->first; k >= 0; k = doc->nodes[k].next) {
        int rc = parse_tensor(doc, &doc->nodes[k], m, &m->tensors[m->ntensors], err, errcap);
        m->ntensors++; /* counted either way, so that ck_meta_free frees its chunks */
        if (rc) return -1;
    }
    if (m->ntensors > 1) qsort(m->tensors, (size_t)m->ntensors, sizeof *m->tensors, tensor_cmp);
    for (int i = 1; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, m->tensors[i - 1].name) == 0)
            FAIL("tensor \"%s\" appears twice", m->tensors[i].name);
    return 0;
}

int ck_meta_parse(const char *text, size_t len, ck_meta *out, char *err, size_t errcap) {
    ck_json doc;
    ck_meta m = {0};
    if (ck_json_parse(text, len, &doc, err, errcap)) return -1;
    int rc = parse_doc(&doc, &m, err, errcap);
    ck_json_free(&doc);
    if (rc)
        ck_meta_free(&m);
    else
        *out = m;
    return rc;
}

dt_status ck_meta_read(const char *dir, ck_meta *out, const char *fn) {
    char path[4096], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, CK_META_FILE);
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return dt_error(DT_ERR_IO, "%s: %s is not a complete checkpoint (incomplete: no %s: %s)",
                        fn, dir, CK_META_FILE, strerror(errno));
    fclose(probe);
    DT_CHECK(ck_read_file(path, &text, &len, (size_t)1 << 30, fn));
    char err[300];
    int rc = ck_meta_parse(text, len, out, err, sizeof err);
    free(text);
    if (rc) return dt_error(DT_ERR_PARSE, "%s: %s: %s", fn, path, err);
    return DT_OK;
}
