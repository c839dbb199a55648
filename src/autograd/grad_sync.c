/* Grad sync, coalesced: after a backward, the leaves whose gradients need the same collectives
 * (the same redistribute steps over the same mesh dims with the same reduce op, dtype and
 * device) are reduced together, as DDP's buckets and FSDP2's per-group reduce_scatter do: one
 * all_reduce over a flat buffer holding all of them, one reduce_scatter whose input is laid out
 * member by member (member k's region = the concatenation of every leaf's chunk for k), each
 * up to the bucket cap. Per element the sums are those of reducing each leaf alone: the
 * collectives reduce every element in group-rank order whatever its position in the buffer.
 * A leaf whose move takes several collectives (HSDP: a reduce_scatter, then an all_reduce) takes
 * them in rounds, each shared with the leaves taking the same one next. Plans with other steps
 * (gathers, local slices, pending norms) go leaf by leaf. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "comm/comm_impl.h"
#include "core/alloc.h"
#include "core/box.h"
#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "redistribute/redistribute_impl.h"
#include "trace/trace_impl.h"

#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20) /* DDP's bucket_cap_mb */

/* A leaf on its way: its gradient's block on this rank under the current placements. */
typedef struct item {
    dt_tensor *leaf;
    const dt_plan *plan; /* retained; NULL: goes alone through dt_tensor_redistribute */
    int pos;             /* where backward first reached it (sorting only) */
    int next;            /* its plan's next step */
    size_t bytes;        /* of the whole gradient: buckets are cut alike on every rank */
    void *cur;           /* the block: the gradient's data until a step makes a new one */
    bool owned;
    bool in_grad; /* cur is the gradient's own storage, reduced in place (all_reduce_bufs) */
    int64_t shape[DT_MAX_NDIM], off[DT_MAX_NDIM];
    size_t numel;
    int64_t src; /* the trace event that made the block (the placed gradient's readers wait) */
} item;

typedef struct sync {
    dt_mesh *mesh;
    const dt_mem_ops *mem;
    dt_dtype dtype;
    size_t es;
} sync;

static size_t bucket_cap(const dt_ctx *ctx) {
    const dt_autograd_state *ag = dt_ctx_slot_peek(ctx, DT_CTX_SLOT_AUTOGRAD);
    return ag->grad_bucket_bytes ? ag->grad_bucket_bytes - 1 : DEFAULT_BUCKET_BYTES;
}

/* Steps a bucket can run together: one collective over a group reducing (not a pending norm)
 * into Replicate or a shard, and relabels; at least one collective. */
static bool coalescable(const dt_plan *p) {
    int colls = 0;
    for (int i = 0; i < p->nsteps; i++) {
        const dt_plan_step *s = &p->steps[i];
        if (s->kind == DT_STEP_RELABEL) continue;
        if (s->kind != DT_STEP_ALL_REDUCE && s->kind != DT_STEP_REDUCE_SCATTER) return false;
        if (s->before[__builtin_ctz(s->mesh_mask)].op == DT_REDUCE_NORM) return false;
        colls++;
    }
    return colls > 0;
}

/* The step an item takes next, past relabels (nothing moves); NULL when done. */
static const dt_plan_step *next_step(item *it) {
    while (it->plan && it->next < it->plan->nsteps &&
           it->plan->steps[it->next].kind == DT_STEP_RELABEL)
        it->next++;
    return it->plan && it->next < it->plan->nsteps ? &it->plan->steps[it->next] : NULL;
}

/* Whether two items' next steps are one collective: same kind over the same mesh dims with the
 * same reduce op, on gradients of one mesh, dtype and device. */
static bool same_step(item *a, item *b) {
    const dt_plan_step *s = next_step(a), *t = next_step(b);
    const dt_tensor *ga = dt_ag(a->leaf)->grad, *gb = dt_ag(b->leaf)->grad;
    if (!s || !t || s->kind != t->kind || s->mesh_mask != t->mesh_mask) return false;
    int m = __builtin_ctz(s->mesh_mask);
    return s->before[m].op == t->before[m].op && ga->mesh == gb->mesh && ga->dtype == gb->dtype &&
           ga->device.kind == gb->device.kind && ga->device.index == gb->device.index;
}

