/* The safetensors format: 8 bytes of little-endian header length, a JSON header mapping each
 * name to {dtype, shape, data_offsets} (offsets relative to the data after the header), then
 * the raw little-endian data. Writer and checked reader; the reader trusts nothing it reads. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/json.h"
#include "checkpoint/safetensors.h"
#include "core/box.h"
#include "core/check.h"
#include "core/text.h"

#define CK_HEADER_MAX ((uint64_t)100 << 20) /* the Python library's own limit */

static const struct {
    dt_dtype dtype;
    const char *name;
} st_dtypes[] = {{DT_F32, "F32"}, {DT_F64, "F64"}, {DT_BF16, "BF16"},
                 {DT_F16, "F16"}, {DT_I32, "I32"}, {DT_I64, "I64"},
                 {DT_F8E4M3, "F8_E4M3"}, {DT_F8E5M2, "F8_E5M2"}};

const char *ck_st_dtype_name(dt_dtype dtype) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == dtype) return st_dtypes[i].name;
    return NULL;
}

int ck_st_dtype_parse(const char *name, dt_dtype *out) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) {
            *out = st_dtypes[i].dtype;
            return 0;
        }
    return -1;
}

static void put_ints(dt_text *t, const int64_t *v, int n) {
    dt_text_put(t, "[");
    for (int i = 0; i < n; i++)
        dt_text_put(t, "%s%lld", i ? "," : "", (long long)v[i]);
    dt_text_put(t, "]");
}

/* Names are checked (ck_name_ok: no quote, backslash or control character), so they go into
 * the JSON as they are. */
static void header_text(dt_text *t, const ck_st_entry *e, int n,
                        const int64_t (*offsets)[DT_MAX_NDIM]) {
    dt_text_put(t, "{");
    for (int i = 0; i < n; i++) {
        dt_text_put(t, "\"%s\":{\"dtype\":\"%s\",\"shape\":", e[i].name,
                    ck_st_dtype_name(e[i].dtype));
        put_ints(t, e[i].shape, e[i].ndim);
        dt_text_put(t, ",\"data_offsets\":[%llu,%llu]},", (unsigned long long)e[i].begin,
                    (unsigned long long)e[i].end);
    }
    dt_text_put(t, "\"__metadata__\":{\"format\":\"pt\"");
    for (int i = 0; offsets && i < n; i++) {
        dt_text_put(t, ",\"offset:%s\":\"", e[i].name);
        put_ints(t, offsets[i], e[i].ndim);
        dt_text_put(t, "\"");
    }
    dt_text_put(t, "}}");
}

char *ck_st_header(const ck_st_entry *e, int n, const int64_t (*offsets)[DT_MAX_NDIM],
                   size_t *len_out) {
    dt_text count = {0};
    header_text(&count, e, n, offsets);
    size_t json = (count.len + 7) / 8 * 8, total = 8 + json;
    char *buf = malloc(total + 1);
    if (!buf) return NULL;
    dt_text t = {.buf = buf + 8, .cap = json + 1};
    header_text(&t, e, n, offsets);
    memset(buf + 8 + t.len, ' ', json - t.len);
    for (int b = 0; b < 8; b++)
        buf[b] = (char)((uint64_t)json >> (8 * b));
    *len_out = total;
    return buf;
}

static int bad(char *err, size_t cap, const char *fmt, const char *name) {
    snprintf(err, cap, fmt, name);
    return -1;
}

