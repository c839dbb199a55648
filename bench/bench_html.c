/* make bench's page: the benchmark table and, for each collective of bench_collectives --tsv,
 * bus bandwidth against size (log scale) with one line per rank count, min-max whiskers, and a
 * dashed line for the busbw the same point would reach at the speed of its copy reference.
 * One self-contained HTML file with inline SVG: no scripts, styles or fonts from elsewhere.
 *
 *   bench_html TABLE.tsv SWEEP.tsv "what ran where" > bench.html
 * TABLE.tsv: case<TAB>figure<TAB>reference<TAB>ratio lines (tools/bench-table.sh), the first
 * one the header; SWEEP.tsv: bench_collectives --tsv. */
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
    int ranks;
    char op[32];
    double size, time, tmin, tmax, busbw, mem_pct;
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
        double count, alg, must, copy;
        char type[16], redop[16];
        if (sscanf(line, "%d %31s %lf %lf %15s %15s %lf %lf %lf %lf %lf %lf %lf %lf", &p.ranks,
                   p.op, &p.size, &count, type, redop, &p.time, &p.tmin, &p.tmax, &alg, &p.busbw,
                   &must, &copy, &p.mem_pct) == 14)
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

static void plot(const char *op) {
    int ranks[MAX_SERIES], nr = 0;
    double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
    for (int i = 0; i < npts; i++) {
        const point *p = &pts[i];
        if (strcmp(p->op, op)) continue;
        int known = 0;
        for (int r = 0; r < nr; r++)
            known |= ranks[r] == p->ranks;
        if (!known && nr < MAX_SERIES) ranks[nr++] = p->ranks;
        xmin = fmin(xmin, p->size);
        xmax = fmax(xmax, p->size);
        ymax = fmax(ymax, p->busbw * p->time / p->tmin);
        if (p->mem_pct > 0) ymax = fmax(ymax, p->busbw * 100 / p->mem_pct);
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
            for (int i = 0; i < npts; i++) {
                const point *p = &pts[i];
                if (strcmp(p->op, op) || p->ranks != ranks[r]) continue;
                double v = dashed ? (p->mem_pct > 0 ? p->busbw * 100 / p->mem_pct : 0) : p->busbw;
                printf("%.1f,%.1f ", X(p->size), Y(v));
            }
            puts("\"/>");
        }
        for (int i = 0; i < npts; i++) { /* whiskers: busbw at the slowest and fastest round */
            const point *p = &pts[i];
            if (strcmp(p->op, op) || p->ranks != ranks[r]) continue;
            double lo = p->busbw * p->time / p->tmax, hi = p->busbw * p->time / p->tmin;
            printf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>"
                   "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                   X(p->size), X(p->size), Y(lo), Y(hi), col, X(p->size), Y(p->busbw), col);
        }
        const int lx = W - MR - 66 * (nr - r); /* legend: the title's row, right-aligned */
        printf("<line x1=\"%d\" x2=\"%d\" y1=\"12\" y2=\"12\" stroke=\"%s\" stroke-width=\"2\"/>"
               "<text x=\"%d\" y=\"16\">%d ranks</text>\n",
               lx, lx + 14, col, lx + 17, ranks[r]);
    }
    puts("</svg><figcaption>solid: median busbw, whiskers: min and max round; dashed: the busbw "
         "at the speed of a copy of the bytes it must move (same run)</figcaption></figure>");
#undef X
#undef Y
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: bench_html TABLE.tsv SWEEP.tsv \"what ran where\" > page.html\n");
        return 2;
    }
    read_sweep(argv[2]);
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
    const char *seen[16];
    int nseen = 0;
    for (int i = 0; i < npts; i++) {
        int known = 0;
        for (int k = 0; k < nseen; k++)
            known |= !strcmp(seen[k], pts[i].op);
        if (known || nseen == 16) continue;
        seen[nseen++] = pts[i].op;
        plot(pts[i].op);
    }
    if (!nseen) puts("<p>(no sweep: bench_collectives did not run)</p>");
    puts("<h2>Sweep (nccl-tests columns)</h2>");
    table(argv[2]);
    puts("</body></html>");
    return 0;
}
