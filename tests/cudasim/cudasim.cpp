/* cudasim's runtime: fibers for a block's threads, host memory for device memory, a
 * double-accumulating GEMM for cuBLAS. See cudasim.h. */
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <sys/mman.h>
#include <ucontext.h>
#include <vector>

#include "core/half.h"
#include "cudasim.h"

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

namespace {

/* ---- fibers ---------------------------------------------------------------------------- */

const size_t STACK = 128 << 10;

struct fiber {
    ucontext_t uc;
    char *stack = nullptr;
    bool done = false;
    unsigned round = 0; /* sync points passed: selects the exchange buffer */
};

struct block_run {
    std::vector<fiber> fibers;
    ucontext_t sched;
    const std::function<void()> *body = nullptr;
    unsigned cur = 0;
    std::vector<unsigned long long> slots[2];
};

thread_local block_run *run;
std::atomic<unsigned long long> launches, blocks, threads_run, switches, gemms;

/* CUDASIM_STATS=1: what ran, printed at exit, so a run shows it went through the kernels. */
struct stats_at_exit {
    ~stats_at_exit() {
        if (getenv("CUDASIM_STATS"))
            fprintf(stderr, "cudasim: %llu kernel launches, %llu blocks, %llu threads, %llu sync "
                            "rounds, %llu GEMMs\n", launches.load(), blocks.load(),
                    threads_run.load(), switches.load(), gemms.load());
    }
} stats_printer;
thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

void fiber_main() {
    (*run->body)();
    run->fibers[run->cur].done = true; /* returning switches to uc_link: the scheduler */
}

void set_thread_index(unsigned t) {
    threadIdx.x = t % blockDim.x;
    threadIdx.y = t / blockDim.x % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

void yield_to_scheduler() {
    fiber &f = run->fibers[run->cur];
    f.round++;
    swapcontext(&f.uc, &run->sched);
}

/* ---- guarded device memory ---------------------------------------------------------------- */

/* CUDASIM_GUARD=1: device memory is one arena that only device work (kernels, copies, GEMMs,
 * NCCL) may touch; the rest of the time it is PROT_NONE, so host code that reads or writes a
 * device pointer directly, which would crash on a GPU, crashes here too. The arena opens while
 * any thread's device work runs, so such an access may slip through then, never the reverse. */
bool guarded() {
    static int g = -1;
    if (g < 0) g = getenv("CUDASIM_GUARD") && atoi(getenv("CUDASIM_GUARD")) != 0;
    return g;
}

std::mutex guard_mu;
char *arena;
size_t arena_used, arena_cap;
int open_count;
std::multimap<size_t, char *> arena_free; /* freed blocks by size, for reuse */

void protect(int prot) {
    if (arena_used) mprotect(arena, arena_used, prot);
}

} // namespace

void cudasim_device_access(int begin) {
    if (!guarded()) return;
    std::lock_guard<std::mutex> g(guard_mu);
    if (begin ? open_count++ == 0 : --open_count == 0) protect(begin ? PROT_READ | PROT_WRITE : PROT_NONE);
}

namespace {

/* Device work, with the arena open while it runs. */
void device_work(const std::function<void()> &f) {
    cudasim_device_access(1);
    f();
    cudasim_device_access(0);
}

void *arena_alloc(size_t bytes) {
    std::lock_guard<std::mutex> g(guard_mu);
    size_t size = (bytes + 255) / 256 * 256;
    if (!size) size = 256;
    auto it = arena_free.find(size);
    if (it != arena_free.end()) {
        char *p = it->second;
        arena_free.erase(it);
        return p;
    }
    if (!arena) {
        arena_cap = (size_t)64 << 30;
        void *m = mmap(nullptr, arena_cap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        if (m == MAP_FAILED) return nullptr;
        arena = (char *)m;
    }
    if (arena_used + size > arena_cap) return nullptr;
    char *p = arena + arena_used;
    arena_used += size;
    if (open_count) mprotect(arena, arena_used, PROT_READ | PROT_WRITE);
    return p;
}

void arena_release(void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(guard_mu);
    size_t size = (bytes + 255) / 256 * 256;
    arena_free.emplace(size ? size : 256, (char *)p);
}

/* ---- streams ---------------------------------------------------------------------------- */

/* Work queued on a stream runs when someone waits for it (stream or event synchronize, a
 * wait on an event, cudaFree), never earlier: code that reads results without waiting sees
 * stale data here, as it may on a GPU. CUDASIM_SYNC=1 runs everything at once instead. */
bool deferred() {
    static int d = -1;
    if (d < 0) d = !getenv("CUDASIM_SYNC");
    return d;
}

} // namespace

struct cudasim_stream {
    std::mutex mu;     /* the queue */
    std::mutex run_mu; /* one drainer at a time keeps the order */
    std::deque<std::function<void()>> q;
};
struct cudasim_event {
    cudaStream_t stream;
};

namespace {

std::mutex streams_mu;
std::set<cudaStream_t> streams;

void enqueue(cudaStream_t s, std::function<void()> f) {
    if (!s || !deferred()) {
        device_work(f);
        return;
    }
    std::lock_guard<std::mutex> g(s->mu);
    s->q.push_back(std::move(f));
}

void drain(cudaStream_t s) {
    if (!s) return;
    std::lock_guard<std::mutex> r(s->run_mu);
    for (;;) {
        std::function<void()> f;
        {
            std::lock_guard<std::mutex> g(s->mu);
            if (s->q.empty()) return;
            f = std::move(s->q.front());
            s->q.pop_front();
        }
        device_work(f);
    }
}

void drain_all() {
    std::vector<cudaStream_t> all;
    {
        std::lock_guard<std::mutex> g(streams_mu);
        all.assign(streams.begin(), streams.end());
    }
    for (cudaStream_t s : all) drain(s);
}

/* ---- memory ---------------------------------------------------------------------------- */

std::mutex mem_mu;
std::map<uintptr_t, size_t> allocations; /* start -> bytes */

bool is_device(const void *p) {
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = allocations.upper_bound((uintptr_t)p);
    if (it == allocations.begin()) return false;
    --it;
    return (uintptr_t)p < it->first + (it->second ? it->second : 1);
}

int device_count() {
    const char *e = getenv("CUDASIM_DEVICES");
    return e ? atoi(e) : 1;
}

size_t memory_limit() {
    const char *e = getenv("CUDASIM_MEMORY_MB");
    return (e ? (size_t)atoll(e) : (size_t)16384) << 20;
}
size_t allocated;

cudaError_t fail(cudaError_t e) { return last_error = e; }

/* ---- GEMM ------------------------------------------------------------------------------ */

double load(cudaDataType t, const void *p, size_t i) {
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_64F: return ((const double *)p)[i];
    case CUDA_R_16F: return dt_f16_to_f32(((const uint16_t *)p)[i]);
    case CUDA_R_16BF: return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0; /* float8 is cuBLASLt's only (cublaslt.cpp); known() refuses it */
    }
}

void store(cudaDataType t, void *p, size_t i, double v) {
    switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = (float)v; break;
    case CUDA_R_64F: ((double *)p)[i] = v; break;
    case CUDA_R_16F: ((uint16_t *)p)[i] = dt_f32_to_f16((float)v); break;
    case CUDA_R_16BF: ((uint16_t *)p)[i] = dt_f32_to_bf16((float)v); break;
    default: break;
    }
}

bool known(cudaDataType t) {
    return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

/* Column-major C = alpha op(A) op(B) + beta C, as cuBLAS defines it. */
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha,
          const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb,
          double beta, void *C, cudaDataType ct, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                double a = load(at, A, ta == CUBLAS_OP_N ? (size_t)l * lda + i : (size_t)i * lda + l);
                double b = load(bt, B, tb == CUBLAS_OP_N ? (size_t)j * ldb + l : (size_t)l * ldb + j);
                s += a * b;
            }
            size_t ci = (size_t)j * ldc + i;
            store(ct, C, ci, alpha * s + (beta != 0 ? beta * load(ct, C, ci) : 0));
        }
}