/* Replaces an item's block by buf (numel elements, owned), laid out under placements pl (the
 * item's own plan's: leaves sharing a collective may lie differently on the other dims). */
static void item_take(const sync *x, item *it, void *buf, const dt_placement *pl) {
    if (it->owned) x->mem->free(it->cur);
    it->cur = buf, it->owned = true;
    dt_tensor *g = dt_ag(it->leaf)->grad;
    dt_shard_layout(x->mesh->ndim, x->mesh->shape, x->mesh->coord, g->ndim, g->shape, pl,
                    it->shape, it->off);
    it->numel = dt_shape_numel(it->shape, g->ndim);
}

/* Copies n elements at src + at into a new buffer. */
static dt_status copy_out(const sync *x, const char *src, size_t at, size_t n, void **out) {
    void *p = x->mem->alloc(n * x->es);
    if (!p) return dt_error(DT_ERR_NOMEM, "grad sync: out of memory");
    dt_status st = x->mem->copy(p, src + at * x->es, n * x->es);
    if (st != DT_OK) x->mem->free(p);
    else *out = p;
    return st;
}

/* Whether an item's block may be reduced where it lies: a block of its own, or its gradient's
 * storage when nothing else holds that gradient (it is replaced by the reduced one). */
static bool writable(const item *it) {
    const dt_tensor *g = dt_ag(it->leaf)->grad;
    return it->owned ||
           (it->cur == g->data && g->owned && !g->dropped && atomic_load(&g->refs) == 1);
}

/* P -> R with no packed copy (the backend reduces the blocks where they lie): blocks that are
 * not writable are copied first. The same bits as the packed form: every element is reduced
 * over the members in group-rank order either way. */
static dt_status all_reduce_in_place(sync *x, dt_comm *c, item **b, int n) {
    const dt_plan_step *s = next_step(b[0]);
    void **bufs = dt_host_alloc(sizeof *bufs * (size_t)n);
    size_t *counts = dt_host_alloc(sizeof *counts * (size_t)n);
    dt_status st = bufs && counts ? DT_OK : dt_error(DT_ERR_NOMEM, "grad sync: out of memory");
    for (int i = 0; i < n && st == DT_OK; i++) {
        item *it = b[i];
        if (!writable(it)) {
            void *p;
            st = copy_out(x, it->cur, 0, it->numel, &p);
            if (st != DT_OK) break;
            it->cur = p, it->owned = true;
        }
        it->in_grad = !it->owned;
        bufs[i] = it->cur, counts[i] = it->numel;
    }
    if (st == DT_OK)
        st = dt_comm_all_reduce_bufs(c, bufs, counts, n, x->dtype,
                                     s->before[__builtin_ctz(s->mesh_mask)].op);
    dt_host_free(bufs), dt_host_free(counts);
    return st;
}

/* P -> R over the step's group: one in-place all_reduce of the bucket's blocks, packed. */
static dt_status all_reduce(sync *x, dt_comm *c, item **b, int n) {
    const dt_plan_step *s = next_step(b[0]);
    /* Host blocks on a backend that reduces arrays where they lie: no pack, no unpack. An
     * all_reduce keeps each block's layout (P -> R on the step's dims). */
    if (x->mem == &dt_mem_cpu && dt_comm_all_reduce_bufs_here(c))
        return all_reduce_in_place(x, c, b, n);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += b[i]->numel;
    char *flat = x->mem->alloc(total * x->es);
    if (!flat) return dt_error(DT_ERR_NOMEM, "grad sync: out of memory for %zu elements", total);
    dt_status st = DT_OK;
    for (size_t i = 0, at = 0; i < (size_t)n && st == DT_OK; at += b[i++]->numel)
        st = x->mem->copy(flat + at * x->es, b[i]->cur, b[i]->numel * x->es);
    if (st == DT_OK)
        st = dt_all_reduce(c, flat, flat, total, x->dtype,
                           s->before[__builtin_ctz(s->mesh_mask)].op);
    for (size_t i = 0, at = 0; i < (size_t)n && st == DT_OK; at += b[i++]->numel) {
        void *p;
        st = copy_out(x, flat, at, b[i]->numel, &p);
        if (st == DT_OK) item_take(x, b[i], p, next_step(b[i])->after);
    }
    x->mem->free(flat);
    return st;
}

