/* ncclsim's communicators of several ranks (cudasim builds only): this program forks 2, 3 and 4
 * processes that make one communicator from the parent's ncclUniqueId and check every NCCL call
 * dtensor makes against a naive loop on the host: all_reduce (sum, prod, max, min, avg),
 * all_gather, reduce_scatter, broadcast and reduce, in f32, f64, i32, i64, u8 and bf16, at sizes
 * that take one round and several (larger than a segment slot), and a grouped all_to_all whose
 * messages outgrow the rings, blocking and non-blocking. Then the failures: a rank that exits and
 * one that never arrives (NCCLSIM_TIMEOUT_S=1) end the others' waits with an error instead of a
 * hang. Prints "[ok] ..." per world and exits 0, or names the rank, call and element and exits 1.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/half.h"

static int me, n;
static ncclComm_t comm;
static cudaStream_t stream;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "ncclsim_ranks: rank %d of %d: ", me, n);                                  \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

static const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclInt32,
                                       ncclInt64,   ncclUint8,   ncclBfloat16};
static const char *const type_names[] = {"f32", "f64", "i32", "i64", "u8", "bf16"};

static const char *tname(ncclDataType_t t) {
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        if (types[k] == t) return type_names[k];
    return "?";
}

static size_t tsize(ncclDataType_t t) {
    return t == ncclUint8 ? 1 : t == ncclBfloat16 ? 2 : t == ncclFloat64 || t == ncclInt64 ? 8 : 4;
}

static double get(ncclDataType_t t, const void *p, size_t i) {
    switch (t) {
    case ncclFloat32:
        return ((const float *)p)[i];
    case ncclFloat64:
        return ((const double *)p)[i];
    case ncclInt32:
        return ((const int32_t *)p)[i];
    case ncclInt64:
        return (double)((const int64_t *)p)[i];
    case ncclUint8:
        return ((const uint8_t *)p)[i];
    default:
        return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

static void put(ncclDataType_t t, void *p, size_t i, double v) {
    switch (t) {
    case ncclFloat32:
        ((float *)p)[i] = (float)v;
        break;
    case ncclFloat64:
        ((double *)p)[i] = v;
        break;
    case ncclInt32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    case ncclInt64:
        ((int64_t *)p)[i] = (int64_t)v;
        break;
    case ncclUint8:
        ((uint8_t *)p)[i] = (uint8_t)v;
        break;
    default:
        ((uint16_t *)p)[i] = dt_f32_to_bf16((float)v);
    }
}

/* Rank r's element i: small integers, exact in every type (sums of four stay under 256). */
static double val(int r, size_t i) {
    return (double)(r + 1 + (int)(i % 7) + (int)(i / 7919 % 3));
}

/* Waits out ncclInProgress (non-blocking communicators), then for the stream. */
static void finish(const char *what) {
    ncclResult_t r = ncclInProgress, q;
    time_t t0 = time(NULL);
    while (r == ncclInProgress) {
        if ((q = ncclCommGetAsyncError(comm, &r)) != ncclSuccess) r = q;
        if (time(NULL) - t0 > 30) FAIL("%s: still in progress after 30 s", what);
    }
    if (r != ncclSuccess) FAIL("%s: %s: %s", what, ncclGetErrorString(r), ncclGetLastError(comm));
    if (cudaStreamSynchronize(stream) != cudaSuccess) FAIL("%s: cudaStreamSynchronize", what);
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess || r != ncclSuccess)
        FAIL("%s: asynchronous error %s: %s", what, ncclGetErrorString(r), ncclGetLastError(comm));
}

static void call(ncclResult_t r, const char *what) {
    if (r != ncclSuccess && r != ncclInProgress)
        FAIL("%s: %s: %s", what, ncclGetErrorString(r), ncclGetLastError(comm));
    finish(what);
}

static void *dev(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) FAIL("cudaMalloc of %zu bytes", bytes);
    return p;
}

static void upload(void *d, const void *h, size_t bytes) {
    if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) FAIL("cudaMemcpy H2D");
}

static void download(void *h, const void *d, size_t bytes) {
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) FAIL("cudaMemcpy D2H");
}

static void expect(ncclDataType_t t, const char *what, size_t i, double got, double want) {
    double tol = t == ncclBfloat16 ? 8e-3 * fabs(want) : t == ncclFloat32 ? 1e-6 * fabs(want) : 0;
    if (!(fabs(got - want) <= tol))
        FAIL("%s (%s) element %zu: got %.9g, want %.9g", what, tname(t), i, got, want);
}

