/* The shared-memory arena of a UCX group whose members all run on this host (as NCCL's shm
 * transport): one slot per member of SHM_CHUNKS chunks, each chunk a header and SHM_CHUNK
 * bytes of data. A collective runs as a series of rounds; round k uses chunk k % SHM_CHUNKS of
 * every slot. In a round every member writes its chunk (perhaps nothing), publishes it by
 * storing k in its posted flag (release), then reads what it needs from its peers' chunks and
 * stores k in its done flag. A member writes round k only once every peer's done flag says
 * k - SHM_CHUNKS, so a message of any size streams through a fixed arena. The chunk header of
 * a collective's first round carries the member's fingerprint and counts, which every member
 * compares; a round's header says whether its writer has more to send, so all members see
 * the same number of rounds whatever their own counts. Waits spin briefly, then sleep on the
 * flag's word with a process-shared futex (short timeouts), checking the world's failure
 * state and the operation's deadline between sleeps. */
#ifndef DT_COMM_UCX_SHM_H
#define DT_COMM_UCX_SHM_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/ucx/ucx_impl.h"

#define SHM_CHUNKS 4
#define SHM_CHUNK  ((size_t)512 << 10)

/* One flag: a round number (64 bits, its low 32 the futex word) and how many wait on it. */
typedef struct shm_flag {
    _Alignas(64) _Atomic uint64_t v;
    _Atomic uint32_t sleepers;
} shm_flag;

typedef struct shm_ctl {
    shm_flag posted, done;
} shm_ctl;

/* The head of a chunk. counts: n entries after it (the collective's counts on its first
 * round; all_to_allv: the elements its writer sends each member). */
typedef struct shm_hdr {
    int64_t fp[6]; /* dt_coll_fp, field by field */
    uint64_t round;
    uint32_t more; /* its writer has more rounds to send */
    uint32_t kind; /* which shm algorithm wrote it */
    uint64_t counts[];
} shm_hdr;

struct ux_shm {
    char *base;
    size_t bytes;
    int n, me;
    size_t hdr_bytes;   /* shm_hdr with n counts, rounded up to 64 */
    size_t chunk_bytes; /* hdr_bytes + SHM_CHUNK */
    shm_ctl *ctl;       /* n of them */
    char *slots;        /* n * SHM_CHUNKS chunks */
    uint64_t round;     /* the last round this member ran */
};

/* One collective over the arena: its operation (deadline, status, what) and round state. */
typedef struct shm_op {
    ux_op *op;
    ux_shm *s;
    uint64_t first; /* its first round */
    int any_more;   /* some member has more to send after the current round */
} shm_op;

/* Chunk of member m for round k. */
static inline shm_hdr *shm_chunk(const ux_shm *s, int m, uint64_t k) {
    return (shm_hdr *)(s->slots +
                       ((size_t)m * SHM_CHUNKS + (size_t)(k % SHM_CHUNKS)) * s->chunk_bytes);
}
static inline char *shm_data(const ux_shm *s, shm_hdr *h) {
    return (char *)h + s->hdr_bytes;
}

/* shm.c: the round protocol. shm_begin waits until this member may write the next round
 * and returns its chunk; shm_post publishes it (more: the writer has more after it); shm_peer
 * waits for member m's chunk of the round and checks its header; shm_end marks the round
 * read by this member and says whether another round follows. Each returns op->st. */
void shm_start(shm_op *so, ux_op *op, ux_shm *s);
dt_status shm_begin(shm_op *so, shm_hdr **out);
void shm_post(shm_op *so, shm_hdr *h, int kind, int more, const size_t *counts);
dt_status shm_peer(shm_op *so, int m, shm_hdr **out);
int shm_end(shm_op *so);

#endif
