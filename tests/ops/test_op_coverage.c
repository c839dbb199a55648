/* Every op, walked from 0 to DT_OP_COUNT, is complete: it has a description (name, family,
 * arity), the kernel its description names in the CPU table (and the CUDA table in CUDA
 * builds), a typed wrapper the shared library exports, at least one sharded-vs-unsharded case
 * in tests/common/op_cases.c, and a row in the propagation conformance table. Every public call
 * of ops.h and create.h has a text form (or a reason for none), and every form a row. Adding an op
 * without one of these fails here, naming the op and what it lacks. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/explain.h"
#include "dt_config.h"
#include "helpers.h"
#include "op_cases.h"
#include "core/check.h"
#include "ops/op_impl.h"

/* The kernel slot d names in table k, NULL when the table lacks it. */
static const void *slot(const dt_kernels *k, const op_desc *d) {
    return k ? *(const void *const *)((const char *)k + d->kernel) : NULL;
}

Test(op_coverage, every_op_is_described_and_has_its_kernels) {
    int missing = 0;
    for (int op = 0; op < DT_OP_COUNT; op++) {
        const op_desc *d = dt_op_desc((dt_op)op);
        if (!d || !d->name || !strcmp(dt_op_name((dt_op)op), "?") || !d->family) {
            cr_log_error("op %d: no description, name or family", op);
            missing++;
            continue;
        }
        const op_family *f = d->family;
        if (!f->composite && !(f->infer && f->rules && f->compute)) {
            cr_log_error("%s: its family lacks infer, rules or compute", d->name);
            missing++;
        }
        if (d->min_inputs < 1 || d->max_inputs < d->min_inputs ||
            d->max_inputs > DT_OP_MAX_INPUTS) {
            cr_log_error("%s: arity %d..%d", d->name, d->min_inputs, d->max_inputs);
            missing++;
        }
        if (d->kernel < 0) continue; /* composites and copies run no kernel */
        if (!slot(&dt_kernels_cpu, d)) {
            cr_log_error("%s: no CPU %s kernel", d->name, d->kernel_name);
            missing++;
        }
#if DT_HAVE_CUDA
        if (!slot(dt_kernels_of(DT_DEVICE_CUDA), d)) {
            cr_log_error("%s: no CUDA %s kernel", d->name, d->kernel_name);
            missing++;
        }
#endif
    }
    cr_assert_eq(missing, 0, "%d gaps in the op table (see the log)", missing);
}

/* A kernel slot no op names is dead; a NULL slot in a table would be called through. */
Test(op_coverage, kernel_tables_are_full) {
    const dt_kernels *tables[] = {&dt_kernels_cpu, dt_kernels_of(DT_DEVICE_CUDA)};
    for (size_t t = 0; t < 2; t++) {
        if (!tables[t]) continue;
        const void *const *slots = (const void *const *)((const char *)tables[t] + sizeof(char *));
        size_t n = (sizeof(dt_kernels) - sizeof(char *)) / sizeof(void *);
        for (size_t i = 0; i < n; i++)
            cr_expect(slots[i] != NULL, "%s table: slot %zu is NULL", tables[t]->name, i);
    }
}

Test(op_coverage, every_op_has_an_exported_typed_wrapper) {
    const char *lib = getenv("DT_LIBDTENSOR");
    cr_assert(lib, "DT_LIBDTENSOR (the shared library's path) is not set");
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "dlopen %s: %s", lib, dlerror());
    int missing = 0;
    for (int op = 0; op < DT_OP_COUNT; op++) {
        const op_desc *d = dt_op_desc((dt_op)op);
        if (!d->wrapper || !dlsym(h, d->wrapper)) {
            cr_log_error("%s: wrapper %s is not exported", d->name, d->wrapper ? d->wrapper : "-");
            missing++;
        }
    }
    dlclose(h);
    cr_assert_eq(missing, 0, "%d ops without a typed wrapper (see the log)", missing);
}

Test(op_coverage, every_op_has_a_sharded_case) {
    int missing = 0;
    for (int op = 0; op < DT_OP_COUNT; op++) {
        int cases = 0;
        for (size_t i = 0; i < op_ncases; i++) cases += op_cases[i].op == (dt_op)op;
        if (!cases) {
            cr_log_error("%s: no case in tests/common/op_cases.c", dt_op_name((dt_op)op));
            missing++;
        }
    }
    cr_assert_eq(missing, 0, "%d ops without a sharded-vs-unsharded case (see the log)",
                 missing);
}

typedef struct rows_seen {
    int ops[DT_OP_COUNT], forms[EXPLAIN_FORM_COUNT];
} rows_seen;

