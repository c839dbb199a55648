/* The JSON of the two formats a checkpoint holds (safetensors headers and metadata.json), read
 * with jansson under the limits those formats need. Untrusted input: the text's size and its
 * nesting are bounded, duplicate keys, numbers with a fraction or an exponent (neither format
 * has them), integers outside int64 and \u0000 in strings are refused, and every failure is a
 * message, never a crash. Nothing here blocks on others or is collective. */
#ifndef DT_CHECKPOINT_JSON_H
#define DT_CHECKPOINT_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define CK_JSON_MAX_DEPTH 32                /* nested arrays and objects, the root's included */
#define CK_JSON_MAX_BYTES ((size_t)1 << 31) /* of text */

/* Parses len bytes of text (no NUL needed). Returns the document, which the caller owns
 * (json_decref), or NULL with a message in err ("<what> at byte <i>" where jansson says
 * where). */
json_t *ck_json_load(const char *text, size_t len, char *err, size_t errcap);

/* v as an integer in [lo, hi] into out: 0, or -1 (out untouched) when v is NULL, not an
 * integer or outside the range. */
int ck_json_int(const json_t *v, int64_t lo, int64_t hi, int64_t *out);
/* An array of at most cap integers in [lo, hi] into out; its length, or -1 when arr is NULL,
 * not such an array or longer. */
int ck_json_ints(const json_t *arr, int64_t *out, int cap, int64_t lo, int64_t hi);
/* A checksum as metadata writes it: a string of 16 lower-case hex digits. 0, or -1 (v NULL or
 * anything else). */
int ck_json_hex64(const json_t *v, uint64_t *out);

#endif
