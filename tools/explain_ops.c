/* Op text to op and arguments, for dtensor-explain --op and propagation rows (tools/explain.h
 * lists the forms). One entry per built-in op says which arguments its text takes; the
 * conformance test walks every op through it, so an op added without one fails there. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "explain.h"

typedef enum args_kind {
    MISSING = 0,
    NONE,     /* mm, add, relu: nothing */
    SCALAR,   /* (2.5) */
    REDUCE,   /* (dim=0,1,keepdim,correction=0); no dims: all */
    ARGINDEX, /* argmax(dim=1,keepdim) */
    DIM,      /* softmax(dim=-1), cat(dim=0), stack(dim=0) */
    TWO_DIMS, /* transpose(0,1) */
    PERM,     /* permute(2,0,1) */
    SHAPE,    /* view(4,-1), view(8,6->48), expand(4,8) */
    SLICE,    /* slice(dim=1,start=8,end=16), slice([:,8:]) */
    NORM,     /* layer_norm(eps=1e-5), layer_norm(last), layer_norm(last=2),
                 layer_norm(normalized_shape=[8,10]) (= last=2) */
    SDPA,     /* (causal,scale=0.125,seq_first) */
    XENT,     /* cross_entropy(mean|sum|none,ignore_index=-100|none,label_smoothing=0.1) */
    DROPOUT,  /* dropout(0.1), dropout(p=0.1,seed=7,offset=0) */
    TOPK,     /* topk(k=3,dim=0,largest=0); dim defaults to -1 */
    CLASSES,  /* one_hot(classes=5), one_hot(num_classes=5), one_hot(5) */
    VNORM,    /* vector_norm(2), vector_norm(inf,dim=1,keepdim), vector_norm(ord=-inf,dim=0,1) */
    SCATTER,  /* scatter_add(dim=0,shape=[11,6]) */
} args_kind;

static const args_kind kinds[] = {
    [DT_OP_ADD] = NONE,
    [DT_OP_SUB] = NONE,
    [DT_OP_MUL] = NONE,
    [DT_OP_DIV] = NONE,
    [DT_OP_MAXIMUM] = NONE,
    [DT_OP_MINIMUM] = NONE,
    [DT_OP_WHERE] = NONE,
    [DT_OP_NEG] = NONE,
    [DT_OP_EXP] = NONE,
    [DT_OP_LOG] = NONE,
    [DT_OP_SQRT] = NONE,
    [DT_OP_RSQRT] = NONE,
    [DT_OP_ABS] = NONE,
    [DT_OP_RELU] = NONE,
    [DT_OP_GELU] = NONE,
    [DT_OP_SILU] = NONE,
    [DT_OP_TANH] = NONE,
    [DT_OP_SIGMOID] = NONE,
    [DT_OP_POW_SCALAR] = SCALAR,
    [DT_OP_ADD_SCALAR] = SCALAR,
    [DT_OP_MUL_SCALAR] = SCALAR,
    [DT_OP_MM] = NONE,
    [DT_OP_BMM] = NONE,
    [DT_OP_MATMUL] = NONE,
    [DT_OP_ADDMM] = NONE,
    [DT_OP_LINEAR] = NONE,
    [DT_OP_SUM] = REDUCE,
    [DT_OP_MEAN] = REDUCE,
    [DT_OP_AMAX] = REDUCE,
    [DT_OP_AMIN] = REDUCE,
    [DT_OP_MAX] = REDUCE,
    [DT_OP_MIN] = REDUCE,
    [DT_OP_ARGMAX] = ARGINDEX,
    [DT_OP_ARGMIN] = ARGINDEX,
    [DT_OP_VAR] = REDUCE,
    [DT_OP_STD] = REDUCE,
    [DT_OP_SOFTMAX] = DIM,
    [DT_OP_LOG_SOFTMAX] = DIM,
    [DT_OP_LAYER_NORM] = NORM,
    [DT_OP_RMS_NORM] = NORM,
    [DT_OP_EMBEDDING] = NONE,
    [DT_OP_PICK] = NONE,
    [DT_OP_CROSS_ENTROPY] = XENT,
    [DT_OP_SDPA] = SDPA,
    [DT_OP_TRANSPOSE] = TWO_DIMS,
    [DT_OP_PERMUTE] = PERM,
    [DT_OP_VIEW] = SHAPE,
    [DT_OP_SLICE] = SLICE,
    [DT_OP_UNSQUEEZE] = DIM,
    [DT_OP_SQUEEZE] = DIM,
    [DT_OP_CONTIGUOUS] = NONE,
    [DT_OP_EXPAND] = SHAPE,
    [DT_OP_CAT] = DIM,
    [DT_OP_STACK] = DIM,
    [DT_OP_SWIGLU] = NONE,
    [DT_OP_ROPE] = NONE,
    [DT_OP_DROPOUT] = DROPOUT,
    [DT_OP_SDPA_BACKWARD] = SDPA,
    [DT_OP_GATHER] = DIM,
    [DT_OP_ONE_HOT] = CLASSES,
    [DT_OP_TOPK] = TOPK,
    [DT_OP_CUMSUM] = DIM,
    [DT_OP_VECTOR_NORM] = VNORM,
    [DT_OP_EQ] = NONE,
    [DT_OP_NE] = NONE,
    [DT_OP_GT] = NONE,
    [DT_OP_GE] = NONE,
    [DT_OP_LT] = NONE,
    [DT_OP_LE] = NONE,
    [DT_OP_SIGN] = NONE,
    [DT_OP_SCATTER_ADD] = SCATTER,
    [DT_OP_SILU_MUL] = NONE,
    [DT_OP_SILU_MUL_BACKWARD] = NONE,
    [DT_OP_LOG_SOFTMAX_PICK] = NONE,
    [DT_OP_LOG_SOFTMAX_PICK_BACKWARD] = NONE,
    [DT_OP_RMS_NORM_RESIDUAL] = NONE,
    [DT_OP_LAYER_NORM_BACKWARD] = NORM,
    [DT_OP_RMS_NORM_BACKWARD] = NORM,
};
_Static_assert(sizeof kinds / sizeof kinds[0] == DT_OP_COUNT, "an op has no text form");

