/* The UCX runtime: one process per rank, on one host or many, over UCX (shared memory, CMA,
 * TCP or RDMA, as UCX picks). Rank and world size come from the launcher's environment; the
 * same SPMD function that dt_local_run runs on threads runs here unchanged, with the same
 * collectives, meshes and redistribute.
 *
 * Launch (every process runs the same binary, which calls dt_ucx_run):
 *   dtrun -n 4 ./prog args...                         one host (tools/dtrun.c)
 *   torchrun --nproc-per-node 4 --master-port 29500 --no-python ./prog
 *   torchrun --nnodes 2 --nproc-per-node 4 --master-addr h0 --master-port 29500 --no-python ./prog
 *   export DT_JOB_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')   then:
 *   srun -N 2 --ntasks-per-node 4 env MASTER_ADDR=h0 MASTER_PORT=29500 ./prog
 *   mpirun -np 8 -x MASTER_ADDR=h0 -x MASTER_PORT=29500 -x DT_JOB_TOKEN ./prog
 *
 * Environment read by dt_ucx_run:
 *   rank and size   RANK/WORLD_SIZE (torchrun, dtrun), else OMPI_COMM_WORLD_RANK/_SIZE
 *                   (Open MPI), else PMI_RANK/PMI_SIZE (MPICH), else SLURM_PROCID/SLURM_NTASKS;
 *                   LOCAL_RANK/LOCAL_WORLD_SIZE and their equivalents are read when present.
 *   MASTER_ADDR, MASTER_PORT   where rank 0 listens for the rendezvous (only that address);
 *                   required whenever the world has more than one rank. Under torchrun
 *                   (TORCHELASTIC_USE_AGENT_STORE=True) they name torchrun's own store: rank 0
 *                   listens on a free port and publishes it there for the others.
 *   DT_JOB_TOKEN    the job's secret (at most 128 bytes), the same for every rank: rank 0
 *                   lets in only ranks that show it; any other connection is logged on stderr
 *                   and dropped. dtrun sets a fresh one per run; under torchrun, when unset,
 *                   rank 0 makes one and hands it out through torchrun's store; with srun or
 *                   mpirun set it yourself. Unset, MASTER_ADDR must be a loopback address.
 *   DT_STARTUP_TIMEOUT_S       how long the rendezvous may take (default 60).
 *   DT_TIMEOUT_S               per-operation timeout (default 300; 0 = wait forever).
 *   DT_CHECK_S                 a wait longer than this (default 5; 0 = never) posts where the
 *                              rank waits to rank 0, which fails every rank with DT_ERR_COMM
 *                              when the posted ranks wait on each other across groups ("rank 0
 *                              diverged (ranks wait on each other across groups ...): rank 0 in
 *                              all_gather #1 (8 x f32) on group dp, waiting for rank 2; ...")
 *                              and lets a merely slow peer be (see dtensor/runtime.h).
 *   DT_DEBUG_COLLECTIVES=1     before each collective, the members all_gather its fingerprint
 *                              (number on the communicator, kind, count, dtype, op, root) and
 *                              all fail with DT_ERR_COMM naming both sides when they differ
 *                              ("ranks called different collectives: rank 0 is in all_reduce
 *                              #3 (60 x f32, sum), rank 1 in all_gather #3 (60 x f32)"). One
 *                              small extra exchange per collective; the local runtime always
 *                              checks, at no cost.
 *   DT_UCX_RING_MIN_BYTES      collectives moving at least this many bytes use rings, smaller
 *                              ones direct exchange (default 65536; see "Results" below).
 *   DT_UCX_SHM=0               keep communicators whose members all run on one host on UCP
 *                              messages. Default (1): their collectives run over a shared-
 *                              memory arena the members map (see "Algorithms"); a host where
 *                              shared memory cannot be had (no /dev/shm, full) falls back to
 *                              UCP by itself, without an error.
 *   DT_UCX_CMA=1               also use CMA (single-copy shared memory): up to 1.7x the
 *                              bandwidth of large messages between ranks of one host, but with
 *                              UCX 1.13 a rank that dies while a peer copies from it takes that
 *                              peer down (UCX's fatal error) instead of letting it fail cleanly.
 *                              Off by default: ranks of one host use posix/sysv shared memory.
 *   DT_UCX_ERR_MODE            auto (default): endpoints to ranks on this host without UCX
 *                              error handling (UCX 1.13's shared memory has none; dtensor's
 *                              control plane detects dead peers), to other hosts with it;
 *                              peer or none: the same mode for every endpoint.
 *   DT_UCX_HIER=0              all_reduce flat on every communicator. Default 1: on a
 *                              communicator whose members span hosts, with more than one on
 *                              some host, all_reduce runs hierarchically (each host's members
 *                              all_reduce among themselves, one leader per host all_reduces
 *                              with the other leaders, each leader broadcasts to its host), so
 *                              only the leaders' ring crosses hosts.
 *   UCX_TLS, UCX_NET_DEVICES, ...  are UCX's own (e.g. UCX_TLS=sm or UCX_TLS=tcp).
 *
 * MASTER_ADDR must resolve, on rank 0's host, to an address the other ranks can reach: rank 0
 * listens there only (a host name that /etc/hosts maps to 127.0.1.1 is reachable from that
 * host alone). The rendezvous sockets stay open as a control plane through rank 0: that is
 * how a rank's failure, return or death reaches the others, whatever transport UCX uses.
 *
 * Faults: a collective that cannot complete fails, never hangs and never returns partial
 * results as success. A rank whose SPMD function returns an error, whose collective fails
 * (timeout, lost connection, mismatched counts) or whose process dies makes every pending and
 * later collective on every rank fail with DT_ERR_ABORTED naming it. A rank that returns
 * DT_OK early makes the collectives that wait for it fail with DT_ERR_PEER_EXITED. After a
 * failure the world is unusable (as an NCCL communicator after an error): return and let
 * dt_ucx_run tear down. A transfer UCX could not cancel may still land in a failed
 * collective's receive buffer until dt_ucx_run returns.
 *
 * Results: reductions use the same arithmetic as the local runtime (dt_reduce_n). Over shared
 * memory (members on one host), and on groups of one or two ranks, and below DT_UCX_RING_MIN_BYTES (bytes of the whole vector), each element
 * is reduced once, in group-rank order, so results are bitwise identical to the local
 * runtime's; setting DT_UCX_RING_MIN_BYTES above every message size makes that hold always,
 * at the cost of more memory (direct exchange holds n-1 incoming blocks). Ring reductions (at
 * or above it, on groups of three or more) fold each block along the ring starting after its
 * owner, and bf16/f16 partials are rounded once per hop: integer results stay identical to
 * the local runtime's; floating-point sums, averages and products may differ in the last bits
 * (max/min only in the sign of zeros). Within one run every rank always gets bitwise
 * identical results: each block is reduced by one rank and then copied.
 * A hierarchical all_reduce (DT_UCX_HIER) sums each host's members first, then the hosts'
 * sums: integer results are unchanged, floating-point ones are not bitwise the flat order's.
 *
 * Algorithms: all_gather and broadcast (scatter + all_gather) by ring, reduce_scatter by ring,
 * all_reduce = reduce_scatter + all_gather, all_to_all by pairwise exchange; below the
 * threshold, direct exchange (one round: all_reduce, all_gather, reduce_scatter, all_to_all)
 * or a binomial tree (broadcast) and a dissemination barrier. Communicators whose members all
 * run on one host (host name and boot id alike) use none of these: each such group maps a
 * POSIX shared-memory arena (a slot of 4 chunks of 512 KiB per member, unlinked as soon as
 * every member mapped it) and runs the local runtime's direct algorithms through it, in
 * chunk-sized rounds that every member publishes with a flag and acknowledges: all_gather,
 * reduce_scatter (each member reduces its block from all n in group-rank order), all_reduce
 * (reduce_scatter + all_gather), all_to_all, broadcast and barrier, whatever the size, and
 * redistribute's box exchanges (S(i) -> S(j), P -> S(j > 0)), packed straight into the arena
 * and unpacked straight out of it. Members compare fingerprints and counts in the first
 * round, so mismatched collectives fail as on the local runtime (DT_ERR_COMM naming both
 * sides) without DT_DEBUG_COLLECTIVES. A wait on the arena spins briefly, yields for up to
 * 1 ms while every rank of the host has a core, then sleeps on the flag's futex, looking at
 * failures and the deadline every 2 ms. dt_comm_stats.shm_calls counts them. */
