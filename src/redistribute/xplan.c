/* Cross-mesh plans: which box of the global tensor each world rank sends to which, found by
 * intersecting every target block with the distinct source blocks, and the plan as text.
 * Pure: no ranks, no data; xmesh.c runs what this file plans. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/box.h"
#include "core/check.h"
#include "core/text.h"
#include "dtensor/tensor_impl.h"
#include "redistribute/xplan_impl.h"

typedef struct block {
    int64_t off[DT_MAX_NDIM], ext[DT_MAX_NDIM];
} block;

static int mesh_size(const dt_mesh_desc *m) {
    int n = 1;
    for (int d = 0; d < m->ndim; d++) n *= m->shape[d];
    return n;
}

static int world_rank(const dt_mesh_desc *m, int r) { return m->ranks ? m->ranks[r] : r; }

static void coord_of(const dt_mesh_desc *m, int r, int *coord) {
    for (int d = m->ndim - 1; d >= 0; d--) {
        coord[d] = r % m->shape[d];
        r /= m->shape[d];
    }
}

static void block_of(const dt_xplan *p, const dt_mesh_desc *m, const dt_placement *pl, int r,
                     block *b) {
    int coord[DT_MESH_MAX_NDIM];
    coord_of(m, r, coord);
    dt_shard_layout(m->ndim, m->shape, coord, p->ndim, p->shape, pl, b->ext, b->off);
}

/* a and b's common box in out; 0 when it is empty. */
static int intersect(int ndim, const block *a, const block *b, block *out) {
    for (int d = 0; d < ndim; d++) {
        int64_t lo = a->off[d] > b->off[d] ? a->off[d] : b->off[d];
        int64_t ha = a->off[d] + a->ext[d], hb = b->off[d] + b->ext[d];
        int64_t hi = ha < hb ? ha : hb;
        if (hi <= lo) return 0;
        out->off[d] = lo, out->ext[d] = hi - lo;
    }
    return 1;
}

static int block_equal(int ndim, const block *a, const block *b) {
    return !memcmp(a->off, b->off, sizeof(int64_t) * (size_t)ndim) &&
           !memcmp(a->ext, b->ext, sizeof(int64_t) * (size_t)ndim);
}

/* Whether target mesh rank r keeps a value at all: under P(sum) only coordinate 0 does (the
 * plan after makes the others zeros, so nothing is sent to them). */
static int keeps_value(const dt_xplan *p, int r) {
    int coord[DT_MESH_MAX_NDIM];
    coord_of(&p->mesh[1], r, coord);
    for (int m = 0; m < p->mesh[1].ndim; m++)
        if (p->dst[m].kind == DT_PLACEMENT_PARTIAL && p->dst[m].op == DT_REDUCE_SUM && coord[m])
            return 0;
    return 1;
}

static dt_placement unpartial(dt_placement pl) {
    return pl.kind == DT_PLACEMENT_PARTIAL ? dt_replicate() : pl;
}

static int placements_equal(const dt_placement *a, const dt_placement *b, int n) {
    for (int m = 0; m < n; m++)
        if (!dt_placement_equal(a[m], b[m])) return 0;
    return 1;
}

/* The transfers: for each target rank in order, one box per distinct source block it
 * overlaps, sent by the replica of that block on the same world rank when there is one, else
 * by replica (target rank mod replicas), so replicas share the sending. */
