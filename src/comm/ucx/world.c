/* The UCX runtime's life cycle: world from the environment, UCP context and worker, the
 * rendezvous, endpoints to every peer, the rank's SPMD function, and an orderly teardown once
 * every rank has returned. Also the failure state that operations poll, and what ties it to
 * the control plane (comm/boot). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/boot/run.h"
#include "comm/ucx/ucx_impl.h"
#include "comm/worker.h"
#include "core/alloc.h"
#include "core/check.h"
#include "core/pool.h"
#include "core/spin.h"

#define DEFAULT_STARTUP_S 60.0
#define DEFAULT_RING_MIN  (64u << 10)
#define CLOSE_NS          5000000000LL

/* The boot blob: the host id, then the process id (int32), then the worker address. */
#define ADDR_AT (UX_HOST_ID + 4)

/* Other processes' use of the cores is measured over windows this long: the host's ranks' CPU
 * times come from /proc/<pid>/stat in 10 ms ticks each, so rounding stays under the quarter of
 * a core that counts (comm/host_load.h). */
#define HOST_LOAD_WINDOW_NS 500000000LL

/* dt_ours_fn: the CPU time of this host's ranks. */
static int64_t host_cpu_ns(void *arg) {
    const ux_world *w = arg;
    return dt_pids_cpu_ns(w->host_pids, w->nhost_pids);
}

typedef struct ep_arg {
    ux_world *w;
    int rank;
} ep_arg;

int dt_ucx_available(void) {
    return 1;
}

/* Wakes an operation asleep on the worker's event fd, to look at the failure state. */
static void wake_waiters(ux_world *w) {
    if (w->efd >= 0) ucp_worker_signal(w->worker);
}

void ux_world_abort(ux_world *w, int rank, dt_status st, const char *msg) {
    dt_failure_record(&w->fail, w->rank, rank, st, msg);
    atomic_fetch_add(&w->events, 1);
    wake_waiters(w);
}

void ux_world_exited(ux_world *w, int r, uint64_t sent_to_me, uint64_t recvd_from_me) {
    pthread_mutex_lock(&w->mu);
    w->exited[r] = 1;
    w->exit_sent[r] = sent_to_me;
    w->exit_recvd[r] = recvd_from_me;
    pthread_mutex_unlock(&w->mu);
    atomic_fetch_add(&w->events, 1);
    wake_waiters(w);
}

/* --- the control plane's hooks, and the calls world.c and progress.c make into it --- */

static void hook_abort(void *arg, int rank, dt_status st, const char *msg) {
    ux_world_abort(arg, rank, st, msg);
}

static void hook_exited(void *arg, int rank, uint64_t sent_to_me, uint64_t recvd_from_me) {
    ux_world_exited(arg, rank, sent_to_me, recvd_from_me);
}

static int hook_failed(void *arg, int *rank, dt_status *st, char *msg, size_t cap) {
    ux_world *w = arg;
    return dt_failure_get(&w->fail, rank, st, msg, cap);
}

dt_status ux_ctl_start(ux_world *w, int *socks) {
    dt_boot_hooks h = {.entry = "dt_ucx_run",
                       .arg = w,
                       .abort = hook_abort,
                       .exited = hook_exited,
                       .failed = hook_failed};
    return dt_boot_ctl_start(w->rank, w->size, socks, &h, &w->ctl);
}

void ux_ctl_fail(ux_world *w, dt_status st, const char *msg) {
    ux_world_abort(w, w->rank, st, msg);
    dt_boot_ctl_fail(w->ctl, st, msg);
}

void ux_ctl_finish(ux_world *w, int *rank_out, dt_status *st_out, char *msg, size_t cap) {
    *rank_out = -1;
    *st_out = DT_OK;
    if (!w->ctl) {
        if (!hook_failed(w, rank_out, st_out, msg, cap)) *rank_out = -1;
        return;
    }
    int n = w->size;
    uint64_t *v = malloc(sizeof *v * 2 * (size_t)n);
    for (int q = 0; v && q < n; q++) {
        v[q] = atomic_load(&w->sent[q]);
        v[n + q] = atomic_load(&w->recvd[q]);
    }
    dt_boot_ctl_finish(w->ctl, v, rank_out, st_out, msg, cap);
    free(v);
}

void ux_ctl_stop(ux_world *w) {
    dt_boot_ctl_stop(w->ctl);
    w->ctl = NULL;
}