/* Elements of an item's block cut to extent e along d. */
static size_t chunk_numel(const item *it, int d, int64_t e) {
    int64_t shape[DT_MAX_NDIM];
    memcpy(shape, it->shape, sizeof shape);
    shape[d] = e;
    return dt_shape_numel(shape, dt_ag(it->leaf)->grad->ndim);
}

/* P -> S(d) over the step's group of g members: member k's region of the input holds every
 * leaf's chunk for k (its block cut along d to member k's after-layout), in bucket order; this
 * rank receives the concatenation of its own chunks. */
static dt_status reduce_scatter(sync *x, dt_comm *c, item **b, int n) {
    const dt_plan_step *s = next_step(b[0]);
    int g = s->group_size, me = dt_comm_rank(c), m0 = __builtin_ctz(s->mesh_mask);
    int64_t *ext = dt_host_alloc(sizeof *ext * (size_t)g * (size_t)n * 2), *off = ext + g * n;
    size_t *counts = dt_host_calloc(sizeof *counts * (size_t)g), total = 0;
    char *send = NULL, *recv = NULL;
    dt_status st = ext && counts ? DT_OK : dt_error(DT_ERR_NOMEM, "grad sync: out of memory");
    /* The members' chunks along d (member coordinates row-major over the step's dims). */
    for (int k = 0; k < g && st == DT_OK; k++) {
        int coord[DT_MESH_MAX_NDIM], r = k;
        memcpy(coord, x->mesh->coord, sizeof coord);
        for (int m = x->mesh->ndim - 1; m >= 0; m--)
            if (s->mesh_mask & (1u << m)) coord[m] = r % x->mesh->shape[m], r /= x->mesh->shape[m];
        for (int i = 0; i < n; i++) {
            const dt_tensor *t = dt_ag(b[i]->leaf)->grad;
            const dt_placement *after = next_step(b[i])->after;
            int64_t shape[DT_MAX_NDIM], o[DT_MAX_NDIM];
            int d = after[m0].dim;
            dt_shard_layout(x->mesh->ndim, x->mesh->shape, coord, t->ndim, t->shape, after, shape,
                            o);
            ext[k * n + i] = shape[d], off[k * n + i] = o[d] - b[i]->off[d];
            counts[k] += chunk_numel(b[i], d, shape[d]);
        }
        total += counts[k];
    }
    if (st == DT_OK && (!(send = x->mem->alloc(total * x->es)) ||
                        !(recv = x->mem->alloc(counts[me] * x->es))))
        st = dt_error(DT_ERR_NOMEM, "grad sync: out of memory for %zu elements", total);
    char *p = send;
    for (int k = 0; k < g && st == DT_OK; k++)
        for (int i = 0; i < n && st == DT_OK; i++) {
            item *it = b[i];
            int nd = dt_ag(it->leaf)->grad->ndim, d = next_step(it)->after[m0].dim;
            int64_t box[DT_MAX_NDIM], at[DT_MAX_NDIM] = {0};
            memcpy(box, it->shape, sizeof box);
            box[d] = ext[k * n + i], at[d] = off[k * n + i];
            st = x->mem->box_copy(p, box, NULL, it->cur, it->shape, at, box, nd, x->es);
            p += dt_shape_numel(box, nd) * x->es;
        }
    if (st == DT_OK)
        st = dt_reduce_scatterv(c, send, recv, counts, x->dtype, s->before[m0].op);
    for (size_t i = 0, at = 0; i < (size_t)n && st == DT_OK; i++) {
        item *it = b[i];
        int d = next_step(it)->after[m0].dim;
        size_t cnt = chunk_numel(it, d, ext[(size_t)me * (size_t)n + i]);
        void *q;
        st = copy_out(x, recv, at, cnt, &q);
        if (st == DT_OK) item_take(x, it, q, next_step(it)->after);
        at += cnt;
    }
    if (send) x->mem->free(send);
    if (recv) x->mem->free(recv);
    dt_host_free(ext);
    dt_host_free(counts);
    return st;
}

