/* The world as launchers describe it in the environment: torchrun/dtrun, Open MPI, MPICH (PMI)
 * and Slurm conventions, plus the rendezvous address and dtensor's own timeouts. Pure parsing
 * (and the clock and host id the rendezvous uses): no network, built in every configuration. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <unistd.h>

#include "comm/boot/boot.h"
#include "core/check.h"

/* One launcher convention: the variables for rank, size, local rank and local size. */
typedef struct convention {
    const char *source, *rank, *size, *local_rank, *local_size;
} convention;

static const convention conventions[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};

int64_t dt_boot_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void dt_boot_host_id(char out[DT_BOOT_HOST_ID]) {
    memset(out, 0, DT_BOOT_HOST_ID);
    gethostname(out, DT_BOOT_HOST_ID / 2 - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return;
    if (!fgets(out + DT_BOOT_HOST_ID / 2, DT_BOOT_HOST_ID / 2 - 1, f))
        out[DT_BOOT_HOST_ID / 2] = '\0';
    fclose(f);
}

dt_status dt_boot_token_read(uint8_t out[DT_BOOT_TOKEN_BYTES], int *set_out) {
    memset(out, 0, DT_BOOT_TOKEN_BYTES);
    const char *s = getenv("DT_JOB_TOKEN");
    size_t n = s ? strlen(s) : 0;
    if (n > DT_BOOT_TOKEN_BYTES)
        return dt_error(DT_ERR_ARG,
                        "environment: DT_JOB_TOKEN is %zu bytes long; at most %d are used, so "
                        "give a shorter secret",
                        n, DT_BOOT_TOKEN_BYTES);
    if (n) memcpy(out, s, n);
    *set_out = n > 0;
    return DT_OK;
}

dt_status dt_boot_token_random(char out[33]) {
    unsigned char b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t k = getrandom(b + got, sizeof b - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return dt_error(DT_ERR_COMM, "getrandom failed: %s", strerror(errno));
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return DT_OK;
}

int dt_boot_token_equal(const uint8_t a[DT_BOOT_TOKEN_BYTES], const uint8_t b[DT_BOOT_TOKEN_BYTES]) {
    /* Every byte is looked at whatever differs: no early exit for a timing oracle. */
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < DT_BOOT_TOKEN_BYTES; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

/* Parses env var name as an integer in [lo, hi]; *out untouched when unset (returns DT_OK). */
static dt_status env_int(const char *name, long lo, long hi, int *out) {
    const char *s = getenv(name);
    if (!s) return DT_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return dt_error(DT_ERR_ARG, "environment: %s=\"%s\" is not an integer in [%ld, %ld]", name,
                        s, lo, hi);
    *out = (int)v;
    return DT_OK;
}

dt_status dt_boot_env_seconds(const char *name, double dflt, double *out) {
    const char *s = getenv(name);
    *out = dflt;
    if (!s || !*s) return DT_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= 0) || !isfinite(v))
        return dt_error(DT_ERR_ARG, "environment: %s=\"%s\" is not a number of seconds >= 0", name,
                        s);
    *out = v;
    return DT_OK;
}

dt_status dt_boot_env_ns(const char *name, double dflt, const char *zero, int64_t *ns_out) {
    double s;
    DT_CHECK(dt_boot_env_seconds(name, dflt, &s));
    if (s >= 1e9)
        return dt_error(DT_ERR_ARG, "environment: %s=\"%s\" is not below 1e9 seconds (0 %s)", name,
                        getenv(name), zero);
    *ns_out = (int64_t)(s * 1e9);
    return DT_OK;
}

dt_status dt_boot_env_timeout_ns(int64_t *ns_out) {
    return dt_boot_env_ns("DT_TIMEOUT_S", DT_BOOT_TIMEOUT_S, "waits forever", ns_out);
}

dt_status dt_boot_env_flag(const char *name, int unset, int *out) {
    const char *s = getenv(name);
    if (s && *s && strcmp(s, "0") && strcmp(s, "1"))
        return dt_error(DT_ERR_ARG, "environment: %s=\"%s\" is not 0 or 1", name, s);
    *out = s && *s ? s[0] == '1' : unset;
    return DT_OK;
}

dt_status dt_boot_env_bytes(const char *name, size_t dflt, size_t *out) {
    const char *s = getenv(name);
    *out = dflt;
    if (!s || !*s) return DT_OK;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end != '\0' || s[0] == '-')
        return dt_error(DT_ERR_ARG, "environment: %s=\"%s\" is not a byte count", name, s);
    *out = (size_t)v;
    return DT_OK;
}

/* Rank, size and local placement from the first convention whose rank variable is set. */
static dt_status read_world(dt_ucx_env *e) {
    for (size_t i = 0; i < sizeof conventions / sizeof conventions[0]; i++) {
        const convention *c = &conventions[i];
        int have_rank = getenv(c->rank) != NULL, have_size = getenv(c->size) != NULL;
        if (!have_rank && !have_size) continue;
        if (!have_rank || !have_size)
            return dt_error(DT_ERR_ARG, "environment: %s is set but %s is not (%s convention)",
                            have_rank ? c->rank : c->size, have_rank ? c->size : c->rank,
                            c->source);
        e->source = c->source;
        DT_CHECK(env_int(c->size, 1, DT_BOOT_MAX_RANKS, &e->size));
        DT_CHECK(env_int(c->rank, 0, e->size - 1, &e->rank));
        if (c->local_rank) DT_CHECK(env_int(c->local_rank, 0, INT_MAX, &e->local_rank));
        if (c->local_size) DT_CHECK(env_int(c->local_size, 1, INT_MAX, &e->local_size));
        if (e->local_size < 0 && strcmp(c->source, "slurm") == 0 &&
            getenv("SLURM_TASKS_PER_NODE")) {
            /* "4(x2)" or "4,3": the first host's count is a fair estimate. */
            long v = strtol(getenv("SLURM_TASKS_PER_NODE"), NULL, 10);
            if (v > 0 && v <= INT_MAX) e->local_size = (int)v;
        }
        return DT_OK;
    }
    return dt_error(DT_ERR_ARG,
                    "environment: no world found: set RANK and WORLD_SIZE (torchrun style) or run "
                    "under dtrun, srun or mpirun (SLURM_PROCID/SLURM_NTASKS, "
                    "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, PMI_RANK/PMI_SIZE)");
}

dt_status dt_ucx_env_read(dt_ucx_env *out) {
    DT_ARG_NOT_NULL(out);
    dt_ucx_env e = {.local_rank = -1, .local_size = -1};
    DT_CHECK(read_world(&e));
    const char *addr = getenv("MASTER_ADDR");
    if (addr) {
        if (!*addr || strlen(addr) >= sizeof e.master_addr)
            return dt_error(DT_ERR_ARG,
                            "environment: MASTER_ADDR=\"%s\" is not a host name or "
                            "address",
                            addr);
        strcpy(e.master_addr, addr);
    }
    DT_CHECK(env_int("MASTER_PORT", 1, 65535, &e.master_port));
    if (e.size > 1 && (!addr || !e.master_port))
        return dt_error(DT_ERR_ARG,
                        "environment: %s%s%s not set: rank %d of %d (from %s) needs "
                        "MASTER_ADDR and MASTER_PORT (where rank 0 listens) to meet the others",
                        !addr ? "MASTER_ADDR" : "", !addr && !e.master_port ? " and " : "",
                        !e.master_port ? "MASTER_PORT" : "", e.rank, e.size, e.source);
    *out = e;
    return DT_OK;
}
