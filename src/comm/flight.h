/* A rank's flight recorder: its last DT_FLIGHT_LEN collectives and sends/receives (kind, group,
 * count, dtype, sequence number, start and end, the op that issued them), kept in the context
 * and written into the rank's error record when it fails, so that a launcher can print the
 * ranks' last calls side by side (dtrun does). comm.c records every call; entries still
 * running when the rank failed have no end. */
#ifndef DT_COMM_FLIGHT_H
#define DT_COMM_FLIGHT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm_impl.h"

#define DT_FLIGHT_LEN 16
/* Room for dt_flight_json's array of DT_FLIGHT_LEN entries. */
#define DT_FLIGHT_JSON_MAX 4096

typedef struct dt_flight_entry {
    dt_coll_fp fp;
    int peer;         /* send/recv: the world rank of the other end; -1 for collectives */
    char label[32];   /* the group ("tp", "world") */
    char caller[32];  /* the op (or redistribute) that issued it; "" when called directly */
    double start_us, end_us; /* dt_now_us; end 0: not completed */
} dt_flight_entry;

/* Written without a lock (one slot claimed per call; a rank's calls on one communicator never
 * overlap, and its two threads claim different slots): a reader at a failure may see an entry
 * being rewritten, which costs a garbled line of a report, never a crash (strings are copied
 * bounded and terminated). */
struct dt_flight {
    _Atomic uint64_t n; /* calls recorded so far; the ring holds the last DT_FLIGHT_LEN */
    dt_flight_entry ring[DT_FLIGHT_LEN];
};

/* The op that issues collectives on this thread (dispatch sets it around an op, redistribute
 * around a move; a non-blocking request carries its issuer's to the comm thread). Returns the
 * previous one, to restore. */
extern _Thread_local const char *dt_comm_caller_tls;
static inline const char *dt_comm_caller_swap(const char *name) {
    const char *prev = dt_comm_caller_tls;
    dt_comm_caller_tls = name;
    return prev;
}
static inline const char *dt_comm_caller(void) { return dt_comm_caller_tls; }

/* Where the collectives of this thread come from, for dt_comm_set_observer: the module whose
 * forward (or backward) runs (nn sets it where layers fetch weights and inputs, autograd
 * around each node's backward to the module that recorded it; a registry name, borrowed) and
 * whether a backward runs. A pointer store, so that the hot paths can afford it. */
extern _Thread_local const char *dt_comm_module_tls;
extern _Thread_local int dt_comm_backward_tls;

/* The three together, carried by a non-blocking request to the comm thread. */
typedef struct dt_comm_site {
    const char *caller, *module;
    int backward;
} dt_comm_site;
static inline dt_comm_site dt_comm_site_get(void) {
    return (dt_comm_site){dt_comm_caller_tls, dt_comm_module_tls, dt_comm_backward_tls};
}
static inline dt_comm_site dt_comm_site_swap(dt_comm_site s) {
    dt_comm_site prev = dt_comm_site_get();
    dt_comm_caller_tls = s.caller, dt_comm_module_tls = s.module, dt_comm_backward_tls = s.backward;
    return prev;
}

/* A call begins at comm->issued_us (fp: the collective's, comm->fp; or a send's or receive's,
 * with peer, else peer -1): its entry, whose index is kept in comm->flight_id. */
void dt_flight_begin(dt_comm *comm, const dt_coll_fp *fp, int peer);
/* The call comm->flight_id names completed at now_us. */
void dt_flight_end(dt_comm *comm, double now_us);

/* "all_reduce #12 on tp (1024 x f32, sum) by matmul: 3.2 ms" or "... : running for 8.1 s". */
void dt_flight_entry_str(const dt_flight_entry *e, double now_us, char *buf, size_t cap);
/* The last k entries (oldest first) as a JSON array of such strings into buf (always
 * terminated). */
void dt_flight_json(dt_ctx *ctx, int k, char *buf, size_t cap);

#endif
