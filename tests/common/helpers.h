/* Test helpers for the Criterion suites: run an SPMD body on N local ranks, main-thread
 * error checks; the rank-side ones are in rank_helpers.h. */
#ifndef DT_TEST_HELPERS_H
#define DT_TEST_HELPERS_H

#include <criterion/criterion.h>

#include "rank_helpers.h"

/* Runs body on n ranks and asserts every rank returned DT_OK. */
void t_run(int n, dt_spmd_fn body, void *arg);

/* A loopback TCP port that was free a moment ago and has nothing listening on it. */
int t_closed_port(void);

/* A fresh directory under /tmp (free it with t_rmtree, which also removes what is in it). */
char *t_tmpdir(void);
void t_rmtree(char *dir);
/* A whole file (malloc'd, NUL-terminated, 8 bytes to spare; its length in *len), and a file
 * written whole; both assert. */
char *t_slurp(const char *path, size_t *len);
void t_spit(const char *path, const char *data, size_t len);

/* How often needle occurs in s. */
int t_count(const char *s, const char *needle);

/* The per-rank traces dir/rank0.json ... rank<n - 1>.json merged (dt_trace_merge) and rendered
 * (dt_trace_render_html): the merged JSON and the page as text into *json and *page (free
 * them); dir and its files are removed. Asserts. */
void t_trace_page(const char *dir, int n, char **json, char **page);

/* A pipeline trace's spans: "stage s micro i forward" and "... backward" once each in json
 * and in page, for s < stages (a chunk under interleaved 1F1B) and i < micro. */
void t_assert_pipeline_spans(const char *json, const char *page, int stages, int micro);

/* Main-thread form of R_ERR. */
#define T_ERR(call, want, needle)                                                                  \
    do {                                                                                           \
        dt_status t_st_ = (call);                                                                  \
        cr_assert_eq(t_st_, (want), "%s returned %s, expected %s (%s)", #call,                     \
                     dt_status_str(t_st_), dt_status_str(want), dt_last_error());                  \
        cr_assert(strstr(dt_last_error(), (needle)), "%s: message \"%s\" does not mention \"%s\"", \
                  #call, dt_last_error(), (needle));                                               \
    } while (0)

#endif
