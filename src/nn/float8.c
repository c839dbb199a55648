/* float8 scales, scaled casts, the scaled matmul and the float8 linear (dtensor/float8.h),
 * composed from the library's ops so that sharding and the amax's all_reduce come from
 * dispatch and redistribute. The element conversions are core/float8.h's; the float8 GEMM is
 * dt_mm's kernel on float8 inputs. */
#include <string.h>

#include "core/check.h"
#include "dtensor/autograd.h"
#include "dtensor/create.h"
#include "dtensor/float8.h"
#include "dtensor/ops.h"
#include "dtensor/redistribute.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"
#include "nn/params_impl.h"

#define AMAX_EPS 1e-12 /* torchao's EPS: an all-zero tensor gets a finite scale */

static int is_f8(dt_dtype d) {
    return d == DT_F8E4M3 || d == DT_F8E5M2;
}
static int is_wide(dt_dtype d) {
    return d == DT_F32 || d == DT_F64 || d == DT_BF16 || d == DT_F16;
}

double dt_float8_max(dt_dtype dtype) {
    return dtype == DT_F8E4M3 ? 448.0 : dtype == DT_F8E5M2 ? 57344.0 : 0.0;
}

/* t with every Partial placement made Replicate (the amax's all_reduce MAX); t released. */
static dt_status settle(dt_tensor **t) {
    dt_placement pl[DT_MESH_MAX_NDIM];
    int nd = (*t)->mesh->ndim, partial = 0;
    for (int m = 0; m < nd; m++) {
        pl[m] = (*t)->placements[m];
        if (pl[m].kind == DT_PLACEMENT_PARTIAL) pl[m] = dt_replicate(), partial = 1;
    }
    if (!partial) return DT_OK;
    dt_tensor *r;
    DT_CHECK(dt_tensor_redistribute(*t, nd, pl, &r));
    dt_tensor_release(*t);
    *t = r;
    return DT_OK;
}

/* A tensor of t's spec (dtype aside) whose every element is v. */
static dt_status full_like(dt_tensor *t, dt_dtype dtype, double v, dt_tensor **out) {
    return dt_tensor_full_value(t->mesh, dtype, t->ndim, t->shape, t->mesh->ndim, t->placements, v,
                                out);
}

