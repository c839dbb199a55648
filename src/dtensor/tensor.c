/* DTensor objects: spec checks, construction, reference counting, accessors, from_local. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/alloc.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"

dt_status dt_placement_count_check(const char *fn, const char *what, int nplacements,
                                   const dt_placement *placements, int mesh_ndim) {
    DT_ARG(placements != NULL, "%s: argument %s is NULL", fn, what);
    if (nplacements != mesh_ndim)
        return dt_error(DT_ERR_PLACEMENT, "%s: %d %s given for a %d-D mesh (one per mesh dim)",
                        fn, nplacements, what, mesh_ndim);
    return DT_OK;
}

dt_status dt_placements_check(const char *fn, const dt_placement *p, int n, int tensor_ndim,
                              dt_dtype dtype, dt_placement *out) {
    memcpy(out, p, sizeof(dt_placement) * (size_t)n);
    dt_status st = dt_placements_normalize(out, n, tensor_ndim);
    if (st != DT_OK) {
        dt_error_prefix(fn);
        return st;
    }
    return dt_norm_partial_dtype_check(fn, out, n, dtype);
}

dt_status dt_norm_partial_dtype_check(const char *fn, const dt_placement *placements, int n,
                                      dt_dtype dtype) {
    int m = dt_placements_find_norm(placements, n);
    if (m < 0 || dtype == DT_F32 || dtype == DT_F64 || dtype == DT_BF16 || dtype == DT_F16)
        return DT_OK;
    return dt_error(DT_ERR_DTYPE, "%s: placements[%d] = NormP(%g) needs a float dtype, not %s "
                                  "(a pending norm of integers has no exact root)", fn, m,
                    placements[m].norm_ord, dt_dtype_name(dtype));
}

dt_status dt_spec_check(const char *fn, const dt_mesh *mesh, dt_dtype dtype, int ndim,
                        const int64_t *shape, int nplacements, const dt_placement *placements,
                        dt_placement *norm_out) {
    DT_ARG(mesh != NULL, "%s: argument mesh is NULL", fn);
    DT_CHECK(dt_placement_count_check(fn, "placements", nplacements, placements, mesh->ndim));
    DT_CHECK(dt_shape_dtype_check(fn, ndim, shape, dtype));
    memcpy(norm_out, placements, sizeof(dt_placement) * (size_t)mesh->ndim);
    dt_status st = dt_placements_normalize(norm_out, mesh->ndim, ndim);
    if (st != DT_OK) dt_error_prefix(fn);
    if (st == DT_OK) st = dt_norm_partial_dtype_check(fn, norm_out, mesh->ndim, dtype);
    return st;
}

enum { GIVEN, UNINIT, ZEROED }; /* where make's storage comes from */

/* The rank's tensors alive and their owned bytes, in its context's dtensor slot. */
typedef dt_dtensor_state live_counts;
_Static_assert(sizeof(live_counts) <= DT_CTX_SLOT_BYTES, "live counts outgrew their slot");

static live_counts *live_of(dt_ctx *ctx) {
    return dt_ctx_slot(ctx, DT_CTX_SLOT_DTENSOR);
}

/* Whether the calling thread is ctx's own (its arena is bound here): only that thread writes
 * the own_ counters. */
static bool on_own_thread(const dt_ctx *ctx) {
    return ctx->arena && ctx->arena == dt_host_arena_current();
}

/* v += d for a counter only the calling thread writes: a relaxed load and store (readers on
 * other threads see one value or the other), no locked read-modify-write. */
static long long own_add(atomic_llong *v, long long d) {
    long long now = atomic_load_explicit(v, memory_order_relaxed) + d;
    atomic_store_explicit(v, now, memory_order_relaxed);
    return now;
}

static void count_change(dt_ctx *ctx, int tensors, long long bytes) {
    live_counts *lc = live_of(ctx);
    long long now;
    if (on_own_thread(ctx)) {
        if (tensors) own_add(&lc->own_tensors, tensors);
        if (!bytes) return;
        now =
            own_add(&lc->own_bytes, bytes) + atomic_load_explicit(&lc->bytes, memory_order_relaxed);
    } else {
        if (tensors) atomic_fetch_add(&lc->tensors, tensors);
        if (!bytes) return;
        now = atomic_fetch_add(&lc->bytes, bytes) + bytes +
              atomic_load_explicit(&lc->own_bytes, memory_order_relaxed);
    }
    long long peak = atomic_load_explicit(&lc->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak(&lc->peak, &peak, now)) {
    }
}

