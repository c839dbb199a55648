/* Device meshes: validation, coordinates, sub-meshes and the communicator of every set of
 * mesh dimensions. Holds no placement logic. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "core/lru.h"
#include "mesh/mesh_impl.h"

#define DEFAULT_CACHE_CAPACITY 4096

/* DT_CACHE_CAPACITY (entries per cache), else the default. */
static size_t env_cache_capacity(void) {
    const char *v = getenv("DT_CACHE_CAPACITY");
    if (!v || !*v) return DEFAULT_CACHE_CAPACITY;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || n < 1 || !isdigit((unsigned char)*v)) {
        static atomic_int warned;
        if (!atomic_exchange(&warned, 1))
            fprintf(stderr, "dtensor: DT_CACHE_CAPACITY=\"%s\" is not a whole number >= 1; "
                            "using %d\n", v, DEFAULT_CACHE_CAPACITY);
        return DEFAULT_CACHE_CAPACITY;
    }
    return (size_t)n;
}

static dt_mesh *root_of(const dt_mesh *m) { return m->root ? m->root : (dt_mesh *)m; }

static dt_status check_name(const char *name, int dim) {
    DT_ARG(name != NULL, "dt_mesh_create: names[%d] is NULL", dim);
    size_t len = strlen(name);
    if (len == 0 || len > DT_MESH_NAME_MAX)
        return dt_error(DT_ERR_MESH, "dt_mesh_create: names[%d] = \"%s\" must have 1 to %d "
                                     "characters", dim, name, DT_MESH_NAME_MAX);
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)name[i]) || name[i] == '_'))
            return dt_error(DT_ERR_MESH, "dt_mesh_create: names[%d] = \"%s\" may only hold "
                                         "letters, digits and '_'", dim, name);
    return DT_OK;
}

dt_status dt_mesh_create(dt_ctx *ctx, int ndim, const int *shape, const char *const *names,
                         dt_mesh **out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(shape);
    DT_ARG_NOT_NULL(out);
    if (ndim < 1 || ndim > DT_MESH_MAX_NDIM)
        return dt_error(DT_ERR_MESH, "dt_mesh_create: ndim = %d is not in [1, %d]", ndim,
                        DT_MESH_MAX_NDIM);
    long long product = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 1)
            return dt_error(DT_ERR_MESH, "dt_mesh_create: shape[%d] = %d must be at least 1", d,
                            shape[d]);
    for (int d = 0; d < ndim; d++) /* saturate: the message shows the true product */
        product = product > (1ll << 40) ? product : product * shape[d];
    if (product != ctx->size) {
        char text[128] = "";
        for (int d = 0, o = 0; d < ndim && o < (int)sizeof text - 12; d++)
            o += snprintf(text + o, sizeof text - (size_t)o, d ? "x%d" : "%d", shape[d]);
        return dt_error(DT_ERR_MESH, "dt_mesh_create: shape %s has %lld ranks but the world has %d",
                        text, product, ctx->size);
    }
    dt_mesh *m = calloc(1, sizeof *m);
    if (!m) return dt_error(DT_ERR_NOMEM, "dt_mesh_create: out of memory");
    for (int d = 0; d < ndim; d++) {
        if (names) {
            dt_status st = check_name(names[d], d);
            for (int e = 0; st == DT_OK && e < d; e++)
                if (strcmp(names[e], names[d]) == 0)
                    st = dt_error(DT_ERR_MESH, "dt_mesh_create: dimension name \"%s\" is used "
                                               "twice (dims %d and %d)", names[d], e, d);
            if (st != DT_OK) {
                free(m);
                return st;
            }
            strcpy(m->names[d], names[d]);
        } else {
            snprintf(m->names[d], sizeof m->names[d], "d%d", d);
        }
        m->shape[d] = shape[d];
        m->root_dim[d] = d;
    }
    m->ranks = malloc(sizeof(int) * (size_t)ctx->size);
    m->comms = calloc((size_t)DT_MESH_LANES << ndim, sizeof *m->comms);
    if (!m->ranks || !m->comms) {
        free(m->ranks);
        free(m->comms);
        free(m);
        return dt_error(DT_ERR_NOMEM, "dt_mesh_create: out of memory");
    }
    atomic_init(&m->refs, 1);
    m->ctx = ctx;
    m->ndim = ndim;
    m->nranks = ctx->size;
    for (int r = 0; r < ctx->size; r++) m->ranks[r] = r;
    m->rank = ctx->rank;
    for (int d = ndim - 1, r = ctx->rank; d >= 0; d--) {
        m->coord[d] = r % shape[d];
        r /= shape[d];
    }
    m->seq = (*(uint64_t *)dt_ctx_slot(ctx, DT_CTX_SLOT_MESH))++; /* meshes made on the rank */
    for (int k = 0; k < DT_CACHE_KIND_COUNT; k++) m->cache_capacity[k] = env_cache_capacity();
    *out = m;
    return DT_OK;
}

