/* Framed messages on the rendezvous/control TCP sockets (bootstrap.c, control.c): a fixed
 * header and a payload, written in one piece, read with a deadline. Both ends are the same
 * library build, so fields travel in host byte order. */
#ifndef DT_COMM_BOOT_WIRE_H
#define DT_COMM_BOOT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/boot/boot.h" /* DT_BOOT_TOKEN_BYTES */

#define BOOT_WIRE_MAGIC       0x44540004u /* "DT", protocol version 4 */
#define BOOT_WIRE_MAX_PAYLOAD (64u << 20)
/* Largest blob a HELLO may carry (a UCX worker address is a few KiB, an NCCL id 128 bytes). */
#define BOOT_WIRE_MAX_BLOB (256u << 10)

enum {
    BOOT_MSG_HELLO = 1, /* rank -> 0: a boot_wire_hello, then the rank's blob (len bytes) */
    BOOT_MSG_TABLE,     /* 0 -> rank: every rank's blob (u64 length + bytes each) */
    BOOT_MSG_ERR,       /* 0 -> rank: the rendezvous failed; payload = message */
    BOOT_MSG_FAIL,      /* rank -> 0: this rank failed; status, message */
    BOOT_MSG_BYE,       /* rank -> 0: returned; u64 sent[size], u64 recvd[size] */
    BOOT_MSG_ABORT,     /* 0 -> rank: rank failed or died; status, message */
    BOOT_MSG_EXITED,    /* 0 -> rank: rank returned; u64 sent to you, u64 received from you */
    BOOT_MSG_DONE,      /* 0 -> rank: every rank returned; first failure (rank -1: none) */
    BOOT_MSG_PUT,       /* rank -> 0: store; readers (status field), u32 klen, key, value */
    BOOT_MSG_GET,       /* rank -> 0: look up; key */
    BOOT_MSG_VALUE,     /* 0 -> rank: the answer to a GET; u32 klen, key, value */
    BOOT_MSG_POS,       /* rank -> 0: where it waits (a dt_pos); empty: it waits no more */
};

typedef struct boot_wire_hdr {
    uint32_t magic, type;
    int32_t rank, status;
    uint64_t len;
} boot_wire_hdr;

/* The first message on a connection to rank 0, read in full before rank 0 allocates or answers
 * anything: the header (type HELLO, rank, world size in status, len = the blob's length) and
 * the job's token (DT_JOB_TOKEN, zero-padded; all zero when the job has none). */
typedef struct boot_wire_hello {
    boot_wire_hdr hdr;
    uint8_t token[DT_BOOT_TOKEN_BYTES];
} boot_wire_hello;

/* 0, or -1 with errno set. Never raises SIGPIPE. */
int boot_wire_write(int fd, uint32_t type, int rank, int status, const void *payload, size_t len);
/* Sends a HELLO and its blob in one write; 0 or -1 (errno). */
int boot_wire_write_hello(int fd, int rank, int size, const uint8_t token[DT_BOOT_TOKEN_BYTES],
                          const void *blob, size_t len);
/* Reads exactly len bytes: 0, -1 (errno; 0 at end of stream) or -2 (deadline_ns passed; 0 =
 * none). */
int boot_wire_read_full(int fd, void *p, size_t len, int64_t deadline_ns);
/* Reads one message; *payload_out (NUL-terminated, caller frees; NULL when empty).
 * 0 = a message; -1 = error or end of stream (errno 0 at EOF); -2 = deadline passed
 * (deadline_ns 0 = none); -3 = not our protocol. */
int boot_wire_read(int fd, boot_wire_hdr *hdr, char **payload_out, int64_t deadline_ns);

#endif