static void count_bytes(dt_ctx *ctx, long long bytes) {
    count_change(ctx, 0, bytes);
}

static void count_live(const dt_tensor *t, int sign) {
    long long bytes =
        t->owned && !t->dropped ? (long long)(t->local_numel * dt_dtype_size(t->dtype)) : 0;
    count_change(t->mesh->ctx, sign, sign * bytes);
}

dt_status dt_ctx_tensor_memory(dt_ctx *ctx, dt_tensor_memory *out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(out);
    live_counts *lc = live_of(ctx);
    out->tensors = atomic_load(&lc->tensors) + atomic_load(&lc->own_tensors);
    out->bytes = atomic_load(&lc->bytes) + atomic_load(&lc->own_bytes);
    out->peak_bytes = atomic_load(&lc->peak);
    return DT_OK;
}

dt_status dt_ctx_reset_peak(dt_ctx *ctx) {
    DT_ARG_NOT_NULL(ctx);
    live_counts *lc = live_of(ctx);
    atomic_store(&lc->peak, atomic_load(&lc->bytes) + atomic_load(&lc->own_bytes));
    return DT_OK;
}

void dt_tensor_storage_drop(dt_tensor *t) {
    if (t->dropped || !t->owned) return;
    count_bytes(t->mesh->ctx, -(long long)(t->local_numel * dt_dtype_size(t->dtype)));
    dt_tensor_mem(t)->free(t->data);
    t->data = NULL;
    t->dropped = true;
}

dt_status dt_tensor_storage_alloc(dt_tensor *t) {
    if (!t->dropped) return DT_OK;
    size_t bytes = t->local_numel * dt_dtype_size(t->dtype);
    void *p = dt_tensor_mem(t)->alloc(bytes);
    if (!p) return dt_error(DT_ERR_NOMEM, "tensor: out of memory refilling a dropped shard "
                                          "(%zu bytes)", bytes);
    t->data = p;
    t->dropped = false;
    count_bytes(t->mesh->ctx, (long long)bytes);
    return DT_OK;
}

void dt_tensor_storage_adopt(dt_tensor *t, void *data) {
    if (!t->dropped) return;
    t->data = data;
    t->owned = true;
    t->dropped = false;
    count_bytes(t->mesh->ctx, (long long)(t->local_numel * dt_dtype_size(t->dtype)));
}

/* A new tensor's shell, unfilled, and its device's memory ops. The shell comes from the rank's
 * arena too: a dispatch makes one per op (glibc's calloc and free of it were a tenth of a small
 * op's instructions). */
static inline dt_status shell_new(dt_device device, const dt_mem_ops **mem, dt_tensor **t) {
    if (!(*mem = dt_mem_ops_of(device.kind)))
        return dt_error(DT_ERR_UNSUPPORTED, "tensor: device kind %d is not in this build",
                        (int)device.kind);
    if (!(*t = dt_host_alloc(sizeof **t))) return dt_error(DT_ERR_NOMEM, "tensor: out of memory");
    return DT_OK;
}

/* A filled shell becomes a live tensor of mesh, with bytes of owned storage counted. */
static dt_status born(dt_tensor *t, dt_mesh *mesh, size_t bytes, dt_tensor **out) {
    t->mesh = mesh;
    dt_mesh_retain(mesh);
    count_change(mesh->ctx, 1, (long long)bytes); /* count_live's, size known */
    *out = t;
    return DT_OK;
}