double scalar(cublasComputeType_t c, const void *p) {
    return c == CUBLAS_COMPUTE_64F || c == CUBLAS_COMPUTE_64F_PEDANTIC ? *(const double *)p
                                                                        : *(const float *)p;
}

} // namespace

/* ---- the kernel language ------------------------------------------------------------------ */

/* One block: fresh fibers, then rounds in which every live thread runs to its next sync point
 * (or its end). Apart from the launch loop: getcontext returns twice. */
static __attribute__((noinline)) void run_block(block_run &r, unsigned n) {
    for (unsigned t = 0; t < n; t++) {
        fiber &f = r.fibers[t];
        f.done = false;
        f.round = 0;
        getcontext(&f.uc);
        f.uc.uc_stack.ss_sp = f.stack;
        f.uc.uc_stack.ss_size = STACK;
        f.uc.uc_link = &r.sched;
        makecontext(&f.uc, fiber_main, 0);
    }
    threads_run += n;
    for (bool live = true; live;) {
        live = false;
        switches++;
        for (unsigned t = 0; t < n; t++) {
            if (r.fibers[t].done) continue;
            r.cur = t;
            set_thread_index(t);
            swapcontext(&r.sched, &r.fibers[t].uc);
            live |= !r.fibers[t].done;
        }
    }
}