/* Other spellings of the rows (PyTorch's). */
static const struct {
    const char *alias, *name, *args; /* args NULL: the text's own */
} aliases[] = {
    {"broadcast_to", "expand", NULL}, /* torch.broadcast_to is expand (dt_expand) */
    {"reshape", "view", NULL},
    {"sdpa", "scaled_dot_product_attention", NULL},
    {"sdpa_backward", "scaled_dot_product_attention_backward", NULL},
    {"linalg_vector_norm", "vector_norm", NULL},
};

dt_dtype explain_op_input_dtype(dt_op op, int i) {
    int index = (i == 1 && (op == DT_OP_EMBEDDING || op == DT_OP_PICK ||
                            op == DT_OP_CROSS_ENTROPY || op == DT_OP_GATHER ||
                            op == DT_OP_SCATTER_ADD || op == DT_OP_LOG_SOFTMAX_PICK ||
                            op == DT_OP_LOG_SOFTMAX_PICK_BACKWARD)) ||
                (i == 0 && op == DT_OP_ONE_HOT);
    return index ? DT_I64 : DT_F32;
}

static args_kind kind_of(dt_op op) {
    return (unsigned)op < DT_OP_COUNT ? kinds[op] : NONE; /* registered ops take none */
}

/* ---- argument tokens ------------------------------------------------------------------------ */

typedef struct tokens {
    int n;
    char key[DT_MAX_NDIM + 4][96], val[DT_MAX_NDIM + 4][96]; /* key "" for a bare value */
} tokens;

