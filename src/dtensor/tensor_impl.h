/* The body of dt_tensor and the spec helpers the dtensor layer shares. */
#ifndef DT_TENSOR_IMPL_H
#define DT_TENSOR_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "core/check.h"
#include "core/device.h"
#include "dtensor/device.h"
#include "dtensor/tensor.h"

/* magic of a live tensor; a released one's shell holds DT_TENSOR_DEAD for a while (see
 * tensor.c's quarantine), so a second release or a use after it fails cleanly. */
#define DT_TENSOR_LIVE 0x7e5a11feu
#define DT_TENSOR_DEAD 0xdeadbeefu

/* tensor.c's make zeroes a new shell, but dt_tensor_alloc_laid_out (the cached dispatch's
 * outputs) sets it field by field: a new field must be set there too. */
struct dt_tensor {
    unsigned magic;
    atomic_int refs;
    dt_mesh *mesh; /* retained */
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_placement placements[DT_MESH_MAX_NDIM];
    int64_t local_shape[DT_MAX_NDIM];
    int64_t local_offset[DT_MAX_NDIM];
    size_t local_numel;
    void *data;       /* on device */
    dt_device device; /* where data lives */
    bool owned;
    /* Its storage was freed after a forward (dt_tensor_storage_drop); an owner refills it. */
    bool dropped;
    /* The autograd layer's state of this tensor (whether it requires grad, the node that made
     * it, a leaf's gradient, hooks of saved tensors): opaque here, NULL until autograd first
     * marks the tensor, freed through the hook that layer registers (dt_tensor_slot_hook). */
    struct dt_grad_slot *ag;
    /* The trace event that produced data (a kernel's or a collective's id, trace/trace_impl.h),
     * set only while the rank traces, so that its readers can list what they waited for; 0 or
     * an id of an earlier recording means unknown. */
    int64_t trace_src;
    /* Bumped by every op that writes its storage in place (dt_op_call_inplace): autograd
     * compares it with the count a node saw when it recorded t as an input, so a backward
     * never reads values an in-place op overwrote (PyTorch's version counter). */
    unsigned version;
};

/* Called with t and its autograd slot when a tensor that has one dies. The autograd layer
 * registers it before it makes the first slot; the dtensor layer knows nothing else of it. */
typedef void (*dt_tensor_slot_free_fn)(dt_tensor *t, struct dt_grad_slot *slot);
void dt_tensor_slot_hook(dt_tensor_slot_free_fn fn);

/* Whether t's storage was dropped (dt_tensor_storage_drop) and not yet refilled. */
static inline bool dt_tensor_storage_dropped(const dt_tensor *t) {
    return t->dropped;
}

/* Frees t's owned storage and marks it dropped (its spec, node and references stay): live
 * bytes fall by its size. A dropped tensor is not an op's input until it is refilled. */
void dt_tensor_storage_drop(dt_tensor *t);
/* Gives a dropped t fresh uninitialised storage of its size (the caller fills it). */
dt_status dt_tensor_storage_alloc(dt_tensor *t);
/* Gives a dropped t the storage data (its size, from its device's allocator: what a peer's
 * collective filled in place), which t then owns; no-op unless t is dropped. */
void dt_tensor_storage_adopt(dt_tensor *t, void *data);

/* DT_ERR_ARG naming fn and the argument when t is NULL, released or not a tensor. */
static inline dt_status dt_tensor_check(const char *fn, const char *arg, const dt_tensor *t) {
    if (!t) return dt_error_set(DT_ERR_ARG, "%s: argument %s is NULL", fn, arg);
    if (t->magic != DT_TENSOR_LIVE)
        return dt_error_set(DT_ERR_ARG, "%s: argument %s (%p) is a released tensor (or not a "
                                        "tensor)", fn, arg, (const void *)t);
    return DT_OK;
}

#define DT_TENSOR_ARG(t) DT_CHECK(dt_tensor_check(__func__, #t, (t)))

/* The dtensor layer's state in each context's slot (all zero as created): the rank's tensors
 * alive and their owned bytes (tensor.c, dt_ctx_tensor_memory; in-place ops swap data and
 * ownership between two tensors of the same local shape, so the sum stays right), and whether
 * arguments are checked for agreement across ranks (agree.c, DT_DEBUG_ARGS). */
