/* Placement text: parse "S(0),R,P(sum),NormP(2)" (and PyTorch's spelling), print the short
 * form. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/placement.h"

static const char *skip_ws(const char *p) {
    while (isspace((unsigned char)*p)) p++;
    return p;
}

/* Matches one of the words (case-sensitive) at p; returns its length or 0. */
static size_t match_word(const char *p, const char *const *words) {
    for (; *words; words++) {
        size_t n = strlen(*words);
        if (strncmp(p, *words, n) == 0 && !isalnum((unsigned char)p[n])) return n;
    }
    return 0;
}

static dt_status parse_error(const char *text, const char *p, const char *what) {
    return dt_error(DT_ERR_PARSE, "dt_placements_parse: %s at offset %d of \"%s\"", what,
                    (int)(p - text), text);
}

/* "NormP(p)": p a number, inf or -inf. */
static dt_status parse_norm(const char *text, const char **pp, dt_placement *out) {
    const char *p = skip_ws(*pp);
    if (*p != '(') return parse_error(text, p, "expected '(' after NormP");
    p = skip_ws(p + 1);
    char *end;
    double ord = strtod(p, &end);
    if (end == p || isnan(ord)) return parse_error(text, p, "expected a number, inf or -inf as p");
    p = skip_ws(end);
    if (*p != ')') return parse_error(text, p, "expected ')'");
    *out = dt_norm_partial(ord);
    *pp = p + 1;
    return DT_OK;
}

static dt_status parse_one(const char *text, const char **pp, dt_placement *out) {
    static const char *const norm_w[] = {"NormP", "NormPartial", NULL};
    static const char *const shard_w[] = {"Shard", "S", NULL};
    static const char *const repl_w[] = {"Replicate", "R", NULL};
    static const char *const part_w[] = {"Partial", "P", NULL};
    const char *p = skip_ws(*pp);
    size_t n;
    if ((n = match_word(p, norm_w))) {
        p += n;
        DT_CHECK(parse_norm(text, &p, out));
    } else if ((n = match_word(p, shard_w))) {
        p = skip_ws(p + n);
        if (*p != '(') return parse_error(text, p, "expected '(' after Shard");
        char *end;
        long dim = strtol(p + 1, &end, 10);
        if (end == p + 1) return parse_error(text, p + 1, "expected a tensor dimension");
        if (dim < -DT_MAX_NDIM || dim >= DT_MAX_NDIM)
            return parse_error(text, p + 1, "shard dimension out of range");
        p = skip_ws(end);
        if (*p != ')') return parse_error(text, p, "expected ')'");
        *out = dt_shard((int)dim);
        p++;
    } else if ((n = match_word(p, repl_w))) {
        p = skip_ws(p + n);
        if (*p == '(') {
            p = skip_ws(p + 1);
            if (*p != ')') return parse_error(text, p, "expected ')' after Replicate(");
            p++;
        }
        *out = dt_replicate();
    } else if ((n = match_word(p, part_w))) {
        p = skip_ws(p + n);
        dt_reduce_op op = DT_REDUCE_SUM;
        if (*p == '(') {
            p = skip_ws(p + 1);
            static const char *const ops[] = {"sum", "avg", "max", "min", NULL};
            static const dt_reduce_op codes[] = {DT_REDUCE_SUM, DT_REDUCE_AVG, DT_REDUCE_MAX,
                                                 DT_REDUCE_MIN};
            if (*p == '"' || *p == '\'') p++; /* Partial("sum") */
            int k = 0;
            for (; ops[k]; k++)
                if (strncmp(p, ops[k], 3) == 0 && !isalnum((unsigned char)p[3])) break;
            if (*p != ')') {
                if (!ops[k]) return parse_error(text, p, "expected sum, avg, max or min");
                op = codes[k];
                p += 3;
                if (*p == '"' || *p == '\'') p++;
            }
            p = skip_ws(p);
            if (*p != ')') return parse_error(text, p, "expected ')'");
            p++;
        }
        *out = dt_partial(op);
    } else {
        return parse_error(text, p, "expected S(d), R, P(op) or NormP(p)");
    }
    *pp = skip_ws(p);
    return DT_OK;
}

dt_status dt_placements_parse(const char *text, dt_placement *placements_out, int cap, int *n_out) {
    DT_ARG_NOT_NULL(text);
    DT_ARG_NOT_NULL(placements_out);
    DT_ARG_NOT_NULL(n_out);
    dt_placement tmp[DT_MESH_MAX_NDIM];
    const char *p = skip_ws(text);
    int n = 0;
    int bracketed = *p == '[' || *p == '(';
    char close = *p == '[' ? ']' : ')';
    if (bracketed) p++;
    for (;;) {
        if (n == DT_MESH_MAX_NDIM)
            return parse_error(text, p, "more placements than mesh dimensions allow");
        DT_CHECK(parse_one(text, &p, &tmp[n]));
        n++;
        if (*p != ',') break;
        p = skip_ws(p + 1);
        if (bracketed && *p == close) break; /* trailing comma in a tuple */
    }
    if (bracketed) {
        if (*p != close) return parse_error(text, p, "expected a closing bracket");
        p = skip_ws(p + 1);
    }
    if (*p != '\0') return parse_error(text, p, "unexpected text");
    if (n > cap)
        return dt_error(DT_ERR_SIZE, "dt_placements_parse: \"%s\" has %d placements but cap is %d",
                        text, n, cap);
    memcpy(placements_out, tmp, sizeof(dt_placement) * (size_t)n);
    *n_out = n;
    return DT_OK;
}