/* "dim=0,1,keepdim" -> (dim,0) ("",1) ("",keepdim): top-level commas only. */
static dt_status split_args(const char *op, const char *text, tokens *t) {
    t->n = 0;
    for (const char *p = text; *p;) {
        int depth = 0;
        const char *e = p;
        for (; *e && (depth || *e != ','); e++)
            depth += (*e == '[') - (*e == ']');
        if (t->n == DT_COUNT_OF(t->key))
            return dt_error_set(DT_ERR_PARSE, "%s: too many arguments in \"%s\"", op, text);
        char one[96];
        snprintf(one, sizeof one, "%.*s", (int)(e - p), p);
        char *eq = strchr(one, '=');
        if (eq && one[0] != '[') {
            *eq = '\0';
            snprintf(t->key[t->n], sizeof t->key[0], "%s", one);
            snprintf(t->val[t->n], sizeof t->val[0], "%s", eq + 1);
        } else {
            t->key[t->n][0] = '\0';
            snprintf(t->val[t->n], sizeof t->val[0], "%s", one);
        }
        explain_trim(t->key[t->n]), explain_trim(t->val[t->n]);
        t->n++;
        p = *e ? e + 1 : e;
    }
    return DT_OK;
}

static int to_i64(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno) return 0;
    *v = x;
    return 1;
}

static int to_int(const char *s, int *v) {
    int64_t x;
    if (!to_i64(s, &x) || x < -1000000 || x > 1000000) return 0;
    *v = (int)x;
    return 1;
}

static int to_double(const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    return end != s && !*end;
}

static int to_flag(const char *s, int *v) { /* "" (bare key) = 1 */
    if (!*s) return *v = 1, 1;
    return to_int(s, v) && (*v == 0 || *v == 1);
}

#define BAD(...) dt_error_set(DT_ERR_PARSE, __VA_ARGS__)
#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status try_st_ = (call);                                                                \
        if (try_st_ != DT_OK) return try_st_;                                                      \
    } while (0)

/* A comma list of ints ("4,-1"); "" = none. */
static dt_status int_list(const char *op, const char *text, int64_t *v, int *n) {
    *n = 0;
    for (const char *p = text; *p;) {
        char *end;
        while (*p == ' ')
            p++;
        if (*n == DT_MAX_NDIM)
            return BAD("%s: more than %d sizes in \"%s\"", op, DT_MAX_NDIM, text);
        v[(*n)++] = strtoll(p, &end, 10);
        if (end == p) return BAD("%s: \"%s\" is not a list of integers", op, text);
        for (p = end; *p == ' '; p++) {
        }
        if (*p == ',')
            p++;
        else if (*p)
            return BAD("%s: \"%s\" is not a list of integers", op, text);
    }
    return DT_OK;
}

/* slice([:,8:]): one entry a:b (either side may be empty), the others ":". */
static dt_status numpy_slice(const char *op, const char *text, const dt_spec *x, dt_op_args *a) {
    char body[64];
    size_t len = strlen(text);
    if (len < 2 || text[len - 1] != ']') return BAD("%s: \"%s\" is not [..]", op, text);
    snprintf(body, sizeof body, "%.*s", (int)(len - 2), text + 1);
    int d = 0, found = 0, open_end = 0;
    for (char *save, *e = strtok_r(body, ",", &save); e; e = strtok_r(NULL, ",", &save), d++) {
        explain_trim(e);
        if (!strcmp(e, ":")) continue;
        char *colon = strchr(e, ':');
        if (found || !colon) return BAD("%s: \"%s\" must slice exactly one dim as a:b", op, text);
        *colon = '\0';
        found = 1, a->dim = d, a->start = 0, open_end = !colon[1];
        if (*e && !to_i64(e, &a->start)) return BAD("%s: bad start in \"%s\"", op, text);
        if (colon[1] && !to_i64(colon + 1, &a->end)) return BAD("%s: bad end in \"%s\"", op, text);
    }
    if (!found) return BAD("%s: \"%s\" slices no dim", op, text);
    if (open_end) {
        if (!x || a->dim >= x->ndim) return BAD("%s: %s needs input 0's shape", op, text);
        a->end = x->shape[a->dim];
    }
    return DT_OK;
}

