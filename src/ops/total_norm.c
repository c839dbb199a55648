/* The norm of many tensors at once (gradient clipping): each tensor's norm over every dim is a
 * local norm with a pending-norm placement on the mesh dims that shard it (vector_norm's
 * rules); the parts of all tensors then go into one scalar and one all_reduce over the union
 * of those mesh dims, however many tensors and placements there are. */
#include <math.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/check.h"
#include "dtensor/create.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "ops/op_impl.h"

/* A part's contribution to the combination: v^p for finite p (v for p = 0 and 1, where the
 * local norm already is the sum), v itself for inf and -inf. */
static double raise(double ord, double v) {
    return isfinite(ord) && ord != 0 && ord != 1 ? pow(v, ord) : v;
}

/* Max (inf) or min (-inf) with NaN kept once in. */
static double pick(double ord, double a, double b) {
    if (a != a || b != b) return a != a ? a : b;
    return ord > 0 ? (b > a ? b : a) : (b < a ? b : a);
}

/* This rank's norm of t over every dim (in double), and the mesh dims over which the ranks'
 * norms must still be combined: those the result holds as NormP. A Partial input is reduced
 * by dispatch first; bf16/f16 are widened so the local norm is not rounded to 8 bits. */
static dt_status local_norm(dt_tensor *t, double ord, double *v_out, unsigned *mask_out) {
    dt_tensor *x = t, *n = NULL;
    dt_status st = DT_OK;
    if (t->dtype == DT_BF16 || t->dtype == DT_F16) st = dt_cast(t, DT_F32, &x);
    dt_op_args all = {.scalar = ord}; /* every dim, as dt_vector_norm(x, ord, NULL, 0, 0) */
    if (st == DT_OK) st = dt_dispatch_run(DT_OP_VECTOR_NORM, &x, 1, &all, &n);
    if (x != t) dt_tensor_release(x);
    double v = 0;
    if (st == DT_OK) st = dt_tensor_local_to_host(n, &v, sizeof v); /* f32 or f64, one element */
    if (st == DT_OK && n->dtype == DT_F32) {
        float f;
        memcpy(&f, &v, sizeof f);
        v = f;
    }
    unsigned mask = 0;
    for (int m = 0; st == DT_OK && m < t->mesh->ndim; m++) {
        dt_placement p = n->placements[m];
        if (p.kind == DT_PLACEMENT_PARTIAL && p.op == DT_REDUCE_NORM && t->mesh->shape[m] > 1)
            mask |= 1u << m;
        else if (p.kind != DT_PLACEMENT_REPLICATE && t->mesh->shape[m] > 1)
            st = dt_error(DT_ERR_PLACEMENT, "total norm: a full vector_norm left placement kind "
                                            "%d on mesh dim %d", (int)p.kind, m);
    }
    dt_tensor_release(n);
    if (st == DT_OK) *v_out = v, *mask_out = mask;
    return st;
}

static dt_status check_tensors(const char *fn, dt_tensor *const *tensors, int n) {
    DT_ARG(n >= 0, "%s: argument n = %d is negative", fn, n);
    DT_ARG(tensors != NULL || n == 0, "%s: argument tensors is NULL", fn);
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "tensors[%d]", i);
        DT_CHECK(dt_tensor_check(fn, what, tensors[i]));
        const dt_tensor *t = tensors[i];
        if (!dt_mesh_equal(t->mesh, tensors[0]->mesh))
            return dt_error(DT_ERR_MESH, "%s: tensors[%d] is on another mesh than tensors[0] (one "
                                         "mesh for all)", fn, i);
        if (t->dtype != DT_F32 && t->dtype != DT_F64 && t->dtype != DT_BF16 && t->dtype != DT_F16)
            return dt_error(DT_ERR_DTYPE, "%s: tensors[%d] has dtype %s; norms need a float "
                                          "dtype", fn, i, dt_dtype_name(t->dtype));
    }
    return DT_OK;
}

