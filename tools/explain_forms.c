/* Calls of the C API that rows name but that are not one dispatched op (tools/explain.h lists
 * the forms): t of a 1-D tensor, unbind, split, the like-factories, new_full, cast. Their text
 * here, the ops' text in explain_ops.c; which C function each text stands for, and why the
 * others have none, in the two tables at the end (test_op_coverage holds the headers to them). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "explain.h"

#define BAD(...) dt_error_set(DT_ERR_PARSE, __VA_ARGS__)
#define TRY(call)                                                                                  \
    do {                                                                                           \
        dt_status try_st_ = (call);                                                                \
        if (try_st_ != DT_OK) return try_st_;                                                      \
    } while (0)

static const char *const form_names[EXPLAIN_FORM_COUNT] = {
    [EXPLAIN_OP] = NULL,
    [EXPLAIN_IDENTITY] = "t",
    [EXPLAIN_UNBIND] = "unbind",
    [EXPLAIN_SPLIT] = "split",
    [EXPLAIN_ZEROS_LIKE] = "zeros_like",
    [EXPLAIN_ONES_LIKE] = "ones_like",
    [EXPLAIN_EMPTY_LIKE] = "empty_like",
    [EXPLAIN_FULL_LIKE] = "full_like",
    [EXPLAIN_NEW_FULL] = "new_full",
    [EXPLAIN_CAST] = "cast",
};

const char *explain_call_name(const explain_call *c) {
    return c->form == EXPLAIN_OP ? dt_op_name(c->op) : form_names[c->form];
}

dt_dtype explain_call_input_dtype(const explain_call *c, int i) {
    return c->form == EXPLAIN_OP ? explain_op_input_dtype(c->op, i) : DT_F32;
}

/* ---- arguments: "dim=1,sizes=[2,4]" -> (dim,1) (sizes,[2,4]); a bare value has key "" ---- */

typedef struct arg {
    char key[128], val[128];
} arg;

dt_status explain_split_call(const char *text, char name[EXPLAIN_NAME_MAX],
                             char args[EXPLAIN_ARGS_MAX]) {
    const char *paren = strchr(text, '(');
    size_t len = paren ? (size_t)(paren - text) : strlen(text);
    snprintf(name, EXPLAIN_NAME_MAX, "%.*s",
             (int)(len < EXPLAIN_NAME_MAX ? len : EXPLAIN_NAME_MAX - 1), text);
    explain_trim(name);
    args[0] = '\0';
    if (!paren) return DT_OK;
    size_t alen = strlen(paren + 1);
    if (!alen || paren[alen] != ')' || alen >= EXPLAIN_ARGS_MAX)
        return BAD("%s: \"%s\" does not end with ')'", name, text);
    snprintf(args, EXPLAIN_ARGS_MAX, "%.*s", (int)alen - 1, paren + 1);
    explain_trim(args);
    return DT_OK;
}

void explain_trim(char *s) {
    size_t a = strspn(s, " "), n = strlen(s);
    while (n > a && s[n - 1] == ' ')
        n--;
    memmove(s, s + a, n - a);
    s[n - a] = '\0';
}

static dt_status split_args(const char *name, const char *text, arg *args, int max, int *n) {
    *n = 0;
    for (const char *p = text; *p;) {
        int depth = 0;
        const char *e = p;
        for (; *e && (depth || *e != ','); e++)
            depth += (*e == '[') - (*e == ']');
        if (*n == max) return BAD("%s: too many arguments in \"%s\"", name, text);
        char one[128];
        snprintf(one, sizeof one, "%.*s", (int)(e - p), p);
        char *eq = one[0] == '[' ? NULL : strchr(one, '=');
        arg *a = &args[(*n)++];
        if (eq) *eq = '\0';
        snprintf(a->key, sizeof a->key, "%s", eq ? one : "");
        snprintf(a->val, sizeof a->val, "%s", eq ? eq + 1 : one);
        explain_trim(a->key), explain_trim(a->val);
        p = *e ? e + 1 : e;
    }
    return DT_OK;
}