static int entry_cmp(const void *a, const void *b) {
    const ck_st_entry *x = a, *y = b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

int ck_st_parse(const char *json, size_t len, uint64_t data_bytes, ck_st_entry **out, int *n_out,
                char *err, size_t errcap) {
    ck_json doc;
    if (ck_json_parse(json, len, &doc, err, errcap)) return -1;
    const ck_jnode *root = &doc.nodes[0];
    ck_st_entry *e = NULL;
    int n = 0, rc = -1;
    if (root->type != CK_JOBJ) {
        snprintf(err, errcap, "the header is not a JSON object");
        goto done;
    }
    e = calloc((size_t)root->count + 1, sizeof *e);
    if (!e) {
        snprintf(err, errcap, "out of memory for %d entries", root->count);
        goto done;
    }
    for (int k = root->first; k >= 0; k = doc.nodes[k].next) {
        const ck_jnode *v = &doc.nodes[k];
        if (strcmp(v->key, "__metadata__") == 0) continue;
        ck_st_entry *x = &e[n];
        if (strlen(v->key) > DT_CHECKPOINT_NAME_MAX) {
            bad(err, errcap, "entry name \"%.64s...\" is too long", v->key);
            goto done;
        }
        strcpy(x->name, v->key);
        const ck_jnode *dt = ck_json_get(&doc, v, "dtype");
        if (!dt || dt->type != CK_JSTR || ck_st_dtype_parse(dt->str, &x->dtype)) {
            bad(err, errcap, "entry \"%s\": missing or unsupported dtype", x->name);
            goto done;
        }
        x->ndim =
            ck_json_ints(&doc, ck_json_get(&doc, v, "shape"), x->shape, DT_MAX_NDIM, 0, INT64_MAX);
        int64_t off[2], bytes;
        if (x->ndim < 0 ||
            !dt_shape_size(x->shape, x->ndim, dt_dtype_size(x->dtype), NULL, &bytes)) {
            bad(err, errcap, "entry \"%s\": bad shape", x->name);
            goto done;
        }
        if (ck_json_ints(&doc, ck_json_get(&doc, v, "data_offsets"), off, 2, 0, INT64_MAX) != 2 ||
            off[1] < off[0] || (uint64_t)off[1] > data_bytes) {
            bad(err, errcap, "entry \"%s\": data_offsets missing or outside the data", x->name);
            goto done;
        }
        if (off[1] - off[0] != bytes) {
            bad(err, errcap, "entry \"%s\": data_offsets do not match its shape and dtype",
                x->name);
            goto done;
        }
        x->begin = (uint64_t)off[0], x->end = (uint64_t)off[1];
        n++;
    }
    /* as the Python library requires: the entries tile the data section, back to back */
    if (n > 1) qsort(e, (size_t)n, sizeof *e, entry_cmp);
    for (int i = 0; i < n; i++)
        if (e[i].begin != (i ? e[i - 1].end : 0)) {
            bad(err, errcap, "entry \"%s\" does not start where the previous one ends", e[i].name);
            goto done;
        }
    if ((n ? e[n - 1].end : 0) != data_bytes) {
        snprintf(err, errcap, "the entries cover %llu of the %llu data bytes",
                 (unsigned long long)(n ? e[n - 1].end : 0), (unsigned long long)data_bytes);
        goto done;
    }
    rc = 0;
done:
    ck_json_free(&doc);
    if (rc)
        free(e);
    else
        *out = e, *n_out = n;
    return rc;
}

dt_status ck_st_read(const char *path, ck_st_entry **out, int *n_out, uint64_t *file_bytes_out) {
    const char *fn = "ck_st_read";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dt_error(DT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    dt_status st = DT_OK;
    char *json = NULL;
    struct stat sb;
    unsigned char lenb[8];
    if (fstat(fd, &sb) != 0) {
        st = dt_error(DT_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        goto done;
    }
    uint64_t fbytes = (uint64_t)sb.st_size, hlen = 0;
    if (fbytes < 8) {
        st = dt_error(DT_ERR_IO, "%s is truncated: %llu bytes, no header", path,
                      (unsigned long long)fbytes);
        goto done;
    }
    DT_CHECK_GOTO(ck_pread_all(fd, lenb, 8, 0, path, fn), st, done);
    for (int b = 0; b < 8; b++)
        hlen |= (uint64_t)lenb[b] << (8 * b);
    if (hlen > CK_HEADER_MAX || hlen > fbytes - 8) {
        st = dt_error(DT_ERR_PARSE, "%s: header length %llu does not fit in the file (%llu bytes)",
                      path, (unsigned long long)hlen, (unsigned long long)fbytes);
        goto done;
    }
    json = malloc(hlen + 1);
    if (!json) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory for its header", path);
        goto done;
    }
    DT_CHECK_GOTO(ck_pread_all(fd, json, hlen, 8, path, fn), st, done);
    char err[256];
    ck_st_entry *e;
    int n;
    if (ck_st_parse(json, hlen, fbytes - 8 - hlen, &e, &n, err, sizeof err)) {
        st = dt_error(DT_ERR_PARSE, "%s: bad safetensors header: %s", path, err);
        goto done;
    }
    for (int i = 0; i < n; i++)
        e[i].begin += 8 + hlen, e[i].end += 8 + hlen;
    *out = e, *n_out = n;
    if (file_bytes_out) *file_bytes_out = fbytes;
done:
    free(json);
    close(fd);
    return st;
}