/* The largest size one mesh dim may have in text. */
#define MESH_DIM_MAX (1 << 20)

dt_status dt_mesh_parse(const char *text, int *shape_out, char (*names_out)[DT_MESH_NAME_MAX + 1],
                        int *ndim_out) {
    DT_ARG_NOT_NULL(text);
    DT_ARG_NOT_NULL(shape_out);
    DT_ARG_NOT_NULL(ndim_out);
    int shape[DT_MESH_MAX_NDIM], ndim = 0, named = -1;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    const char *p = text;
    for (;;) {
        if (ndim == DT_MESH_MAX_NDIM)
            return dt_error(DT_ERR_PARSE, "dt_mesh_parse: \"%s\" has more than %d dims", text,
                            DT_MESH_MAX_NDIM);
        while (*p == ' ') p++;
        const char *start = p;
        while (isalnum((unsigned char)*p) || *p == '_') p++;
        int has_name = *p == '=';
        if (named >= 0 && has_name != named)
            return dt_error(DT_ERR_PARSE, "dt_mesh_parse: \"%s\": name every dim (\"dp=2,tp=2\") "
                                          "or none (\"2x2\")", text);
        named = has_name;
        if (has_name) {
            size_t len = (size_t)(p - start);
            if (len == 0 || len > DT_MESH_NAME_MAX)
                return dt_error(DT_ERR_PARSE, "dt_mesh_parse: bad name at offset %d of \"%s\"",
                                (int)(start - text), text);
            memcpy(names[ndim], start, len);
            names[ndim][len] = '\0';
            start = ++p;
        } else {
            snprintf(names[ndim], sizeof names[ndim], "d%d", ndim);
            p = start;
        }
        char *end;
        errno = 0;
        long v = strtol(start, &end, 10);
        if (end == start || !isdigit((unsigned char)*start))
            return dt_error(DT_ERR_PARSE, "dt_mesh_parse: expected a size at offset %d of \"%s\"",
                            (int)(start - text), text);
        if (errno == ERANGE || v > MESH_DIM_MAX)
            return dt_error(DT_ERR_PARSE, "dt_mesh_parse: size %.*s at offset %d of \"%s\" is "
                                          "larger than %d ranks", (int)(end - start), start,
                            (int)(start - text), text, MESH_DIM_MAX);
        shape[ndim++] = (int)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == '\0') break;
        if (*p != (named ? ',' : 'x'))
            return dt_error(DT_ERR_PARSE, "dt_mesh_parse: unexpected '%c' at offset %d of \"%s\"",
                            *p, (int)(p - text), text);
        p++;
    }
    memcpy(shape_out, shape, sizeof(int) * (size_t)ndim);
    if (names_out) memcpy(names_out, names, sizeof names[0] * (size_t)ndim);
    *ndim_out = ndim;
    return DT_OK;
}

