/* json.h: one pass over the text enforces what jansson does not (the nesting limit, so that
 * jansson's recursion stays within it too, and integers only), then jansson parses it
 * (duplicate keys refused, any value at the root, so that callers name what they expected
 * there). */
#include "checkpoint/json.h"

#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(json_int_t) == sizeof(int64_t), "jansson integers are not 64-bit");

static int number_char(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* Outside strings, valid JSON has '.' only in a number's fraction and 'e' or 'E' after a digit
 * only in its exponent ("true" and "false" have theirs after a letter). Text that is not JSON
 * may pass or fail here: jansson refuses it either way. */
static int check_text(const char *s, size_t len, char *err, size_t errcap) {
    int depth = 0, in_string = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
            continue;
        }
        if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > CK_JSON_MAX_DEPTH) {
                snprintf(err, errcap, "nesting deeper than %d arrays and objects at byte %zu",
                         CK_JSON_MAX_DEPTH, i);
                return -1;
            }
        } else if (c == ']' || c == '}') {
            depth--;
        } else if (c == '.' ||
                   ((c == 'e' || c == 'E') && i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9')) {
            size_t a = i, b = i;
            while (a > 0 && number_char(s[a - 1]))
                a--;
            while (b < len && number_char(s[b]))
                b++;
            snprintf(err, errcap,
                     "number %.*s at byte %zu has a fraction or an exponent (integers only)",
                     (int)(b - a < 40 ? b - a : 40), s + a, a);
            return -1;
        }
    }
    return 0;
}

json_t *ck_json_load(const char *text, size_t len, char *err, size_t errcap) {
    if (len > CK_JSON_MAX_BYTES) {
        snprintf(err, errcap, "text of %zu bytes is too long (at most %zu)", len,
                 CK_JSON_MAX_BYTES);
        return NULL;
    }
    if (check_text(text, len, err, errcap)) return NULL;
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!doc) snprintf(err, errcap, "%s at byte %d", je.text, je.position);
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
