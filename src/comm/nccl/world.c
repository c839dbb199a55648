/* The NCCL runtime's life cycle: world from the environment, the rendezvous (rank 0's blob
 * carries the world's ncclUniqueId), this rank's GPU, the world communicator, the rank's SPMD
 * function, and a teardown once every rank has returned; plus the control plane's hooks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/boot/run.h"
#include "comm/nccl/nccl_impl.h"
#include "comm/worker.h"
#include "core/check.h"

#define DEFAULT_STARTUP_S 60.0
#define BLOB_LEN          (DT_BOOT_HOST_ID + sizeof(ncclUniqueId))

int dt_nccl_available(void) {
    return 1;
}

static const dt_backend_ops nc_backend = {.name = "nccl", .comm_create = nc_comm_create};

/* --- the control plane's hooks ---------------------------------------------------------- */

static void hook_abort(void *arg, int rank, dt_status st, const char *msg) {
    nc_world_abort(arg, rank, st, msg);
}

static void hook_exited(void *arg, int rank, uint64_t sent_to_me, uint64_t recvd_from_me) {
    (void)sent_to_me; /* NCCL counts no messages: a returned rank has drained its streams */
    (void)recvd_from_me;
    nc_world *w = arg;
    pthread_mutex_lock(&w->mu);
    w->exited_at[rank] = dt_boot_now_ns();
    pthread_mutex_unlock(&w->mu);
}

static int hook_failed(void *arg, int *rank, dt_status *st, char *msg, size_t cap) {
    nc_world *w = arg;
    return dt_failure_get(&w->fail, rank, st, msg, cap);
}

/* --- setup ------------------------------------------------------------------------------ */

static dt_status alloc_world(nc_world **out) {
    nc_world *w = calloc(1, sizeof *w);
    if (!w) return dt_error(DT_ERR_NOMEM, "dt_nccl_run: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->create_mu, NULL);
    pthread_mutex_init(&w->nccl_mu, NULL);
    pthread_mutex_init(&w->ops_mu, NULL);
    pthread_mutex_init(&w->stage_mu, NULL);
    pthread_mutex_init(&w->wd_mu, NULL);
    pthread_cond_init(&w->wd_cv, NULL);
    dt_failure_init(&w->fail);
    w->device = -1;
    *out = w;
    return DT_OK;
}

static dt_status read_config(nc_world *w) {
    DT_CHECK(dt_ucx_env_read(&w->env));
    double startup;
    int64_t timeout_ns;
    DT_CHECK(dt_boot_env_seconds("DT_STARTUP_TIMEOUT_S", DEFAULT_STARTUP_S, &startup));
    DT_CHECK(dt_boot_env_timeout_ns(&timeout_ns));
    const char *b = getenv("DT_NCCL_BLOCKING");
    if (b && *b && strcmp(b, "0") && strcmp(b, "1"))
        return dt_error(DT_ERR_ARG, "environment: DT_NCCL_BLOCKING=\"%s\" is not 0 or 1", b);
    w->blocking = b && !strcmp(b, "1");
    w->startup_timeout_ns = (int64_t)(startup * 1e9);
    if (w->startup_timeout_ns <= 0) w->startup_timeout_ns = 1;
    atomic_store(&w->timeout_ns, timeout_ns);
    w->rank = w->env.rank;
    w->size = w->env.size;
    w->exited_at = calloc((size_t)w->size, sizeof *w->exited_at);
    if (!w->exited_at)
        return dt_error(DT_ERR_NOMEM, "dt_nccl_run: out of memory for %d ranks", w->size);
    return DT_OK;
}

/* The rendezvous: every rank publishes its host id, rank 0 also the world's unique id. Sets
 * *local_out to this rank's index among the ranks of its host. */
static dt_status meet(nc_world *w, int *local_out) {
    char blob[BLOB_LEN];
    dt_boot_host_id(blob);
    size_t len = DT_BOOT_HOST_ID;
    *local_out = 0;
    if (w->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&w->world_id);
        if (r != ncclSuccess)
            return nc_nccl_error(r, NULL, "dt_nccl_run: ncclGetUniqueId", "world", w->size);
        memcpy(blob + DT_BOOT_HOST_ID, &w->world_id, sizeof w->world_id);
        len = BLOB_LEN;
    }
    if (w->size == 1) return DT_OK;
    void **blobs = NULL;
    size_t *lens = NULL;
    int *socks = NULL;
    DT_CHECK(dt_boot_exchange(&w->env, w->startup_timeout_ns, blob, len, &blobs, &lens, &socks));
    dt_status st = DT_OK;
    if (lens[0] != BLOB_LEN)
        st = dt_error(DT_ERR_COMM, "dt_nccl_run: rank 0 published no NCCL unique id (does it run "
                                   "another runtime, dt_ucx_run say?)");
    else
        memcpy(&w->world_id, (char *)blobs[0] + DT_BOOT_HOST_ID, sizeof w->world_id);
    for (int r = 0; r < w->rank; r++)
        if (lens[r] >= DT_BOOT_HOST_ID && !memcmp(blobs[r], blob, DT_BOOT_HOST_ID)) ++*local_out;
    dt_boot_blobs_free(blobs, lens, w->size);
    if (st != DT_OK) {
        for (int r = 0; r < w->size; r++)
            if (socks[r] >= 0) close(socks[r]);
        free(socks);
        return st;
    }
    dt_boot_hooks h = {.entry = "dt_nccl_run",
                       .arg = w,
                       .abort = hook_abort,
                       .exited = hook_exited,
                       .failed = hook_failed};
    return dt_boot_ctl_start(w->rank, w->size, socks, &h, &w->ctl);
}

