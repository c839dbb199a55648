/* Helpers of ckpt_common.h. Expected shards come from the full tensor by index arithmetic
 * written here, not from the library's layout code. */
#include "ckpt_common.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "rank_helpers.h"

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void *ct_full(const ct_spec *s, size_t *bytes_out) {
    size_t numel = 1, es = dt_dtype_size(s->dtype);
    for (int d = 0; d < s->ndim; d++)
        numel *= (size_t)s->shape[d];
    unsigned char *buf = malloc(numel * es + 1);
    if (!buf) return NULL;
    if (s->small) {
        t_fill(s->dtype, buf, numel, s->seed);
    } else {
        for (size_t i = 0; i < numel * es; i++)
            buf[i] = (unsigned char)mix(s->seed * 1000003u + i);
    }
    *bytes_out = numel * es;
    return buf;
}

dt_status ct_check_shard(dt_tensor *t, const void *full) {
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    size_t es = dt_dtype_size(info.dtype);
    unsigned char *local = malloc(info.local_bytes + 1);
    R_CHECK(local, "out of memory");
    dt_status st = dt_tensor_local_to_host(t, local, info.local_bytes);
    if (st != DT_OK) {
        free(local);
        R_OK(st);
    }
    int zeros = 0;
    for (int d = 0; d < info.mesh_ndim; d++)
        if (info.placements[d].kind == DT_PLACEMENT_PARTIAL &&
            info.placements[d].op == DT_REDUCE_SUM && dt_mesh_coord(info.mesh, d) != 0)
            zeros = 1;
    int64_t idx[DT_MAX_NDIM] = {0};
    for (size_t i = 0; i < info.local_numel; i++) {
        size_t g = 0;
        for (int d = 0; d < info.ndim; d++)
            g = g * (size_t)info.shape[d] + (size_t)(info.local_offset[d] + idx[d]);
        static const unsigned char zero[8];
        const unsigned char *want = zeros ? zero : (const unsigned char *)full + g * es;
        if (memcmp(local + i * es, want, es) != 0) {
            free(local);
            return t_fail(__FILE__, __LINE__, "element %zu of the shard (global %zu) differs", i,
                          g);
        }
        for (int d = info.ndim - 1; d >= 0 && ++idx[d] == info.local_shape[d]; d--)
            idx[d] = 0;
    }
    free(local);
    return DT_OK;
}

static dt_status make(dt_mesh *mesh, const ct_spec *s, int zeros, dt_tensor **out) {
    dt_placement pl[DT_MESH_MAX_NDIM];
    int np;
    R_OK(dt_placements_parse(s->placements, pl, DT_MESH_MAX_NDIM, &np));
    if (zeros) return dt_tensor_zeros(mesh, s->dtype, s->ndim, s->shape, np, pl, out);
    size_t bytes;
    void *full = ct_full(s, &bytes);
    R_CHECK(full, "out of memory");
    dt_status st =
        dt_tensor_distribute(mesh, full, s->dtype, s->ndim, s->shape, np, pl, DT_ALL_RANKS, out);
    free(full);
    return st;
}