/* The engine that answers no row: it only notes which op or form each row parsed to. */
static dt_status note_op(const explain_row *row, explain_seen *seen, void *user) {
    (void)seen;
    rows_seen *s = user;
    s->forms[row->call.form] = 1;
    if (row->call.form == EXPLAIN_OP && (unsigned)row->call.op < DT_OP_COUNT)
        s->ops[row->call.op] = 1;
    return dt_error(DT_ERR_UNSUPPORTED, "counted");
}

Test(op_coverage, every_op_has_a_conformance_row) {
    const char *src = getenv("DT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/conformance/propagation_cases.tsv", src ? src : "..");
    rows_seen seen = {0};
    FILE *out = fopen("/dev/null", "w");
    explain_totals t;
    int rc = explain_check_file(path, note_op, &seen, 0, out, &t);
    fclose(out);
    cr_assert_eq(rc, 0, "%s: cannot be read (%d)", path, rc);
    int missing = 0;
    for (int op = 0; op < DT_OP_COUNT; op++)
        if (!seen.ops[op]) {
            cr_log_error("%s: no row in %s", dt_op_name((dt_op)op), path);
            missing++;
        }
    for (int f = EXPLAIN_OP + 1; f < EXPLAIN_FORM_COUNT; f++) /* and every other call's form */
        if (!seen.forms[f]) {
            explain_call c = {.form = (explain_form)f};
            cr_log_error("the call form %s: no row in %s", explain_call_name(&c), path);
            missing++;
        }
    cr_assert_eq(missing, 0, "%d ops and forms without a conformance row (see the log)", missing);
}

/* Every public call of dtensor/ops.h and dtensor/create.h has a text that rows and
 * dtensor-explain --op read as that call: an op's typed wrapper its op's text (checked by
 * propagation/op_text_covers_every_op), another call the text tools/explain_forms.c lists for
 * it, which must read back. A call in neither list, or listed as having no text, must say why
 * in explain_no_text; so a new public call without a text fails here. */
static int listed(const explain_c_call *list, int n, const char *fn) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i].function, fn)) return i;
    return -1;
}

Test(op_coverage, every_public_call_has_a_text_form) {
    const char *src = getenv("DT_SOURCE_DIR"), *headers[] = {"ops.h", "create.h"};
    int missing = 0, calls = 0;
    dt_spec x = {.dtype = DT_F32, .ndim = 2, .shape = {4, 6}, .nplacements = 1};
    for (size_t h = 0; h < DT_COUNT_OF(headers); h++) {
        char path[1024], line[1024];
        snprintf(path, sizeof path, "%s/include/dtensor/%s", src ? src : "..", headers[h]);
        FILE *f = fopen(path, "r");
        cr_assert(f, "cannot open %s", path);
        for (int no = 1; fgets(line, sizeof line, f); no++) {
            const char *api = strstr(line, "DT_API "), *paren = strchr(line, '(');
            if (!api || !paren) continue;
            const char *name = paren; /* the identifier before the '(' */
            while (name > api && (name[-1] == '_' || (name[-1] >= 'a' && name[-1] <= 'z') ||
                                  (name[-1] >= '0' && name[-1] <= '9')))
                name--;
            char fn[96];
            snprintf(fn, sizeof fn, "%.*s", (int)(paren - name), name);
            calls++;
            int wrapper = 0;
            for (int op = 0; op < DT_OP_COUNT; op++)
                wrapper |=
                    dt_op_desc((dt_op)op)->wrapper && !strcmp(dt_op_desc((dt_op)op)->wrapper, fn);
            int k = listed(explain_c_calls, explain_n_c_calls, fn);
            int why = listed(explain_no_text, explain_n_no_text, fn);
            if (wrapper + (k >= 0) + (why >= 0) != 1) {
                cr_log_error("%s:%d: %s is %s", path, no, fn,
                             wrapper + (k >= 0) + (why >= 0) ? "listed twice (op wrapper, "
                                                               "explain_c_calls, explain_no_text)"
                                                             : "no op's wrapper and has no text "
                                                               "in tools/explain_forms.c");
                missing++;
                continue;
            }
            if (k < 0) continue;
            explain_call c;
            char again[256];
            dt_status st = explain_call_parse(explain_c_calls[k].text, 1, &x, &c);
            if (st == DT_OK) st = explain_call_format(&c, again, sizeof again);
            if (st != DT_OK) {
                cr_log_error("%s: its text \"%s\" does not read: %s", fn, explain_c_calls[k].text,
                             dt_last_error());
                missing++;
            }
        }
        fclose(f);
    }
    cr_assert_gt(calls, 100, "only %d public calls found: the headers' form changed?", calls);
    for (int i = 0; i < explain_n_no_text; i++)
        cr_expect(explain_no_text[i].why && *explain_no_text[i].why, "%s: no reason",
                  explain_no_text[i].function);
    cr_assert_eq(missing, 0, "%d public calls without a text form (see the log)", missing);
}