static dt_status plan_transfers(dt_xplan *p) {
    const dt_mesh_desc *S = &p->mesh[0], *D = &p->mesh[1];
    int ns = mesh_size(S), nd = mesh_size(D);
    block *sb = malloc(sizeof *sb * (size_t)ns);
    int *cls = malloc(sizeof(int) * (size_t)ns); /* first source rank of each block's class */
    int *members = malloc(sizeof(int) * (size_t)ns);
    size_t cap = (size_t)ns + (size_t)nd;
    p->transfers = malloc(sizeof *p->transfers * cap);
    dt_status st = DT_OK;
    if (!sb || !cls || !members || !p->transfers) {
        st = dt_error(DT_ERR_NOMEM, "dt_xplan_create: out of memory for %d x %d ranks", ns, nd);
        goto out;
    }
    for (int i = 0; i < ns; i++) {
        block_of(p, S, p->mid_src, i, &sb[i]);
        cls[i] = i;
        for (int k = 0; k < i; k++)
            if (cls[k] == k && block_equal(p->ndim, &sb[k], &sb[i])) {
                cls[i] = k;
                break;
            }
    }
    size_t es = dt_dtype_size(p->dtype);
    for (int j = 0; j < nd; j++) {
        block db, box;
        block_of(p, D, p->mid_dst, j, &db);
        if (!keeps_value(p, j) || dt_shape_numel(db.ext, p->ndim) == 0) continue;
        int to = world_rank(D, j);
        for (int c = 0; c < ns; c++) {
            if (cls[c] != c || !intersect(p->ndim, &sb[c], &db, &box)) continue;
            int n = 0, from = -1;
            for (int i = c; i < ns; i++)
                if (cls[i] == c) members[n++] = i;
            for (int k = 0; k < n && from < 0; k++)
                if (world_rank(S, members[k]) == to) from = to;
            if (from < 0) from = world_rank(S, members[j % n]);
            if ((size_t)p->ntransfers == cap) {
                dt_transfer *more = realloc(p->transfers, sizeof *more * (cap *= 2));
                if (!more) {
                    st = dt_error(DT_ERR_NOMEM, "dt_xplan_create: out of memory");
                    goto out;
                }
                p->transfers = more;
            }
            dt_transfer *t = &p->transfers[p->ntransfers++];
            *t = (dt_transfer){.from = from, .to = to};
            memcpy(t->off, box.off, sizeof box.off);
            memcpy(t->ext, box.ext, sizeof box.ext);
            t->bytes = dt_shape_numel(box.ext, p->ndim) * es;
            if (from != to) p->nmessages++, p->bytes += t->bytes;
        }
    }
out:
    free(sb), free(cls), free(members);
    return st;
}

/* The busiest rank's messages at latency_us each plus its bytes over the bandwidth. */
static dt_status estimate(dt_xplan *p, const dt_cost_model *model) {
    int top = 0;
    for (int i = 0; i < p->ntransfers; i++) {
        top = p->transfers[i].from > top ? p->transfers[i].from : top;
        top = p->transfers[i].to > top ? p->transfers[i].to : top;
    }
    double *us = calloc((size_t)top + 1, sizeof *us);
    if (!us) return dt_error(DT_ERR_NOMEM, "dt_xplan_create: out of memory");
    for (int i = 0; i < p->ntransfers; i++) {
        const dt_transfer *t = &p->transfers[i];
        if (t->from == t->to) continue;
        double c = model->latency_us + (double)t->bytes / (model->bandwidth_gbps * 1e3);
        us[t->from] += c, us[t->to] += c;
    }
    double worst = 0;
    for (int r = 0; r <= top; r++) worst = us[r] > worst ? us[r] : worst;
    free(us);
    p->cost_us = worst + (p->before ? p->before->cost_us : 0) + (p->after ? p->after->cost_us : 0);
    return DT_OK;
}

/* The plan that reduces the source's Partial dims into placement `into` (R, or S(d): a
 * reduce_scatter leaves less to send) before the transfers. */
