/* tl_explain_print (tl_explain.h): a view of tl_explain_json as text, section by section. */
#include <string.h>

#include "tl_explain.h"

static const char *str(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "?";
}
static long long num(const json_t *o, const char *key) {
    return (long long)json_integer_value(json_object_get(o, key));
}

/* "(a, b, c)" into buf. */
static const char *shape_str(const json_t *a, char *buf, size_t cap) {
    size_t len = 0, i;
    json_t *v;
    len += (size_t)snprintf(buf, cap, "(");
    json_array_foreach(a, i, v) {
        if (len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "",
                                    (long long)json_integer_value(v));
    }
    if (len < cap) snprintf(buf + len, cap - len, ")");
    return buf;
}

/* Sorted positions as runs: "0-15, 48-63". */
static const char *runs_str(const json_t *a, char *buf, size_t cap) {
    size_t n = json_array_size(a), len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && len < cap;) {
        long long lo = (long long)json_integer_value(json_array_get(a, i)), hi = lo;
        size_t k = i + 1;
        while (k < n && json_integer_value(json_array_get(a, k)) == hi + 1)
            hi++, k++;
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld%s%.0lld", i ? ", " : "", lo,
                                hi > lo ? "-" : "", hi > lo ? hi : 0);
        i = k;
    }
    return buf;
}

static void header(const json_t *v, FILE *f) {
    const json_t *c = json_object_get(v, "config"), *m = json_object_get(c, "model"),
                 *coords = json_object_get(v, "coords"), *pipe = json_object_get(v, "pipeline");
    fprintf(f, "rank %lld of %lld on mesh %s:", num(c, "rank"), num(c, "world"), str(c, "mesh"));
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)coords, k, x)
        fprintf(f, " %s %lld", k, (long long)json_integer_value(x));
    if (pipe) fprintf(f, "; pipeline stage %lld of %lld", num(pipe, "stage"), num(pipe, "nstages"));
    fprintf(f,
            "\nmodel: vocab %lld, dim %lld, %lld layers, %lld heads (%lld kv), hidden %lld, seq "
            "%lld, batch %lld",
            num(m, "vocab"), num(m, "dim"), num(m, "layers"), num(m, "heads"), num(m, "kv_heads"),
            num(m, "hidden"), num(m, "seq"), num(m, "batch"));
    if (num(m, "experts"))
        fprintf(f, ", MoE %lld experts top-%lld", num(m, "experts"), num(m, "top_k"));
    fprintf(f,
            "\nlayout: fsdp %lld (units %lld), sequence parallel %lld, loss parallel %lld, ac %s",
            num(c, "fsdp"), num(c, "fsdp_units"), num(c, "sequence_parallel"),
            num(c, "loss_parallel"), str(c, "ac"));
    if (pipe) fprintf(f, ", %lld micro-batches, %s", num(c, "micro"), str(c, "schedule"));
    fprintf(f, "\n");
}

static void parameters(const json_t *v, FILE *f) {
    size_t i;
    json_t *p;
    char a[64], b[64];
    fprintf(f, "\nparameters (global shape, stored -> compute placements, this rank's shard):\n");
    json_array_foreach(json_object_get(v, "parameters"), i, p)
        fprintf(f, "  %-36s %-16s %-12s -> %-12s local %s\n", str(p, "name"),
                shape_str(json_object_get(p, "shape"), a, sizeof a), str(p, "stored"),
                str(p, "compute"), shape_str(json_object_get(p, "local_shape"), b, sizeof b));
}

static void rows(const json_t *rs, const char *pass, FILE *f) {
    size_t i;
    json_t *r;
    json_array_foreach(rs, i, r) {
        fprintf(f, "    %-8s %-14s on %-8s (%lld ranks) x%-3lld %9lld B in %9lld B out", pass,
                str(r, "kind"), str(r, "group"), num(r, "group_size"), num(r, "calls"),
                num(r, "bytes_in"), num(r, "bytes_out"));
        if (json_object_get(r, "op")) fprintf(f, "  for %s", str(r, "op"));
        fprintf(f, "\n");
    }
}

static void collectives(const json_t *v, FILE *f) {
    size_t i;
    json_t *m;
    fprintf(f, "\ncollectives by module (forward, backward; for: the op whose inputs needed "
               "them):\n");
    json_array_foreach(json_object_get(v, "modules"), i, m) {
        fprintf(f, "  %s\n", str(m, "module"));
        rows(json_object_get(m, "forward"), "forward", f);
        rows(json_object_get(m, "backward"), "backward", f);
    }
    fprintf(f, "step totals (as dt_comm_stats counts them):\n");
    rows(json_object_get(v, "totals"), "total", f);
}