typedef struct dt_dtensor_state {
    atomic_llong tensors, bytes; /* changes made on threads other than the rank's own */
    atomic_llong peak;           /* most bytes since start or the last reset */
    int debug_args;              /* DT_AGREE_UNREAD, _OFF or _ON (agree.h) */
    /* Changes made on the rank's own thread (the one its arena is bound to), the common case:
     * only that thread writes them, so it updates them without a locked instruction; readers
     * add the two. */
    atomic_llong own_tensors, own_bytes;
} dt_dtensor_state;

/* The memory table of t's device. */
static inline const dt_mem_ops *dt_tensor_mem(const dt_tensor *t) {
    return dt_mem_ops_of(t->device.kind);
}

/* Checks dtype, ndim and shape of a spec; fn names the public call for messages. */
dt_status dt_shape_dtype_check(const char *fn, int ndim, const int64_t *shape, dt_dtype dtype);

/* Checks mesh, dtype, shape and placements of a spec and returns the placements normalised
 * in norm_out (mesh ndim entries). fn names the public call for messages. */
dt_status dt_spec_check(const char *fn, const dt_mesh *mesh, dt_dtype dtype, int ndim,
                        const int64_t *shape, int nplacements, const dt_placement *placements,
                        dt_placement *norm_out);

/* The first mesh dim holding Partial(norm), -1 when none does. */
static inline int dt_placements_find_norm(const dt_placement *p, int n) {
    for (int m = 0; m < n; m++)
        if (p[m].kind == DT_PLACEMENT_PARTIAL && p[m].op == DT_REDUCE_NORM) return m;
    return -1;
}

/* DT_ERR_DTYPE when placements hold Partial(norm) and dtype is not a float type: a pending
 * norm of integers would need an integer root. */
dt_status dt_norm_partial_dtype_check(const char *fn, const dt_placement *placements, int n,
                                      dt_dtype dtype);

/* Combining a pending p-norm over a group (norm_partial.c): raise each part to p in place
 * (pre), run the collective with dt_norm_partial_reduce_op(p) (sum for finite p, max for inf,
 * min for -inf), raise the result to 1/p (post). pre and post do nothing for p = 0, 1, inf
 * and -inf. Work is queued on mem's device. */
dt_reduce_op dt_norm_partial_reduce_op(double ord);
dt_status dt_norm_partial_pre(const dt_mem_ops *mem, dt_dtype dtype, void *buf, size_t count,
                              double ord);
dt_status dt_norm_partial_post(const dt_mem_ops *mem, dt_dtype dtype, void *buf, size_t count,
                               double ord);

/* n placements p (one per mesh dim, for a tensor of tensor_ndim dims and dtype dtype)
 * checked and normalised into out, with fn prefixed to the error: the check of a placement
 * argument at a public boundary. */
dt_status dt_placements_check(const char *fn, const dt_placement *p, int n, int tensor_ndim,
                              dt_dtype dtype, dt_placement *out);

/* nplacements placements given for a mesh of mesh_ndim dims: DT_ERR_PLACEMENT unless equal.
 * what names the argument for the message. */
dt_status dt_placement_count_check(const char *fn, const char *what, int nplacements,
                                   const dt_placement *placements, int mesh_ndim);

/* Allocates a tensor on device for a checked spec; data NULL allocates zeroed storage,
 * otherwise the tensor takes data (on device) as it is (owned says whether release frees
 * it). */
dt_status dt_tensor_new(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                        const int64_t *shape, const dt_placement *norm, void *data, bool owned,
                        dt_tensor **out);

/* The same with uninitialised owned storage (for outputs a kernel fills entirely). */
dt_status dt_tensor_alloc(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                          const int64_t *shape, const dt_placement *norm, dt_tensor **out);

/* dt_tensor_alloc with this rank's local shape and offset already known (what dt_shard_layout
 * gives for the mesh's own coordinate): dispatch keeps them with a cached strategy, so a cached
 * op skips the layout computation. shape, local_shape and local_offset are whole arrays of
 * DT_MAX_NDIM, zero past ndim (copied whole). */
dt_status dt_tensor_alloc_laid_out(dt_mesh *mesh, dt_device device, dt_dtype dtype, int ndim,
                                   const int64_t *shape, const dt_placement *norm,
                                   const int64_t *local_shape, const int64_t *local_offset,
                                   dt_tensor **out);

/* Local shape and offset of the shard held by mesh rank r. */
void dt_tensor_layout_of(const dt_tensor *t, int mesh_rank, int64_t *shape_out,
                         int64_t *offset_out);

#endif
