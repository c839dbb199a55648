/* Which UCX error handling each endpoint gets, and the transport list that goes with it.
 *
 * UCX 1.13 offers peer-failure handling (UCP_ERR_HANDLING_MODE_PEER) only on transports that
 * can detect a dead peer: with it, ranks on one host talk over TCP loopback instead of shared
 * memory (posix/sysv lack it). Without it (MODE_NONE), a peer that dies while UCX copies from
 * it with CMA (process_vm_readv) makes UCX abort the surviving process. So by default:
 * peers on this host get MODE_NONE over posix/sysv shared memory with CMA left out (measured
 * here: no bandwidth lost at 4 MiB), and the control plane detects their death; peers on other
 * hosts get MODE_PEER (TCP or RDMA, whose failures UCX reports as errors).
 *
 * DT_UCX_CMA=1 keeps CMA: single-copy shared memory, measured here at up to 1.7x the bandwidth
 * of large messages between ranks of one host, at the price that a rank dying mid-transfer can
 * take the ranks copying from it down with it (UCX's fatal error) instead of failing cleanly.
 * DT_UCX_ERR_MODE=peer|none forces one mode for every endpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/ucx/ucx_impl.h"
#include "core/check.h"

dt_status ux_err_mode_read(int *mode_out, int *cma_out) {
    const char *m = getenv("DT_UCX_ERR_MODE");
    if (!m || !*m || !strcmp(m, "auto"))
        *mode_out = UX_ERR_AUTO;
    else if (!strcmp(m, "peer"))
        *mode_out = UX_ERR_PEER;
    else if (!strcmp(m, "none"))
        *mode_out = UX_ERR_NONE;
    else
        return dt_error(DT_ERR_ARG, "environment: DT_UCX_ERR_MODE=\"%s\" is not auto, peer or none",
                        m);
    return dt_boot_env_flag("DT_UCX_CMA", 0, cma_out);
}

/* Appends token to out (comma-separated); 0 when it does not fit. */
static int append(char *out, size_t cap, const char *tok, size_t len) {
    size_t have = strlen(out), need = have + (have ? 1 : 0) + len + 1;
    if (need > cap) return 0;
    if (have) out[have++] = ',';
    memcpy(out + have, tok, len);
    out[have + len] = '\0';
    return 1;
}

int ux_tls_without_cma(const char *user, char *out, size_t cap) {
    out[0] = '\0';
    if (!user || !*user || !strcmp(user, "all")) return snprintf(out, cap, "^cma") < (int)cap;
    if (user[0] == '^') return snprintf(out, cap, "%s,cma", user) < (int)cap;
    for (const char *p = user; *p;) {
        size_t len = strcspn(p, ",");
        if ((len == 2 && !strncmp(p, "sm", 2)) || (len == 3 && !strncmp(p, "shm", 3))) {
            if (!append(out, cap, "posix,sysv", 10)) return 0;
        } else if (!(len == 3 && !strncmp(p, "cma", 3)) && len) {
            if (!append(out, cap, p, len)) return 0;
        }
        p += len + (p[len] == ',');
    }
    return out[0] != '\0';
}