/* view's "8,6->48": the left side must be input 0's shape. */
static dt_status shape_args(const char *op, const char *text, int n, const dt_spec *in,
                            dt_op_args *a) {
    const char *arrow = strstr(text, "->");
    if (arrow) {
        char left[128];
        int64_t v[DT_MAX_NDIM];
        int nv;
        snprintf(left, sizeof left, "%.*s", (int)(arrow - text), text);
        TRY(int_list(op, left, v, &nv));
        if (n < 1 || nv != in[0].ndim || memcmp(v, in[0].shape, sizeof(int64_t) * (size_t)nv))
            return dt_error_set(DT_ERR_SHAPE, "%s: input 0 does not have the shape %s", op, left);
        text = arrow + 2;
    }
    return int_list(op, text, a->shape, &a->shape_ndim);
}

static dt_status parse_args(dt_op op, const char *name, const char *text, int n, const dt_spec *in,
                            dt_op_args *a) {
    args_kind kind = kind_of(op);
    if (kind == SHAPE) return shape_args(name, text, n, in, a);
    if (kind == SLICE && text[0] == '[') return numpy_slice(name, text, n ? &in[0] : NULL, a);
    tokens t;
    TRY(split_args(name, text, &t));
    int ok = 1, positional = 0, have_dim = 0, have_end = 0, have_k = 0;
    a->correction = op == DT_OP_VAR || op == DT_OP_STD; /* torch's unbiased default */
    if (kind == TWO_DIMS) a->dim = 0, a->dim2 = 1;
    if (kind == TOPK) a->dim = -1; /* torch's default */
    if (kind == VNORM) a->scalar = 2; /* torch's default ord */
    if (kind == XENT)
        a->reduction = DT_REDUCTION_MEAN, a->use_ignore_index = 1, a->ignore_index = DT_IGNORE_INDEX;
    for (int i = 0; i < t.n && ok; i++) {
        const char *k = t.key[i], *v = t.val[i];
        int bare = !*k;
        switch (kind) {
        case SCALAR:
            ok = (bare || !strcmp(k, "scalar")) &&
                 (to_double(v, &a->scalar) || !strcmp(v, "scalar"));
            if (!strcmp(v, "scalar")) a->scalar = 2; /* any value: placements do not depend on it */
            break;
        case REDUCE:
        case ARGINDEX: {
            int d;
            if (!strcmp(k, "keepdim") || (bare && !strcmp(v, "keepdim"))) {
                ok = to_flag(bare ? "" : v, &a->keepdim);
            } else if (!strcmp(k, "correction") && (op == DT_OP_VAR || op == DT_OP_STD)) {
                ok = to_int(v, &a->correction);
            } else if ((bare || !strcmp(k, "dim")) && to_int(v, &d)) { /* dim=0,1 or (0) */
                if (kind == ARGINDEX)
                    ok = !have_dim, a->dim = d;
                else if ((ok = a->ndims < DT_MAX_NDIM))
                    a->dims[a->ndims++] = d;
                have_dim = 1;
            } else
                ok = 0;
            break;
        }
        case DIM:
            ok = (bare || !strcmp(k, "dim")) && !have_dim++ && to_int(v, &a->dim);
            break;
        case TWO_DIMS:
            if (!strcmp(k, "dim0") || (bare && positional == 0))
                ok = to_int(v, &a->dim);
            else if (!strcmp(k, "dim1") || (bare && positional == 1))
                ok = to_int(v, &a->dim2);
            else
                ok = 0;
            positional++;
            break;
        case PERM:
            ok = bare && a->ndims < DT_MAX_NDIM && to_int(v, &a->dims[a->ndims++]);
            break;
        case SLICE:
            if (!strcmp(k, "dim"))
                ok = to_int(v, &a->dim);
            else if (!strcmp(k, "start"))
                ok = to_i64(v, &a->start);
            else if (!strcmp(k, "end"))
                ok = to_i64(v, &a->end), have_end = 1;
            else
                ok = 0;
            break;
        case NORM: {
            size_t len = strlen(v);
            if (!strcmp(k, "last")) {
                ok = to_int(v, &a->ndims) && a->ndims >= 1 && a->ndims <= DT_MAX_NDIM;
            } else if (!strcmp(k, "normalized_shape") && len >= 2 && v[0] == '[' &&
                       v[len - 1] == ']') { /* torch's spelling of last=K */
                char list[96];
                int64_t sizes[DT_MAX_NDIM];
                snprintf(list, sizeof list, "%.*s", (int)(len - 2), v + 1);
                TRY(int_list(name, list, sizes, &a->ndims));
                int d0 = n ? in[0].ndim - a->ndims : 0;
                if (n &&
                    (d0 < 0 || memcmp(sizes, in[0].shape + d0, sizeof(int64_t) * (size_t)a->ndims)))
                    return dt_error_set(DT_ERR_SHAPE,
                                        "%s: normalized_shape %s is not input 0's "
                                        "last sizes",
                                        name, v);
                ok = a->ndims >= 1;
            } else
                ok = (bare && !strcmp(v, "last")) ||
                     (!strcmp(k, "eps") && to_double(v, &a->scalar));
            break;
        }
        case DROPOUT: {
            int64_t u = 0;
            if (bare || !strcmp(k, "p")) {
                ok = to_double(v, &a->scalar);
            } else if (!strcmp(k, "seed") || !strcmp(k, "offset")) {
                ok = to_i64(v, &u) && u >= 0;
                *(!strcmp(k, "seed") ? &a->seed : &a->offset) = (uint64_t)u;
            } else {
                ok = 0;
            }
            break;
        }
        case SDPA:
            if (!strcmp(k, "causal") || (bare && !strcmp(v, "causal")))
                ok = to_flag(bare ? "" : v, &a->causal);
            else if (!strcmp(k, "seq_first") || (bare && !strcmp(v, "seq_first")))
                ok = to_flag(bare ? "" : v, &a->seq_first);
            else
                ok = !strcmp(k, "scale") && to_double(v, &a->scalar);
            break;
        case VNORM: {
            int d;
            if (!strcmp(k, "keepdim") || (bare && !strcmp(v, "keepdim"))) {
                ok = to_flag(bare ? "" : v, &a->keepdim);
            } else if (!strcmp(k, "ord") || (bare && !positional && !have_dim)) {
                ok = to_double(v, &a->scalar) && !isnan(a->scalar); /* strtod reads inf */
                positional++;
            } else if ((bare || !strcmp(k, "dim")) && to_int(v, &d)) { /* dim=0,1 */
                ok = (!bare || have_dim) && a->ndims < DT_MAX_NDIM;
                if (ok) a->dims[a->ndims++] = d;
                have_dim = 1;
            } else
                ok = 0;
            break;
        }
        case XENT:
            if (bare && !strcmp(v, "mean"))
                a->reduction = DT_REDUCTION_MEAN;
            else if (bare && !strcmp(v, "sum"))
                a->reduction = DT_REDUCTION_SUM;
            else if (bare && !strcmp(v, "none"))
                a->reduction = DT_REDUCTION_NONE;
            else if (!strcmp(k, "label_smoothing"))
                ok = to_double(v, &a->label_smoothing) && a->label_smoothing >= 0 &&
                     a->label_smoothing <= 1;
            else if (!strcmp(k, "ignore_index") && !strcmp(v, "none"))
                a->use_ignore_index = 0;
            else
                ok = !strcmp(k, "ignore_index") && to_i64(v, &a->ignore_index);
            break;
        case TOPK:
            if (!strcmp(k, "k") || (bare && positional == 0))
                ok = to_i64(v, &a->k), have_k = 1;
            else if (!strcmp(k, "dim") || (bare && positional == 1))
                ok = to_int(v, &a->dim);
            else if (!strcmp(k, "largest"))
                ok = to_flag(v, &a->smallest), a->smallest = !a->smallest;
            else
                ok = 0;
            positional++;
            break;
        case SCATTER: {
            size_t len = strlen(v);
            if (!strcmp(k, "dim")) {
                ok = !have_dim++ && to_int(v, &a->dim);
            } else if (!strcmp(k, "shape") && len >= 2 && v[0] == '[' && v[len - 1] == ']') {
                char list[96];
                snprintf(list, sizeof list, "%.*s", (int)(len - 2), v + 1);
                TRY(int_list(name, list, a->shape, &a->shape_ndim));
            } else {
                ok = 0;
            }
            break;
        }
        case CLASSES:
            ok = (bare || !strcmp(k, "classes") || !strcmp(k, "num_classes")) && !have_k++ &&
                 to_i64(v, &a->k);
            break;
        default:
            ok = 0;
        }
        if (!ok && a->ndims == DT_MAX_NDIM && (kind == REDUCE || kind == PERM))
            return BAD("%s: more than %d dims", name, DT_MAX_NDIM);
        if (!ok)
            return BAD("%s: cannot read the argument \"%s%s%s\"%s", name, k, bare ? "" : "=", v,
                       kind == NORM ? " (the last K dims: last=K or normalized_shape=[..])" : "");
    }
    if ((kind == ARGINDEX || (kind == DIM && op != DT_OP_CAT && op != DT_OP_STACK)) &&
        !have_dim)
        return BAD("%s needs dim=K", name);
    if (kind == PERM && a->ndims == 0) return BAD("%s needs the new order of the dims", name);
    if (kind == TOPK && !have_k) return BAD("%s needs k=K", name);
    if (kind == CLASSES && !have_k) return BAD("%s needs classes=C", name);
    if (kind == SCATTER && (!have_dim || !a->shape_ndim))
        return BAD("%s needs dim=K and shape=[..]", name);
    if (kind == SLICE && !have_end) {
        int d = n ? a->dim + (a->dim < 0 ? in[0].ndim : 0) : -1;
        if (d < 0 || d >= in[0].ndim)
            return BAD("%s: without end= it needs input 0's dim %d", name, a->dim);
        a->end = in[0].shape[d];
    }
    return DT_OK;
}