static void run_grid(dim3 grid, dim3 block, const std::function<void()> &body) {
    unsigned n = block.x * block.y * block.z;
    block_run r;
    r.fibers.resize(n);
    r.body = &body;
    r.slots[0].resize(n);
    r.slots[1].resize(n);
    block_run *outer = run;
    run = &r;
    gridDim = grid;
    blockDim = block;
    for (fiber &f : r.fibers) f.stack = (char *)malloc(STACK);
    launches++;
    blocks += grid.x * grid.y * grid.z;
    for (unsigned b = 0; b < grid.x * grid.y * grid.z; b++) {
        blockIdx = {b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)};
        run_block(r, n);
    }
    for (fiber &f : r.fibers) free(f.stack);
    run = outer;
}

void cudasim_launch(dim3 grid, dim3 block, const std::function<void()> &body, size_t shmem,
                    cudaStream_t stream) {
    unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024 || shmem > 0 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535) {
        last_error = cudaErrorInvalidValue; /* what a bad launch configuration gives */
        return;
    }
    enqueue(stream, [grid, block, body] { run_grid(grid, block, body); });
}

void cudasim_enqueue(cudaStream_t s, std::function<void()> f) { enqueue(s, std::move(f)); }

void __syncthreads(void) { yield_to_scheduler(); }

unsigned long long cudasim_exchange(unsigned long long v, unsigned src_lane) {
    unsigned t = run->cur, parity = run->fibers[t].round & 1;
    run->slots[parity][t] = v;
    yield_to_scheduler();
    unsigned src = t - t % 32 + src_lane;
    return src < run->slots[parity].size() ? run->slots[parity][src] : v;
}

/* ---- runtime ----------------------------------------------------------------------------- */