dt_status dt_mesh_create_str(dt_ctx *ctx, const char *text, dt_mesh **out) {
    int shape[DT_MESH_MAX_NDIM], ndim;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    DT_CHECK(dt_mesh_parse(text, shape, names, &ndim));
    const char *name_ptrs[DT_MESH_MAX_NDIM];
    for (int d = 0; d < ndim; d++) name_ptrs[d] = names[d];
    return dt_mesh_create(ctx, ndim, shape, name_ptrs, out);
}

dt_status dt_mesh_retain(dt_mesh *mesh) {
    DT_ARG_NOT_NULL(mesh);
    atomic_fetch_add(&mesh->refs, 1);
    return DT_OK;
}

dt_status dt_mesh_release(dt_mesh *mesh) {
    if (!mesh || atomic_fetch_sub(&mesh->refs, 1) != 1) return DT_OK;
    for (int k = 0; k < DT_CACHE_KIND_COUNT; k++) dt_lru_destroy(mesh->caches[k]);
    free(mesh->op_memo);
    if (mesh->comms)
        for (size_t i = 0; i < (size_t)DT_MESH_LANES << mesh->ndim; i++)
            dt_comm_destroy(mesh->comms[i]);
    free(mesh->comms);
    free(mesh->ranks);
    dt_mesh_release(mesh->root);
    free(mesh);
    return DT_OK;
}

#define MESH_GET(mesh, dim, expr, bad)                                                             \
    do {                                                                                           \
        if (!(mesh)) {                                                                             \
            dt_error(DT_ERR_ARG, "%s: argument mesh is NULL", __func__);                           \
            return bad;                                                                            \
        }                                                                                          \
        if ((dim) < 0 || (dim) >= (mesh)->ndim) {                                                  \
            dt_error(DT_ERR_ARG, "%s: argument dim = %d is not in [0, %d)", __func__, (dim),       \
                     (mesh)->ndim);                                                                \
            return bad;                                                                            \
        }                                                                                          \
        return expr;                                                                               \
    } while (0)

int dt_mesh_ndim(const dt_mesh *mesh) { MESH_GET(mesh, 0, mesh->ndim, -1); }
int dt_mesh_nranks(const dt_mesh *mesh) { MESH_GET(mesh, 0, mesh->nranks, -1); }
int dt_mesh_rank(const dt_mesh *mesh) { MESH_GET(mesh, 0, mesh->rank, -1); }
dt_ctx *dt_mesh_ctx(const dt_mesh *mesh) { MESH_GET(mesh, 0, mesh->ctx, NULL); }
int dt_mesh_dim_size(const dt_mesh *mesh, int dim) { MESH_GET(mesh, dim, mesh->shape[dim], -1); }
int dt_mesh_coord(const dt_mesh *mesh, int dim) { MESH_GET(mesh, dim, mesh->coord[dim], -1); }
const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim) {
    MESH_GET(mesh, dim, mesh->names[dim], NULL);
}

dt_status dt_mesh_dim_index(const dt_mesh *mesh, const char *name, int *out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(name);
    DT_ARG_NOT_NULL(out);
    for (int d = 0; d < mesh->ndim; d++) {
        if (strcmp(mesh->names[d], name) == 0) {
            *out = d;
            return DT_OK;
        }
    }
    char all[DT_MESH_MAX_NDIM * (DT_MESH_NAME_MAX + 2)] = "";
    for (int d = 0; d < mesh->ndim; d++) {
        if (d) strcat(all, ",");
        strcat(all, mesh->names[d]);
    }
    return dt_error(DT_ERR_MESH, "dt_mesh_dim_index: the mesh has no dimension named \"%s\" (it has %s)",
                    name, all);
}

dt_status dt_mesh_coord_of(const dt_mesh *mesh, int mesh_rank, int *out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(out);
    DT_ARG(mesh_rank >= 0 && mesh_rank < mesh->nranks,
           "dt_mesh_coord_of: argument mesh_rank = %d is not in [0, %d)", mesh_rank, mesh->nranks);
    for (int d = mesh->ndim - 1; d >= 0; d--) {
        out[d] = mesh_rank % mesh->shape[d];
        mesh_rank /= mesh->shape[d];
    }
    return DT_OK;
}