dt_status explain_op_parse(const char *text, int n, const dt_spec *in, dt_op *op_out,
                           dt_op_args *args_out) {
    if (!text || !op_out || !args_out || (n && !in))
        return dt_error_set(DT_ERR_ARG, "explain_op_parse: NULL argument");
    dt_op_args a = {0};
    dt_op op;
    if (dt_op_lookup(text, &op) == DT_OK && op >= DT_OP_COUNT) { /* registered: whole text */
        *op_out = op, *args_out = a;
        return DT_OK;
    }
    char name[EXPLAIN_NAME_MAX], args[EXPLAIN_ARGS_MAX];
    const char *paren = strchr(text, '(');
    size_t len = paren ? (size_t)(paren - text) : strlen(text);
    if (len >= sizeof name)
        return dt_error_set(DT_ERR_UNSUPPORTED, "no op is named \"%.*s\"", (int)len, text);
    dt_status split = explain_split_call(text, name, args);
    if (split != DT_OK) return split;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) {
            if (aliases[i].args && paren) return BAD("%s takes no arguments", name);
            snprintf(name, sizeof name, "%s", aliases[i].name);
            if (aliases[i].args) snprintf(args, sizeof args, "%s", aliases[i].args);
        }
    /* add(scalar), mul(scalar=3), pow(2): the scalar ops */
    if (!strncmp(args, "scalar", 6) &&
        (!strcmp(name, "add") || !strcmp(name, "mul") || !strcmp(name, "pow")))
        strcat(name, "_scalar");
    if (!strcmp(name, "pow")) strcat(name, "_scalar");
    if (dt_op_lookup(name, &op) != DT_OK)
        return dt_error_set(DT_ERR_UNSUPPORTED,
                            "op \"%s\" is neither built in nor registered "
                            "(a plugin's ops need --plugin)",
                            name);
    if (kind_of(op) == NONE && args[0]) return BAD("%s takes no arguments (\"%s\")", name, args);
    TRY(parse_args(op, name, args, n, in, &a));
    *op_out = op, *args_out = a;
    return DT_OK;
}

