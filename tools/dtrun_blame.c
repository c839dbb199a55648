/* dtrun's error records and its choice of a failed world's root cause (dtrun.h). Reads only
 * what the ranks wrote and what dtrun saw; starts, signals and waits for nothing. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrun.h"

/* --- the record: a flat JSON object ------------------------------------------------------- */

static const char *skip_space(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* The JSON string at p (its opening quote) into out, truncated to cap - 1 bytes; returns what
 * follows it, NULL when it is not a string. \u escapes outside ASCII become '?'. */
static const char *read_string(const char *p, char *out, size_t cap) {
    static const char names[] = "ntrbf", chars[] = "\n\t\r\b\f";
    size_t k = 0;
    if (*p++ != '"') return NULL;
    while (*p && *p != '"') {
        char c = *p++;
        const char *esc = c == '\\' && *p ? strchr(names, *p) : NULL;
        if (esc) {
            c = chars[esc - names];
            p++;
        } else if (c == '\\' && *p == 'u') {
            char hex[5] = {0};
            for (int i = 0; i < 4; i++)
                if (!(hex[i] = *++p)) return NULL;
            p++;
            long v = strtol(hex, NULL, 16);
            c = v > 0 && v < 0x80 ? (char)v : '?';
        } else if (c == '\\') { /* \" \\ \/ */
            if (!(c = *p++)) return NULL;
        }
        if (k + 1 < cap) out[k++] = c;
    }
    if (cap) out[k] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

int dtrun_record_parse(const char *text, dtrun_record *out) {
    memset(out, 0, sizeof *out);
    int have_rank = 0;
    const char *p = skip_space(text);
    if (*p++ != '{') return -1;
    for (p = skip_space(p); *p != '}'; p = skip_space(p)) {
        char key[32], value[64];
        if (!(p = read_string(p, key, sizeof key))) return -1;
        p = skip_space(p);
        if (*p++ != ':') return -1;
        p = skip_space(p);
        if (*p == '[' && !strcmp(key, "flight")) { /* an array of strings */
            for (p = skip_space(p + 1); *p != ']'; p = skip_space(p)) {
                char entry[sizeof out->flight[0]];
                if (!(p = read_string(p, entry, sizeof entry))) return -1;
                if (out->nflight == DTRUN_FLIGHT) { /* keep the last ones */
                    memmove(out->flight[0], out->flight[1],
                            sizeof out->flight[0] * (DTRUN_FLIGHT - 1));
                    out->nflight--;
                }
                memcpy(out->flight[out->nflight++], entry, sizeof entry);
                p = skip_space(p);
                if (*p == ',') p++;
                else if (*p != ']') return -1;
            }
            p++;
        } else if (*p == '"') { /* strings land where they belong; others are skipped */
            char *dst = value;
            size_t cap = sizeof value;
            if (!strcmp(key, "status")) dst = out->status, cap = sizeof out->status;
            if (!strcmp(key, "message")) dst = out->message, cap = sizeof out->message;
            if (!(p = read_string(p, dst, cap))) return -1;
        } else { /* a number, true, false or null */
            size_t k = strcspn(p, ",} \t\r\n");
            if (k == 0 || k >= sizeof value) return -1;
            memcpy(value, p, k);
            value[k] = '\0';
            p += k;
            if (!strcmp(key, "failed_rank")) {
                out->failed_rank = atoi(value);
                have_rank = 1;
            } else if (!strcmp(key, "origin")) {
                out->origin = !strcmp(value, "true");
            } else if (!strcmp(key, "monotonic_ns")) {
                out->at_ns = strtoll(value, NULL, 10);
            }
        }
        p = skip_space(p);
        if (*p == ',')
            p++;
        else if (*p != '}')
            return -1;
    }
    out->present = have_rank;
    return have_rank ? 0 : -1;
}

int dtrun_record_read(const char *path, dtrun_record *out) {
    char text[8192];
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    return dtrun_record_parse(text, out);
}

/* --- the root cause ---------------------------------------------------------------------- */

static int failed(const dtrun_end *e) {
    return e->code != 0;
}

/* 1 when a sorts before b on (first, second, rank); a < 0 means "none yet". */
static int earlier(int64_t a1, int64_t a2, int a, int64_t b1, int64_t b2, int b) {
    if (b < 0) return 1;
    if (a1 != b1) return a1 < b1;
    if (a2 != b2) return a2 < b2;
    return a < b;
}

int dtrun_root_cause(const dtrun_end *e, int n, dtrun_why *why_out) {
    int best = -1;
    int64_t k1 = 0, k2 = 0;
    /* 1. A failure that began at its rank: whatever happened after it may be its consequence. */
    for (int r = 0; r < n; r++) {
        const dtrun_record *c = &e[r].rec;
        if (!failed(&e[r]) || !c->present || !c->origin) continue;
        if (earlier(c->at_ns, 0, r, k1, k2, best)) best = r, k1 = c->at_ns;
    }
    if (best >= 0) return *why_out = DTRUN_ORIGIN, best;
    /* 2. The failed rank a peer's earliest record blames (the runtimes relay the world's first
     *    failure, so the ranks' records agree on it). */
    for (int r = 0; r < n; r++) {
        const dtrun_record *c = &e[r].rec;
        int q = c->failed_rank;
        if (!c->present || q == r || q < 0 || q >= n || !failed(&e[q])) continue;
        if (earlier(c->at_ns, 0, q, k1, k2, best)) best = q, k1 = c->at_ns;
    }
    if (best >= 0) return *why_out = DTRUN_NAMED, best;
    /* 3. A signal from outside (the OOM killer, a crash, kill -9): nothing the others did. */
    for (int r = 0; r < n; r++) {
        if (!failed(&e[r]) || !e[r].signal || e[r].signal_ours) continue;
        if (earlier(e[r].seen_ns, 0, r, k1, k2, best)) best = r, k1 = e[r].seen_ns;
    }
    if (best >= 0) return *why_out = DTRUN_SIGNAL, best;
    /* 4. Seen first; dtrun's own stopping last; then the earlier record. */
    for (int r = 0; r < n; r++) {
        if (!failed(&e[r])) continue;
        int64_t a1 = e[r].signal_ours ? INT64_MAX : e[r].seen_ns;
        int64_t a2 = e[r].rec.present ? e[r].rec.at_ns : INT64_MAX;
        if (earlier(a1, a2, r, k1, k2, best)) best = r, k1 = a1, k2 = a2;
    }
    *why_out = best >= 0 ? DTRUN_FIRST : DTRUN_NO_FAILURE;
    return best;
}

/* --- the report -------------------------------------------------------------------------- */

void dtrun_describe_end(char *buf, size_t cap, int rank, const dtrun_end *e) {
    if (e->signal)
        snprintf(buf, cap, "rank %d was killed by signal %d (%s)%s", rank, e->signal,
                 strsignal(e->signal), e->signal_ours ? ", sent by dtrun" : "");
    else
        snprintf(buf, cap, "rank %d exited with status %d", rank, e->code);
}

/* One line each: a message's line breaks and other control characters become spaces. */
static void print_end(FILE *out, const char *head, int rank, const dtrun_end *e, const char *tail) {
    char what[256], msg[sizeof e->rec.message];
    dtrun_describe_end(what, sizeof what, rank, e);
    const dtrun_record *c = &e->rec;
    snprintf(msg, sizeof msg, "%s", c->message);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20) *p = ' ';
    fprintf(out, "dtrun: %s%s", head, what);
    if (c->present && c->failed_rank != rank)
        fprintf(out, ": rank %d failed (%s): %s", c->failed_rank, c->status, msg);
    else if (c->present)
        fprintf(out, ": %s: %s", c->status, msg);
    fprintf(out, "%s\n", tail);
}

/* The ranks' last collectives, one line each, the last REPORT_FLIGHT of them. */
#define REPORT_FLIGHT 3
static void print_flights(FILE *out, const dtrun_end *e, int n) {
    int any = 0;
    for (int r = 0; r < n; r++) any |= e[r].rec.present && e[r].rec.nflight > 0;
    if (!any) return;
    fprintf(out, "dtrun: last collectives (oldest first; the last is where a rank waited):\n");
    for (int r = 0; r < n; r++) {
        const dtrun_record *c = &e[r].rec;
        if (!c->present || !c->nflight) continue;
        fprintf(out, "dtrun:   rank %d", r);
        for (int k = c->nflight > REPORT_FLIGHT ? c->nflight - REPORT_FLIGHT : 0; k < c->nflight; k++)
            fprintf(out, " | %s", c->flight[k]);
        fprintf(out, "\n");
    }
}

void dtrun_report(FILE *out, const dtrun_end *e, int n, int root, dtrun_why why) {
    static const char *const reason[] = {
        [DTRUN_ORIGIN] = "its error record is the earliest of a failure that began at its rank",
        [DTRUN_NAMED] = "the other ranks' error records name it",
        [DTRUN_SIGNAL] = "no rank recorded a failure; a signal dtrun did not send ended it",
        [DTRUN_FIRST] = "no rank recorded a failure; it was seen to fail first",
    };
    if (root < 0) return;
    int others = 0;
    for (int r = 0; r < n; r++)
        others += r != root && failed(&e[r]);
    char tail[160];
    snprintf(tail, sizeof tail, " [%s]", others ? reason[why] : "the only failure");
    print_end(out, "root cause: ", root, &e[root], tail);
    for (int r = 0; r < n; r++)
        if (r != root && failed(&e[r])) print_end(out, "also failed: ", r, &e[r], "");
    print_flights(out, e, n);
}