/* One layout computation per tensor. */
static dt_status make(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                      const int64_t *shape, const dt_placement *norm, void *data, bool owned,
                      int storage, dt_tensor **out) {
    const dt_mem_ops *mem;
    dt_tensor *t;
    DT_CHECK(shell_new(device, &mem, &t));
    /* Zeroed by the assignment (stores the compiler inlines, cheaper than a memset call); the
     * dims are copied in loops, not memcpy calls, as a small op has few. */
    *t = (dt_tensor){.magic = DT_TENSOR_LIVE, .dtype = dtype, .ndim = ndim};
    atomic_init(&t->refs, 1);
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    for (int m = 0; m < mesh->ndim; m++)
        t->placements[m] = norm[m];
    /* A rank outside the mesh (a sub-mesh made elsewhere) holds nothing of the tensor. */
    if (mesh->rank >= 0)
        dt_shard_layout(mesh->ndim, mesh->shape, mesh->coord, ndim, shape, norm, t->local_shape,
                        t->local_offset);
    t->local_numel = mesh->rank >= 0 ? dt_shape_numel(t->local_shape, ndim) : 0;
    t->device = device;
    t->data = data;
    t->owned = owned;
    /* Zeroed storage only when there is something to zero; uninitialised storage always (a
     * kernel's output pointer is never NULL, even for an empty shard). */
    size_t bytes = t->local_numel * dt_dtype_size(dtype);
    if (storage == UNINIT || (storage == ZEROED && t->local_numel)) {
        t->data = mem->alloc(bytes);
        t->owned = true;
        dt_status st = !t->data ? DT_ERR_NOMEM : storage == ZEROED ? mem->zero(t->data, bytes) : DT_OK;
        if (st != DT_OK) {
            mem->free(t->data);
            dt_host_free(t);
            if (st == DT_ERR_NOMEM) dt_error_prefix("tensor: a shard");
            return st;
        }
    }
    return born(t, mesh, t->owned ? bytes : 0, out);
}

dt_status dt_tensor_new(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                        const int64_t *shape, const dt_placement *norm, void *data, bool owned,
                        dt_tensor **out) {
    return make(mesh, device, dtype, ndim, shape, norm, data, owned, data ? GIVEN : ZEROED, out);
}

dt_status dt_tensor_alloc(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                          const int64_t *shape, const dt_placement *norm, dt_tensor **out) {
    return make(mesh, device, dtype, ndim, shape, norm, NULL, true, UNINIT, out);
}

dt_status dt_tensor_alloc_laid_out(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                                   const int64_t *shape, const dt_placement *norm,
                                   const int64_t *local_shape, const int64_t *local_offset,
                                   dt_tensor **out) {
    if (mesh->rank < 0) /* holds nothing: make's general path */
        return make(mesh, device, dtype, ndim, shape, norm, NULL, true, UNINIT, out);
    const dt_mem_ops *mem;
    dt_tensor *t;
    DT_CHECK(shell_new(device, &mem, &t));
    /* Field by field: the dims as whole arrays (fixed-size copies, zero past ndim in the
     * caller's), the placements past the mesh's dims zeroed, no zeroing of the whole shell. */
    t->magic = DT_TENSOR_LIVE;
    atomic_init(&t->refs, 1);
    t->dtype = dtype, t->ndim = ndim;
    memcpy(t->shape, shape, sizeof t->shape);
    memcpy(t->local_shape, local_shape, sizeof t->local_shape);
    memcpy(t->local_offset, local_offset, sizeof t->local_offset);
    memset(t->placements, 0, sizeof t->placements);
    for (int m = 0; m < mesh->ndim; m++)
        t->placements[m] = norm[m];
    t->local_numel = dt_shape_numel(t->local_shape, ndim);
    size_t bytes = t->local_numel * dt_dtype_size(dtype);
    t->device = device;
    t->dropped = false, t->ag = NULL, t->trace_src = 0, t->version = 0;
    if (!(t->data = mem->alloc(bytes))) { /* the allocator said why */
        dt_host_free(t);
        dt_error_prefix("tensor: a shard");
        return DT_ERR_NOMEM;
    }
    t->owned = true;
    return born(t, mesh, bytes, out);
}

void dt_tensor_layout_of(const dt_tensor *t, int mesh_rank, int64_t *shape_out,
                         int64_t *offset_out) {
    int coord[DT_MESH_MAX_NDIM];
    dt_mesh_coord_of(t->mesh, mesh_rank, coord);
    dt_shard_layout(t->mesh->ndim, t->mesh->shape, coord, t->ndim, t->shape, t->placements,
                    shape_out, offset_out);
}

dt_status dt_tensor_zeros(dt_mesh *mesh, dt_dtype dtype, int ndim, const int64_t *shape,
                          int nplacements, const dt_placement *placements,
                          dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    dt_placement norm[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_spec_check("dt_tensor_zeros", mesh, dtype, ndim, shape, nplacements,
                           placements, norm));
    return dt_tensor_new(mesh, mesh->ctx->dev.device, dtype, ndim, shape, norm, NULL, true, out);
}