/* UCX reports a broken endpoint; the requests on it fail on their own, so only note it. */
static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
    (void)ep;
    ep_arg *a = arg;
    if (atomic_load(&a->w->closing)) return;
    atomic_store(&a->w->ep_error[a->rank], (int)status);
    atomic_fetch_add(&a->w->events, 1);
}

static const dt_backend_ops ux_backend = {.name = "ucx", .comm_create = ux_comm_create};

static dt_status alloc_world(ux_world **out) {
    ux_world *w = calloc(1, sizeof *w);
    if (!w) return dt_error(DT_ERR_NOMEM, "dt_ucx_run: out of memory");
    w->efd = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->groups_mu, NULL);
    dt_failure_init(&w->fail);
    *out = w;
    return DT_OK;
}

static dt_status read_config(ux_world *w) {
    DT_CHECK(dt_ucx_env_read(&w->env));
    double startup;
    int64_t timeout_ns;
    DT_CHECK(dt_boot_env_seconds("DT_STARTUP_TIMEOUT_S", DEFAULT_STARTUP_S, &startup));
    DT_CHECK(dt_boot_env_timeout_ns(&timeout_ns));
    DT_CHECK(dt_boot_env_bytes("DT_UCX_RING_MIN_BYTES", DEFAULT_RING_MIN, &w->ring_min_bytes));
    DT_CHECK(ux_err_mode_read(&w->err_mode, &w->cma));
    DT_CHECK(dt_boot_env_flag("DT_UCX_SHM", 1, &w->shm_on));
    DT_CHECK(dt_boot_env_flag("DT_UCX_HIER", 1, &w->hier));
    w->startup_timeout_ns = (int64_t)(startup * 1e9);
    if (w->startup_timeout_ns <= 0) w->startup_timeout_ns = 1;
    atomic_store(&w->timeout_ns, timeout_ns);
    w->rank = w->env.rank;
    w->size = w->env.size;
    size_t n = (size_t)w->size;
    w->eps = calloc(n, sizeof *w->eps);
    w->ep_error = calloc(n, sizeof *w->ep_error);
    w->exited = calloc(n, 1);
    w->exit_sent = calloc(n, sizeof *w->exit_sent);
    w->exit_recvd = calloc(n, sizeof *w->exit_recvd);
    w->sent = calloc(n, sizeof *w->sent);
    w->recvd = calloc(n, sizeof *w->recvd);
    w->host = calloc(n, sizeof *w->host);
    w->host_pids = calloc(n, sizeof *w->host_pids);
    if (w->host_pids) w->host_pids[0] = (int)getpid(), w->nhost_pids = 1;
    dt_host_load_init(&w->load, HOST_LOAD_WINDOW_NS, host_cpu_ns, w);
    if (!w->host || !w->host_pids || !w->eps || !w->ep_error || !w->exited || !w->exit_sent ||
        !w->exit_recvd || !w->sent || !w->recvd)
        return dt_error(DT_ERR_NOMEM, "dt_ucx_run: out of memory for %d ranks", w->size);
    return DT_OK;
}

static dt_status ucx_error(const char *what, ucs_status_t us) {
    return dt_error(DT_ERR_COMM, "dt_ucx_run: %s failed: UCX: %s", what, ucs_status_string(us));
}

static dt_status ucx_init(ux_world *w) {
    ucp_config_t *cfg;
    ucs_status_t us = ucp_config_read(NULL, NULL, &cfg);
    if (us != UCS_OK) return ucx_error("ucp_config_read (check the UCX_* variables)", us);
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
                      .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
                      .estimated_num_eps = (size_t)w->size};
    if (w->env.local_size > 0) {
        p.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_PPN;
        p.estimated_num_ppn = (size_t)w->env.local_size;
    }
    char tls[256]; /* see policy.c: no CMA */
    if (!w->cma && ux_tls_without_cma(getenv("UCX_TLS"), tls, sizeof tls))
        ucp_config_modify(cfg, "TLS", tls);
    us = ucp_init(&p, cfg, &w->ucp);
    ucp_config_release(cfg);
    if (us != UCS_OK) return ucx_error("ucp_init", us);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_MULTI};
    us = ucp_worker_create(w->ucp, &wp, &w->worker);
    if (us != UCS_OK) return ucx_error("ucp_worker_create", us);
    ucp_worker_attr_t attr = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
    us = ucp_worker_query(w->worker, &attr);
    if (us != UCS_OK) return ucx_error("ucp_worker_query", us);
    if (attr.thread_mode != UCS_THREAD_MODE_MULTI)
        return dt_error(DT_ERR_UNSUPPORTED, "dt_ucx_run: this UCX was built without "
                                            "multi-thread support (configure --enable-mt)");
    /* Waits sleep on it (progress.c); without one they back off instead. */
    if (ucp_worker_get_efd(w->worker, &w->efd) != UCS_OK) w->efd = -1;
    return DT_OK;
}

