/* json.h: jansson parses (duplicate keys refused, any value at the root, so that callers name
 * what they expected there); one walk of the result then enforces what jansson does not: the
 * nesting limit and integers only. */
#include "checkpoint/json.h"

#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(json_int_t) == sizeof(int64_t), "jansson integers are not 64-bit");

/* depth: of v's container, the root's being 1 */
static int check_value(json_t *v, int depth, char *err, size_t errcap) {
    if (json_is_real(v)) {
        snprintf(err, errcap, "number %.17g has a fraction or an exponent (integers only)",
                 json_real_value(v));
        return -1;
    }
    if (!json_is_array(v) && !json_is_object(v)) return 0;
    if (depth > CK_JSON_MAX_DEPTH) {
        snprintf(err, errcap, "nesting deeper than %d arrays and objects", CK_JSON_MAX_DEPTH);
        return -1;
    }
    size_t i;
    const char *key;
    json_t *child;
    if (json_is_array(v)) {
        json_array_foreach(v, i, child)
            if (check_value(child, depth + 1, err, errcap)) return -1;
    } else {
        json_object_foreach(v, key, child)
            if (check_value(child, depth + 1, err, errcap)) return -1;
    }
    return 0;
}

json_t *ck_json_load(const char *text, size_t len, char *err, size_t errcap) {
    if (len > CK_JSON_MAX_BYTES) {
        snprintf(err, errcap, "text of %zu bytes is too long (at most %zu)", len,
                 CK_JSON_MAX_BYTES);
        return NULL;
    }
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!doc) {
        snprintf(err, errcap, "%s at byte %d", je.text, je.position);
        return NULL;
    }
    if (check_value(doc, 1, err, errcap)) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

int ck_json_int(const json_t *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) return -1;
    *out = json_integer_value(v);
    return 0;
}

int ck_json_ints(const json_t *arr, int64_t *out, int cap, int64_t lo, int64_t hi) {
    if (!json_is_array(arr) || json_array_size(arr) > (size_t)cap) return -1;
    int n = (int)json_array_size(arr);
    for (int i = 0; i < n; i++) {
        if (ck_json_int(json_array_get(arr, (size_t)i), lo, hi, &out[i])) return -1;
    }
    return n;
}

int ck_json_hex64(const json_t *v, uint64_t *out) {
    const char *s = json_string_value(v);
    if (!s || json_string_length(v) != 16) return -1;
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        h <<= 4;
        if (c >= '0' && c <= '9')
            h |= (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            h |= (uint64_t)(c - 'a' + 10);
        else
            return -1;
    }
    *out = h;
    return 0;
}
