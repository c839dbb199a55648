/* Framed messages on the control sockets: one write per message, reads bounded by a deadline. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "comm/boot/boot.h"
#include "comm/boot/wire.h"

/* Sends head then body as one buffer (one segment on the wire, so a HELLO arrives whole). */
static int send_joined(int fd, const void *head, size_t hlen, const void *body, size_t blen) {
    char *buf = malloc(hlen + blen);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(buf, head, hlen);
    if (blen) memcpy(buf + hlen, body, blen);
    size_t off = 0, total = hlen + blen;
    while (off < total) {
        ssize_t k = send(fd, buf + off, total - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            free(buf);
            errno = e;
            return -1;
        }
        off += (size_t)k;
    }
    free(buf);
    return 0;
}

int boot_wire_write(int fd, uint32_t type, int rank, int status, const void *payload, size_t len) {
    boot_wire_hdr h = {
        .magic = BOOT_WIRE_MAGIC, .type = type, .rank = rank, .status = status, .len = len};
    return send_joined(fd, &h, sizeof h, payload, len);
}

int boot_wire_write_hello(int fd, int rank, int size, const uint8_t token[DT_BOOT_TOKEN_BYTES],
                          const void *blob, size_t len) {
    boot_wire_hello h = {.hdr = {.magic = BOOT_WIRE_MAGIC,
                                 .type = BOOT_MSG_HELLO,
                                 .rank = rank,
                                 .status = size,
                                 .len = len}};
    memcpy(h.token, token, sizeof h.token);
    return send_joined(fd, &h, sizeof h, blob, len);
}

int boot_wire_read_full(int fd, void *p, size_t len, int64_t deadline) {
    size_t off = 0;
    while (off < len) {
        int ms = -1;
        if (deadline) {
            int64_t left = deadline - dt_boot_now_ns();
            if (left <= 0) return -2;
            ms = (int)(left / 1000000 + 1);
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) continue;
        ssize_t k = recv(fd, (char *)p + off, len - off, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k == 0) errno = 0;
        if (k <= 0) return -1;
        off += (size_t)k;
    }
    return 0;
}

int boot_wire_read(int fd, boot_wire_hdr *hdr, char **payload_out, int64_t deadline_ns) {
    *payload_out = NULL;
    int r = boot_wire_read_full(fd, hdr, sizeof *hdr, deadline_ns);
    if (r) return r;
    if (hdr->magic != BOOT_WIRE_MAGIC || hdr->len > BOOT_WIRE_MAX_PAYLOAD) return -3;
    char *p = malloc(hdr->len + 1);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    r = boot_wire_read_full(fd, p, hdr->len, deadline_ns);
    if (r) {
        free(p);
        return r;
    }
    p[hdr->len] = '\0';
    *payload_out = p;
    return 0;
}