/* One endpoint to rank r, with the error handling policy.c picks for where r runs. */
static dt_status make_ep(ux_world *w, int r, const void *addr, int same_host, ep_arg *arg) {
    *arg = (ep_arg){.w = w, .rank = r};
    int peer = w->err_mode == UX_ERR_PEER || (w->err_mode == UX_ERR_AUTO && !same_host);
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_NONE,
    };
    ucs_status_t us = UCS_ERR_UNREACHABLE;
    if (peer) {
        ucp_ep_params_t pe = ep;
        pe.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        pe.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        pe.err_handler = (ucp_err_handler_t){.cb = ep_error, .arg = arg};
        us = ucp_ep_create(w->worker, &pe, &w->eps[r]);
    }
    if (us == UCS_ERR_UNREACHABLE) {
        us = ucp_ep_create(w->worker, &ep, &w->eps[r]);
        /* No transport to the other host detects a dead peer (e.g. a network device that was
         * down, so that UCX took shared memory): the control plane still does, but say so. */
        if (us == UCS_OK && peer && !same_host)
            fprintf(stderr,
                    "dtensor: rank %d reaches rank %d on another host only without UCX's "
                    "peer-failure handling (UCX_TLS=%s); its death is still seen by the "
                    "control connection\n",
                    w->rank, r, getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)");
    }
    if (us != UCS_OK)
        return dt_error(DT_ERR_COMM,
                        "dt_ucx_run: rank %d cannot make a UCX endpoint to rank %d "
                        "(%s): %s (do the ranks share a transport? UCX_TLS=%s)",
                        w->rank, r, same_host ? "same host" : "another host", ucs_status_string(us),
                        getenv("UCX_TLS") ? getenv("UCX_TLS") : "(unset)");
    return DT_OK;
}

static dt_status connect_peers(ux_world *w, ep_arg **args_out) {
    ucp_address_t *addr;
    size_t len;
    ucs_status_t us = ucp_worker_get_address(w->worker, &addr, &len);
    if (us != UCS_OK) return ucx_error("ucp_worker_get_address", us);
    /* What every rank publishes: its host id, its process id, then its worker address. */
    char *blob = malloc(ADDR_AT + len);
    if (!blob) {
        ucp_worker_release_address(w->worker, addr);
        return dt_error(DT_ERR_NOMEM, "dt_ucx_run: out of memory");
    }
    dt_boot_host_id(blob);
    int32_t pid = (int32_t)getpid();
    memcpy(blob + UX_HOST_ID, &pid, sizeof pid);
    memcpy(blob + ADDR_AT, addr, len);
    ucp_worker_release_address(w->worker, addr);
    void **addrs = NULL;
    size_t *lens = NULL;
    int *socks = NULL;
    dt_status st = dt_boot_exchange(&w->env, w->startup_timeout_ns, blob, ADDR_AT + len, &addrs,
                                    &lens, &socks);
    DT_CHECK_GOTO(st, st, out);
    ep_arg *args = calloc((size_t)w->size, sizeof *args);
    *args_out = args;
    if (!args) st = dt_error(DT_ERR_NOMEM, "dt_ucx_run: out of memory");
    for (int r = 0; r < w->size; r++) { /* the lowest rank with r's host id */
        w->host[r] = r;
        const char *id = r == w->rank ? blob : lens[r] >= UX_HOST_ID ? addrs[r] : NULL;
        for (int q = 0; id && q < r; q++) {
            const char *iq = q == w->rank ? blob : lens[q] >= UX_HOST_ID ? addrs[q] : NULL;
            if (iq && !memcmp(iq, id, UX_HOST_ID)) {
                w->host[r] = q;
                break;
            }
        }
    }
    int on_host = 0;
    for (int r = 0; r < w->size; r++) {
        if (w->host[r] != w->host[w->rank]) continue;
        on_host++;
        if (r == w->rank || lens[r] <= ADDR_AT) continue; /* this rank's own pid is first */
        memcpy(&pid, (char *)addrs[r] + UX_HOST_ID, sizeof pid);
        w->host_pids[w->nhost_pids++] = pid;
    }
    w->fits = on_host <= dt_usable_cores();
    /* The processes of this host share its cores for their kernels' intra-op threads. */
    if (st == DT_OK && dt_pool_set_threads(dt_pool_share(on_host)) != DT_OK)
        dt_error(DT_OK, "%s", ""); /* fewer threads change no result */
    for (int r = 0; r < w->size && st == DT_OK; r++) {
        if (r == w->rank) continue;
        if (lens[r] <= ADDR_AT) {
            st = dt_error(DT_ERR_COMM, "dt_ucx_run: rank %d published no UCX address", r);
            break;
        }
        int same = memcmp(addrs[r], blob, UX_HOST_ID) == 0;
        st = make_ep(w, r, (char *)addrs[r] + ADDR_AT, same, &args[r]);
    }
    dt_boot_blobs_free(addrs, lens, w->size);
    if (st != DT_OK) {
        for (int r = 0; r < w->size; r++)
            if (socks[r] >= 0) close(socks[r]);
        free(socks);
        goto out;
    }
    st = ux_ctl_start(w, socks);
out:
    free(blob);
    return st;
}

