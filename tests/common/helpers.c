#include "helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void t_run(int n, dt_spmd_fn body, void *arg) {
    dt_status st = dt_local_run(n, body, arg, NULL);
    cr_assert_eq(st, DT_OK, "%d ranks: %s: %s", n, dt_status_str(st), dt_last_error());
}

int t_closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

char *t_tmpdir(void) {
    char *d = strdup("/tmp/dtckpt-XXXXXX");
    cr_assert(d && mkdtemp(d), "mkdtemp");
    return d;
}

void t_rmtree(char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(dir);
}

char *t_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*len + 8);
    cr_assert(b);
    cr_assert_eq(fread(b, 1, *len, f), *len);
    b[*len] = 0;
    fclose(f);
    return b;
}

void t_spit(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(data, 1, len, f) == len, "write %s", path);
    fclose(f);
}

int t_count(const char *s, const char *needle) {
    int c = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++)
        c++;
    return c;
}

void t_trace_page(const char *dir, int n, char **json, char **page) {
    char merged[4096], html[4096], (*paths)[4096] = calloc((size_t)n, sizeof *paths);
    const char **p = calloc((size_t)n, sizeof *p);
    cr_assert(paths && p);
    for (int r = 0; r < n; r++)
        snprintf(paths[r], sizeof paths[r], "%s/rank%d.json", dir, r), p[r] = paths[r];
    snprintf(merged, sizeof merged, "%s/all.json", dir);
    snprintf(html, sizeof html, "%s/all.html", dir);
    cr_assert_eq(dt_trace_merge(p, n, merged), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_trace_render_html(merged, html), DT_OK, "%s", dt_last_error());
    size_t len;
    *json = t_slurp(merged, &len), *page = t_slurp(html, &len);
    free(paths), free(p);
    t_rmtree(strdup(dir));
}

void t_assert_pipeline_spans(const char *json, const char *page, int stages, int micro) {
    for (int s = 0; s < stages; s++)
        for (int i = 0; i < micro; i++)
            for (int b = 0; b < 2; b++) {
                char want[64];
                snprintf(want, sizeof want, "stage %d micro %d %s", s, i,
                         b ? "backward" : "forward");
                cr_assert(t_count(json, want) == 1 && t_count(page, want) == 1, "\"%s\"", want);
            }
}