/* every reduction of every type, count elements each */
static void check_reductions(ncclDataType_t t, size_t count) {
    static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    static const char *const names[] = {"sum", "prod", "max", "min", "avg"};
    size_t es = tsize(t), nb = (size_t)n * count * es;
    char *h = malloc(nb + 8), *g = malloc(nb + 8);
    void *s = dev(nb), *r = dev(nb);
    for (int k = 0; k < 5; k++) {
        if (ops[k] == ncclProd && (t == ncclBfloat16 || t == ncclUint8)) continue; /* inexact */
        for (size_t i = 0; i < count; i++)
            put(t, h, i, val(me, i));
        upload(s, h, count * es);
        char what[96];
        snprintf(what, sizeof what, "ncclAllReduce %s of %zu", names[k], count);
        /* in place for sum (as dtensor calls it), out of place otherwise */
        void *out = ops[k] == ncclSum ? s : r;
        call(ncclAllReduce(s, out, count, t, ops[k], comm, stream), what);
        download(g, out, count * es);
        for (size_t i = 0; i < count; i++) {
            double w = val(0, i);
            for (int q = 1; q < n; q++) {
                double v = val(q, i);
                w = ops[k] == ncclProd  ? w * v
                    : ops[k] == ncclMax ? (v > w ? v : w)
                    : ops[k] == ncclMin ? (v < w ? v : w)
                                        : w + v;
            }
            if (ops[k] == ncclAvg)
                w = t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 ? w / n
                                                                              : floor(w / n);
            expect(t, what, i, get(t, g, i), w);
        }
    }
    /* reduce_scatter: block d of rank q's send is val(q, d * count + i) */
    for (size_t i = 0; i < (size_t)n * count; i++)
        put(t, h, i, val(me, i));
    upload(s, h, nb);
    call(ncclReduceScatter(s, r, count, t, ncclSum, comm, stream), "ncclReduceScatter");
    download(g, r, count * es);
    for (size_t i = 0; i < count; i++) {
        double w = 0;
        for (int q = 0; q < n; q++)
            w += val(q, (size_t)me * count + i);
        expect(t, "ncclReduceScatter", i, get(t, g, i), w);
    }
    /* reduce to the last rank */
    call(ncclReduce(s, me == n - 1 ? r : NULL, count, t, ncclMax, n - 1, comm, stream),
         "ncclReduce");
    if (me == n - 1) {
        download(g, r, count * es);
        for (size_t i = 0; i < count; i++)
            expect(t, "ncclReduce max", i, get(t, g, i), val(n - 1, i));
    }
    free(h), free(g);
    cudaFree(s), cudaFree(r);
}

static void check_moves(ncclDataType_t t, size_t count) {
    size_t es = tsize(t), nb = (size_t)n * count * es;
    char *h = malloc(nb + 8), *g = malloc(nb + 8);
    void *s = dev(nb), *r = dev(nb);
    for (size_t i = 0; i < count; i++)
        put(t, h, i, val(me, i));
    upload(s, h, count * es);
    call(ncclAllGather(s, r, count, t, comm, stream), "ncclAllGather");
    download(g, r, nb);
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < count; i++)
            expect(t, "ncclAllGather", (size_t)q * count + i, get(t, g, (size_t)q * count + i),
                   val(q, i));
    /* broadcast from rank 1, in place */
    call(ncclBroadcast(s, s, count, t, 1, comm, stream), "ncclBroadcast");
    download(g, s, count * es);
    for (size_t i = 0; i < count; i++)
        expect(t, "ncclBroadcast", i, get(t, g, i), val(1, i));
    free(h), free(g);
    cudaFree(s), cudaFree(r);
}

/* all_to_all as dtensor makes it: one group of sends and receives, rank a sending rank b
 * (a + b + 1) * unit int32s of value 1000 a + b, each way at once (more than a ring holds). */
