/* make bench's page: the benchmark table and, for each collective of bench_collectives --tsv,
 * bus bandwidth against size (log scale) with one line per rank count, min-max whiskers, and a
 * dashed line for the busbw the same point would reach at the speed of its copy reference;
 * the same for bench_ucx --tsv (one line per process count and environment), the dashed line
 * there the local runtime's busbw for the same collective, size and ranks.
 * One self-contained HTML file with inline SVG: no scripts, styles or fonts from elsewhere.
 *
 *   bench_html TABLE.tsv SWEEP.tsv "what ran where" [UCX.tsv] > bench.html
 * TABLE.tsv: case<TAB>figure<TAB>reference<TAB>ratio lines (tools/bench-table.sh), the first
 * one the header; SWEEP.tsv: bench_collectives --tsv; UCX.tsv: bench_ucx --tsv. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_POINTS 4096
#define MAX_SERIES 8
#define W          520
#define H          320
#define ML         60 /* margins: left, right, top, bottom */
#define MR         16
#define MT         28
#define MB         44

typedef struct point {
    char op[32], series[96]; /* the line it belongs to: "4 ranks", "4 processes DT_UCX_SHM=0" */
    double size, time, tmin, tmax, busbw, ref; /* ref: the dashed line's busbw (0: none) */
} point;

static point pts[MAX_POINTS];
static int npts;

static void put_escaped(const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", stdout);
        else if (*s == '>')
            fputs("&gt;", stdout);
        else if (*s == '&')
            fputs("&amp;", stdout);
        else
            putchar(*s);
    }
}

static void table(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[2048];
    int first = 1;
    puts("<table>");
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        fputs("<tr>", stdout);
        for (char *cell = line, *tab;; cell = tab + 1) {
            tab = strchr(cell, '\t');
            if (tab) *tab = '\0';
            fputs(first ? "<th>" : "<td>", stdout);
            put_escaped(cell);
            fputs(first ? "</th>" : "</td>", stdout);
            if (!tab) break;
        }
        puts("</tr>");
        first = 0;
    }
    puts("</table>");
    fclose(f);
}

static void read_sweep(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f) && npts < MAX_POINTS) {
        point p;
        int ranks;
        double count, alg, must, copy, mem_pct;
        char type[16], redop[16];
        if (sscanf(line, "%d %31s %lf %lf %15s %15s %lf %lf %lf %lf %lf %lf %lf %lf", &ranks, p.op,
                   &p.size, &count, type, redop, &p.time, &p.tmin, &p.tmax, &alg, &p.busbw, &must,
                   &copy, &mem_pct) != 14)
            continue;
        snprintf(p.series, sizeof p.series, "%d ranks", ranks);
        p.ref = mem_pct > 0 ? p.busbw * 100 / mem_pct : 0;
        pts[npts++] = p;
    }
    fclose(f);
}

/* bench_ucx --tsv: ranks op env size count type redop time min max algbw busbw local_us
 * local_min local_max x_local p2p_GBps p2p_pct (env: no spaces inside a field, tabs apart). */
static void read_ucx(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f) && npts < MAX_POINTS) {
        point p;
        int ranks;
        double count, alg, lus, lmin, lmax, x;
        char env[64], rest[512];
        if (sscanf(line, "%d\t%31[^\t]\t%63[^\t]\t%511[^\n]", &ranks, p.op, env, rest) != 4 ||
            sscanf(rest, "%lf %lf %*s %*s %lf %lf %lf %lf %lf %lf %lf %lf %lf", &p.size, &count,
                   &p.time, &p.tmin, &p.tmax, &alg, &p.busbw, &lus, &lmin, &lmax, &x) != 11)
            continue;
        snprintf(p.series, sizeof p.series, "%d processes%s%s", ranks, strcmp(env, "-") ? " " : "",
                 strcmp(env, "-") ? env : "");
        p.ref = p.busbw * x; /* the local runtime's busbw: same bytes, its time */
        pts[npts++] = p;
    }
    fclose(f);
}

static const char *const colors[MAX_SERIES] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                               "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};

static void size_label(double s, char *buf, size_t cap) {
    if (s >= 1048576)
        snprintf(buf, cap, "%gM", s / 1048576);
    else if (s >= 1024)
        snprintf(buf, cap, "%gK", s / 1024);
    else
        snprintf(buf, cap, "%g", s);
}