#ifndef DTENSOR_UCX_H
#define DTENSOR_UCX_H

#include "dtensor/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build of the library has the UCX runtime, else 0. */
DT_API int dt_ucx_available(void);

/* The world as the launcher's environment describes it. */
typedef struct dt_ucx_env {
    int rank, size;             /* this process's rank and the world size */
    int local_rank, local_size; /* on this host; -1 when the launcher does not say */
    char master_addr[256];      /* "" when MASTER_ADDR is not set */
    int master_port;            /* 0 when MASTER_PORT is not set */
    const char *source;         /* "torchrun", "openmpi", "pmi" or "slurm" (static string) */
} dt_ucx_env;

/* Reads and checks the environment (no network, works in every build). Missing or malformed
 * variables are DT_ERR_ARG naming them, e.g. "RANK is set but WORLD_SIZE is not". */
DT_API dt_status dt_ucx_env_read(dt_ucx_env *out);

/* Runs fn on this process's rank: reads the world from the environment, meets the other
 * ranks at MASTER_ADDR:MASTER_PORT (rank 0 listens there, the others connect; each sends its
 * UCX worker address and receives everyone's), connects to every peer, runs fn, then waits
 * until every rank has returned and tears down. Collective over the world; blocks.
 * Returns fn's status when it failed (dt_last_error() reads "rank R: <its message>");
 * otherwise DT_OK when every rank returned DT_OK, else the status of the first rank to fail
 * with "rank R: <that rank's message>". A rendezvous that does not complete within
 * DT_STARTUP_TIMEOUT_S fails with DT_ERR_COMM naming the address and the missing ranks.
 * Without UCX in the build: DT_ERR_UNSUPPORTED. */
DT_API dt_status dt_ucx_run(dt_spmd_fn fn, void *arg);

/* Sets this rank's per-operation timeout (seconds; 0 = wait forever), overriding
 * DT_TIMEOUT_S. A collective or send/recv that does not complete in time fails with
 * DT_ERR_ABORTED naming the rank it was waiting for. Not collective: set it alike on every
 * rank. DT_ERR_UNSUPPORTED for contexts of other runtimes. */
DT_API dt_status dt_ucx_set_timeout(dt_ctx *ctx, double seconds);

#ifdef __cplusplus
}
#endif
#endif