static int to_int(const char *s, int *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (end == s || *end || errno || x < -1000000 || x > 1000000) return 0;
    *v = (int)x;
    return 1;
}

static int to_double(const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    return end != s && !*end;
}

/* "[2,4]" (or "[]") -> sizes, each >= 0. */
static dt_status size_list(const char *name, const char *text, int64_t *v, int *n) {
    size_t len = strlen(text);
    if (len < 2 || text[0] != '[' || text[len - 1] != ']')
        return BAD("%s: \"%s\" is not a list like [2,4]", name, text);
    *n = 0;
    for (const char *p = text + 1; *p != ']';) {
        char *end;
        while (*p == ' ')
            p++;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 0 || *n == DT_MAX_NDIM)
            return BAD("%s: \"%s\" is not a list of at most %d sizes", name, text, DT_MAX_NDIM);
        v[(*n)++] = x;
        for (p = end; *p == ' '; p++) {
        }
        if (*p == ',')
            p++;
        else if (*p != ']')
            return BAD("%s: \"%s\" is not a list like [2,4]", name, text);
    }
    return DT_OK;
}

/* ---- parse and format --------------------------------------------------------------------- */

/* t: dt_t's meaning, decided by input 0's ndim (a 2-D or unknown input: transpose(0,1)). */
static dt_status parse_t(const char *args, int n, const dt_spec *in, explain_call *c) {
    if (*args) return BAD("t takes no arguments (\"%s\")", args);
    if (n >= 1 && in[0].ndim > 2)
        return dt_error_set(DT_ERR_SHAPE,
                            "t expects a tensor of at most 2 dims, got %d-D "
                            "(dt_t; transpose(0,1) names the dims)",
                            in[0].ndim);
    if (n >= 1 && in[0].ndim < 2) {
        c->form = EXPLAIN_IDENTITY;
        return DT_OK;
    }
    c->form = EXPLAIN_OP;
    return explain_op_parse("transpose(0,1)", n, in, &c->op, &c->args);
}

static dt_status parse_form(explain_form form, const char *name, const char *text, int n,
                            const dt_spec *in, explain_call *c) {
    arg a[4];
    int na, have_sizes = 0, have_value = 0, have_dtype = 0, have_size = 0, size = 0;
    TRY(split_args(name, text, a, 4, &na));
    for (int i = 0; i < na; i++) {
        const char *k = a[i].key, *v = a[i].val;
        int bare = !*k, ok = 0;
        switch (form) {
        case EXPLAIN_UNBIND:
            ok = (bare || !strcmp(k, "dim")) && to_int(v, &c->dim);
            break;
        case EXPLAIN_SPLIT:
            if (!strcmp(k, "dim"))
                ok = to_int(v, &c->dim);
            else if ((bare && v[0] == '[') || !strcmp(k, "sizes")) {
                TRY(size_list(name, v, c->sizes, &c->nsizes));
                ok = have_sizes = 1;
            } else if (bare || !strcmp(k, "size")) /* torch's split_size: equal pieces */
                ok = to_int(v, &size) && size > 0 && (have_size = 1);
            break;
        case EXPLAIN_FULL_LIKE:
            ok = (bare || !strcmp(k, "value")) && to_double(v, &c->value) && (have_value = 1);
            break;
        case EXPLAIN_NEW_FULL:
            if ((bare && v[0] == '[') || !strcmp(k, "shape")) {
                TRY(size_list(name, v, c->sizes, &c->nsizes));
                ok = have_sizes = 1;
            } else
                ok = (bare || !strcmp(k, "value")) && to_double(v, &c->value) && (have_value = 1);
            break;
        case EXPLAIN_CAST:
            ok = (bare || !strcmp(k, "dtype")) && dt_dtype_parse(v, &c->dtype) == DT_OK &&
                 (have_dtype = 1);
            break;
        default:
            ok = 0; /* the like-factories take nothing */
        }
        if (!ok) return BAD("%s: cannot read the argument \"%s%s%s\"", name, k, bare ? "" : "=", v);
    }
    if (form == EXPLAIN_SPLIT && have_size == have_sizes)
        return BAD("split needs sizes=[a,b,..] or size=K");
    if (form == EXPLAIN_SPLIT && have_size) { /* torch: pieces of size K, the last one smaller */
        int d = n >= 1 ? (c->dim < 0 ? c->dim + in[0].ndim : c->dim) : -1;
        if (d < 0 || d >= in[0].ndim)
            return BAD("split(size=%d): needs input 0's dim %d", size, c->dim);
        for (int64_t left = in[0].shape[d]; left > 0; left -= size) {
            if (c->nsizes == DT_MAX_NDIM)
                return BAD("split: more than %d pieces (name them with sizes=[..])", DT_MAX_NDIM);
            c->sizes[c->nsizes++] = left < size ? left : size;
        }
    }
    if (form == EXPLAIN_FULL_LIKE && !have_value) return BAD("full_like needs its value");
    if (form == EXPLAIN_NEW_FULL && (!have_sizes || !have_value))
        return BAD("new_full needs shape=[..] and value=V");
    if (form == EXPLAIN_CAST && !have_dtype) return BAD("cast needs dtype=f64 (or bf16, ...)");
    c->form = form;
    return DT_OK;
}