dt_status explain_op_format(dt_op op, const dt_op_args *a, char *buf, size_t cap) {
    const char *name = dt_op_name(op);
    args_kind kind = kind_of(op);
    if (!strcmp(name, "?") || kind == MISSING)
        return dt_error_set(DT_ERR_ARG, "explain_op_format: op %d has no text form", (int)op);
    size_t o = (size_t)snprintf(buf, cap, "%s", name);
#define PUT(...)                                                                                   \
    (o += (size_t)snprintf(buf + (o < cap ? o : cap), o < cap ? cap - o : 0, __VA_ARGS__))
    switch (kind) {
    case SCALAR:
        PUT("(%.17g)", a->scalar);
        break;
    case REDUCE:
        if (!a->ndims && !a->keepdim && a->correction == (op == DT_OP_VAR || op == DT_OP_STD))
            break;
        PUT("(");
        for (int i = 0; i < a->ndims; i++)
            PUT(i ? ",%d" : "dim=%d", a->dims[i]);
        if (a->keepdim) PUT("%skeepdim", a->ndims ? "," : "");
        if (op == DT_OP_VAR || op == DT_OP_STD)
            PUT("%scorrection=%d", a->ndims || a->keepdim ? "," : "", a->correction);
        PUT(")");
        break;
    case ARGINDEX:
        PUT("(dim=%d%s)", a->dim, a->keepdim ? ",keepdim" : "");
        break;
    case DIM:
        PUT("(dim=%d)", a->dim);
        break;
    case TWO_DIMS:
        PUT("(%d,%d)", a->dim, a->dim2);
        break;
    case PERM:
    case SHAPE: {
        int k = kind == PERM ? a->ndims : a->shape_ndim;
        PUT("(");
        for (int i = 0; i < k; i++)
            PUT(i ? ",%lld" : "%lld",
                kind == PERM ? (long long)a->dims[i] : (long long)a->shape[i]);
        PUT(")");
        break;
    }
    case SLICE:
        PUT("(dim=%d,start=%lld,end=%lld)", a->dim, (long long)a->start, (long long)a->end);
        break;
    case NORM:
        if (a->ndims > 0 || a->scalar != 0) PUT("(");
        if (a->ndims > 0) PUT("last=%d", a->ndims);
        if (a->scalar != 0) PUT("%seps=%.17g", a->ndims > 0 ? "," : "", a->scalar);
        if (a->ndims > 0 || a->scalar != 0) PUT(")");
        break;
    case DROPOUT:
        PUT("(p=%.17g", a->scalar);
        if (a->seed || a->offset)
            PUT(",seed=%llu,offset=%llu", (unsigned long long)a->seed,
                (unsigned long long)a->offset);
        PUT(")");
        break;
    case SDPA:
        if (a->causal || a->scalar != 0 || a->seq_first) PUT("(");
        if (a->causal) PUT("causal");
        if (a->scalar != 0) PUT("%sscale=%.17g", a->causal ? "," : "", a->scalar);
        if (a->seq_first) PUT("%sseq_first", a->causal || a->scalar != 0 ? "," : "");
        if (a->causal || a->scalar != 0 || a->seq_first) PUT(")");
        break;
    case VNORM:
        PUT("(%.17g", a->scalar);
        for (int i = 0; i < a->ndims; i++)
            PUT(i ? ",%d" : ",dim=%d", a->dims[i]);
        if (a->keepdim) PUT(",keepdim");
        PUT(")");
        break;
    case XENT:
        PUT("(%s", a->reduction == DT_REDUCTION_MEAN ? "mean" : a->reduction == DT_REDUCTION_SUM ? "sum" : "none");
        if (!a->use_ignore_index)
            PUT(",ignore_index=none");
        else if (a->ignore_index != DT_IGNORE_INDEX)
            PUT(",ignore_index=%lld", (long long)a->ignore_index);
        if (a->label_smoothing != 0) PUT(",label_smoothing=%.17g", a->label_smoothing);
        PUT(")");
        break;
    case TOPK:
        PUT("(k=%lld,dim=%d%s)", (long long)a->k, a->dim, a->smallest ? ",largest=0" : "");
        break;
    case CLASSES:
        PUT("(classes=%lld)", (long long)a->k);
        break;
    case SCATTER:
        PUT("(dim=%d,shape=[", a->dim);
        for (int i = 0; i < a->shape_ndim; i++) PUT(i ? ",%lld" : "%lld", (long long)a->shape[i]);
        PUT("])");
        break;
    default:
        break;
    }
#undef PUT
    if (o >= cap) return dt_error_set(DT_ERR_SIZE, "explain_op_format: %zu bytes needed", o + 1);
    return DT_OK;
}
