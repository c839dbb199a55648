/* Ops registered at run time: their rows, inference and kernel come from the caller. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/op_impl.h"

typedef struct user_op {
    dt_op_def def;
    char name[64];
    dt_placement (*rows)[DT_OP_MAX_USER_INPUTS + 1];
} user_op;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static user_op *ops[DT_OP_MAX_REGISTERED];
static int nops;

static const user_op *find(dt_op op) {
    int k = (int)op - DT_OP_COUNT;
    pthread_mutex_lock(&mu);
    const user_op *u = k >= 0 && k < nops ? ops[k] : NULL;
    pthread_mutex_unlock(&mu);
    return u;
}

const char *dt_user_op_name(dt_op op) {
    const user_op *u = find(op);
    return u ? u->name : NULL;
}

int dt_user_op_ninputs(dt_op op) {
    const user_op *u = find(op);
    return u ? u->def.ninputs : 0;
}

static dt_status infer(dt_op op, const op_input *in, int n, const dt_op_args *a, op_out *out) {
    (void)a;
    const user_op *u = find(op);
    if (n != u->def.ninputs)
        return dt_error(DT_ERR_ARG, "%s: takes %d inputs, got %d", u->name, u->def.ninputs, n);
    dt_block blocks[DT_OP_MAX_USER_INPUTS], o = {0};
    for (int i = 0; i < n; i++) {
        blocks[i] = (dt_block){.dtype = in[i].dtype, .ndim = in[i].ndim};
        memcpy(blocks[i].shape, in[i].shape, sizeof(int64_t) * (size_t)in[i].ndim);
    }
    dt_status st = u->def.infer(blocks, n, &o, u->def.user);
    if (st != DT_OK) return st;
    if (o.ndim < 0 || o.ndim > DT_MAX_NDIM || (unsigned)o.dtype >= DT_DTYPE_COUNT)
        return dt_error(DT_ERR_SHAPE, "%s: infer gave ndim %d, dtype %d", u->name, o.ndim,
                        (int)o.dtype);
    out->ndim = o.ndim;
    out->dtype = o.dtype;
    memcpy(out->shape, o.shape, sizeof(int64_t) * (size_t)o.ndim);
    return DT_OK;
}

static int rules(dt_op op, const op_input *in, int n, const dt_op_args *a, int mesh_size,
                 int mesh_total, rule_row *rows) {
    (void)in, (void)a, (void)mesh_size, (void)mesh_total;
    const user_op *u = find(op);
    int k = 0;
    rows[k++] = (rule_row){.in = {RP, RP, RP, RP}, .out = RP};
    for (int r = 0; r < u->def.nrows && k < DT_OP_MAX_ROWS; r++, k++) {
        for (int i = 0; i < n; i++) rows[k].in[i] = u->rows[r][i];
        rows[k].out = u->rows[r][n];
    }
    return k;
}

static dt_status compute(local_call *c) {
    const user_op *u = find(c->op);
    return u->def.kernel(c->in, c->ninputs, &c->out, u->def.user);
}

const op_family dt_family_user = {
    .infer = infer, .rules = rules,
    .compute = compute,
};

dt_status dt_op_register(const dt_op_def *def, dt_op *out) {
    DT_ARG_NOT_NULL(def);
    DT_ARG_NOT_NULL(out);
    DT_ARG(def->name && def->name[0], "dt_op_register: def->name is empty");
    DT_ARG(def->ninputs >= 1 && def->ninputs <= DT_OP_MAX_USER_INPUTS,
           "dt_op_register: def->ninputs = %d is not in [1, %d]", def->ninputs,
           DT_OP_MAX_USER_INPUTS);
    DT_ARG(def->nrows >= 0 && def->nrows < DT_OP_MAX_ROWS && (def->rows || !def->nrows),
           "dt_op_register: def->nrows = %d (at most %d rows)", def->nrows, DT_OP_MAX_ROWS - 1);
    DT_ARG(def->infer && def->kernel, "dt_op_register: %s needs infer and kernel", def->name);
    for (int r = 0; r < def->nrows; r++) {
        dt_placement tmp[DT_OP_MAX_USER_INPUTS + 1];
        memcpy(tmp, def->rows[r], sizeof tmp);
        for (int i = 0; i <= def->ninputs; i++)
            if (tmp[i].kind > DT_PLACEMENT_PARTIAL || (tmp[i].kind == DT_PLACEMENT_SHARD && tmp[i].dim < 0))
                return dt_error(DT_ERR_PLACEMENT, "dt_op_register: %s: rows[%d][%d] is not a "
                                                  "placement with a non-negative dim", def->name, r, i);
    }
    user_op *u = calloc(1, sizeof *u);
    if (!u) return dt_error(DT_ERR_NOMEM, "dt_op_register: out of memory");
    u->rows = calloc((size_t)(def->nrows ? def->nrows : 1), sizeof *u->rows);
    if (!u->rows) {
        free(u);
        return dt_error(DT_ERR_NOMEM, "dt_op_register: out of memory");
    }
    u->def = *def;
    snprintf(u->name, sizeof u->name, "%s", def->name);
    if (def->nrows) memcpy(u->rows, def->rows, sizeof *u->rows * (size_t)def->nrows);
    pthread_mutex_lock(&mu);
    dt_status st = DT_OK;
    if (nops == DT_OP_MAX_REGISTERED)
        st = dt_error(DT_ERR_UNSUPPORTED, "dt_op_register: at most %d ops can be registered",
                      DT_OP_MAX_REGISTERED);
    else {
        ops[nops] = u;
        *out = (dt_op)(DT_OP_COUNT + nops++);
    }
    pthread_mutex_unlock(&mu);
    if (st != DT_OK) {
        free(u->rows);
        free(u);
    }
    return st;
}
