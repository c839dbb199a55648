#include "helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

void t_run(int n, dt_spmd_fn body, void *arg) {
    dt_status st = dt_local_run(n, body, arg, NULL);
    cr_assert_eq(st, DT_OK, "%d ranks: %s: %s", n, dt_status_str(st), dt_last_error());
}

int t_closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}
