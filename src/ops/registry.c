/* The op table, generated from the op list (ops/op_list.h): every built-in op's name, family,
 * arity, kernel slot, argument schema, wrapper and backward rule. The argument schema also gives
 * the cache key. */
#include <stddef.h>
#include <string.h>

#include "core/check.h"
#include "ops/grad.h"
#include "ops/op_impl.h"

/* The kernel column: a dt_kernels slot's offset, or -1 for none (the second argument of
 * KSECOND is -1 only when KERNEL_NONE_##k expands to "~, -1"). */
#define KSECOND(a, b, ...) b
#define KSELECT(...)       KSECOND(__VA_ARGS__)
#define KERNEL_NONE_none   ~, -1
#define KERNEL_OF(k)       KSELECT(KERNEL_NONE_##k, (int)offsetof(dt_kernels, k), ~)

/* Ops built from other ops: composite.c runs them through dt_op_call, piece by piece. */
const op_family dt_family_composite = {.composite = true};

const op_desc dt_op_descs[DT_OP_COUNT] = {
#define DESC(e, name_, family_, min_in, max_in, kernel_, args_, wrapper_, grad_)                   \
    [DT_OP_##e] = {.name = name_,                                                                  \
                   .family = &dt_family_##family_,                                                 \
                   .min_inputs = min_in,                                                           \
                   .max_inputs = max_in,                                                           \
                   .kernel = KERNEL_OF(kernel_),                                                   \
                   .kernel_name = #kernel_,                                                        \
                   .args = (args_),                                                                \
                   .wrapper = #wrapper_,                                                           \
                   .backward = dt_grad_##grad_},
    DT_OP_LIST(DESC)
#undef DESC
};
_Static_assert(sizeof dt_op_descs / sizeof dt_op_descs[0] == DT_OP_COUNT, "op table incomplete");
/* One entry per value of dt_op (designated initializers catch a value given twice). */
#define ONE(...) +1
_Static_assert(0 DT_OP_LIST(ONE) == DT_OP_COUNT, "the op list and dt_op (dtensor/ops.h) differ");
#undef ONE

const char *dt_op_name(dt_op op) {
    if ((unsigned)op < DT_OP_COUNT) return dt_op_descs[op].name;
    const char *user = dt_user_op_name(op);
    return user ? user : "?";
}

const op_family *dt_op_family_user(dt_op op) {
    return dt_user_op_name(op) ? &dt_family_user : NULL;
}

dt_status dt_op_kernel_check(dt_op op, const dt_kernels *k) {
    const op_desc *d = dt_op_desc(op);
    if (!d || d->kernel < 0) return DT_OK;
    void *const *slot = (void *const *)((const char *)k + d->kernel);
    if (!k || !*slot)
        return dt_error(DT_ERR_UNSUPPORTED, "%s: no %s kernel on %s", d->name, d->kernel_name,
                        k ? k->name : "this device");
    return DT_OK;
}

dt_status dt_op_inputs_check(const char *fn, dt_op op, const void *const *in, int n) {
    const op_family *f = dt_op_family(op);
    DT_ARG(f != NULL, "%s: argument op has unknown value %d", fn, (int)op);
    const char *name = dt_op_name(op);
    DT_ARG(in != NULL, "%s: argument inputs is NULL", name);
    const op_desc *d = dt_op_desc(op);
    int lo = d ? d->min_inputs : dt_user_op_ninputs(op), hi = d ? d->max_inputs : lo;
    if (lo == hi)
        DT_ARG(n == lo, "%s: takes %d input%s, got %d", name, lo, lo == 1 ? "" : "s", n);
    else
        DT_ARG(n >= lo && n <= hi, "%s: takes %d to %d inputs, got %d", name, lo, hi, n);
    for (int i = 0; i < n; i++)
        DT_ARG(in[i] != NULL || (f->optional & (1u << i)), "%s: input %d is NULL", name, i);
    return DT_OK;
}

/* ---- the argument key ---------------------------------------------------------------------
 * Every field of dt_op_args belongs to one ARG_ bit; an op's key holds the fields of its bits,
 * field by field (callers' structs may carry padding garbage). */
_Static_assert(sizeof(void *) != 8 || sizeof(dt_op_args) == 216,
               "dt_op_args changed: give the new field an ARG_ bit, key it below, then update "
               "this size");

static uint64_t two(int lo, int hi) {
    return (uint64_t)(uint32_t)lo | (uint64_t)(uint32_t)hi << 32;
}

static uint64_t bits_of(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

unsigned dt_op_args_key(dt_op op, const dt_op_args *a, uint64_t *k) {
    static const dt_op_args zero;
    const op_desc *d = dt_op_desc(op);
    unsigned use = d ? d->args : ARG_ALL & ~ARG_SEED, n = 0; /* registered ops: every field */
    if (!use) return 0; /* most ops read no argument: the common case pays one test */
    if (!a) a = &zero;
    if (use & ARG_SCALAR) k[n++] = bits_of(a->scalar);
    if (use & ARG_DIMS) {
        int nd = a->ndims < 0 ? 0 : a->ndims > DT_MAX_NDIM ? DT_MAX_NDIM : a->ndims;
        k[n++] = (uint64_t)(uint32_t)a->ndims;
        for (int i = 0; i < nd; i += 2) k[n++] = two(a->dims[i], i + 1 < nd ? a->dims[i + 1] : 0);
    }
    if (use & ARG_KEEPDIM) k[n++] = (uint64_t)(uint32_t)a->keepdim;
    if (use & ARG_DIM) k[n++] = (uint64_t)(uint32_t)a->dim;
    if (use & ARG_DIM2) k[n++] = (uint64_t)(uint32_t)a->dim2;
    if (use & ARG_RANGE) k[n++] = (uint64_t)a->start, k[n++] = (uint64_t)a->end;
    if (use & ARG_SHAPE) {
        int nd = a->shape_ndim < 0 ? 0 : a->shape_ndim > DT_MAX_NDIM ? DT_MAX_NDIM : a->shape_ndim;
        k[n++] = (uint64_t)(uint32_t)a->shape_ndim;
        for (int i = 0; i < nd; i++) k[n++] = (uint64_t)a->shape[i];
    }
    if (use & ARG_CORRECTION) k[n++] = (uint64_t)(uint32_t)a->correction;
    if (use & ARG_CAUSAL) k[n++] = (uint64_t)(uint32_t)a->causal;
    if (use & ARG_REDUCTION) k[n++] = (uint64_t)(uint32_t)a->reduction;
    if (use & ARG_IGNORE) k[n++] = (uint64_t)(uint32_t)a->use_ignore_index,
                          k[n++] = (uint64_t)a->ignore_index;
    if (use & ARG_LABEL_SMOOTHING) k[n++] = bits_of(a->label_smoothing);
    if (use & ARG_K) k[n++] = (uint64_t)a->k;
    if (use & ARG_SMALLEST) k[n++] = (uint64_t)(uint32_t)a->smallest;
    if (use & ARG_SEQ_FIRST) k[n++] = (uint64_t)(uint32_t)a->seq_first;
    if (use & ARG_TRANS) k[n++] = two(a->trans_a, a->trans_b);
    return n;
}