/* One plot of op over the points [from, to): a line per series. */
static void plot(const char *op, int from, int to, const char *dashed_means) {
    const char *series[MAX_SERIES];
    int nr = 0;
    double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
    for (int i = from; i < to; i++) {
        const point *p = &pts[i];
        if (strcmp(p->op, op)) continue;
        int known = 0;
        for (int r = 0; r < nr; r++)
            known |= !strcmp(series[r], p->series);
        if (!known && nr < MAX_SERIES) series[nr++] = p->series;
        xmin = fmin(xmin, p->size);
        xmax = fmax(xmax, p->size);
        ymax = fmax(ymax, p->busbw * p->time / p->tmin);
        if (p->ref > 0) ymax = fmax(ymax, p->ref);
        if (p->busbw > 0) ymin = fmin(ymin, p->busbw * p->time / p->tmax);
    }
    if (!nr) return;
    /* Whole decades of GB/s around every point. */
    double ly0 = ymin < 1e300 ? floor(log10(ymin)) : -2, ly1 = ymax > 0 ? ceil(log10(ymax)) : 1;
    if (ly1 <= ly0) ly1 = ly0 + 1;
    double lx0 = log2(xmin), lx1 = log2(xmax) > lx0 ? log2(xmax) : lx0 + 1;
#define X(s) (ML + (log2(s) - lx0) / (lx1 - lx0) * (W - ML - MR))
#define Y(v)                                                                                       \
    (H - MB -                                                                                      \
     (log10((v) > 0 ? (v) : 1e-300) < ly0 ? 0 : (log10(v) - ly0)) / (ly1 - ly0) * (H - MT - MB))
    printf("<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
           "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
           W, H, W, H);
    printf("<text x=\"%d\" y=\"16\" font-size=\"13\" font-weight=\"bold\">%s</text>\n"
           "<text transform=\"translate(12 %d) rotate(-90)\" text-anchor=\"middle\">busbw "
           "(GB/s)</text>\n",
           ML, op, (MT + H - MB) / 2);
    for (double e = ly0; e <= ly1; e++) { /* y grid: decades */
        double v = pow(10, e);
        printf("<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
               "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
               ML, W - MR, Y(v), Y(v), ML - 4, Y(v) + 4, v);
    }
    for (double s = xmin; s <= xmax * 1.0001; s *= 4) { /* x ticks */
        char lab[16];
        size_label(s, lab, sizeof lab);
        printf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#999\"/>"
               "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
               X(s), X(s), H - MB, H - MB + 4, X(s), H - MB + 16, lab);
    }
    printf("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">size (bytes)</text>\n",
           (ML + W - MR) / 2, H - 8);
    printf("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n",
           ML, MT, W - ML - MR, H - MT - MB);
    for (int r = 0; r < nr; r++) {
        const char *col = colors[r % MAX_SERIES];
        for (int dashed = 0; dashed < 2; dashed++) {
            printf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", col,
                   dashed ? "1" : "2", dashed ? " stroke-dasharray=\"4 3\"" : "");
            for (int i = from; i < to; i++) {
                const point *p = &pts[i];
                if (strcmp(p->op, op) || strcmp(p->series, series[r])) continue;
                double v = dashed ? p->ref : p->busbw;
                printf("%.1f,%.1f ", X(p->size), Y(v));
            }
            puts("\"/>");
        }
        for (int i = from; i < to; i++) { /* whiskers: busbw at the slowest and fastest round */
            const point *p = &pts[i];
            if (strcmp(p->op, op) || strcmp(p->series, series[r])) continue;
            double lo = p->busbw * p->time / p->tmax, hi = p->busbw * p->time / p->tmin;
            printf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>"
                   "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                   X(p->size), X(p->size), Y(lo), Y(hi), col, X(p->size), Y(p->busbw), col);
        }
        const int ly = MT + 12 + 13 * r; /* legend: inside the plot, top left, one per row */
        printf("<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>"
               "<text x=\"%d\" y=\"%d\">",
               ML + 6, ML + 20, ly - 4, ly - 4, col, ML + 23, ly);
        put_escaped(series[r]);
        puts("</text>");
    }
    printf("</svg><figcaption>solid: median busbw, whiskers: min and max round; dashed: %s "
           "(same run)</figcaption></figure>\n",
           dashed_means);
#undef X
#undef Y
}

/* A plot per collective of the points [from, to); how many. */
static int plots(int from, int to, const char *dashed_means) {
    const char *seen[16];
    int nseen = 0;
    for (int i = from; i < to; i++) {
        int known = 0;
        for (int k = 0; k < nseen; k++)
            known |= !strcmp(seen[k], pts[i].op);
        if (known || nseen == 16) continue;
        seen[nseen++] = pts[i].op;
        plot(pts[i].op, from, to, dashed_means);
    }
    return nseen;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: bench_html TABLE.tsv SWEEP.tsv \"what ran where\" [UCX.tsv] > "
                        "page.html\n");
        return 2;
    }
    read_sweep(argv[2]);
    int nlocal = npts;
    if (argc == 5) read_ucx(argv[4]);
    puts("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>dtensor benchmarks</title>"
         "<style>body{font-family:sans-serif;margin:1.5em;max-width:1200px}"
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px "
         "6px;text-align:left}figure{display:inline-block;margin:0 1em 1em 0}"
         "figcaption{font-size:11px;color:#555;max-width:520px}</style></head><body>");
    fputs("<h1>dtensor benchmarks</h1>\n<p>", stdout);
    put_escaped(argv[3]);
    puts("</p>\n<h2>Table</h2>");
    table(argv[1]);
    puts("<h2>Local runtime collectives: bandwidth vs size</h2>");
    if (!plots(0, nlocal, "the busbw at the speed of a copy of the bytes it must move"))
        puts("<p>(no sweep: bench_collectives did not run)</p>");
    puts("<h2>Sweep (nccl-tests columns)</h2>");
    table(argv[2]);
    if (argc == 5) {
        puts("<h2>UCX collectives (processes): bandwidth vs size</h2>");
        if (!plots(nlocal, npts, "the local runtime's busbw, same collective, size and ranks"))
            puts("<p>(no UCX sweep: bench_ucx did not run)</p>");
        puts("<h2>UCX sweep (nccl-tests columns, the local runtime and ucx_perftest)</h2>");
        table(argv[4]);
    }
    puts("</body></html>");
    return 0;
}