dt_status explain_call_parse(const char *text, int n, const dt_spec *in, explain_call *out) {
    if (!text || !out || (n && !in))
        return dt_error_set(DT_ERR_ARG, "explain_call_parse: NULL argument");
    explain_call c = {.form = EXPLAIN_OP};
    char name[EXPLAIN_NAME_MAX], args[EXPLAIN_ARGS_MAX];
    dt_status split = explain_split_call(text, name, args);
    if (split != DT_OK) return split;
    dt_op registered; /* a registered op's name is its whole text, and wins */
    int user = dt_op_lookup(text, &registered) == DT_OK && registered >= DT_OP_COUNT;
    dt_status st = DT_OK;
    if (user)
        st = explain_op_parse(text, n, in, &c.op, &c.args);
    else if (!strcmp(name, "t"))
        st = parse_t(args, n, in, &c);
    else {
        int f = EXPLAIN_OP + 1;
        while (f < EXPLAIN_FORM_COUNT && strcmp(name, form_names[f]))
            f++;
        if (f == EXPLAIN_FORM_COUNT || f == EXPLAIN_IDENTITY)
            st = explain_op_parse(text, n, in, &c.op, &c.args);
        else
            st = parse_form((explain_form)f, name, args, n, in, &c);
    }
    if (st == DT_OK) *out = c;
    return st;
}

dt_status explain_call_format(const explain_call *c, char *buf, size_t cap) {
    if ((unsigned)c->form >= EXPLAIN_FORM_COUNT)
        return dt_error_set(DT_ERR_ARG, "explain_call_format: form %d is none", (int)c->form);
    if (c->form == EXPLAIN_OP) return explain_op_format(c->op, &c->args, buf, cap);
    size_t o = (size_t)snprintf(buf, cap, "%s", form_names[c->form]);
#define PUT(...)                                                                                   \
    (o += (size_t)snprintf(buf + (o < cap ? o : cap), o < cap ? cap - o : 0, __VA_ARGS__))
    switch (c->form) {
    case EXPLAIN_UNBIND:
        PUT("(dim=%d)", c->dim);
        break;
    case EXPLAIN_SPLIT:
    case EXPLAIN_NEW_FULL:
        PUT(c->form == EXPLAIN_SPLIT ? "(dim=%d,sizes=[" : "(shape=[", c->dim);
        for (int i = 0; i < c->nsizes; i++)
            PUT(i ? ",%lld" : "%lld", (long long)c->sizes[i]);
        if (c->form == EXPLAIN_SPLIT)
            PUT("])");
        else
            PUT("],value=%.17g)", c->value);
        break;
    case EXPLAIN_FULL_LIKE:
        PUT("(%.17g)", c->value);
        break;
    case EXPLAIN_CAST:
        PUT("(dtype=%s)", dt_dtype_name(c->dtype));
        break;
    default: /* t, zeros_like, ones_like, empty_like: no arguments */
        break;
    }
#undef PUT
    if (o >= cap) return dt_error_set(DT_ERR_SIZE, "explain_call_format: %zu bytes needed", o + 1);
    return DT_OK;
}

