/* What tools/torch_trace.c (one rank's events, lanes, output) and tools/torch_trace_comm.c
 * (collectives: kinds, sizes, groups, issue/run matching) share. Internal to the converter. */
#ifndef DT_TORCH_TRACE_IMPL_H
#define DT_TORCH_TRACE_IMPL_H

#include <jansson.h>
#include <stddef.h>

/* One complete ("X") event of the torch trace; strings and args borrowed from the parsed JSON. */
typedef struct tt_ev {
    const char *name;
    double ts, dur;
    long long tid;
    json_t *args;       /* may be NULL */
    int parent;         /* enclosing cpu_op on the main thread, -1 at top level */
    int top;            /* its top-level ancestor (itself at top level) */
    int work_below;     /* a descendant does work (so this one is not a kernel) */
    int comm_below;     /* a descendant is a c10d:: op (so this one is not the issue) */
    int is_issue;       /* the call that issued a collective on this rank's thread */
    json_t *out_args;   /* args of its op event (top level only) */
    int out_id;         /* id of its op event (top level only) */
    const char *module; /* module text (owned by the rank's module strings) */
} tt_ev;

/* A collective, from its issue on the rank's thread and/or its run on a backend thread. */
typedef struct tt_coll {
    int issue;        /* index into the main-thread events, -1 if only its run was recorded */
    int run;          /* index into the rank's run events (gloo:*), -1 if none */
    const char *kind; /* dtensor's name: all_reduce, all_gather, ... */
    long long bytes_in, bytes_out;
    long long out_elems; /* elements of its output (what a wait_tensor on it names) */
    int dtype_known;
    const char *group;
    int group_size;
    int seq;
    int id;         /* its event's id */
    double ts, dur; /* the run's span, else the issue's */
    double order;   /* when this rank issued it */
    int lane;
} tt_coll;

typedef struct tt_rank {
    const char *path;
    json_t *root;
    int rank;
    const char *backend;
    const char *pg_label; /* the only process group's description, when there is one */
    int pg_size;
    long long main_tid;
    tt_ev *ops; /* main-thread cpu_op events, by start */
    size_t nops;
    tt_ev *frames; /* main-thread "nn.Module: X" python frames, by start */
    size_t nframes;
    tt_ev *steps; /* ProfilerStep#N spans */
    size_t nsteps;
    tt_ev *runs; /* collectives run by the backend ("gloo:*" on any thread), by start */
    size_t nruns;
    tt_coll *colls;
    size_t ncolls;
    int rpc; /* the trace has record_param_comms events (NCCL-style metadata) */
    char **strings;
    size_t nstrings;
} tt_rank;

/* Sets the message (prefixed with the file) and returns -1. */
int tt_fail(char *err, size_t errcap, const char *path, const char *fmt, ...);

/* Collectives of one rank: finds issues and runs, matches them, sizes them and numbers them per
 * group (seq). Fills r->colls; returns 0 or -1 with err set. */
int tt_collect_collectives(tt_rank *r, char *err, size_t errcap);

/* Elements of a recorded shape: a shape [d0, d1, ...] or a list (of lists) of shapes. */
long long tt_numel(const json_t *dims);

/* Bytes per element of a dtype as the profiler writes it ("float", "c10::BFloat16", "Float"),
 * 0 when unknown. */
int tt_dtype_size(const char *t);

#endif