/* scale = max / max(amax(|x|) over dims, eps), in f64, rounded to f32. No grad recorded. */
static dt_status scale_of(const char *fn, dt_tensor *x, dt_dtype dtype, const int *dims, int ndims,
                          int keepdim, dt_tensor **out) {
    DT_ARG(is_f8(dtype), "%s: argument dtype is %s, not a float8 dtype", fn, dt_dtype_name(dtype));
    if (!is_wide(x->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: argument x is %s; scales are taken of float tensors", fn,
                        dt_dtype_name(x->dtype));
    dt_ctx *ctx = x->mesh->ctx;
    DT_CHECK(dt_no_grad_enter(ctx));
    dt_tensor *a = NULL, *m = NULL, *w = NULL, *eps = NULL, *c = NULL, *num = NULL, *s = NULL;
    dt_status st = dt_abs(x, &a);
    if (st == DT_OK) st = dt_amax(a, dims, ndims, keepdim, &m);
    if (st == DT_OK) st = settle(&m); /* one all_reduce MAX over the dims that shard x */
    if (st == DT_OK) st = dt_cast(m, DT_F64, &w);
    if (st == DT_OK) st = full_like(w, DT_F64, AMAX_EPS, &eps);
    if (st == DT_OK) st = dt_maximum(w, eps, &c);
    if (st == DT_OK) st = full_like(c, DT_F64, dt_float8_max(dtype), &num);
    if (st == DT_OK) st = dt_div(num, c, &s);
    if (st == DT_OK) st = dt_cast(s, DT_F32, out);
    dt_tensor *all[] = {a, m, w, eps, c, num, s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    dt_no_grad_exit(ctx);
    if (st != DT_OK) dt_error_prefix(fn);
    return st;
}

dt_status dt_float8_scale_tensorwise(dt_tensor *x, dt_dtype dtype, dt_tensor **scale_out) {
    DT_TENSOR_ARG(x);
    DT_ARG_NOT_NULL(scale_out);
    return scale_of(__func__, x, dtype, NULL, 0, 0, scale_out);
}

dt_status dt_float8_scale_axiswise(dt_tensor *x, dt_dtype dtype, int dim, dt_tensor **scale_out) {
    DT_TENSOR_ARG(x);
    DT_ARG_NOT_NULL(scale_out);
    DT_ARG(dim >= -x->ndim && dim < x->ndim, "%s: argument dim %d is out of range for %d dims",
           __func__, dim, x->ndim);
    if (dim < 0) dim += x->ndim;
    return scale_of(__func__, x, dtype, &dim, 1, 1, scale_out);
}

static dt_status cast_scaled(dt_tensor *x, dt_dtype dtype, dt_tensor *scale, dt_tensor **out) {
    dt_tensor *f = NULL, *y = NULL;
    dt_status st = DT_OK;
    if (x->dtype != DT_F32) st = dt_cast(x, DT_F32, &f); /* exact but for f64 */
    dt_tensor *src = f ? f : x;
    if (is_f8(dtype)) { /* x * scale in f32, then one saturating rounding */
        if (st == DT_OK) st = dt_mul(src, scale, &y);
        if (st == DT_OK) st = dt_cast(y, dtype, out);
    } else { /* / scale in f32, then dtype */
        if (st == DT_OK) st = dt_div(src, scale, &y);
        if (st == DT_OK && dtype == DT_F32)
            *out = y, y = NULL;
        else if (st == DT_OK)
            st = dt_cast(y, dtype, out);
    }
    dt_tensor_release(f);
    dt_tensor_release(y);
    return st;
}

dt_status dt_cast_scaled(dt_tensor *x, dt_dtype dtype, dt_tensor *scale, dt_tensor **out) {
    DT_TENSOR_ARG(x);
    DT_TENSOR_ARG(scale);
    DT_ARG_NOT_NULL(out);
    int to8 = is_f8(dtype) && is_wide(x->dtype), from8 = is_f8(x->dtype) && is_wide(dtype);
    if (!to8 && !from8)
        return dt_error(DT_ERR_DTYPE,
                        "%s: casts %s to %s; a scaled cast goes between float8 and "
                        "f32/f64/bf16/f16",
                        __func__, dt_dtype_name(x->dtype), dt_dtype_name(dtype));
    if (scale->dtype != DT_F32)
        return dt_error(DT_ERR_DTYPE, "%s: argument scale is %s, not f32", __func__,
                        dt_dtype_name(scale->dtype));
    dt_ctx *ctx = x->mesh->ctx;
    DT_CHECK(dt_no_grad_enter(ctx));
    dt_status st = cast_scaled(x, dtype, scale, out);
    dt_no_grad_exit(ctx);
    if (st != DT_OK) dt_error_prefix(__func__);
    return st;
}

dt_status dt_mm_scaled(dt_tensor *a, dt_tensor *a_scale, dt_tensor *b, dt_tensor *b_scale,
                       dt_tensor **out) {
    DT_TENSOR_ARG(a);
    DT_TENSOR_ARG(a_scale);
    DT_TENSOR_ARG(b);
    DT_TENSOR_ARG(b_scale);
    DT_ARG_NOT_NULL(out);
    if (!is_f8(a->dtype) || !is_f8(b->dtype))
        return dt_error(DT_ERR_DTYPE, "%s: arguments a and b are %s and %s; both must be float8",
                        __func__, dt_dtype_name(a->dtype), dt_dtype_name(b->dtype));
    if (a_scale->dtype != DT_F32 || b_scale->dtype != DT_F32)
        return dt_error(DT_ERR_DTYPE, "%s: arguments a_scale and b_scale are %s and %s, not f32",
                        __func__, dt_dtype_name(a_scale->dtype), dt_dtype_name(b_scale->dtype));
    dt_ctx *ctx = a->mesh->ctx;
    DT_CHECK(dt_no_grad_enter(ctx));
    dt_tensor *p = NULL, *q = NULL;
    dt_status st = dt_mm(a, b, &p); /* (M, K) @ (K, N) -> (M, N) f32, unscaled */
    if (st == DT_OK) st = dt_div(p, a_scale, &q);
    if (st == DT_OK) st = dt_div(q, b_scale, out);
    dt_tensor_release(p);
    dt_tensor_release(q);
    dt_no_grad_exit(ctx);
    if (st != DT_OK) dt_error_prefix(__func__);
    return st;
}

/* x + (round8(x) - x): round8(x)'s value, x's gradient (the difference is not recorded). */
static dt_status straight_through(dt_tensor *x, dt_tensor **out) {
    dt_ctx *ctx = x->mesh->ctx;
    dt_tensor *s = NULL, *x8 = NULL, *back = NULL, *d = NULL;
    DT_CHECK(dt_no_grad_enter(ctx));
    dt_status st = dt_float8_scale_tensorwise(x, DT_F8E4M3, &s);
    if (st == DT_OK) st = dt_cast_scaled(x, DT_F8E4M3, s, &x8);
    if (st == DT_OK) st = dt_cast_scaled(x8, DT_F32, s, &back);
    if (st == DT_OK) st = dt_sub(back, x, &d);
    dt_no_grad_exit(ctx);
    if (st == DT_OK) st = dt_add(x, d, out);
    dt_tensor *all[] = {s, x8, back, d};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_tensor_release(all[i]);
    return st;
}

/* x + (bf16(x) - x): x rounded to bf16 (nearest, ties to even) and held in f32, with x's
 * gradient. The difference is exact (x and bf16(x) are within a factor of 2), so the sum is
 * bf16(x) exactly. */
static dt_status straight_through_bf16(dt_tensor *x, dt_tensor **out) {
    dt_ctx *ctx = x->mesh->ctx;
    dt_tensor *xb = NULL, *back = NULL, *d = NULL;
    DT_CHECK(dt_no_grad_enter(ctx));
    dt_status st = dt_cast(x, DT_BF16, &xb);
    if (st == DT_OK) st = dt_cast(xb, DT_F32, &back);
    if (st == DT_OK) st = dt_sub(back, x, &d);
    dt_no_grad_exit(ctx);
    if (st == DT_OK) st = dt_add(x, d, out);
    dt_tensor_release(xb), dt_tensor_release(back), dt_tensor_release(d);
    return st;
}

/* x @ w.T (+ bias) with x and w through round (their straight-through low-precision forms). */
static dt_status linear_rounded(const char *fn, dt_status (*round)(dt_tensor *, dt_tensor **),
                                dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_tensor **out) {
    if (x->dtype != DT_F32 || w->dtype != DT_F32)
        return dt_error(DT_ERR_DTYPE, "%s: arguments x and w are %s and %s, not f32", fn,
                        dt_dtype_name(x->dtype), dt_dtype_name(w->dtype));
    dt_tensor *xs = NULL, *ws = NULL;
    dt_status st = round(x, &xs);
    if (st == DT_OK) st = round(w, &ws);
    if (st == DT_OK) st = dt_linear(xs, ws, bias, out);
    dt_tensor_release(xs);
    dt_tensor_release(ws);
    if (st != DT_OK) dt_error_prefix(fn);
    return st;
}

dt_status dt_linear_bf16(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_tensor **out) {
    DT_TENSOR_ARG(x);
    DT_TENSOR_ARG(w);
    DT_ARG_NOT_NULL(out);
    return linear_rounded(__func__, straight_through_bf16, x, w, bias, out);
}

/* Marks a linear module bf16 (bf16 = 1) or float8; a module takes one of the two. */
static dt_status module_set_precision(const char *fn, dt_module module, int bf16, int on) {
    DT_ARG(module.params && module.index >= 0 && module.index < module.params->nmodules,
           "%s: argument module (index %d) is not a module of its registry", fn, module.index);
    module_entry *e = &module.params->modules[module.index];
    DT_ARG(e->kind == DT_MODULE_LINEAR, "%s: module \"%s\" is not a linear", fn, e->name);
    DT_ARG(!(on && (bf16 ? e->float8 : e->bf16)),
           "%s: module \"%s\" is a %s linear; it takes one of the two", fn, e->name,
           bf16 ? "float8" : "bf16");
    if (bf16)
        e->bf16 = on != 0;
    else
        e->float8 = on != 0;
    return DT_OK;
}

dt_status dt_module_set_bf16(dt_module module, int on) {
    return module_set_precision(__func__, module, 1, on);
}

dt_status dt_module_set_float8(dt_module module, int on) {
    return module_set_precision(__func__, module, 0, on);
}

dt_status dt_linear_float8(dt_tensor *x, dt_tensor *w, dt_tensor *bias, dt_tensor **out) {
    DT_TENSOR_ARG(x);
    DT_TENSOR_ARG(w);
    DT_ARG_NOT_NULL(out);
    return linear_rounded(__func__, straight_through, x, w, bias, out);
}