static dt_status total_norm(const char *fn, dt_tensor *const *tensors, int n, double ord,
                            double *out) {
    DT_CHECK(check_tensors(fn, tensors, n));
    DT_ARG(!isnan(ord), "%s: argument ord is NaN", fn);
    DT_ARG(out != NULL, "%s: argument out is NULL", fn);
    if (n == 0) { /* torch: the norm of no gradients is 0 */
        *out = 0;
        return DT_OK;
    }
    dt_mesh *mesh = tensors[0]->mesh;
    /* Group by mask: parts[mask] folds the raised local norms of the tensors sharded over
     * exactly those mesh dims; union = every mesh dim some tensor needs combined. */
    enum { NMASK = 1 << DT_MESH_MAX_NDIM };
    double parts[NMASK];
    unsigned char used[NMASK] = {0};
    unsigned all = 0;
    int sum_like = isfinite(ord);
    for (int i = 0; i < n; i++) {
        double v;
        unsigned mask;
        DT_CHECK(local_norm(tensors[i], ord, &v, &mask));
        double r = raise(ord, v);
        if (!used[mask]) parts[mask] = r, used[mask] = 1;
        else parts[mask] = sum_like ? parts[mask] + r : pick(ord, parts[mask], r);
        all |= mask;
    }
    /* One value for the whole union: a group's ranks that differ only on mesh dims outside
     * its mask hold the same part, so a sum over the union counts it k times (k = the size of
     * those dims): divide by k first. Max and min do not count. */
    double acc = sum_like ? 0 : ord > 0 ? 0 : INFINITY;
    int first = 1;
    for (unsigned mask = 0; mask < NMASK; mask++) {
        if (!used[mask]) continue;
        double v = parts[mask];
        if (sum_like) {
            int64_t k = 1;
            for (int m = 0; m < mesh->ndim; m++)
                if ((all & ~mask) & (1u << m)) k *= mesh->shape[m];
            acc += v / (double)k;
        } else {
            acc = first ? v : pick(ord, acc, v);
        }
        first = 0;
    }
    if (all) { /* the only collective: one double over the union's group */
        dt_comm *c;
        DT_CHECK(dt_mesh_mask_comm(mesh, all, &c));
        dt_reduce_op op = sum_like ? DT_REDUCE_SUM : ord > 0 ? DT_REDUCE_MAX : DT_REDUCE_MIN;
        DT_CHECK(dt_all_reduce(c, &acc, &acc, 1, DT_F64, op));
    }
    *out = isfinite(ord) && ord != 0 && ord != 1 ? pow(acc, 1.0 / ord) : acc;
    return DT_OK;
}

dt_status dt_total_norm(dt_tensor *const *tensors, int n, double ord, double *out) {
    return total_norm("dt_total_norm", tensors, n, ord, out);
}

dt_status dt_clip_grad_norm_(dt_tensor *const *tensors, int n, double max_norm, double ord,
                             double *total_out) {
    const char *fn = "dt_clip_grad_norm_";
    DT_ARG(max_norm >= 0, "%s: argument max_norm = %g is not a non-negative number", fn, max_norm);
    double total;
    DT_CHECK(total_norm(fn, tensors, n, ord, &total));
    /* torch: clamp(max_norm / (total + 1e-6), max=1); a NaN total scales by NaN, as there */
    double coef = max_norm / (total + 1e-6);
    if (!(coef >= 1)) {
        for (int i = 0; i < n; i++) { /* local: scaling commutes with every placement */
            dt_tensor *t = tensors[i];
            const dt_kernels *k = dt_kernels_of(t->device.kind);
            if (!k)
                return dt_error(DT_ERR_UNSUPPORTED, "%s: tensors[%d]'s device is not in this "
                                                    "build", fn, i);
            if (t->local_numel == 0) continue;
            dt_local b = {.data = t->data, .dtype = t->dtype, .ndim = t->ndim, .device = t->device};
            memcpy(b.shape, t->local_shape, sizeof(int64_t) * (size_t)t->ndim);
            dt_ctx_bind(t->mesh->ctx);
            DT_CHECK(k->unary(DT_UNARY_MUL_SCALAR, coef, &b, &b));
        }
    }
    if (total_out) *total_out = total;
    return DT_OK;
}