static void check_all_to_all(size_t unit) {
    size_t *sc = calloc((size_t)n, sizeof *sc), st = 0, rt = 0;
    for (int j = 0; j < n; j++) {
        st += sc[j] = (size_t)(me + j + 1) * unit;
        rt += (size_t)(j + me + 1) * unit;
    }
    int32_t *h = malloc(st * 4), *g = malloc(rt * 4);
    char *s = dev(st * 4), *r = dev(rt * 4);
    for (int j = 0, o = 0; j < n; o += (int)sc[j], j++)
        for (size_t i = 0; i < sc[j]; i++)
            h[o + (int)i] = 1000 * me + j + (int)(i % 5) * 100000;
    upload(s, h, st * 4);
    ncclResult_t res = ncclGroupStart();
    for (int j = 0, so = 0, ro = 0; j < n && res == ncclSuccess; j++) {
        size_t rc = (size_t)(j + me + 1) * unit;
        res = ncclSend(s + so * 4, sc[j], ncclInt32, j, comm, stream);
        if (res == ncclSuccess) res = ncclRecv(r + ro * 4, rc, ncclInt32, j, comm, stream);
        so += (int)sc[j], ro += (int)rc;
    }
    ncclResult_t e = ncclGroupEnd();
    call(res != ncclSuccess ? res : e, "grouped ncclSend/ncclRecv");
    download(g, r, rt * 4);
    for (int j = 0, o = 0; j < n; o += (j + me + 1) * (int)unit, j++)
        for (size_t i = 0; i < (size_t)(j + me + 1) * unit; i++)
            if (g[o + (int)i] != 1000 * j + me + (int)(i % 5) * 100000)
                FAIL("all_to_all from rank %d element %zu: got %d", j, i, g[o + (int)i]);
    free(h), free(g), free(sc);
    cudaFree(s), cudaFree(r);
}

static int rank_main(ncclUniqueId id, int blocking, const char *mode) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
        FAIL("cudaStreamCreateWithFlags");
    call(ncclCommInitRankConfig(&comm, n, id, me, &cfg), "ncclCommInitRankConfig");
    if (!strcmp(mode, "exit") && me == n - 1) _exit(0); /* leaves without a word */
    if (!strcmp(mode, "late") && me == n - 1) {         /* alive, but never arrives within 1 s */
        sleep(3);
        _exit(0);
    }
    if (!strcmp(mode, "exit") || !strcmp(mode, "late")) {
        float *b = dev(64 * 4);
        ncclResult_t r = ncclAllReduce(b, b, 64, ncclFloat32, ncclSum, comm, stream), q;
        time_t t0 = time(NULL);
        while (r == ncclInProgress || r == ncclSuccess) { /* until the error shows */
            if (time(NULL) - t0 > 20) FAIL("%s: no error after 20 s", mode);
            cudaStreamSynchronize(stream);
            if ((q = ncclCommGetAsyncError(comm, &r)) != ncclSuccess) r = q;
            if (r == ncclSuccess) break;
        }
        /* this rank saw it, or a peer that saw it first aborted the communicator */
        const char *want = !strcmp(mode, "exit") ? "exited" : "never arrived";
        const char *msg = ncclGetLastError(comm);
        if (r != ncclRemoteError || (!strstr(msg, want) && !strstr(msg, "aborted the comm")))
            FAIL("%s: got %s: \"%s\", want a remote error saying \"%s\"", mode,
                 ncclGetErrorString(r), ncclGetLastError(comm), want);
        ncclCommAbort(comm);
        return 0;
    }
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        /* 1 element, a few, and more than one 256 KiB round */
        size_t counts[3] = {1, 1000, 3 * 256 * 1024 / tsize(types[k]) / (size_t)n + 17};
        for (int c = 0; c < 3; c++) {
            check_reductions(types[k], counts[c]);
            check_moves(types[k], counts[c]);
        }
    }
    check_all_to_all(3);
    check_all_to_all(9000); /* (a + b + 1) * 36 KB each way: rings of 64 KiB wrap */
    call(ncclCommFinalize(comm), "ncclCommFinalize");
    if (ncclCommDestroy(comm) != ncclSuccess) FAIL("ncclCommDestroy");
    return 0;
}

/* One world of ranks processes; 0 when every one exited 0. */
static int world(int ranks, int blocking, const char *mode) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    pid_t pids[8];
    for (int r = 0; r < ranks; r++) {
        if ((pids[r] = fork()) == 0) {
            me = r, n = ranks;
            alarm(60); /* a hang here is a failure, not a stuck test */
            exit(rank_main(id, blocking, mode));
        }
    }
    int bad = 0;
    for (int r = 0; r < ranks; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "ncclsim_ranks: %s world of %d: rank %d ended with status %#x\n", mode,
                    ranks, r, st);
            bad = 1;
        }
    }
    if (!bad)
        printf("[ok] ncclsim %s on %d ranks (%s)\n", mode, ranks,
               blocking ? "blocking" : "non-blocking");
    return bad;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int bad = 0;
    for (int ranks = 2; ranks <= 4; ranks++)
        bad |= world(ranks, ranks == 3, "collectives");
    setenv("NCCLSIM_TIMEOUT_S", "1", 1);
    bad |= world(3, 0, "exit");
    bad |= world(2, 1, "late");
    return bad;
}
