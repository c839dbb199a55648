/* The timeline page: a dtensor Chrome trace rendered as self-contained HTML (inline SVG, no
 * network): one lane group per rank with rows for ops, compute and communication on a shared
 * time axis, hover for details, per-rank communication totals and overlap; and, for a
 * pipeline, one row per stage with its forward, backward and idle spans per micro-batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/trace.h"

typedef struct ev {
    char name[32], cat[16], detail[192];
    double ts, dur;
    int pid, tid;
} ev;

/* The value after "key": in line (a string without quotes, or a number). */
static int field(const char *line, const char *key, char *out, size_t cap) {
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return 0;
    p += strlen(pat);
    size_t n = 0;
    if (*p == '"') {
        for (p++; *p && *p != '"' && n + 1 < cap; p++) {
            if (*p == '\\' && p[1]) p++;
            out[n++] = *p;
        }
    } else {
        while (*p && *p != ',' && *p != '}' && n + 1 < cap) out[n++] = *p++;
    }
    out[n] = '\0';
    return 1;
}

static void put_html(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

static const char *const lanes[3] = {"ops", "compute", "comm"};
enum { PIPE = 3 }; /* the pipeline lane (tid), drawn in a section of its own */

/* The stage of a pipeline span ("stage S micro M ..."), -1 when the detail names none. */
static int stage_of(const ev *x) {
    int s;
    return x->tid == PIPE && sscanf(x->detail, "stage %d", &s) == 1 && s >= 0 ? s : -1;
}

/* One row per stage, drawn from the lowest rank of the stage (the others run the same
 * schedule): forward, backward and idle boxes, each labelled with its micro-batch, and per
 * stage the busy and idle time (the bubble). */
static void pipeline_section(FILE *f, const ev *e, int n) {
    int nstages = 0;
    for (int i = 0; i < n; i++)
        if (stage_of(&e[i]) + 1 > nstages) nstages = stage_of(&e[i]) + 1;
    if (!nstages) return;
    int *rank = malloc(sizeof(int) * (size_t)nstages);
    if (!rank) return;
    double t0 = 0, t1 = 0;
    int any = 0;
    for (int s = 0; s < nstages; s++) rank[s] = -1;
    for (int i = 0; i < n; i++) {
        int s = stage_of(&e[i]);
        if (s < 0) continue;
        if (rank[s] < 0 || e[i].pid < rank[s]) rank[s] = e[i].pid;
        if (!any || e[i].ts < t0) t0 = e[i].ts;
        if (!any || e[i].ts + e[i].dur > t1) t1 = e[i].ts + e[i].dur;
        any = 1;
    }
    if (t1 <= t0) t1 = t0 + 1;
    const double width = 1200, row = 22, label = 110;
    fprintf(f, "<h3>Pipeline stages</h3><p>One row per stage (its lowest rank): "
               "<b style=\"color:#4c78a8\">forward</b>, <b style=\"color:#e45756\">backward</b> "
               "and <b style=\"color:#999\">idle</b> (the bubble) per micro-batch.</p>\n"
               "<svg id=\"pipeline\" width=\"%.0f\" height=\"%.0f\">\n", width + label,
            nstages * row + 10);
    for (int s = 0; s < nstages; s++)
        fprintf(f, "<text x=\"0\" y=\"%.1f\">stage %d (rank %d)</text>\n", 5 + s * row + 15, s,
                rank[s]);
    for (int i = 0; i < n; i++) {
        int s = stage_of(&e[i]), m = -1;
        if (s < 0 || e[i].pid != rank[s]) continue;
        const char *cls = !strcmp(e[i].name, "forward") ? "pf" : !strcmp(e[i].name, "backward") ? "pb" : "pi";
        double x = label + (e[i].ts - t0) / (t1 - t0) * width, w = e[i].dur / (t1 - t0) * width;
        double y = 5 + s * row;
        fprintf(f, "<g class=\"span %s\"><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\">"
                   "<title>", cls, x, y + 1, w < 0.5 ? 0.5 : w, row - 2);
        put_html(f, e[i].detail);
        fprintf(f, " (%.1f us)</title></rect>", e[i].dur);
        if (strcmp(cls, "pi") && sscanf(e[i].detail, "stage %*d micro %d", &m) == 1 && w > 8)
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"10\" fill=\"#fff\">%d</text>",
                    x + 2, y + 15, m);
        fprintf(f, "</g>\n");
    }
    fprintf(f, "</svg>\n<table id=\"bubble\"><tr><th>stage</th><th>forward us</th>"
               "<th>backward us</th><th>idle us</th><th>idle fraction</th></tr>\n");
    for (int s = 0; s < nstages; s++) {
        double tf = 0, tb = 0, ti = 0;
        for (int i = 0; i < n; i++) {
            if (stage_of(&e[i]) != s || e[i].pid != rank[s]) continue;
            if (!strcmp(e[i].name, "forward")) tf += e[i].dur;
            else if (!strcmp(e[i].name, "backward")) tb += e[i].dur;
            else ti += e[i].dur;
        }
        double all = tf + tb + ti;
        fprintf(f, "<tr class=\"stage\"><td>%d</td><td>%.1f</td><td>%.1f</td><td>%.1f</td>"
                   "<td>%.3f</td></tr>\n", s, tf, tb, ti, all > 0 ? ti / all : 0);
    }
    fprintf(f, "</table>\n");
    free(rank);
}