static void sequence_parallel(const json_t *v, FILE *f) {
    const json_t *sp = json_object_get(v, "sequence_parallel");
    if (!json_array_size(sp)) return;
    size_t i;
    json_t *c;
    fprintf(f, "\nlayout changes over tp (forward; backward runs each in reverse, the collectives "
               "listed under the module's backward):\n");
    json_array_foreach(sp, i, c) fprintf(f, "  %-36s %-6s %s -> %s\n", str(c, "module"),
                                         str(c, "at"), str(c, "from"), str(c, "to"));
}

static void pipeline(const json_t *v, FILE *f) {
    const json_t *p = json_object_get(v, "pipeline");
    if (!p) return;
    fprintf(f,
            "\npipeline: stage %lld of %lld holds blocks [%lld, %lld)%s%s; its actions in "
            "order (saved: the micro-batches whose activations are alive after it):\n",
            num(p, "stage"), num(p, "nstages"), num(p, "first_layer"), num(p, "end_layer"),
            json_is_true(json_object_get(p, "embedding")) ? ", the token embedding" : "",
            json_is_true(json_object_get(p, "head")) ? ", the norm, output and loss" : "");
    size_t i;
    json_t *a, *chunks = json_object_get(v, "chunks");
    int virt = json_array_size(chunks) > 1;
    if (virt) {
        fprintf(f, "  interleaved: this rank runs chunks");
        json_array_foreach(chunks, i, a)
            fprintf(f, "%s %lld (blocks [%lld, %lld))", i ? "," : "", num(a, "chunk"),
                    num(a, "first_layer"), num(a, "end_layer"));
        fprintf(f, "\n");
    }
    json_array_foreach(json_object_get(p, "actions"), i, a) {
        char buf[128];
        fprintf(f, "  %2zu %-9s micro %lld", i + 1, str(a, "op"), num(a, "micro"));
        if (virt) fprintf(f, " chunk %lld", num(a, "chunk"));
        if (num(a, "peer") >= 0)
            fprintf(f, " %s stage %lld", strstr(str(a, "op"), "send") ? "to" : "from",
                    num(a, "peer"));
        const char *ev = json_string_value(json_object_get(a, "activations"));
        if (ev) fprintf(f, "  (activations %s)", ev);
        fprintf(f, "  saved %s, live %.1f KiB\n",
                shape_str(json_object_get(a, "saved"), buf, sizeof buf),
                (double)num(a, "live_bytes") / 1024);
    }
}

static void ring(const json_t *v, FILE *f) {
    const json_t *r = json_object_get(v, "ring");
    if (!r) return;
    fprintf(f, "\ncontext parallel (every attention layer's ring; positions are original "
               "sequence positions):\n");
    size_t i;
    json_t *s;
    json_array_foreach(r, i, s) {
        char buf[256];
        int bw = !strcmp(str(s, "pass"), "backward");
        fprintf(f,
                "  %-8s step %lld: queries see the K/V of cp rank %lld (world %lld%s), "
                "positions %s",
                str(s, "pass"), num(s, "step"), num(s, "source"), num(s, "source_world"),
                num(s, "source") == num(s, "cp_rank") ? ", its own" : "",
                runs_str(json_object_get(s, "positions"), buf, sizeof buf));
        if (json_is_true(json_object_get(s, "sends_kv")))
            fprintf(f, "; the block moves on to world %lld", num(s, "next_world"));
        if (bw && json_is_true(json_object_get(s, "sends_dkv")))
            fprintf(f, "; its dK/dV so far go to world %lld%s", num(s, "next_world"),
                    num(s, "source_world") == num(s, "next_world") ? " (home)" : "");
        fprintf(f, "\n");
    }
}

static void moe(const json_t *v, FILE *f) {
    const json_t *m = json_object_get(v, "moe");
    if (!m) return;
    char a[256], b[256];
    fprintf(f,
            "\nexpert parallel (the first MoE layer it runs, first (micro-)batch): ep rank %lld of "
            "%lld holds "
            "%lld of %lld experts; %lld tokens, top-%lld\n",
            num(m, "ep_rank"), num(m, "ep"), num(m, "local_experts"), num(m, "experts"),
            num(m, "tokens"), num(m, "top_k"));
    fprintf(f, "  rows sent to each ep rank %s, received %s\n",
            shape_str(json_object_get(m, "send_counts"), a, sizeof a),
            shape_str(json_object_get(m, "recv_counts"), b, sizeof b));
    fprintf(f, "  tokens per expert %s\n",
            shape_str(json_object_get(m, "tokens_per_expert"), a, sizeof a));
}

dt_status tl_explain_print(const json_t *view, FILE *f) {
    if (!json_is_object(view) || !f)
        return dt_error_set(DT_ERR_ARG, "tl_explain_print: argument %s is NULL", f ? "view" : "f");
    header(view, f);
    parameters(view, f);
    collectives(view, f);
    sequence_parallel(view, f);
    pipeline(view, f);
    ring(view, f);
    moe(view, f);
    return ferror(f) ? dt_error_set(DT_ERR_IO, "tl_explain_print: writing failed") : DT_OK;
}