dt_status dt_mesh_rank_of(const dt_mesh *mesh, const int *coord, int *out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(coord);
    DT_ARG_NOT_NULL(out);
    int r = 0;
    for (int d = 0; d < mesh->ndim; d++) {
        DT_ARG(coord[d] >= 0 && coord[d] < mesh->shape[d],
               "dt_mesh_rank_of: coord[%d] = %d is not in [0, %d)", d, coord[d], mesh->shape[d]);
        r = r * mesh->shape[d] + coord[d];
    }
    *out = r;
    return DT_OK;
}

dt_status dt_mesh_world_rank(const dt_mesh *mesh, int mesh_rank, int *out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(out);
    DT_ARG(mesh_rank >= 0 && mesh_rank < mesh->nranks,
           "dt_mesh_world_rank: argument mesh_rank = %d is not in [0, %d)", mesh_rank,
           mesh->nranks);
    *out = mesh->ranks[mesh_rank];
    return DT_OK;
}

dt_status dt_mesh_mask_comm(dt_mesh *mesh, unsigned dims_mask, dt_comm **out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(out);
    DT_ARG(dims_mask < (1u << mesh->ndim),
           "dt_mesh_mask_comm: argument dims_mask = 0x%x names dims beyond the mesh's %d",
           dims_mask, mesh->ndim);
    return dt_mesh_lane_comm(mesh, dims_mask, 0, out);
}

dt_status dt_mesh_lane_comm(dt_mesh *mesh, unsigned dims_mask, int lane, dt_comm **comm_out) {
    if (mesh->rank < 0)
        return dt_error(DT_ERR_MESH, "mesh communicator: rank %d is not in this mesh (a sub-mesh "
                                     "made with dt_mesh_submesh_at elsewhere): it has no groups",
                        mesh->ctx->rank);
    dt_mesh *root = root_of(mesh);
    unsigned mask = 0;
    for (int d = 0; d < mesh->ndim; d++)
        if (dims_mask & (1u << d)) mask |= 1u << mesh->root_dim[d];
    dt_comm **slot = &root->comms[((unsigned)lane << root->ndim) | mask];
    if (*slot) {
        *comm_out = *slot;
        return DT_OK;
    }
    /* Members: root ranks equal to this one outside mask, in row-major (= mesh rank) order. */
    int *members = malloc(sizeof(int) * (size_t)root->nranks);
    if (!members) return dt_error(DT_ERR_NOMEM, "mesh communicator: out of memory");
    int n = 0, coord[DT_MESH_MAX_NDIM];
    for (int r = 0; r < root->nranks; r++) {
        dt_mesh_coord_of(root, r, coord);
        int same = 1;
        for (int d = 0; d < root->ndim; d++)
            if (!(mask & (1u << d)) && coord[d] != root->coord[d]) same = 0;
        if (same) members[n++] = root->ranks[r];
    }
    uint64_t key[2] = {DT_COMM_KEY(DT_KEY_MESH, root->seq), (uint64_t)lane << 32 | mask};
    dt_status st = dt_ctx_comm_create(root->ctx, key, members, n, slot);
    free(members);
    if (st == DT_OK) { /* label it with the mesh dims, for counters and traces */
        char *label = (*slot)->label;
        size_t o = 0;
        label[0] = '\0';
        for (int d = 0; d < root->ndim && o < sizeof(*slot)->label; d++)
            if (mask & (1u << d))
                o += (size_t)snprintf(label + o, sizeof(*slot)->label - o, "%s%s", o ? "+" : "",
                                      root->names[d]);
        if (!mask) snprintf(label, sizeof(*slot)->label, "self");
    }
    if (st == DT_OK) *comm_out = *slot;
    return st;
}