extern "C" {

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : "simulated CUDA error";
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaGetDeviceCount(int *n) {
    *n = device_count();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice);
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
    *d = current_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    (void)d;
    /* CUDASIM_CC=89 (major * 10 + minor; default 90, an H100) sets the compute capability the
     * library sees, so that paths it picks by it (cuBLASLt's float8 GEMM) all run here. */
    const char *cc_env = getenv("CUDASIM_CC");
    int cc = cc_env ? atoi(cc_env) : 90;
    *v = a == cudaDevAttrClockRate ? 1980000 : a == cudaDevAttrMultiProcessorCount ? 132
         : a == cudaDevAttrComputeCapabilityMinor ? cc % 10 : cc / 10;
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int d, int peer) {
    *can = d != peer;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
    (void)peer, (void)flags;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    drain_all();
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    std::lock_guard<std::mutex> g(mem_mu);
    if (allocated + bytes > memory_limit() ||
        !(*p = guarded() ? arena_alloc(bytes) : malloc(bytes ? bytes : 1)))
        return fail(cudaErrorMemoryAllocation);
    /* Garbage, as fresh device memory is: code that reads before writing shows up. A large
     * block (cuBLAS's 32 MiB workspace per rank) gets it at both ends only: filling it all
     * would back every page, and the guard's mprotect of the arena around each piece of device
     * work costs time per backed page. */
    void *q = *p;
    const size_t edge = (size_t)1 << 20;
    device_work([=] {
        if (bytes <= 4 * edge) {
            memset(q, 0xa5, bytes);
        } else {
            memset(q, 0xa5, edge);
            memset((char *)q + bytes - edge, 0xa5, edge);
        }
    });
    allocations[(uintptr_t)*p] = bytes;
    allocated += bytes;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    drain_all(); /* cudaFree waits for the device */
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = allocations.find((uintptr_t)p);
    if (it == allocations.end()) return fail(cudaErrorInvalidValue);
    allocated -= it->second;
    if (guarded()) arena_release(p, it->second);
    else free(p);
    allocations.erase(it);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    bool dev = is_device(p);
    *a = {dev ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered, dev ? 0 : -1,
          dev ? (void *)p : nullptr, dev ? nullptr : (void *)p};
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k,
                            cudaStream_t s) {
    (void)k;
    if (bytes) enqueue(s, [=] { memmove(dst, src, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k) {
    drain_all();
    return cudaMemcpyAsync(dst, src, bytes, k, nullptr);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind k, cudaStream_t s) {
    (void)k;
    if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
    enqueue(s, [=] {
        for (size_t r = 0; r < height; r++)
            memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    });
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int v, size_t bytes, cudaStream_t s) {
    if (bytes) enqueue(s, [=] { memset(dst, v, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int v, size_t bytes) {
    drain_all();
    return cudaMemsetAsync(dst, v, bytes, nullptr);
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags;
    *s = new cudasim_stream;
    std::lock_guard<std::mutex> g(streams_mu);
    streams.insert(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    drain(s);
    {
        std::lock_guard<std::mutex> g(streams_mu);
        streams.erase(s);
    }
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    drain(s);
    return cudaSuccess;
}

/* An event stands for everything its stream holds when it is waited for: the work before
 * the record and perhaps some after, so waits never come too early. */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    (void)s, (void)flags;
    drain(e->stream);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    (void)flags;
    *e = new cudasim_event{nullptr};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    e->stream = s;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    drain(e->stream);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    drain(e->stream);
    return cudaSuccess;
}

/* ---- cuBLAS ------------------------------------------------------------------------------ */

struct cudasim_blas {
    cudaStream_t stream;
};
struct cudasim_blaslt {
    int unused;
};

const char *cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "simulated cuBLAS error";
}

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new cudasim_blas{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
    (void)h, (void)ws, (void)bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new cudasim_blaslt{0};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sa, const void *B, cudaDataType bt,
                                          int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || !known(at) || !known(bt) || !known(ct) ||
        ldc < (m > 1 ? m : 1) || lda < 1 || ldb < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    int f64 = compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC;
    if (f64 != (at == CUDA_R_64F) || f64 != (ct == CUDA_R_64F)) return CUBLAS_STATUS_NOT_SUPPORTED;
    size_t ea = at == CUDA_R_64F ? 8 : at == CUDA_R_32F ? 4 : 2;
    size_t eb = bt == CUDA_R_64F ? 8 : bt == CUDA_R_32F ? 4 : 2;
    size_t ec = ct == CUDA_R_64F ? 8 : ct == CUDA_R_32F ? 4 : 2;
    gemms += (unsigned long long)batch;
    double al = scalar(compute, alpha), be = scalar(compute, beta); /* host pointers: read now */
    enqueue(h->stream, [=] {
        for (int i = 0; i < batch; i++)
            gemm(ta, tb, m, n, k, al, (const char *)A + (size_t)(i * sa) * ea, at, lda,
                 (const char *)B + (size_t)(i * sb) * eb, bt, ldb, be,
                 (char *)C + (size_t)(i * sc) * ec, ct, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0,
                                      beta, C, ct, ldc, 0, 1, compute, algo);
}

} /* extern "C" */