dt_status dt_tensor_retain(dt_tensor *tensor) {
    DT_TENSOR_ARG(tensor);
    atomic_fetch_add(&tensor->refs, 1);
    return DT_OK;
}

/* ---- quarantine: released shells wait in a per-thread ring of QUARANTINE before going back
 * to malloc, so a second release of a tensor (a use after free in C) reads the poisoned
 * magic, not reused memory, and fails with a message instead of corrupting the heap. ---- */
#define QUARANTINE 256

typedef struct quarantine {
    dt_tensor *ring[QUARANTINE];
    unsigned next;
} quarantine;

static pthread_key_t quarantine_key;
static pthread_once_t quarantine_once = PTHREAD_ONCE_INIT;

/* The calling thread's ring, as its key holds it: a release reads this instead of paying
 * pthread_once and pthread_getspecific (a tenth of a small op's release). */
static _Thread_local quarantine *my_quarantine; /* the thread's: its fibers share it */

static void quarantine_destroy(void *p) {
    quarantine *q = p;
    if (my_quarantine == q) my_quarantine = NULL; /* runs on the exiting thread itself */
    for (int i = 0; i < QUARANTINE; i++) dt_host_free(q->ring[i]);
    free(q);
}

static void quarantine_init(void) {
    pthread_key_create(&quarantine_key, quarantine_destroy);
}

static void shell_free(dt_tensor *t) {
    t->magic = DT_TENSOR_DEAD;
    quarantine *q = my_quarantine;
    if (!q) {
        pthread_once(&quarantine_once, quarantine_init);
        q = pthread_getspecific(quarantine_key);
        if (!q && (q = calloc(1, sizeof *q)) && pthread_setspecific(quarantine_key, q) != 0) {
            free(q);
            q = NULL;
        }
        my_quarantine = q;
    }
    if (!q) {
        dt_host_free(t);
        return;
    }
    dt_host_free(q->ring[q->next]);
    q->ring[q->next] = t;
    q->next = (q->next + 1) % QUARANTINE;
}

static _Atomic(dt_tensor_slot_free_fn) slot_free;

void dt_tensor_slot_hook(dt_tensor_slot_free_fn fn) {
    atomic_store(&slot_free, fn);
}

dt_status dt_tensor_release(dt_tensor *tensor) {
    if (!tensor) return DT_OK;
    DT_CHECK(dt_tensor_check("dt_tensor_release", "tensor", tensor));
    /* The only reference, held by the caller: no other thread can retain or release it now,
     * so it goes without the locked decrement (most tensors die with one reference). */
    if (atomic_load_explicit(&tensor->refs, memory_order_acquire) != 1 &&
        atomic_fetch_sub(&tensor->refs, 1) != 1)
        return DT_OK;
    if (tensor->ag) atomic_load (&slot_free)(tensor, tensor->ag);
    count_live(tensor, -1);
    if (tensor->owned) dt_tensor_mem(tensor)->free(tensor->data);
    dt_mesh_release(tensor->mesh);
    shell_free(tensor);
    return DT_OK;
}

dt_status dt_tensor_to_local(dt_tensor *tensor, void **out) {
    DT_TENSOR_ARG(tensor);
    DT_ARG_NOT_NULL(out);
    *out = tensor->data;
    return DT_OK;
}

dt_status dt_tensor_info_get(const dt_tensor *tensor, dt_tensor_info *out) {
    DT_TENSOR_ARG(tensor);
    DT_ARG_NOT_NULL(out);
    dt_tensor_info info = {
        .dtype = tensor->dtype,
        .ndim = tensor->ndim,
        .numel = dt_shape_numel(tensor->shape, tensor->ndim),
        .local_numel = tensor->local_numel,
        .local_bytes = tensor->local_numel * dt_dtype_size(tensor->dtype),
        .mesh_ndim = tensor->mesh->ndim,
        .mesh = tensor->mesh,
        .local_data = tensor->data,
        .device = tensor->device,
    };
    size_t nb = sizeof(int64_t) * (size_t)tensor->ndim;
    memcpy(info.shape, tensor->shape, nb);
    memcpy(info.local_shape, tensor->local_shape, nb);
    memcpy(info.local_offset, tensor->local_offset, nb);
    memcpy(info.placements, tensor->placements, sizeof(dt_placement) * (size_t)tensor->mesh->ndim);
    *out = info;
    return DT_OK;
}