dt_status dt_mesh_dim_comm(dt_mesh *mesh, int dim, dt_comm **out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG(dim >= 0 && dim < mesh->ndim, "dt_mesh_dim_comm: argument dim = %d is not in [0, %d)",
           dim, mesh->ndim);
    return dt_mesh_mask_comm(mesh, 1u << dim, out);
}

/* Mask of the named dims, which must be distinct and in mesh order. */
static dt_status names_mask(const dt_mesh *mesh, const char *const *names, int n, const char *fn,
                            unsigned *mask_out) {
    DT_ARG(names != NULL || n == 0, "%s: argument names is NULL", fn);
    DT_ARG(n >= 0 && n <= mesh->ndim, "%s: argument n = %d is not in [0, %d]", fn, n, mesh->ndim);
    unsigned mask = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        int d;
        DT_ARG(names[i] != NULL, "%s: names[%d] is NULL", fn, i);
        dt_status st = dt_mesh_dim_index(mesh, names[i], &d);
        if (st != DT_OK) {
            dt_error_prefix(fn);
            return st;
        }
        if (d <= last)
            return dt_error(DT_ERR_MESH, "%s: names[%d] = \"%s\" is repeated or out of mesh order",
                            fn, i, names[i]);
        last = d;
        mask |= 1u << d;
    }
    *mask_out = mask;
    return DT_OK;
}

dt_status dt_mesh_group_comm(dt_mesh *mesh, const char *const *names, int n, dt_comm **out) {
    DT_ARG_NOT_NULL(mesh);
    unsigned mask;
    DT_CHECK(names_mask(mesh, names, n, "dt_mesh_group_comm", &mask));
    return dt_mesh_mask_comm(mesh, mask, out);
}

/* The sub-mesh of the dims in mask at parent coordinate at (the other dims' entries are
 * ignored): its ranks come from the parent's, so a sub-mesh of a sub-mesh works too. This
 * rank's coordinate in it is -1 everywhere when it is not a member. */
static dt_status submesh(dt_mesh *mesh, unsigned mask, const int *at, dt_mesh **out) {
    dt_mesh *root = root_of(mesh);
    dt_mesh *s = calloc(1, sizeof *s);
    if (!s) return dt_error(DT_ERR_NOMEM, "dt_mesh_submesh: out of memory");
    s->nranks = 1;
    for (int d = 0; d < mesh->ndim; d++) {
        if (!(mask & (1u << d))) continue;
        s->shape[s->ndim] = mesh->shape[d];
        s->root_dim[s->ndim] = mesh->root_dim[d];
        strcpy(s->names[s->ndim], mesh->names[d]);
        s->nranks *= mesh->shape[d];
        s->ndim++;
    }
    s->ranks = malloc(sizeof(int) * (size_t)s->nranks);
    if (!s->ranks) {
        free(s);
        return dt_error(DT_ERR_NOMEM, "dt_mesh_submesh: out of memory");
    }
    int coord[DT_MESH_MAX_NDIM], pcoord[DT_MESH_MAX_NDIM], pr;
    s->rank = -1;
    for (int r = 0; r < s->nranks; r++) {
        dt_mesh_coord_of(s, r, coord);
        memcpy(pcoord, at, sizeof(int) * (size_t)mesh->ndim);
        for (int d = 0, k = 0; d < mesh->ndim; d++)
            if (mask & (1u << d)) pcoord[d] = coord[k++];
        dt_mesh_rank_of(mesh, pcoord, &pr);
        s->ranks[r] = mesh->ranks[pr];
        if (s->ranks[r] == mesh->ctx->rank) s->rank = r;
    }
    if (s->rank >= 0) dt_mesh_coord_of(s, s->rank, s->coord);
    else
        for (int d = 0; d < s->ndim; d++) s->coord[d] = -1;
    atomic_init(&s->refs, 1);
    s->ctx = mesh->ctx;
    s->seq = root->seq;
    memcpy(s->cache_capacity, mesh->cache_capacity, sizeof s->cache_capacity);
    s->root = root;
    dt_mesh_retain(root);
    *out = s;
    return DT_OK;
}