static dt_status build_one(const dt_mesh_desc *src_mesh, const dt_mesh_desc *dst_mesh, int ndim,
                           const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                           const dt_placement *dst, const dt_cost_model *model, dt_placement into,
                           dt_xplan **out) {
    dt_xplan *p = calloc(1, sizeof *p);
    int ns = mesh_size(src_mesh), nd = mesh_size(dst_mesh);
    if (p) p->rank_store = malloc(sizeof(int) * (size_t)(ns + nd));
    if (!p || !p->rank_store) {
        free(p);
        return dt_error(DT_ERR_NOMEM, "dt_xplan_create: out of memory");
    }
    p->mesh[0] = *src_mesh, p->mesh[1] = *dst_mesh;
    for (int r = 0; r < ns; r++) p->rank_store[r] = world_rank(src_mesh, r);
    for (int r = 0; r < nd; r++) p->rank_store[ns + r] = world_rank(dst_mesh, r);
    p->mesh[0].ranks = p->rank_store, p->mesh[1].ranks = p->rank_store + ns;
    p->ndim = ndim, p->dtype = dtype;
    if (ndim) memcpy(p->shape, shape, sizeof(int64_t) * (size_t)ndim);
    for (int m = 0; m < src_mesh->ndim; m++)
        p->src[m] = src[m], p->mid_src[m] = src[m].kind == DT_PLACEMENT_PARTIAL ? into : src[m];
    for (int m = 0; m < dst_mesh->ndim; m++) p->dst[m] = dst[m], p->mid_dst[m] = unpartial(dst[m]);
    dt_status st = DT_OK;
    if (!placements_equal(p->src, p->mid_src, src_mesh->ndim))
        st = dt_plan_search(src_mesh->ndim, src_mesh->shape, ndim, shape, dtype, p->src,
                            p->mid_src, model, &p->before);
    if (st == DT_OK && !placements_equal(p->dst, p->mid_dst, dst_mesh->ndim))
        st = dt_plan_search(dst_mesh->ndim, dst_mesh->shape, ndim, shape, dtype, p->mid_dst,
                            p->dst, model, &p->after);
    if (st == DT_OK) st = plan_transfers(p);
    if (st == DT_OK) st = estimate(p, model);
    if (st != DT_OK) {
        dt_xplan_destroy(p);
        return st;
    }
    *out = p;
    return DT_OK;
}

dt_status dt_xplan_build(const dt_mesh_desc *src_mesh, const dt_mesh_desc *dst_mesh, int ndim,
                         const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                         const dt_placement *dst, const dt_cost_model *model, dt_xplan **out) {
    dt_cost_model def = dt_cost_model_default();
    if (!model) model = &def;
    int partial = 0;
    for (int m = 0; m < src_mesh->ndim; m++) partial |= src[m].kind == DT_PLACEMENT_PARTIAL;
    /* Partial source dims: reduced into Replicate or into a shard of any tensor dim, whichever
     * costs least in all (the first of equals, Replicate first). */
    dt_xplan *best = NULL;
    for (int d = -1; d < (partial ? ndim : 0); d++) {
        dt_xplan *p = NULL;
        dt_placement into = d < 0 ? dt_replicate() : dt_shard(d);
        dt_status st = build_one(src_mesh, dst_mesh, ndim, shape, dtype, src, dst, model, into, &p);
        if (st != DT_OK) {
            dt_xplan_destroy(best);
            return st;
        }
        if (!best || p->cost_us < best->cost_us) dt_xplan_destroy(best), best = p;
        else dt_xplan_destroy(p);
    }
    *out = best;
    return DT_OK;
}

static dt_status check_mesh(const char *what, const dt_mesh_desc *m) {
    DT_ARG(m != NULL, "dt_xplan_create: argument %s is NULL", what);
    DT_ARG(m->ndim >= 1 && m->ndim <= DT_MESH_MAX_NDIM,
           "dt_xplan_create: %s->ndim = %d is not in [1, %d]", what, m->ndim, DT_MESH_MAX_NDIM);
    long long n = 1;
    for (int d = 0; d < m->ndim; d++) {
        if (m->shape[d] < 1 || m->shape[d] > (1 << 20))
            return dt_error(DT_ERR_MESH, "dt_xplan_create: %s->shape[%d] = %d is not a mesh size",
                            what, d, m->shape[d]);
        n = n > (1 << 20) ? n : n * m->shape[d]; /* saturates: the message shows enough */
    }
    if (n > (1 << 20))
        return dt_error(DT_ERR_MESH, "dt_xplan_create: %s has %lld ranks (at most %d)", what, n,
                        1 << 20);
    for (int r = 0; m->ranks && r < (int)n; r++) {
        DT_ARG(m->ranks[r] >= 0, "dt_xplan_create: %s->ranks[%d] = %d is negative", what, r,
               m->ranks[r]);
        for (int k = 0; k < r; k++)
            DT_ARG(m->ranks[k] != m->ranks[r],
                   "dt_xplan_create: %s->ranks[%d] and [%d] are both world rank %d", what, k, r,
                   m->ranks[r]);
    }
    return DT_OK;
}

