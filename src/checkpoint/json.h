/* A small JSON reader for the two formats a checkpoint holds (safetensors headers and
 * metadata.json): objects, arrays, strings (escapes decoded), integers, true, false, null.
 * Untrusted input: the text's size and its nesting are bounded; a key given twice in one
 * object, numbers with a fraction or an exponent (neither format has them), integers outside
 * int64, \u0000 and invalid UTF-8 in strings are refused; every failure is a message, never a read
 * past the text. Hand-written rather than jansson, which read metadata 5-6x slower
 * (docs/benchmarks.md). Nothing here blocks on others or is collective. */
#ifndef DT_CHECKPOINT_JSON_H
#define DT_CHECKPOINT_JSON_H

#include <stddef.h>
#include <stdint.h>

#define CK_JSON_MAX_DEPTH 32                /* nested arrays and objects, the root's included */
#define CK_JSON_MAX_BYTES ((size_t)1 << 31) /* of text */

typedef enum ck_jtype { CK_JNULL, CK_JBOOL, CK_JINT, CK_JSTR, CK_JARR, CK_JOBJ } ck_jtype;

typedef struct ck_jnode {
    ck_jtype type;
    int64_t num;     /* CK_JINT, CK_JBOOL */
    const char *str; /* CK_JSTR: decoded, NUL-terminated (an embedded \u0000 is refused) */
    const char *key; /* member of an object: its key; NULL otherwise */
    int first;       /* CK_JARR / CK_JOBJ: index of the first child, -1 when empty */
    int next;        /* next sibling, -1 at the end */
    int count;       /* CK_JARR / CK_JOBJ: number of children */
} ck_jnode;

typedef struct ck_json {
    ck_jnode *nodes; /* nodes[0] is the root */
    int nnodes;
    char *strings;
} ck_json;

/* Parses len bytes of text (no NUL needed), any value at the root (callers name what they
 * expected there). 0 on success (free with ck_json_free); -1 with a message naming what is
 * wrong and its byte in err. */
int ck_json_parse(const char *text, size_t len, ck_json *out, char *err, size_t errcap);
void ck_json_free(ck_json *doc);

/* The member of object obj named key, or NULL (also when obj is not an object). */
const ck_jnode *ck_json_get(const ck_json *doc, const ck_jnode *obj, const char *key);
/* An array of at most cap integers in [lo, hi] into out; its length, or -1 when arr is NULL,
 * not such an array or longer. */
int ck_json_ints(const ck_json *doc, const ck_jnode *arr, int64_t *out, int cap, int64_t lo,
                 int64_t hi);
/* A checksum as metadata writes it: a string of 16 lower-case hex digits. 0, or -1 (v NULL or
 * anything else). */
int ck_json_hex64(const ck_jnode *v, uint64_t *out);

#endif