dt_status dt_mesh_submesh(dt_mesh *mesh, const char *const *names, int n, dt_mesh **out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(out);
    unsigned mask;
    DT_CHECK(names_mask(mesh, names, n, "dt_mesh_submesh", &mask));
    DT_ARG(n >= 1, "dt_mesh_submesh: argument n = 0: a sub-mesh needs at least one dimension");
    DT_ARG(mesh->rank >= 0, "dt_mesh_submesh: rank %d is not in the mesh (use dt_mesh_submesh_at)",
           mesh->ctx->rank);
    return submesh(mesh, mask, mesh->coord, out);
}

dt_status dt_mesh_submesh_at(dt_mesh *mesh, const char *const *names, int n, const int *coord,
                             dt_mesh **out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(coord);
    DT_ARG_NOT_NULL(out);
    unsigned mask;
    DT_CHECK(names_mask(mesh, names, n, "dt_mesh_submesh_at", &mask));
    DT_ARG(n >= 1, "dt_mesh_submesh_at: argument n = 0: a sub-mesh needs at least one dimension");
    int at[DT_MESH_MAX_NDIM];
    for (int d = 0; d < mesh->ndim; d++) {
        at[d] = mask & (1u << d) ? 0 : coord[d];
        DT_ARG(at[d] >= 0 && at[d] < mesh->shape[d],
               "dt_mesh_submesh_at: coord[%d] = %d is not in [0, %d) (dim \"%s\")", d, coord[d],
               mesh->shape[d], mesh->names[d]);
    }
    return submesh(mesh, mask, at, out);
}

int dt_mesh_equal(const dt_mesh *a, const dt_mesh *b) {
    if (a == b) return 1;
    if (!a || !b || a->ctx != b->ctx || a->ndim != b->ndim || a->nranks != b->nranks) return 0;
    return !memcmp(a->shape, b->shape, sizeof(int) * (size_t)a->ndim) &&
           !memcmp(a->ranks, b->ranks, sizeof(int) * (size_t)a->nranks);
}

dt_status dt_mesh_cache_make(dt_mesh *mesh, dt_cache_kind kind, void (*free_value)(void *),
                             struct dt_lru **cache_out) {
    if (!mesh->caches[kind])
        DT_CHECK(dt_lru_create(mesh->cache_capacity[kind], free_value,
                               &mesh->ctx->stats.caches[kind], &mesh->caches[kind]));
    *cache_out = mesh->caches[kind];
    return DT_OK;
}

dt_status dt_mesh_set_cache_capacity(dt_mesh *mesh, dt_cache_kind kind, size_t capacity) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG((unsigned)kind < DT_CACHE_KIND_COUNT,
           "dt_mesh_set_cache_capacity: argument kind has unknown value %d", (int)kind);
    DT_ARG(capacity >= 1, "dt_mesh_set_cache_capacity: argument capacity = %zu must be at least 1",
           capacity);
    if (mesh->caches[kind]) DT_CHECK(dt_lru_set_capacity(mesh->caches[kind], capacity));
    mesh->cache_capacity[kind] = capacity;
    return DT_OK;
}

dt_status dt_mesh_cache_stats(const dt_mesh *mesh, dt_cache_kind kind, dt_cache_stats *out) {
    DT_ARG_NOT_NULL(mesh);
    DT_ARG_NOT_NULL(out);
    DT_ARG((unsigned)kind < DT_CACHE_KIND_COUNT,
           "dt_mesh_cache_stats: argument kind has unknown value %d", (int)kind);
    if (mesh->caches[kind]) *out = mesh->caches[kind]->stats;
    else *out = (dt_cache_stats){.capacity = mesh->cache_capacity[kind]};
    return DT_OK;
}