dt_status dt_xplan_create(const dt_mesh_desc *src_mesh, const dt_mesh_desc *dst_mesh, int ndim,
                          const int64_t *shape, dt_dtype dtype, const dt_placement *src,
                          const dt_placement *dst, const dt_cost_model *model, dt_xplan **out) {
    DT_ARG_NOT_NULL(out);
    DT_CHECK(check_mesh("src_mesh", src_mesh));
    DT_CHECK(check_mesh("dst_mesh", dst_mesh));
    DT_CHECK(dt_shape_dtype_check("dt_xplan_create", ndim, shape, dtype));
    DT_ARG_NOT_NULL(src);
    DT_ARG_NOT_NULL(dst);
    if (model)
        DT_ARG(model->latency_us >= 0 && model->step_us >= 0 && model->bandwidth_gbps > 0,
               "dt_xplan_create: cost model {latency_us %g, step_us %g, bandwidth_gbps %g} needs "
               "non-negative latencies and a positive bandwidth",
               model->latency_us, model->step_us, model->bandwidth_gbps);
    dt_placement s[DT_MESH_MAX_NDIM], d[DT_MESH_MAX_NDIM];
    memcpy(s, src, sizeof(dt_placement) * (size_t)src_mesh->ndim);
    memcpy(d, dst, sizeof(dt_placement) * (size_t)dst_mesh->ndim);
    dt_status st = dt_placements_normalize(s, src_mesh->ndim, ndim);
    if (st == DT_OK) st = dt_placements_normalize(d, dst_mesh->ndim, ndim);
    if (st != DT_OK) {
        dt_error_prefix("dt_xplan_create");
        return st;
    }
    DT_CHECK(dt_norm_partial_dtype_check("dt_xplan_create", s, src_mesh->ndim, dtype));
    DT_CHECK(dt_norm_partial_dtype_check("dt_xplan_create", d, dst_mesh->ndim, dtype));
    return dt_xplan_build(src_mesh, dst_mesh, ndim, shape, dtype, s, d, model, out);
}

dt_status dt_xplan_destroy(dt_xplan *plan) {
    if (!plan) return DT_OK;
    dt_plan_release(plan->before);
    dt_plan_release(plan->after);
    free(plan->transfers);
    free(plan->rank_store);
    free(plan);
    return DT_OK;
}

int dt_xplan_ntransfers(const dt_xplan *plan) {
    if (!plan) return dt_error(DT_ERR_ARG, "dt_xplan_ntransfers: argument plan is NULL"), -1;
    return plan->ntransfers;
}

dt_status dt_xplan_transfer_get(const dt_xplan *plan, int i, dt_transfer *out) {
    DT_ARG_NOT_NULL(plan);
    DT_ARG_NOT_NULL(out);
    DT_ARG(i >= 0 && i < plan->ntransfers,
           "dt_xplan_transfer_get: argument i = %d is not in [0, %d)", i, plan->ntransfers);
    *out = plan->transfers[i];
    return DT_OK;
}

const dt_plan *dt_xplan_before(const dt_xplan *plan) { return plan ? plan->before : NULL; }
const dt_plan *dt_xplan_after(const dt_xplan *plan) { return plan ? plan->after : NULL; }

int dt_xplan_nmessages(const dt_xplan *plan) {
    if (!plan) return dt_error(DT_ERR_ARG, "dt_xplan_nmessages: argument plan is NULL"), -1;
    return plan->nmessages;
}

size_t dt_xplan_bytes(const dt_xplan *plan) { return plan ? plan->bytes : 0; }
double dt_xplan_cost_us(const dt_xplan *plan) { return plan ? plan->cost_us : -1; }

/* ---- text ---------------------------------------------------------------------------------- */