/* A leaf's gradient once its last step is taken: the block, owned by a new tensor in the
 * leaf's placements, replaces the gradient at once (its whole-tensor Partial goes). */
static dt_status place(item *it) {
    dt_tensor *g = dt_ag(it->leaf)->grad, *out;
    bool take = !it->owned && it->in_grad; /* g's storage, reduced in place: out takes it over */
    DT_CHECK(dt_tensor_new(g->mesh, g->device, g->dtype, g->ndim, g->shape, it->leaf->placements,
                           it->cur, !take, &out));
    /* Made as borrowed, then the owner swapped: the live bytes count g's storage once, as
     * in-place ops do (dtensor/tensor_impl.h). */
    if (take) out->owned = true, g->owned = false;
    it->cur = NULL, it->owned = false, it->in_grad = false;
    out->trace_src = it->src;
    dt_tensor_release(g);
    it->leaf->ag->grad = out;
    return DT_OK;
}

/* One bucket: the first item with a step to take and the items after it taking the same one,
 * up to the cap; each moves one step on. *done when no item has a step left. */
static dt_status run_bucket(dt_ctx *ctx, size_t cap, item *items, int nitems, item **b, int *ncoll,
                            bool *done) {
    int lead = 0;
    while (lead < nitems && !next_step(&items[lead])) lead++;
    if ((*done = lead == nitems)) return DT_OK;
    int n = 0;
    size_t bytes = 0;
    for (int i = lead; i < nitems; i++) {
        if (i != lead && !same_step(&items[lead], &items[i])) continue;
        if (n && (bytes + items[i].bytes > cap)) break;
        b[n++] = &items[i], bytes += items[i].bytes;
    }
    dt_tensor *g = dt_ag(b[0]->leaf)->grad;
    sync x = {.mesh = g->mesh, .mem = dt_tensor_mem(g), .dtype = g->dtype,
              .es = dt_dtype_size(g->dtype)};
    const dt_plan_step *s = next_step(b[0]);
    dt_comm *c;
    DT_CHECK(dt_mesh_lane_comm(x.mesh, s->mesh_mask, 0, &c));
    dt_ctx_bind(ctx);
    /* The trace names one producer per collective: the bucket's first gradient's; and the
     * placements of the step's mesh dims it moves between. */
    dt_trace_coll_site prev = dt_trace_coll_tls;
    char from[40] = "", to[40] = "";
    if (dt_trace_is_on(ctx->trace)) {
        dt_placement a[DT_MESH_MAX_NDIM], z[DT_MESH_MAX_NDIM];
        int nm = 0;
        for (int m = 0; m < x.mesh->ndim; m++)
            if (s->mesh_mask & (1u << m)) a[nm] = s->before[m], z[nm++] = s->after[m];
        dt_placements_format(a, nm, from, sizeof from);
        dt_placements_format(z, nm, to, sizeof to);
    }
    dt_trace_coll_tls = (dt_trace_coll_site){.input = b[0]->src, .from = from, .to = to};
    dt_trace_last_coll_tls = 0;
    dt_status run = s->kind == DT_STEP_ALL_REDUCE ? all_reduce(&x, c, b, n)
                                                 : reduce_scatter(&x, c, b, n);
    dt_trace_coll_tls = prev;
    DT_CHECK(run);
    for (int i = 0; i < n && dt_trace_last_coll_tls; i++) b[i]->src = dt_trace_last_coll_tls;
    *ncoll += 1;
    dt_status st = DT_OK;
    for (int i = 0; i < n; i++) {
        b[i]->next++;
        if (st == DT_OK && !next_step(b[i])) st = place(b[i]);
    }
    return st;
}

/* One leaf alone (no steps to share): the gradient redistributed to the leaf's placements. */
static dt_status sync_alone(dt_tensor *leaf) {
    dt_tensor *moved;
    DT_CHECK(dt_tensor_redistribute(dt_ag(leaf)->grad, leaf->mesh->ndim, leaf->placements, &moved));
    dt_tensor_release(dt_ag(leaf)->grad);
    leaf->ag->grad = moved;
    return DT_OK;
}

