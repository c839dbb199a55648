/* A bounded text builder: writes what fits, counts what would have been written, so callers
 * can report the size they need (the snprintf contract, appended piecewise). */
#ifndef DT_CORE_TEXT_H
#define DT_CORE_TEXT_H

#include <stddef.h>

#include "dtensor/status.h"

typedef struct dt_text {
    char *buf;
    size_t cap, len;
} dt_text;

void dt_text_put(dt_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1536 -> "1.5 KiB". */
void dt_text_bytes(dt_text *t, double bytes);
/* DT_OK when everything fit (with the NUL), else DT_ERR_SIZE naming fn; sets *len_out. */
dt_status dt_text_finish(const dt_text *t, const char *fn, size_t *len_out);

#endif