/* The shortest %g text of v that reads back as v ("2", "0.5", "inf", "-inf"). */
static int format_ord(char *buf, double v) {
    int len = 0;
    for (int prec = 1; prec <= 17; prec++) {
        len = sprintf(buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return len;
}

dt_status dt_placements_format(const dt_placement *placements, int n, char *buf, size_t cap) {
    DT_ARG(placements != NULL || n == 0, "dt_placements_format: argument placements is NULL");
    DT_ARG_NOT_NULL(buf);
    DT_ARG(n >= 0 && n <= DT_MESH_MAX_NDIM, "dt_placements_format: argument n = %d is not in "
                                            "[0, %d]", n, DT_MESH_MAX_NDIM);
    char tmp[40 * DT_MESH_MAX_NDIM], ord[32];
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        const dt_placement *pl = &placements[i];
        const char *sep = i ? "," : "";
        switch (pl->kind) {
        case DT_PLACEMENT_SHARD: o += (size_t)sprintf(tmp + o, "%sS(%d)", sep, pl->dim); break;
        case DT_PLACEMENT_REPLICATE: o += (size_t)sprintf(tmp + o, "%sR", sep); break;
        case DT_PLACEMENT_PARTIAL:
            if (pl->op == DT_REDUCE_NORM) {
                format_ord(ord, pl->norm_ord);
                o += (size_t)sprintf(tmp + o, "%sNormP(%s)", sep, ord);
                break;
            }
            o += (size_t)sprintf(tmp + o, "%sP(%s)", sep, dt_reduce_op_name(pl->op));
            break;
        default:
            return dt_error(DT_ERR_PLACEMENT, "dt_placements_format: placements[%d] has unknown "
                                              "kind %d", i, (int)pl->kind);
        }
    }
    tmp[o] = '\0';
    if (o + 1 > cap)
        return dt_error(DT_ERR_SIZE, "dt_placements_format: \"%s\" needs %zu bytes, cap is %zu",
                        tmp, o + 1, cap);
    memcpy(buf, tmp, o + 1);
    return DT_OK;
}

dt_status dt_placements_normalize(dt_placement *placements, int n, int tensor_ndim) {
    DT_ARG(placements != NULL || n == 0, "dt_placements_normalize: argument placements is NULL");
    for (int i = 0; i < n; i++) {
        dt_placement *pl = &placements[i];
        switch (pl->kind) {
        case DT_PLACEMENT_REPLICATE: pl->norm_ord = 0; break;
        case DT_PLACEMENT_SHARD:
            pl->norm_ord = 0;
            if (pl->dim < -tensor_ndim || pl->dim >= tensor_ndim)
                return dt_error(DT_ERR_PLACEMENT, "placements[%d] = S(%d) is out of range for a "
                                                  "%d-D tensor", i, pl->dim, tensor_ndim);
            if (pl->dim < 0) pl->dim += tensor_ndim;
            break;
        case DT_PLACEMENT_PARTIAL:
            if (pl->op == DT_REDUCE_NORM && isnan(pl->norm_ord))
                return dt_error(DT_ERR_PLACEMENT, "placements[%d] = NormP(nan): p must be a "
                                                  "number, inf or -inf", i);
            if (pl->op != DT_REDUCE_SUM && pl->op != DT_REDUCE_AVG && pl->op != DT_REDUCE_MAX &&
                pl->op != DT_REDUCE_MIN && pl->op != DT_REDUCE_NORM)
                return dt_error(DT_ERR_PLACEMENT, "placements[%d] = P(%s): Partial takes sum, avg, "
                                                  "max, min or norm", i, dt_reduce_op_name(pl->op));
            if (pl->op != DT_REDUCE_NORM) pl->norm_ord = 0;
            break;
        default:
            return dt_error(DT_ERR_PLACEMENT, "placements[%d] has unknown kind %d", i,
                            (int)pl->kind);
        }
    }
    return DT_OK;
}

int dt_placement_equal(dt_placement a, dt_placement b) {
    if (a.kind != b.kind) return 0;
    if (a.kind == DT_PLACEMENT_SHARD) return a.dim == b.dim;
    if (a.kind == DT_PLACEMENT_PARTIAL)
        return a.op == b.op && (a.op != DT_REDUCE_NORM || a.norm_ord == b.norm_ord);
    return 1;
}