static bool placed(const dt_tensor *leaf) {
    for (int m = 0; m < leaf->mesh->ndim; m++)
        if (!dt_placement_equal(dt_ag(leaf)->grad->placements[m], leaf->placements[m]))
            return false;
    return true;
}

static int by_leaf(const void *a, const void *b) {
    const item *x = a, *y = b;
    uintptr_t p = (uintptr_t)x->leaf, q = (uintptr_t)y->leaf;
    return p < q ? -1 : p > q ? 1 : x->pos - y->pos;
}

static int by_pos(const void *a, const void *b) {
    return ((const item *)a)->pos - ((const item *)b)->pos;
}

/* The leaves to place, each once, in the order backward first reached them: items[0..n). */
static int collect(dt_tensor *const *leaves, int nleaves, item *items) {
    int k = 0, n = 0;
    for (int i = 0; i < nleaves; i++)
        if (dt_ag(leaves[i])->grad && !placed(leaves[i]))
            items[k++] = (item){.leaf = leaves[i], .pos = i};
    qsort(items, (size_t)k, sizeof *items, by_leaf);
    for (int i = 0; i < k; i++)
        if (!n || items[n - 1].leaf != items[i].leaf) items[n++] = items[i];
    qsort(items, (size_t)n, sizeof *items, by_pos);
    return n;
}

dt_status dt_grad_sync(dt_tensor *const *leaves, int nleaves) {
    if (nleaves <= 0) return DT_OK;
    dt_ctx *ctx = leaves[0]->mesh->ctx;
    /* the rank's arena: a step's scratch takes no fresh pages */
    item *items = dt_host_calloc(sizeof *items * (size_t)nleaves);
    item **bucket = dt_host_calloc(sizeof *bucket * (size_t)nleaves);
    if (!items || !bucket) {
        dt_host_free(items), dt_host_free(bucket);
        return dt_error(DT_ERR_NOMEM, "grad sync: out of memory for %d leaves", nleaves);
    }
    double t0 = ctx->trace ? dt_now_us() : 0;
    size_t cap = bucket_cap(ctx);
    int n = collect(leaves, nleaves, items), alone = 0, ncoll = 0;
    dt_status st = DT_OK;
    /* Plans first (retained: planning others may evict them from the cache). */
    for (int i = 0; i < n && st == DT_OK; i++) {
        item *it = &items[i];
        dt_tensor *g = dt_ag(it->leaf)->grad;
        const dt_plan *p;
        st = dt_redistribute_cached_plan(g, it->leaf->placements, &p);
        if (st != DT_OK || cap == 0 || !coalescable(p)) continue;
        dt_plan_retain(it->plan = p);
        it->cur = g->data, it->numel = g->local_numel, it->src = g->trace_src;
        it->bytes = dt_shape_numel(g->shape, g->ndim) * dt_dtype_size(g->dtype);
        memcpy(it->shape, g->local_shape, sizeof it->shape);
        memcpy(it->off, g->local_offset, sizeof it->off);
    }
    for (int i = 0; i < n && st == DT_OK; i++)
        if (!items[i].plan) st = sync_alone(items[i].leaf), alone++;
    for (bool done = false; st == DT_OK && !done;)
        st = run_bucket(ctx, cap, items, n, bucket, &ncoll, &done);
    for (int i = 0; i < n; i++) { /* blocks of leaves left unplaced by a failure */
        item *it = &items[i];
        if (it->owned) dt_mem_ops_of(dt_ag(it->leaf)->grad->device.kind)->free(it->cur);
        if (it->plan) dt_plan_release(it->plan);
    }
    if (ctx->trace && st == DT_OK && n)
        dt_trace_record(ctx, DT_LANE_OPS, "grad_sync", t0,
                        "%d leaves: %d coalesced in %d collectives, %d alone", n, n - alone, ncoll,
                        alone);
    dt_host_free(items);
    dt_host_free(bucket);
    return st;
}

dt_status dt_ctx_set_grad_bucket_bytes(dt_ctx *ctx, size_t bytes) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG(bytes < SIZE_MAX, "dt_ctx_set_grad_bucket_bytes: argument bytes = %zu is too large",
           bytes);
    dt_autograd_of(ctx)->grad_bucket_bytes = bytes + 1;
    return DT_OK;
}