/* This rank's GPU (LOCAL_RANK, else its place on its host, modulo the GPUs it sees), made the
 * context's compute device; then the events, staging stream and buffers the backend uses. */
static dt_status gpu_setup(nc_world *w, int host_local) {
    int ndev = dt_cuda_device_count();
    if (ndev == 0)
        return dt_error(DT_ERR_DEVICE,
                        "dt_nccl_run: rank %d sees no CUDA device (check "
                        "CUDA_VISIBLE_DEVICES and the driver)",
                        w->rank);
    int local = w->env.local_rank >= 0 ? w->env.local_rank : host_local;
    DT_CHECK(dt_ctx_set_device(&w->ctx, (dt_device){DT_DEVICE_CUDA, local % ndev}));
    w->device = w->ctx.dev.cuda->device;
    const char *what = "dt_nccl_run: setting up the GPU";
    unsigned fl = cudaEventDisableTiming;
    DT_CHECK(dt_cuda_status(cudaEventCreateWithFlags(&w->ready, fl), what));
    DT_CHECK(dt_cuda_status(cudaEventCreateWithFlags(&w->stage_ev, fl), what));
    DT_CHECK(dt_cuda_status(cudaEventCreateWithFlags(&w->stage_done, fl), what));
    DT_CHECK(
        dt_cuda_status(cudaStreamCreateWithFlags(&w->stage_stream, cudaStreamNonBlocking), what));
    for (; w->nevents < NC_RING; w->nevents++)
        DT_CHECK(dt_cuda_status(cudaEventCreateWithFlags(&w->ring[w->nevents].ev, fl), what));
    DT_CHECK(dt_cuda_status(cudaMalloc((void **)&w->barrier_buf, sizeof(int)), what));
    /* On the compute stream, which every collective waits for. */
    return dt_cuda_status(cudaMemsetAsync(w->barrier_buf, 0, sizeof(int), w->ctx.dev.cuda->compute),
                          what);
}

static void gpu_free(nc_world *w) {
    if (w->device < 0) return;
    if (w->stage_stream) {
        cudaStreamSynchronize(w->stage_stream);
        cudaStreamDestroy(w->stage_stream);
    }
    if (w->stage_buf) cudaFree(w->stage_buf);
    for (int i = 0; i < w->nstage_old; i++)
        cudaFree(w->stage_old[i]);
    for (int i = 0; i < w->nevents; i++)
        cudaEventDestroy(w->ring[i].ev);
    if (w->ready) cudaEventDestroy(w->ready);
    if (w->stage_ev) cudaEventDestroy(w->stage_ev);
    if (w->stage_done) cudaEventDestroy(w->stage_done);
    if (w->barrier_buf) cudaFree(w->barrier_buf);
}

/* A first barrier over the world, within the startup timeout: NCCL connects lazily, so a
 * transport that cannot reach a peer fails here, before fn runs. */
static dt_status first_contact(nc_world *w) {
    int64_t t = atomic_load(&w->timeout_ns);
    atomic_store(&w->timeout_ns, w->startup_timeout_ns);
    dt_status st = dt_barrier(w->ctx.world);
    atomic_store(&w->timeout_ns, t);
    if (st != DT_OK)
        dt_error_prefix("dt_nccl_run: first contact over NCCL");
    else
        dt_comm_stats_reset(&w->ctx); /* the user's counters start at fn */
    w->ctx.world->seq = 0;            /* and so do the collectives' numbers (dt_coll_fp) */
    return st;
}

