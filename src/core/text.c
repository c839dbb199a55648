#include <stdarg.h>
#include <stdio.h>

#include "core/check.h"
#include "core/text.h"

void dt_text_put(dt_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = t->len < t->cap ? t->cap - t->len : 0;
    int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n;
}

void dt_text_bytes(dt_text *t, double bytes) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    if (u == 0) dt_text_put(t, "%.0f %s", bytes, units[u]);
    else dt_text_put(t, "%.1f %s", bytes, units[u]);
}

dt_status dt_text_finish(const dt_text *t, const char *fn, size_t *len_out) {
    if (len_out) *len_out = t->len + 1;
    if (t->len + 1 > t->cap)
        return dt_error(DT_ERR_SIZE, "%s: the text needs %zu bytes, cap is %zu", fn, t->len + 1,
                        t->cap);
    return DT_OK;
}
