/* ucx_rank_prog's "pids" mode: every rank of a world on one host knows the process ids of all
 * the host's ranks, its own first, as the boot exchange carries them for the waits' estimate of
 * other processes' load (comm/host_load.h), checked against the ids the ranks all_gather here;
 * and the job's CPU time reads from /proc, no less than this process's own. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <dtensor.h>

#include "dt_config.h"

#if DT_HAVE_UCX
#include "comm/ucx/ucx_impl.h"
#include "core/check.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) return dt_error_set(DT_ERR_COMM, __VA_ARGS__);                                \
    } while (0)

dt_status ucx_host_pids(dt_ctx *ctx) {
    const ux_world *w = (const ux_world *)ctx; /* the backend state starts with the context */
    const int n = dt_ctx_size(ctx), self = (int)getpid();
    dt_comm *world;
    DT_CHECK(dt_ctx_world_comm(ctx, &world));
    int64_t mine = self, all[64];
    CHECK(n <= 64, "pids: %d ranks", n);
    DT_CHECK(dt_all_gather(world, &mine, all, 1, DT_I64));
    CHECK(w->nhost_pids == n, "pids: %d ids known for %d ranks on this host", w->nhost_pids, n);
    CHECK(w->host_pids[0] == self, "pids: the first id is %d, this process is %d", w->host_pids[0],
          self);
    for (int r = 0; r < n; r++) {
        int found = 0;
        for (int i = 0; i < w->nhost_pids; i++)
            found += w->host_pids[i] == (int)all[r];
        CHECK(found == 1, "pids: rank %d's process %lld is known %d times", r, (long long)all[r],
              found);
    }
    int64_t job = dt_pids_cpu_ns(w->host_pids, w->nhost_pids), own = dt_pids_cpu_ns(&self, 1);
    CHECK(own >= 0 && job >= own, "pids: the job's CPU time %lld ns, this process's %lld ns",
          (long long)job, (long long)own);
    printf("[ok] pids of %d ranks\n", n);
    return DT_OK;
}
#else
dt_status ucx_host_pids(dt_ctx *ctx) {
    (void)ctx;
    return dt_error_set(DT_ERR_UNSUPPORTED, "pids: built without UCX");
}
#endif
