/* Rank-side test helpers without Criterion: turn failures into statuses (Criterion's asserts
 * are not for worker threads), plus deterministic test data. Shared by the Criterion suites
 * and by gpu_check, which runs where Criterion is not installed. */
#ifndef DT_TEST_RANK_HELPERS_H
#define DT_TEST_RANK_HELPERS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <dtensor.h>

/* A rank-side failure: records "file:line: message" as the rank's error and returns. The
 * status is DT_ERR_ARG by convention; the message says it is a test failure. */
dt_status t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define R_CHECK(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) return t_fail(__FILE__, __LINE__, __VA_ARGS__);                               \
    } while (0)

/* A call that must succeed on the rank. */
#define R_OK(call)                                                                                 \
    do {                                                                                           \
        dt_status r_st_ = (call);                                                                  \
        if (r_st_ != DT_OK)                                                                        \
            return t_fail(__FILE__, __LINE__, "%s returned %s: %s", #call,                         \
                          dt_status_str(r_st_), dt_last_error());                                  \
    } while (0)

/* A call that must fail with the given status and a message mentioning `needle`. */
#define R_ERR(call, want, needle)                                                                  \
    do {                                                                                           \
        dt_status r_st_ = (call);                                                                  \
        if (r_st_ != (want))                                                                       \
            return t_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)", #call,           \
                          dt_status_str(r_st_), dt_status_str(want), dt_last_error());             \
        if (!strstr(dt_last_error(), (needle)))                                                    \
            return t_fail(__FILE__, __LINE__, "%s: message \"%s\" does not mention \"%s\"", #call, \
                          dt_last_error(), (needle));                                              \
    } while (0)

/* The last error must also mention needle (R_ERR checks one needle; some errors need two). */
#define R_MSG(needle)                                                                              \
    R_CHECK(strstr(dt_last_error(), (needle)), "message \"%s\" does not mention \"%s\"",           \
            dt_last_error(), (needle))

/* An out-parameter value no call may leave behind on failure: T_SENTINEL(dt_comm *). */
extern int t_sentinel;
#define T_SENTINEL(type) ((type)&t_sentinel)

/* Per-rank failure messages (up to 8 ranks), so that a rank-side test failure is reported
 * even when dt_local_run passes on another rank's message: t_keep_msg(m, ctx, st) stores the
 * rank's last error when st failed and returns st. */
typedef struct t_rank_msgs {
    char msg[8][512];
} t_rank_msgs;
dt_status t_keep_msg(t_rank_msgs *m, dt_ctx *ctx, dt_status st);

/* Collectives the rank issued since its last dt_comm_stats_reset: of one kind, and in all. */
uint64_t t_issued(dt_ctx *ctx, dt_coll_kind kind);
uint64_t t_issued_total(dt_ctx *ctx);

/* Monotonic seconds, and a sleep. */
double t_now_s(void);
void t_sleep_ms(int ms);

/* Dtypes [0, T_NUMERIC_DTYPES) have arithmetic and reductions; the float8 ones after them are
 * storage only (casts, copies, gathers; dtensor/float8.h). Suites that loop over "every dtype"
 * for reductions or Partial placements stop here. */
#define T_NUMERIC_DTYPES DT_F8E4M3

/* Fills count elements of dtype with small integers derived from seed and index, exact in
 * every dtype (|v| <= 16), so sums over up to 8 ranks stay exact in bf16. */
void t_fill(dt_dtype dtype, void *buf, size_t count, uint64_t seed);
/* Element i of the same data, as a double. */
double t_value(uint64_t seed, size_t i);

/* Opens a conformance table: ../shared/conformance/<name> next to the repository (the newest)
 * or the copy in tests/conformance; NULL when neither opens. path receives the one used. */
FILE *t_open_conformance(const char *name, char *path, size_t cap);
/* Splits a tab-separated line in place into at most max columns (newline dropped). */
int t_split_tabs(char *line, char **cols, int max);

/* "2x2" or "12,8" -> at most max sizes in out; their count, -1 for other text. */
int t_parse_dims(const char *text, int *out, int max);

/* Element i of buf as a double. */
double t_get(dt_dtype dtype, const void *buf, size_t i);

#endif
