/* dt_torch_trace_convert called from C (tools/torch_trace.c compiled in): its arguments at
 * fault named in the message, a message cut to any buffer size, no buffer at all, and a
 * conversion of the PyTorch fixture whose output parses. Fixture path from meson
 * (DT_TORCH_FIXTURE). The conversion itself is checked by test_torch_trace.py. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torch_trace.h"

static const char *fixture(int rank) {
    static char path[2][4096];
    const char *dir = getenv("DT_TORCH_FIXTURE");
    cr_assert(dir, "DT_TORCH_FIXTURE not set");
    snprintf(path[rank], sizeof path[rank], "%s/tp2_rank%d.json.gz", dir, rank);
    return path[rank];
}

Test(torch_trace_api, bad_arguments_are_named) {
    char err[256];
    const char *in[2] = {fixture(0), NULL};
    cr_expect_neq(dt_torch_trace_convert(in, 0, "/tmp/x.json", err, sizeof err), 0);
    cr_expect(strstr(err, "n_in = 0"), "%s", err);
    cr_expect_neq(dt_torch_trace_convert(NULL, 1, "/tmp/x.json", err, sizeof err), 0);
    cr_expect(strstr(err, "n_in = 1"), "%s", err);
    cr_expect_neq(dt_torch_trace_convert(in, 2, "/tmp/x.json", err, sizeof err), 0);
    cr_expect(strstr(err, "in_paths[1] is NULL"), "%s", err);
    cr_expect_neq(dt_torch_trace_convert(in, 1, NULL, err, sizeof err), 0);
    cr_expect(strstr(err, "out_path"), "%s", err);
}

Test(torch_trace_api, message_fits_any_buffer) {
    const char *in[1] = {"/nonexistent/dir/trace.json"};
    for (size_t cap = 1; cap < 64; cap++) {
        char *err = malloc(cap); /* exact size, so a write past it is caught under ASan */
        memset(err, 'x', cap);
        cr_expect_neq(dt_torch_trace_convert(in, 1, "/tmp/x.json", err, cap), 0);
        cr_expect_lt(strlen(err), cap);
        free(err);
    }
    cr_expect_neq(dt_torch_trace_convert(in, 1, "/tmp/x.json", NULL, 0), 0);
}

Test(torch_trace_api, fixture_converts) {
    char out[] = "/tmp/dt_torch_trace_XXXXXX", err[256] = "stale";
    int fd = mkstemp(out);
    cr_assert_geq(fd, 0);
    close(fd);
    const char *in[2] = {fixture(0), fixture(1)};
    cr_assert_eq(dt_torch_trace_convert(in, 2, out, err, sizeof err), 0, "%s", err);
    cr_expect_str_empty(err);
    json_error_t je;
    json_t *events = json_load_file(out, 0, &je);
    cr_assert(json_is_array(events), "%s: %s", out, je.text);
    int pids[2] = {0, 0};
    for (size_t i = 0; i < json_array_size(events); i++) {
        json_int_t pid = json_integer_value(json_object_get(json_array_get(events, i), "pid"));
        if (pid == 0 || pid == 1) pids[pid]++;
    }
    cr_expect(pids[0] > 100 && pids[1] > 100, "events per rank: %d %d", pids[0], pids[1]);
    json_decref(events);
    remove(out);
}