dt_status ct_body(dt_ctx *ctx, void *arg) {
    const ct_run *r = arg;
    dt_mesh *mesh;
    if (r->cuda) R_OK(dt_ctx_set_device(ctx, (dt_device){DT_DEVICE_CUDA, -1}));
    R_OK(dt_mesh_create(ctx, r->mesh_ndim, r->mesh_shape, NULL, &mesh));
    dt_tensor *t[CT_MAX] = {0};
    const char *names[CT_MAX];
    dt_status st = DT_OK;
    for (int i = 0; i < r->n && st == DT_OK; i++) {
        names[i] = r->specs[i].name;
        st = make(mesh, &r->specs[i], r->load, &t[i]);
    }
    if (st == DT_OK && !r->load) {
        dt_checkpoint_save_options o = {.blob = r->blob,
                                        .blob_bytes = r->blob ? strlen(r->blob) : 0,
                                        .keep_last = r->keep_last,
                                        .progress = r->progress,
                                        .progress_arg = r->progress_arg,
                                        .block_bytes = r->block_bytes};
        if (r->async) {
            dt_checkpoint_pending *p;
            st = dt_checkpoint_save_async(ctx, r->dir, names, t, r->n, &o, &p);
            for (int i = 0; i < r->n && st == DT_OK; i++) { /* training goes on meanwhile */
                void *local;
                dt_tensor_info info;
                dt_tensor_to_local(t[i], &local);
                dt_tensor_info_get(t[i], &info);
                if (local && info.device.kind == DT_DEVICE_CPU) memset(local, 0x5a, info.local_bytes);
            }
            if (st == DT_OK) st = dt_checkpoint_wait(p);
        } else {
            st = dt_checkpoint_save(ctx, r->dir, names, t, r->n, &o);
        }
    }
    if (st == DT_OK && r->load) {
        dt_comm_stats_reset(ctx);
        dt_checkpoint_load_options lo = {
            .strict = 1, .max_gap = r->max_gap, .verify = r->verify, .no_dist = r->no_dist};
        st = dt_checkpoint_load(r->dir, names, t, r->n, &lo);
        /* collective: one all-reduce of the outcome and nothing else when every rank loads */
        if (st == DT_OK && t_issued_total(ctx) != (r->no_dist ? 0u : 1u))
            st = t_fail(__FILE__, __LINE__, "load issued %llu collectives",
                        (unsigned long long)t_issued_total(ctx));
        for (int i = 0; i < r->n && st == DT_OK; i++) {
            size_t bytes;
            void *full = ct_full(&r->specs[i], &bytes);
            st = full ? ct_check_shard(t[i], full) : DT_ERR_NOMEM;
            if (st != DT_OK) dt_error_prefix(r->specs[i].name);
            free(full);
        }
    }
    for (int i = 0; i < r->n; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return st;
}

ct_spec ct_spec_make(const char *name, dt_dtype dt, int ndim, const int64_t *shape, const char *pl,
                     uint64_t seed, int small) {
    ct_spec s = {.dtype = dt, .ndim = ndim, .seed = seed, .small = small};
    snprintf(s.name, sizeof s.name, "%s", name);
    snprintf(s.placements, sizeof s.placements, "%s", pl);
    for (int d = 0; d < ndim; d++)
        s.shape[d] = shape[d];
    return s;
}

/* The fixed set: uneven sizes, replicated, Partial, empty and 0-d tensors, every dtype. */
ct_run ct_fixed(const char *dir, uint64_t step) {
    ct_run r = {.dir = dir, .mesh_ndim = 2, .mesh_shape = {2, 2}, .blob = "step=42"};
    r.specs[r.n++] =
        ct_spec_make("layers.0.w", DT_F32, 2, (int64_t[]){13, 10}, "S(0),S(1)", 1 + 100 * step, 0);
    r.specs[r.n++] = ct_spec_make("b", DT_BF16, 1, (int64_t[]){7}, "R,S(0)", 2 + 100 * step, 0);
    r.specs[r.n++] =
        ct_spec_make("e", DT_I64, 3, (int64_t[]){5, 3, 4}, "S(2),S(0)", 3 + 100 * step, 0);
    r.specs[r.n++] = ct_spec_make("z", DT_F32, 2, (int64_t[]){0, 4}, "S(0),R", 4 + 100 * step, 0);
    r.specs[r.n++] =
        ct_spec_make("p", DT_F32, 2, (int64_t[]){6, 4}, "P(sum),S(1)", 5 + 100 * step, 1);
    r.specs[r.n++] = ct_spec_make("s", DT_F64, 0, NULL, "R,R", 6 + 100 * step, 0);
    r.specs[r.n++] =
        ct_spec_make("h", DT_F16, 2, (int64_t[]){3, 9}, "S(1),S(1)", 7 + 100 * step, 0);
    r.specs[r.n++] = ct_spec_make("i", DT_I32, 1, (int64_t[]){11}, "R,R", 8 + 100 * step, 0);
    return r;
}