/* A first exchange over the world: every endpoint carries a message before fn runs (UCX
 * connects lazily), so a transport that cannot reach a peer fails here, naming it, within the
 * startup timeout. */
static dt_status first_contact(ux_world *w) {
    int64_t t = atomic_load(&w->timeout_ns);
    atomic_store(&w->timeout_ns, w->startup_timeout_ns);
    int32_t *ids = malloc(sizeof *ids * 2 * (size_t)w->size);
    dt_status st = ids ? DT_OK : dt_error(DT_ERR_NOMEM, "dt_ucx_run: out of memory");
    for (int r = 0; st == DT_OK && r < w->size; r++)
        ids[r] = w->rank;
    if (st == DT_OK) st = dt_all_to_all(w->ctx.world, ids, ids + w->size, 1, DT_I32);
    for (int r = 0; st == DT_OK && r < w->size; r++)
        if (ids[w->size + r] != r)
            st = dt_error(DT_ERR_COMM, "dt_ucx_run: rank %d answered for rank %d", ids[w->size + r],
                          r);
    free(ids);
    if (st == DT_OK) st = dt_barrier(w->ctx.world);
    atomic_store(&w->timeout_ns, t);
    if (st != DT_OK)
        dt_error_prefix("dt_ucx_run: first contact over UCX");
    else
        dt_comm_stats_reset(&w->ctx); /* the user's counters start at fn */
    w->ctx.world->seq = 0;            /* and so do the collectives' numbers (dt_coll_fp) */
    return st;
}

static void close_eps(ux_world *w) {
    atomic_store(&w->closing, 1);
    int force = dt_failed(&w->fail);
    void **reqs = calloc((size_t)w->size, sizeof *reqs);
    for (int r = 0; r < w->size; r++) {
        if (!w->eps[r]) continue;
        int failed = atomic_load(&w->ep_error[r]) != 0;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = force || failed ? UCP_EP_CLOSE_FLAG_FORCE : 0};
        void *q = ucp_ep_close_nbx(w->eps[r], &p);
        if (q && !UCS_PTR_IS_ERR(q)) {
            if (reqs)
                reqs[r] = q;
            else
                ucp_request_free(q);
        }
        w->eps[r] = NULL;
    }
    int64_t until = ux_now_ns() + CLOSE_NS;
    for (int pending = 1; pending && reqs && ux_now_ns() < until;) {
        pending = 0;
        ucp_worker_progress(w->worker);
        for (int r = 0; r < w->size; r++) {
            if (!reqs[r]) continue;
            if (ucp_request_check_status(reqs[r]) == UCS_INPROGRESS) {
                pending = 1;
                continue;
            }
            ucp_request_free(reqs[r]);
            reqs[r] = NULL;
        }
        if (pending) sched_yield();
    }
    for (int r = 0; reqs && r < w->size; r++)
        if (reqs[r]) ucp_request_free(reqs[r]);
    free(reqs);
}