/* What each rank tells the others in from_local: enough to infer and to cross-check. */
enum { ROW_DTYPE, ROW_NDIM, ROW_LOCAL, ROW_GLOBAL = ROW_LOCAL + DT_MAX_NDIM,
       ROW_PLACE = ROW_GLOBAL + DT_MAX_NDIM, ROW_LEN = ROW_PLACE + 3 * DT_MESH_MAX_NDIM };

static void row_fill(int64_t *row, dt_dtype dtype, int ndim, const int64_t *local_shape,
                     const int64_t *global_shape, const dt_placement *norm, int mesh_ndim) {
    for (int i = 0; i < ROW_LEN; i++) row[i] = -1;
    row[ROW_DTYPE] = dtype;
    row[ROW_NDIM] = ndim;
    for (int d = 0; d < ndim; d++) {
        row[ROW_LOCAL + d] = local_shape[d];
        if (global_shape) row[ROW_GLOBAL + d] = global_shape[d];
    }
    for (int m = 0; m < mesh_ndim; m++) {
        row[ROW_PLACE + 3 * m] = norm[m].kind;
        row[ROW_PLACE + 3 * m + 1] = norm[m].kind == DT_PLACEMENT_SHARD ? norm[m].dim : 0;
        if (norm[m].kind == DT_PLACEMENT_PARTIAL && norm[m].op == DT_REDUCE_NORM) /* p's bits */
            memcpy(&row[ROW_PLACE + 3 * m + 1], &norm[m].norm_ord, sizeof(double));
        row[ROW_PLACE + 3 * m + 2] = norm[m].kind == DT_PLACEMENT_PARTIAL ? norm[m].op : 0;
    }
}

/* Gathers every rank's row, checks they agree, and infers the global shape if not given. */
static dt_status agree_on_spec(dt_mesh *mesh, const int64_t *mine, int64_t *global_io,
                               int infer) {
    dt_comm *all;
    DT_CHECK(dt_mesh_mask_comm(mesh, (1u << mesh->ndim) - 1, &all));
    int64_t *rows = malloc(sizeof(int64_t) * ROW_LEN * (size_t)mesh->nranks);
    if (!rows) return dt_error(DT_ERR_NOMEM, "dt_tensor_from_local: out of memory");
    dt_status st = dt_all_gather(all, mine, rows, ROW_LEN, DT_I64);
    for (int r = 0; st == DT_OK && r < mesh->nranks; r++) {
        const int64_t *row = rows + (size_t)r * ROW_LEN;
        /* Local shapes differ by design; everything from the global shape on must agree. */
        if (row[ROW_DTYPE] != mine[ROW_DTYPE] || row[ROW_NDIM] != mine[ROW_NDIM] ||
            memcmp(row + ROW_GLOBAL, mine + ROW_GLOBAL,
                   sizeof(int64_t) * (size_t)(ROW_LEN - ROW_GLOBAL)) != 0)
            st = dt_error(DT_ERR_COMM, "dt_tensor_from_local: mesh rank %d passed a different "
                                       "dtype, ndim, global shape or placements than mesh rank %d",
                          r, mesh->rank);
    }
    if (st == DT_OK && infer) {
        /* Ranks at coordinate 0 on every mesh dim that does not shard d partition dim d. */
        int ndim = (int)mine[ROW_NDIM], coord[DT_MESH_MAX_NDIM];
        for (int d = 0; d < ndim; d++) global_io[d] = 0;
        for (int r = 0; r < mesh->nranks; r++) {
            dt_mesh_coord_of(mesh, r, coord);
            for (int d = 0; d < ndim; d++) {
                int on_line = 1;
                for (int m = 0; m < mesh->ndim; m++) {
                    int shards_d = mine[ROW_PLACE + 3 * m] == DT_PLACEMENT_SHARD &&
                                   mine[ROW_PLACE + 3 * m + 1] == d;
                    if (!shards_d && coord[m] != 0) on_line = 0;
                }
                if (on_line) global_io[d] += rows[(size_t)r * ROW_LEN + ROW_LOCAL + d];
            }
        }
    }
    /* Every rank's shard must be the one torch.chunk gives for the (inferred) global shape. */
    for (int r = 0; st == DT_OK && r < mesh->nranks; r++) {
        int ndim = (int)mine[ROW_NDIM], coord[DT_MESH_MAX_NDIM];
        int64_t want[DT_MAX_NDIM], off[DT_MAX_NDIM];
        dt_placement pl[DT_MESH_MAX_NDIM];
        for (int m = 0; m < mesh->ndim; m++)
            pl[m] = (dt_placement){(dt_placement_kind)mine[ROW_PLACE + 3 * m],
                                   mine[ROW_PLACE + 3 * m] == DT_PLACEMENT_SHARD
                                       ? (int)mine[ROW_PLACE + 3 * m + 1] : 0,
                                   (dt_reduce_op)mine[ROW_PLACE + 3 * m + 2], 0};
        dt_mesh_coord_of(mesh, r, coord);
        dt_shard_layout(mesh->ndim, mesh->shape, coord, ndim, global_io, pl, want, off);
        const int64_t *got = rows + (size_t)r * ROW_LEN + ROW_LOCAL;
        if (memcmp(want, got, sizeof(int64_t) * (size_t)ndim) != 0) {
            char g[96], w[96], full[96];
            dt_shape_text(got, ndim, g, sizeof g);
            dt_shape_text(want, ndim, w, sizeof w);
            dt_shape_text(global_io, ndim, full, sizeof full);
            st = dt_error(DT_ERR_SHAPE, "dt_tensor_from_local: mesh rank %d holds a %s shard, but "
                                        "torch.chunk of global shape %s gives it %s",
                          r, g, full, w);
        }
    }
    free(rows);
    return st;
}