static dt_status setup(nc_world *w, int *ctx_ready) {
    DT_CHECK(read_config(w));
    int host_local = 0;
    DT_CHECK(meet(w, &host_local)); /* before any CUDA call: a rank without a GPU still meets */
    w->ctx = (dt_ctx){.rank = w->rank, .size = w->size, .backend = &nc_backend, .backend_state = w};
    DT_CHECK(dt_ctx_init_common(&w->ctx));
    dt_failure_flight(&w->fail, &w->ctx);
    *ctx_ready = 1;
    DT_CHECK(gpu_setup(w, host_local));
    DT_CHECK(nc_watchdog_start(w));
    int *all = malloc(sizeof(int) * (size_t)w->size);
    if (!all) return dt_error(DT_ERR_NOMEM, "dt_nccl_run: out of memory");
    for (int i = 0; i < w->size; i++)
        all[i] = i;
    uint64_t key[2] = {DT_COMM_KEY(DT_KEY_WORLD, 0), 0};
    dt_status st = nc_comm_make(w, key, all, w->size, &w->world_id, &w->ctx.world);
    free(all);
    if (st != DT_OK) {
        dt_error_prefix("dt_nccl_run: creating the world communicator");
        /* NCCL's own refusals map to DT_ERR_ARG or DT_ERR_SYSTEM (ncclInvalidUsage for two ranks
         * on one GPU, ncclSystemError for an unusable network): dt_nccl_run documents
         * DT_ERR_DEVICE for a world communicator NCCL could not create. */
        return st == DT_ERR_ARG || st == DT_ERR_SYSTEM ? DT_ERR_DEVICE : st;
    }
    snprintf(w->ctx.world->label, sizeof w->ctx.world->label, "world");
    return first_contact(w);
}

/* --- teardown --------------------------------------------------------------------------- */

/* This rank's part is over: its queued communication finishes (so that its return, announced
 * next, means its NCCL work is done), then it waits for every rank to return. */
static void finish(nc_world *w, int *frank, dt_status *fst, char *fmsg, size_t cap) {
    if (w->ctx.world && !dt_failed(&w->fail)) {
        dt_status st = nc_drain(w, NULL, "dt_nccl_run: finishing this rank's queued communication");
        if (st != DT_OK && !dt_failed(&w->fail)) nc_fail(w, st, dt_last_error());
    }
    *frank = -1;
    *fst = DT_OK;
    if (!w->ctl) {
        hook_failed(w, frank, fst, fmsg, cap);
        return;
    }
    uint64_t *zeros = calloc(2 * (size_t)w->size, sizeof *zeros);
    dt_boot_ctl_finish(w->ctl, zeros, frank, fst, fmsg, cap);
    free(zeros);
}

static void free_world(nc_world *w, int ctx_ready) {
    nc_watchdog_stop(w);
    if (w->device >= 0 && w->ctx.dev.cuda) dt_cuda_bind(w->ctx.dev.cuda);
    nc_groups_close(w); /* every rank has returned: finalize together, or abort after a failure */
    if (w->ctx.world) nc_comm_destroy(w->ctx.world);
    w->ctx.world = NULL;
    nc_groups_free(w);
    gpu_free(w);
    dt_failure_flight(&w->fail, NULL);
    if (ctx_ready) dt_ctx_fini_common(&w->ctx); /* also the GPU's streams and handles */
    dt_boot_ctl_stop(w->ctl);
    pthread_mutex_destroy(&w->mu);
    dt_failure_fini(&w->fail);
    pthread_mutex_destroy(&w->create_mu);
    pthread_mutex_destroy(&w->nccl_mu);
    pthread_mutex_destroy(&w->ops_mu);
    pthread_mutex_destroy(&w->stage_mu);
    pthread_mutex_destroy(&w->wd_mu);
    pthread_cond_destroy(&w->wd_cv);
    free(w->exited_at);
    free(w);
}

/* What dt_proc_run's hooks need: the world and whether its context was set up. */
typedef struct run_state {
    nc_world *w;
    int ctx_ready;
} run_state;

static void run_fail(void *p, dt_status st, const char *msg) { nc_fail(((run_state *)p)->w, st, msg); }

static void run_finish(void *p, int *rank, dt_status *st, char *msg, size_t cap) {
    finish(((run_state *)p)->w, rank, st, msg, cap);
}

static void run_teardown(void *p) { free_world(((run_state *)p)->w, ((run_state *)p)->ctx_ready); }

dt_status dt_nccl_run(dt_spmd_fn fn, void *arg) {
    DT_ARG_NOT_NULL(fn);
    run_state r = {0};
    DT_CHECK(alloc_world(&r.w));
    dt_status st = setup(r.w, &r.ctx_ready);
    dt_proc_world pw = {.w = &r, .ctx = &r.w->ctx, .rank = r.w->rank, .size = r.w->size,
                        .fail = run_fail, .teardown = run_teardown,
                        .finish = r.w->ctl || r.w->size == 1 ? run_finish : NULL};
    return dt_proc_run(&pw, st, fn, arg);
}

dt_status dt_nccl_set_timeout(dt_ctx *ctx, double seconds) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG(seconds >= 0 && seconds < 1e9,
           "dt_nccl_set_timeout: argument seconds = %g is not in [0, 1e9)", seconds);
    if (ctx->backend != &nc_backend)
        return dt_error(DT_ERR_UNSUPPORTED,
                        "dt_nccl_set_timeout: the context belongs to the %s runtime, not the "
                        "NCCL one",
                        ctx->backend->name);
    nc_world *w = ctx->backend_state;
    atomic_store(&w->timeout_ns, (int64_t)(seconds * 1e9));
    return DT_OK;
}