static void free_world(ux_world *w, ep_arg *args) {
    if (w->worker) close_eps(w);
    ux_ctl_stop(w);
    for (int i = 0; i < w->norphans; i++)
        dt_host_free(w->orphans[i]);
    free(w->orphans);
    w->efd = -1;
    if (w->worker) ucp_worker_destroy(w->worker);
    if (w->ucp) ucp_cleanup(w->ucp);
    ux_groups_free(w);
    pthread_mutex_destroy(&w->mu);
    dt_failure_fini(&w->fail);
    pthread_mutex_destroy(&w->groups_mu);
    free(w->eps);
    free(w->ep_error);
    free(w->exited);
    free(w->exit_sent);
    free(w->exit_recvd);
    free((void *)w->sent);
    free((void *)w->recvd);
    free(w->host);
    free(w->host_pids);
    free(args);
    free(w);
    dt_host_cache_trim();
}

static dt_status setup(ux_world *w, ep_arg **args, int *ctx_ready) {
    DT_CHECK(read_config(w));
    DT_CHECK(ucx_init(w));
    if (w->size > 1) DT_CHECK(connect_peers(w, args));
    w->ctx = (dt_ctx){.rank = w->rank, .size = w->size, .backend = &ux_backend, .backend_state = w};
    DT_CHECK(dt_ctx_init_common(&w->ctx));
    dt_failure_flight(&w->fail, &w->ctx);
    *ctx_ready = 1;
    int *all = malloc(sizeof(int) * (size_t)w->size);
    if (!all) return dt_error(DT_ERR_NOMEM, "dt_ucx_run: out of memory");
    for (int i = 0; i < w->size; i++)
        all[i] = i;
    uint64_t key[2] = {DT_COMM_KEY(DT_KEY_WORLD, 0), 0};
    dt_status st = ux_comm_create(&w->ctx, key, all, w->size, &w->ctx.world);
    free(all);
    DT_CHECK(st);
    snprintf(w->ctx.world->label, sizeof w->ctx.world->label, "world");
    return first_contact(w);
}

/* What dt_proc_run's hooks need: the world and what setup made. */
typedef struct run_state {
    ux_world *w;
    ep_arg *args;
    int ctx_ready;
} run_state;

static void run_fail(void *p, dt_status st, const char *msg) {
    ux_ctl_fail(((run_state *)p)->w, st, msg);
}

static void run_finish(void *p, int *rank, dt_status *st, char *msg, size_t cap) {
    ux_ctl_finish(((run_state *)p)->w, rank, st, msg, cap);
}

static void run_teardown(void *p) {
    run_state *r = p;
    if (r->w->ctx.world) ux_comm_destroy(r->w->ctx.world);
    dt_failure_flight(&r->w->fail, NULL);
    if (r->ctx_ready) dt_ctx_fini_common(&r->w->ctx);
    free_world(r->w, r->args);
}

dt_status dt_ucx_run(dt_spmd_fn fn, void *arg) {
    DT_ARG_NOT_NULL(fn);
    run_state r = {0};
    DT_CHECK(alloc_world(&r.w));
    dt_status st = setup(r.w, &r.args, &r.ctx_ready);
    dt_proc_world pw = {.w = &r, .ctx = &r.w->ctx, .rank = r.w->rank, .size = r.w->size,
                        .fail = run_fail, .teardown = run_teardown,
                        .finish = r.w->ctl || r.w->size == 1 ? run_finish : NULL};
    st = dt_proc_run(&pw, st, fn, arg);
    dt_pool_release();
    return st;
}

dt_status dt_ucx_set_timeout(dt_ctx *ctx, double seconds) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG(seconds >= 0 && seconds < 1e9,
           "dt_ucx_set_timeout: argument seconds = %g is not in "
           "[0, 1e9)",
           seconds);
    if (ctx->backend != &ux_backend)
        return dt_error(DT_ERR_UNSUPPORTED,
                        "dt_ucx_set_timeout: the context belongs to the %s "
                        "runtime, not the UCX one",
                        ctx->backend->name);
    ux_world *w = ctx->backend_state;
    atomic_store(&w->timeout_ns, (int64_t)(seconds * 1e9));
    return DT_OK;
}