dt_status dt_tensor_from_local(dt_mesh *mesh, void *local, dt_dtype dtype, int ndim,
                               const int64_t *local_shape, int nplacements,
                               const dt_placement *placements, const int64_t *global_shape,
                               unsigned flags,
                               dt_tensor **out) {
    DT_ARG_NOT_NULL(out);
    DT_ARG((flags & ~(DT_FROM_LOCAL_BORROW | DT_FROM_LOCAL_CHECK)) == 0,
           "dt_tensor_from_local: argument flags = 0x%x has unknown bits", flags);
    dt_placement norm[DT_MESH_MAX_NDIM];
    DT_CHECK(dt_spec_check("dt_tensor_from_local", mesh, dtype, ndim, local_shape,
                           nplacements, placements, norm));
    if (global_shape)
        DT_CHECK(dt_shape_dtype_check("dt_tensor_from_local (global_shape)", ndim, global_shape,
                                      dtype));
    size_t numel = dt_shape_numel(local_shape, ndim);
    DT_ARG(local != NULL || numel == 0, "dt_tensor_from_local: argument local is NULL for a "
                                        "%zu-element shard", numel);
    int64_t global[DT_MAX_NDIM];
    if (global_shape) memcpy(global, global_shape, sizeof(int64_t) * (size_t)ndim);
    if (!global_shape || (flags & DT_FROM_LOCAL_CHECK)) {
        int64_t row[ROW_LEN];
        row_fill(row, dtype, ndim, local_shape, global_shape, norm, mesh->ndim);
        DT_CHECK(agree_on_spec(mesh, row, global, global_shape == NULL));
        if (!global_shape) /* the sum of every rank's local shape */
            DT_CHECK(dt_shape_dtype_check("dt_tensor_from_local (inferred global shape)", ndim,
                                          global, dtype));
    } else {
        int64_t want[DT_MAX_NDIM] = {0}, off[DT_MAX_NDIM];
        if (mesh->rank >= 0) /* outside the mesh the shard is empty */
            dt_shard_layout(mesh->ndim, mesh->shape, mesh->coord, ndim, global, norm, want, off);
        if (memcmp(want, local_shape, sizeof(int64_t) * (size_t)ndim) != 0) {
            char g[96], w[96], full[96];
            dt_shape_text(local_shape, ndim, g, sizeof g);
            dt_shape_text(want, ndim, w, sizeof w);
            dt_shape_text(global, ndim, full, sizeof full);
            return dt_error(DT_ERR_SHAPE, "dt_tensor_from_local: local_shape %s does not match "
                                          "the %s shard that global shape %s gives mesh rank %d",
                            g, w, full, mesh->rank);
        }
    }
    /* Like torch's from_local, data on another device than the rank's is copied over. */
    dt_device device = mesh->ctx->dev.device;
    const dt_mem_ops *mem = dt_mem_ops_of(device.kind);
    dt_ctx_bind(mesh->ctx);
    dt_device_kind have = numel ? dt_mem_kind_of(local) : device.kind;
    if (have != device.kind && (flags & DT_FROM_LOCAL_BORROW))
        return dt_error(DT_ERR_DEVICE, "dt_tensor_from_local: argument local is %s memory but the "
                                       "rank's device is %s, so it cannot be borrowed",
                        dt_mem_ops_of(have)->name, mem->name);
    void *data = local;
    if (!(flags & DT_FROM_LOCAL_BORROW) && numel) {
        size_t bytes = numel * dt_dtype_size(dtype);
        if (!(data = mem->alloc(bytes))) {
            dt_error_prefix("dt_tensor_from_local");
            return DT_ERR_NOMEM;
        }
        dt_status st = dt_mem_transfer(data, device.kind, local, have, bytes);
        if (st != DT_OK) {
            mem->free(data);
            return st;
        }
    }
    dt_status st = dt_tensor_new(mesh, device, dtype, ndim, global, norm, numel ? data : NULL,
                                 !(flags & DT_FROM_LOCAL_BORROW), out);
    if (st != DT_OK && data != local) mem->free(data);
    return st;
}

