/* Ranks that wait on each other across groups. A rank blocked in a collective (or a send or
 * receive) longer than the check interval (DT_CHECK_S, default 5 s) publishes where it waits
 * on a board every rank can read: shared memory on the local runtime, rank 0's control plane on
 * the one-process-per-rank runtimes. A rank not on the board is running (or only just began
 * to wait): it may still arrive, so a wait on it is a slow peer and goes on. Ranks on the
 * board whose every missing member is itself on the board, waiting elsewhere, in a set that
 * nothing outside it can release, never proceed: the check fails every rank at once, naming
 * the rank(s) the others wait for and every position, long before DT_TIMEOUT_S. */
#ifndef DT_COMM_STUCK_H
#define DT_COMM_STUCK_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm_impl.h"

/* Worlds larger than this are not checked (the member set is a bit mask). */
#define DT_POS_WORLD_MAX 512
/* The check interval when DT_CHECK_S is unset; 0 there turns the check off. */
#define DT_CHECK_DEFAULT_S 5.0
/* A verdict holds only when it is the same (same message: no rank it names moved) this long
 * after it was first reached (at most half the interval). */
#define DT_CHECK_CONFIRM_NS 500000000LL
/* A waiting rank looks again this often once its first look found nothing (at most the
 * interval). */
#define DT_CHECK_AGAIN_NS 1000000000LL

typedef struct dt_pos {
    int32_t rank;  /* world rank */
    int32_t peer;  /* send/recv: the world rank of the other end; -1 in a collective */
    uint64_t gid;  /* the group: its key and members (dt_comm.gid) */
    dt_coll_fp fp; /* the collective (seq 0 for send/recv) */
    char what[24]; /* "dt_all_reduce", "dt_recv" */
    char label[32];
    char caller[32];
    uint64_t members[DT_POS_WORLD_MAX / 64]; /* one bit per world rank of the group */
} dt_pos;

/* The position of c's rank in call `what` on c, issued by op caller (nullable; peer: the world
 * rank of a send's or receive's other end, else -1). */
void dt_pos_fill(dt_pos *p, const dt_comm *c, const char *what, int peer, const char *caller);
/* The check interval in nanoseconds (DT_CHECK_S; 0: off, also for worlds above
 * DT_POS_WORLD_MAX). */
dt_status dt_check_interval_ns(int world, int64_t *ns_out);

/* board[r]: rank r's position when it has waited there for at least one check interval, NULL
 * when it is not waiting. 1 when some of those ranks can never proceed: msg names the rank(s)
 * the others wait for most (the diverging ones) and the positions; *blamed = the lowest of
 * them. 0 when every wait may still end. Pure. */
int dt_pos_verdict(const dt_pos *const *board, int n, char *msg, size_t cap, int *blamed);

/* A board of positions (rank 0's, for the one-process-per-rank runtimes), and its judge: a
 * verdict counts once it is the same DT_CHECK_CONFIRM_NS after it was first reached. */
typedef struct dt_board {
    int n, count;
    dt_pos *pos;
    unsigned char *on;
    char verdict[512];
    int64_t verdict_ns;
} dt_board;
/* DT_OK, or DT_ERR_NOMEM; a world above DT_POS_WORLD_MAX gets an empty board (no check). */
dt_status dt_board_init(dt_board *b, int n);
void dt_board_fini(dt_board *b);
/* Rank r's position (NULL: it waits no more). */
void dt_board_set(dt_board *b, int r, const dt_pos *p);
/* At now_ns: 1 when a verdict holds (msg, up to sizeof b->verdict, and *blamed set). */
int dt_board_judge(dt_board *b, int64_t now_ns, char *msg, int *blamed);

#endif