/* Time on lane a of rank r that overlaps lane b of the same rank (sum of pairwise
 * intersections; events of one lane do not overlap each other). */
static double overlap(const ev *e, int n, int r, int a, int b) {
    double t = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].pid != r || e[i].tid != a) continue;
        for (int j = 0; j < n; j++) {
            if (e[j].pid != r || e[j].tid != b) continue;
            double lo = e[i].ts > e[j].ts ? e[i].ts : e[j].ts;
            double hi = e[i].ts + e[i].dur < e[j].ts + e[j].dur ? e[i].ts + e[i].dur : e[j].ts + e[j].dur;
            if (hi > lo) t += hi - lo;
        }
    }
    return t;
}

dt_status dt_trace_render_html(const char *trace_path, const char *html_path) {
    DT_ARG_NOT_NULL(trace_path);
    DT_ARG_NOT_NULL(html_path);
    const char *in_path = trace_path, *out_path = html_path;
    FILE *in = fopen(in_path, "r");
    if (!in) return dt_error(DT_ERR_ARG, "dt_trace_render_html: cannot read \"%s\"", in_path);
    int cap = 1024, n = 0, nranks = 0;
    ev *e = malloc(sizeof *e * (size_t)cap);
    char line[4096], buf[256];
    while (e && fgets(line, sizeof line, in)) {
        if (!strstr(line, "\"ph\":\"X\"")) continue;
        if (n == cap) {
            ev *more = realloc(e, sizeof *e * (size_t)(cap *= 2));
            if (!more) {
                free(e);
                e = NULL;
                break;
            }
            e = more;
        }
        ev *x = &e[n];
        memset(x, 0, sizeof *x);
        field(line, "name", x->name, sizeof x->name);
        field(line, "cat", x->cat, sizeof x->cat);
        field(line, "detail", x->detail, sizeof x->detail);
        if (field(line, "ts", buf, sizeof buf)) x->ts = atof(buf);
        if (field(line, "dur", buf, sizeof buf)) x->dur = atof(buf);
        if (field(line, "pid", buf, sizeof buf)) x->pid = atoi(buf);
        if (field(line, "tid", buf, sizeof buf)) x->tid = atoi(buf);
        if (x->tid == 4) x->tid = 2; /* the comm thread's collectives share the comm row */
        if (x->tid < 0 || x->tid > PIPE || x->pid < 0) continue;
        if (x->pid + 1 > nranks) nranks = x->pid + 1;
        n++;
    }
    fclose(in);
    if (!e) return dt_error(DT_ERR_NOMEM, "dt_trace_render_html: out of memory");
    double t0 = n ? e[0].ts : 0, t1 = t0 + 1;
    for (int i = 0; i < n; i++) {
        if (e[i].ts < t0) t0 = e[i].ts;
        if (e[i].ts + e[i].dur > t1) t1 = e[i].ts + e[i].dur;
    }
    FILE *f = fopen(out_path, "w");
    if (!f) {
        free(e);
        return dt_error(DT_ERR_SYSTEM, "dt_trace_render_html: cannot write \"%s\"", out_path);
    }
    const double width = 1200, row = 16, label = 110;
    double height = nranks * (3 * row + 14) + 30;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dtensor timeline</title>\n"
               "<style>body{font:13px sans-serif;margin:16px}rect.ops{fill:#4c78a8}"
               "rect.compute{fill:#54a24b}rect.comm{fill:#f58518}g.pf rect{fill:#4c78a8}"
               "g.pb rect{fill:#e45756}g.pi rect{fill:#ddd}rect.ev:hover{stroke:#000;stroke-width:1}"
               "table{border-collapse:collapse;margin-top:12px}td,th{border:1px solid #ccc;padding:2px 8px;"
               "text-align:right}th{background:#eee}</style></head><body>\n");
    fprintf(f, "<h2>dtensor timeline</h2><p id=\"info\"><span id=\"nevents\">%d</span> events on "
               "<span id=\"nranks\">%d</span> ranks over %.1f us. Legend: "
               "<b style=\"color:#4c78a8\">ops</b>, <b style=\"color:#54a24b\">compute</b>, "
               "<b style=\"color:#f58518\">communication</b>; hover a box for details.</p>\n",
            n, nranks, t1 - t0);
    fprintf(f, "<svg id=\"timeline\" width=\"%.0f\" height=\"%.0f\">\n", width + label, height);
    for (int r = 0; r < nranks; r++) {
        double y0 = 10 + r * (3 * row + 14);
        fprintf(f, "<text x=\"0\" y=\"%.1f\" font-weight=\"bold\">rank %d</text>\n", y0 + 12, r);
        for (int l = 0; l < 3; l++)
            fprintf(f, "<text x=\"50\" y=\"%.1f\" fill=\"#666\">%s</text>\n", y0 + l * row + 12, lanes[l]);
    }
    for (int i = 0; i < n; i++) {
        if (e[i].tid == PIPE) continue;
        double x = label + (e[i].ts - t0) / (t1 - t0) * width;
        double w = e[i].dur / (t1 - t0) * width;
        double y = 10 + e[i].pid * (3 * row + 14) + e[i].tid * row;
        fprintf(f, "<rect class=\"ev %s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\"><title>",
                lanes[e[i].tid], x, y + 1, w < 0.5 ? 0.5 : w, row - 2);
        put_html(f, e[i].name);
        fprintf(f, " (%.1f us at +%.1f us): ", e[i].dur, e[i].ts - t0);
        put_html(f, e[i].detail);
        fprintf(f, "</title></rect>\n");
    }
    fprintf(f, "</svg>\n");
    pipeline_section(f, e, n);
    fprintf(f, "<table id=\"summary\"><tr><th>rank</th><th>collective</th><th>calls</th>"
               "<th>bytes in</th><th>bytes out</th><th>time us</th></tr>\n");
    for (int r = 0; r < nranks; r++) {
        /* per collective kind: calls, bytes (from the detail text), time */
        char kinds[16][32];
        double calls[16] = {0}, bin[16] = {0}, bout[16] = {0}, t[16] = {0};
        int nk = 0;
        for (int i = 0; i < n; i++) {
            if (e[i].pid != r || e[i].tid != 2) continue;
            int k = 0;
            while (k < nk && strcmp(kinds[k], e[i].name)) k++;
            if (k == nk) {
                if (nk == 16) continue;
                snprintf(kinds[nk++], 32, "%s", e[i].name);
            }
            const char *b = strstr(e[i].detail, ", ");
            double in_b = 0, out_b = 0;
            if (b) sscanf(b, ", %lf B in, %lf B out", &in_b, &out_b);
            calls[k]++, bin[k] += in_b, bout[k] += out_b, t[k] += e[i].dur;
        }
        for (int k = 0; k < nk; k++)
            fprintf(f, "<tr class=\"row\"><td>%d</td><td>%s</td><td>%.0f</td><td>%.0f</td><td>%.0f</td>"
                       "<td>%.1f</td></tr>\n", r, kinds[k], calls[k], bin[k], bout[k], t[k]);
    }
    fprintf(f, "</table>\n<table id=\"overlap\"><tr><th>rank</th><th>compute us</th><th>comm us</th>"
               "<th>comm overlapped with compute us</th></tr>\n");
    for (int r = 0; r < nranks; r++) {
        double tc = 0, tm = 0;
        for (int i = 0; i < n; i++)
            if (e[i].pid == r) tc += e[i].tid == 1 ? e[i].dur : 0, tm += e[i].tid == 2 ? e[i].dur : 0;
        fprintf(f, "<tr><td>%d</td><td>%.1f</td><td>%.1f</td><td>%.1f</td></tr>\n", r, tc, tm,
                overlap(e, n, r, 2, 1));
    }
    /* A check the page makes of itself once rendered: boxes drawn vs events listed. */
    fprintf(f, "</table>\n<p>Drawn: <span id=\"drawn\">?</span> boxes.</p>\n<script>"
               "document.getElementById('drawn').textContent="
               "document.querySelectorAll('#timeline rect.ev').length;</script>\n</body></html>\n");
    free(e);
    if (fclose(f) != 0)
        return dt_error(DT_ERR_SYSTEM, "dt_trace_render_html: writing \"%s\" failed", out_path);
    return DT_OK;
}