dt_status dt_tensor_to_device(dt_tensor *tensor, dt_device device, dt_tensor **out) {
    DT_TENSOR_ARG(tensor);
    DT_ARG_NOT_NULL(out);
    const dt_mem_ops *to = dt_mem_ops_of(device.kind);
    if (!to)
        return dt_error(device.kind == DT_DEVICE_CUDA ? DT_ERR_UNSUPPORTED : DT_ERR_ARG,
                        "dt_tensor_to_device: argument device.kind = %d: %s", (int)device.kind,
                        device.kind == DT_DEVICE_CUDA ? "this build has no CUDA"
                                                      : "not a device kind");
    dt_ctx *ctx = tensor->mesh->ctx;
    if (device.kind == DT_DEVICE_CUDA && (!ctx->dev.cuda || ctx->dev.device.index != device.index))
        return dt_error(DT_ERR_DEVICE,
                        "dt_tensor_to_device: argument device is CUDA device %d, "
                        "but this rank works on %s %d (dt_ctx_set_device)",
                        device.index, dt_mem_ops_of(ctx->dev.device.kind)->name,
                        ctx->dev.device.index);
    if (device.kind == DT_DEVICE_CPU) device.index = 0;
    dt_ctx_bind(ctx);
    dt_tensor *t;
    DT_CHECK(dt_tensor_alloc(tensor->mesh, device, tensor->dtype, tensor->ndim, tensor->shape,
                             tensor->placements, &t));
    size_t bytes = tensor->local_numel * dt_dtype_size(tensor->dtype);
    dt_status st = dt_mem_transfer(t->data, device.kind, tensor->data, tensor->device.kind, bytes);
    /* Complete on return, also when both sides are one device's. */
    if (st == DT_OK && bytes && device.kind == tensor->device.kind) st = to->sync();
    if (st != DT_OK) {
        dt_tensor_release(t);
        return st;
    }
    *out = t;
    return DT_OK;
}

dt_status dt_tensor_local_to_host(dt_tensor *tensor, void *out, size_t out_bytes) {
    DT_TENSOR_ARG(tensor);
    size_t bytes = tensor->local_numel * dt_dtype_size(tensor->dtype);
    DT_ARG(out != NULL || bytes == 0, "dt_tensor_local_to_host: argument out is NULL");
    if (out_bytes < bytes)
        return dt_error(DT_ERR_SIZE, "dt_tensor_local_to_host: out_bytes = %zu is less than the "
                                     "%zu bytes of the shard", out_bytes, bytes);
    dt_ctx_bind(tensor->mesh->ctx);
    return bytes ? dt_tensor_mem(tensor)->download(out, tensor->data, bytes) : DT_OK;
}
