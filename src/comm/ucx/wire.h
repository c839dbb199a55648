/* Framed messages on the rendezvous/control TCP sockets (bootstrap.c, control.c): a fixed
 * header and a payload, written in one piece, read with a deadline. Both ends are the same
 * library build, so fields travel in host byte order. */
#ifndef DT_COMM_UCX_WIRE_H
#define DT_COMM_UCX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define UX_WIRE_MAGIC       0x44540001u /* "DT", protocol version 1 */
#define UX_WIRE_MAX_PAYLOAD (64u << 20)

enum {
    UX_MSG_HELLO = 1, /* rank -> 0: rank, world size (status field), worker address */
    UX_MSG_TABLE,     /* 0 -> rank: every rank's worker address (u64 length + bytes each) */
    UX_MSG_ERR,       /* 0 -> rank: the rendezvous failed; payload = message */
    UX_MSG_FAIL,      /* rank -> 0: this rank failed; status, message */
    UX_MSG_BYE,       /* rank -> 0: returned; u64 sent[size], u64 recvd[size] */
    UX_MSG_ABORT,     /* 0 -> rank: rank failed or died; status, message */
    UX_MSG_EXITED,    /* 0 -> rank: rank returned; u64 sent to you, u64 received from you */
    UX_MSG_DONE,      /* 0 -> rank: every rank returned; first failure (rank -1: none) */
};

typedef struct ux_wire_hdr {
    uint32_t magic, type;
    int32_t rank, status;
    uint64_t len;
} ux_wire_hdr;

/* 0, or -1 with errno set. Never raises SIGPIPE. */
int ux_wire_write(int fd, uint32_t type, int rank, int status, const void *payload, size_t len);
/* Reads one message; *payload_out (NUL-terminated, caller frees; NULL when empty).
 * 0 = a message; -1 = error or end of stream (errno 0 at EOF); -2 = deadline passed
 * (deadline_ns 0 = none); -3 = not our protocol. */
int ux_wire_read(int fd, ux_wire_hdr *hdr, char **payload_out, int64_t deadline_ns);

#endif