static void put_mesh(dt_text *t, const dt_mesh_desc *m, const char *const *names,
                     const dt_placement *pl) {
    for (int d = 0; d < m->ndim; d++) {
        if (names) dt_text_put(t, "%s%s=%d", d ? " x " : "", names[d], m->shape[d]);
        else dt_text_put(t, "%s%d", d ? "x" : "", m->shape[d]);
    }
    int n = mesh_size(m), run = 1; /* ranks as "0-3" when they count up by one */
    for (int r = 1; r < n; r++) run &= m->ranks[r] == m->ranks[r - 1] + 1;
    if (run && n > 2) dt_text_put(t, " (ranks %d-%d) ", m->ranks[0], m->ranks[n - 1]);
    else {
        dt_text_put(t, " (rank%s ", n > 1 ? "s" : "");
        for (int r = 0; r < n && r < 64; r++) dt_text_put(t, r ? ",%d" : "%d", m->ranks[r]);
        dt_text_put(t, "%s) ", n > 64 ? ",..." : "");
    }
    char buf[16 * DT_MESH_MAX_NDIM];
    dt_placements_format(pl, m->ndim, buf, sizeof buf);
    dt_text_put(t, "%s", buf);
}

static void put_box(dt_text *t, const dt_transfer *x, int ndim) {
    char buf[DT_MAX_NDIM * 44 + 3];
    size_t o = 0;
    buf[o++] = '[';
    for (int d = 0; d < ndim; d++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%lld:%lld", d ? "," : "",
                              (long long)x->off[d], (long long)(x->off[d] + x->ext[d]));
    snprintf(buf + o, sizeof buf - o, "]");
    dt_text_put(t, "%-24s ", buf);
    dt_text_bytes(t, (double)x->bytes);
    dt_text_put(t, "\n");
}

/* A same-mesh plan's text, each line indented under a heading. */
static dt_status put_plan(dt_text *t, const char *heading, const dt_plan *plan,
                          const char *const *names) {
    size_t len = 0;
    dt_plan_format(plan, names, NULL, 0, &len);
    char *buf = malloc(len + 1);
    if (!buf) return dt_error(DT_ERR_NOMEM, "dt_xplan_format: out of memory");
    dt_status st = dt_plan_format(plan, names, buf, len + 1, NULL);
    dt_text_put(t, "  %s\n", heading);
    for (char *line = buf, *nl; st == DT_OK && *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line) - 1;
        dt_text_put(t, "    %.*s\n", (int)(nl - line), line);
    }
    free(buf);
    return st;
}

dt_status dt_xplan_format(const dt_xplan *plan, const char *const *src_names,
                          const char *const *dst_names, char *buf, size_t cap, size_t *len_out) {
    DT_ARG_NOT_NULL(plan);
    DT_ARG(buf != NULL || cap == 0, "dt_xplan_format: argument buf is NULL with cap %zu", cap);
    dt_text t = {buf, cap, 0};
    dt_text_put(&t, "redistribute %s[", dt_dtype_name(plan->dtype));
    for (int d = 0; d < plan->ndim; d++)
        dt_text_put(&t, d ? ",%lld" : "%lld", (long long)plan->shape[d]);
    dt_text_put(&t, "] across meshes: ");
    put_mesh(&t, &plan->mesh[0], src_names, plan->src);
    dt_text_put(&t, " -> ");
    put_mesh(&t, &plan->mesh[1], dst_names, plan->dst);
    dt_text_put(&t, "\n");
    if (plan->before)
        DT_CHECK(put_plan(&t, "before, on the source mesh (Partial reduced):", plan->before,
                          src_names));
    int copies = 0;
    for (int i = 0; i < plan->ntransfers; i++) {
        const dt_transfer *x = &plan->transfers[i];
        char who[48];
        if (x->from == x->to) snprintf(who, sizeof who, "rank %d keeps", x->to), copies++;
        else snprintf(who, sizeof who, "rank %d -> rank %d", x->from, x->to);
        dt_text_put(&t, "  %-22s", who);
        put_box(&t, x, plan->ndim);
    }
    if (plan->ntransfers == 0) dt_text_put(&t, "  nothing to move: the tensor is empty\n");
    if (plan->after)
        DT_CHECK(put_plan(&t, "after, on the target mesh (local):", plan->after, dst_names));
    dt_text_put(&t, "total: %d message%s, ", plan->nmessages, plan->nmessages == 1 ? "" : "s");
    dt_text_bytes(&t, (double)plan->bytes);
    dt_text_put(&t, " between ranks, %d local cop%s, estimated %.1f us\n", copies,
                copies == 1 ? "y" : "ies", plan->cost_us);
    return dt_text_finish(&t, "dt_xplan_format", len_out);
}
