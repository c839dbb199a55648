/* What dtrun knows of a rank once it ended, and how it picks the root cause of a failed world:
 * the failure the others followed from (dtrun_blame.c). Plain C, no dtensor: dtrun and its
 * tests share it, so the choice can be checked as a table. */
#ifndef DTRUN_H
#define DTRUN_H

#include <stdint.h>
#include <stdio.h>

/* A rank's error record: the JSON file DT_ERROR_FILE names, which the dtensor runtimes write on
 * the process's first failure (members as comm/boot/failure.h lists them; any program may
 * write one). Members other than these are ignored. */
#define DTRUN_FLIGHT 8

typedef struct dtrun_record {
    int present;
    int failed_rank; /* "failed_rank": whose failure it is (the writer, or a peer it heard of) */
    int origin;      /* "origin": the failure began at the writer, not at a peer */
    int64_t at_ns;   /* "monotonic_ns": CLOCK_MONOTONIC when written */
    char status[48]; /* "status" */
    char message[1024];
    int nflight; /* "flight": the rank's last collectives, oldest first (at most DTRUN_FLIGHT) */
    char flight[DTRUN_FLIGHT][160];
} dtrun_record;

typedef struct dtrun_end {
    int code;        /* exit status, 128 + signal when a signal ended it; 0: success */
    int signal;      /* the signal that ended it, 0 none */
    int signal_ours; /* dtrun had sent it that signal */
    int64_t seen_ns; /* CLOCK_MONOTONIC when dtrun reaped it */
    dtrun_record rec;
} dtrun_end;

/* Why a rank is the root cause, strongest first (dtrun.c's header comment explains each). */
typedef enum dtrun_why {
    DTRUN_NO_FAILURE,
    DTRUN_ORIGIN, /* its record says its failure began there; earliest such record */
    DTRUN_NAMED,  /* the earliest record of a peer's failure names it */
    DTRUN_SIGNAL, /* a signal dtrun did not send ended it; first seen */
    DTRUN_FIRST,  /* it was seen to fail first */
} dtrun_why;

/* Fills *out from a record's text; 0 when it is one (a JSON object with "failed_rank"), else -1
 * (out->present = 0). */
int dtrun_record_parse(const char *text, dtrun_record *out);
/* The same from the file at path; -1 when it is missing or not a record. */
int dtrun_record_read(const char *path, dtrun_record *out);

/* The rank among ends[0..n) whose failure (code != 0) the others followed from, -1 when none
 * failed; *why_out says which rule chose it. Pure: the same ends give the same answer. */
int dtrun_root_cause(const dtrun_end *ends, int n, dtrun_why *why_out);

/* Prints every failed rank to out, the root cause first, then the last collectives of the ranks
 * whose records carry a flight recorder, side by side (the last one is usually where a rank
 * waited when the world failed):
 *   dtrun: root cause: rank 2 was killed by signal 9 (Killed) (<why>)
 *   dtrun: also failed: rank 0 exited with status 3: rank 2 failed (DT_ERR_ABORTED): <message>
 *   dtrun: last collectives (oldest first):
 *   dtrun:   rank 0 | all_reduce #4 (8 x f32, sum) on tp by matmul: 0.021 ms | ...
 * Nothing when root < 0. */
void dtrun_report(FILE *out, const dtrun_end *ends, int n, int root, dtrun_why why);

/* "rank R exited with status C" or "rank R was killed by signal S (name)" into buf. */
void dtrun_describe_end(char *buf, size_t cap, int rank, const dtrun_end *e);

#endif