/* ---- the C API's calls -------------------------------------------------------------------- */

/* Public functions that are no op's typed wrapper, and the text that reads as each (an op's
 * own wrapper reads as its op's text). */
const explain_c_call explain_c_calls[] = {
    {"dt_t", "t", NULL},
    {"dt_reshape", "reshape(-1)", NULL},
    {"dt_split", "split(dim=0,sizes=[1,1])", NULL},
    {"dt_unbind", "unbind(dim=0)", NULL},
    {"dt_unary_op", "relu", NULL},
    {"dt_scalar_op", "mul_scalar(2)", NULL},
    {"dt_reduce", "sum(dim=0)", NULL},
    {"dt_cross_entropy_ignore", "cross_entropy(mean,ignore_index=-1)", NULL},
    {"dt_cross_entropy_ex", "cross_entropy(sum,label_smoothing=0.1)", NULL},
    {"dt_sdpa_lse", "sdpa", NULL}, /* the lse rows: placed with the output */
    {"dt_sdpa_seq_first", "sdpa(causal,seq_first)", NULL},
    {"dt_tensor_zeros_like", "zeros_like", NULL},
    {"dt_tensor_ones_like", "ones_like", NULL},
    {"dt_tensor_full_like", "full_like(2.5)", NULL},
    {"dt_tensor_empty_like", "empty_like", NULL},
    {"dt_tensor_new_full", "new_full(shape=[2,2],value=1)", NULL},
    {"dt_cast", "cast(dtype=f64)", NULL},
};
const int explain_n_c_calls = (int)(sizeof explain_c_calls / sizeof explain_c_calls[0]);

/* Public functions of ops.h and create.h that rows cannot name: a row's call takes input
 * tensors and gives tensors. */
const explain_c_call explain_no_text[] = {
    {"dt_op_name", NULL, "names an op"},
    {"dt_op_register", NULL, "adds an op; rows name it by its name"},
    {"dt_op_call", NULL, "calls an op by value: every op has its text"},
    {"dt_op_call_aux", NULL, "dt_op_call with the extra outputs, placed as the first"},
    {"dt_op_call_inplace", NULL, "dt_op_call into input 0: x keeps its spec"},
    {"dt_op_strategy", NULL, "asks dispatch, runs nothing"},
    {"dt_total_norm", NULL, "returns a double on every rank, not a tensor"},
    {"dt_clip_grad_norm_", NULL, "scales tensors in place and returns a double"},
    {"dt_add_", NULL, "in place: x keeps its placements"},
    {"dt_mul_", NULL, "in place: x keeps its placements"},
    {"dt_rope_", NULL, "in place: x keeps its spec (rope's text places it)"},
    {"dt_tensor_uniform_", NULL, "fills x in place: x keeps its spec"},
    {"dt_tensor_normal_", NULL, "fills x in place: x keeps its spec"},
    {"dt_rope_tables", NULL, "makes tensors from a mesh and placements, no input tensor"},
    {"dt_tensor_zeros", NULL, "makes a tensor from a mesh and placements, no input tensor"},
    {"dt_tensor_ones", NULL, "makes a tensor from a mesh and placements, no input tensor"},
    {"dt_tensor_full_value", NULL, "makes a tensor from a mesh and placements, no input"},
    {"dt_tensor_arange", NULL, "makes a tensor from a mesh and placements, no input tensor"},
    {"dt_tensor_eye", NULL, "makes a tensor from a mesh and placements, no input tensor"},
    {"dt_tensor_rand", NULL, "makes a tensor from a mesh and placements, no input tensor"},
    {"dt_tensor_randn", NULL, "makes a tensor from a mesh and placements, no input tensor"},
};
const int explain_n_no_text = (int)(sizeof explain_no_text / sizeof explain_no_text[0]);
