/* dtensor-explain --train CONFIG: one rank's view of the first training step of a make train
 * config (examples/configs/, train --help's keys override it), as the trainer runs it:
 *   dtensor-explain --train examples/configs/dp2_pp2_tp2.json --rank 5 [--json FILE]
 *       [--section.key VALUE ...]
 * dtensor-explain --train-mesh: the same from train's older flags, on synthetic tokens:
 *   dtensor-explain --train-mesh dp=2,pp=2,tp=2 --rank 5 [--fsdp 0|1] [--fsdp-units 0|1]
 *       [--sp 0|1] [--ac none|full|selective] [--micro N] [--schedule afab|1f1b]
 *       [--bucket-kb N] [--experts E --top-k K] [--layers N --dim N --heads N --kv-heads N
 *       --hidden N --seq N --batch N --vocab N] [--json FILE]
 * (--mesh is --train-mesh's other name in this mode). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "explain.h"
#include "tl_explain.h"
#include "trainer.h"

static int train_usage(const char *bad) {
    fprintf(stderr,
            "dtensor-explain: bad argument %s\nusage: dtensor-explain --train-mesh dp=2,tp=2 "
            "[--rank R] [--fsdp 0|1] [--fsdp-units 0|1] [--sp 0|1] [--ac none|full|selective] "
            "[--micro N] [--schedule afab|1f1b] [--bucket-kb N] [--experts E --top-k K] "
            "[--layers N] [--dim N] [--heads N] [--kv-heads N] [--hidden N] [--seq N] "
            "[--batch N] [--vocab N] [--json FILE]\n",
            bad);
    return 2;
}

/* Writes the view v as text to stdout and as JSON to json_path (nullable). */
static int write_view(json_t *v, const char *json_path) {
    dt_status st = tl_explain_print(v, stdout);
    FILE *f = json_path && st == DT_OK ? fopen(json_path, "w") : NULL;
    if (json_path && st == DT_OK && !f) {
        json_decref(v);
        return fprintf(stderr, "dtensor-explain: --json %s: cannot write it\n", json_path), 1;
    }
    if (f && (json_dumpf(v, f, JSON_INDENT(1)) != 0 || fputc('\n', f) == EOF))
        st = dt_error_set(DT_ERR_IO, "--json %s: writing failed", json_path);
    if (f && fclose(f) != 0 && st == DT_OK)
        st = dt_error_set(DT_ERR_IO, "--json %s: writing failed", json_path);
    json_decref(v);
    if (st != DT_OK) return fprintf(stderr, "dtensor-explain: %s\n", dt_last_error()), 1;
    return 0;
}

/* --train CONFIG [--rank R] [--json FILE] [overrides]: the config read as train reads it. */
static int explain_config(int argc, char **argv) {
    int rank = 0, n = 1;
    const char *json_path = NULL;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return fprintf(stderr, "dtensor-explain: out of memory\n"), 1;
    rest[0] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v && (!strcmp(a, "--train") || !strcmp(a, "--rank") || !strcmp(a, "--json"))) {
            free(rest);
            return fprintf(stderr, "dtensor-explain: %s wants a value\n", a), 2;
        }
        if (!strcmp(a, "--train")) {
            rest[n++] = argv[++i]; /* the config file comes first, as train takes it */
        } else if (!strcmp(a, "--rank")) {
            char *end;
            long r = strtol(v, &end, 10);
            if (!*v || *end || r < 0 || r > 1 << 20) {
                free(rest);
                return fprintf(stderr, "dtensor-explain: --rank %s is not a rank\n", v), 2;
            }
            rank = (int)r, i++;
        } else if (!strcmp(a, "--json")) {
            json_path = argv[++i];
        } else {
            rest[n++] = argv[i];
        }
    }
    tr_config c;
    int rc = tr_config_parse(n, rest, &c);
    free(rest);
    if (rc) return rc == 1 ? 0 : 2;
    if (c.ucx) c.ucx = 0; /* the dry run is always on in-process ranks */
    tr_data data;
    if ((rc = tr_data_load(&c, &data))) return rc;
    json_t *v = NULL;
    dt_status st = tl_explain_train(&c, &data, NULL, rank, &v);
    free((void *)data.text);
    if (st != DT_OK) return fprintf(stderr, "dtensor-explain: %s\n", dt_last_error()), 1;
    return write_view(v, json_path);
}

int explain_train_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--train")) return explain_config(argc, argv);
    tr_config d; /* make train's defaults */
    tr_config_defaults(&d);
    tl_explain_setup s = {.fsdp = d.fsdp,
                          .fsdp_units = -1,
                          .sp = d.sequence_parallel,
                          .bucket_kb = -1,
                          .micro = d.microbatches,
                          .schedule = d.schedule,
                          .cfg = d.model};
    int rank = 0;
    const char *json_path = NULL;
    struct {
        const char *flag;
        int *v;
    } ints[] = {{"--rank", &rank},
                {"--fsdp", &s.fsdp},
                {"--fsdp-units", &s.fsdp_units},
                {"--sp", &s.sp},
                {"--micro", &s.micro},
                {"--bucket-kb", &s.bucket_kb},
                {"--experts", &s.cfg.experts},
                {"--top-k", &s.cfg.top_k},
                {"--layers", &s.cfg.layers},
                {"--dim", &s.cfg.dim},
                {"--heads", &s.cfg.heads},
                {"--kv-heads", &s.cfg.kv_heads},
                {"--hidden", &s.cfg.hidden},
                {"--seq", &s.cfg.seq},
                {"--batch", &s.cfg.batch},
                {"--vocab", &s.cfg.vocab}};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) return train_usage(argv[i]);
        const char *a = argv[i], *v = argv[++i];
        int done = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0] && !done; k++)
            if (!strcmp(a, ints[k].flag)) {
                char *end;
                long x = strtol(v, &end, 10);
                if (*end || x < -1 || x > 1 << 20) return train_usage(v);
                *ints[k].v = (int)x, done = 1;
            }
        if (done) continue;
        if (!strcmp(a, "--train-mesh") || !strcmp(a, "--mesh")) {
            s.mesh = v;
        } else if (!strcmp(a, "--json")) {
            json_path = v;
        } else if (!strcmp(a, "--schedule")) {
            if (!strcmp(v, "afab"))
                s.schedule = DT_PIPELINE_AFAB;
            else if (!strcmp(v, "1f1b"))
                s.schedule = DT_PIPELINE_1F1B;
            else
                return fprintf(stderr, "dtensor-explain: --schedule %s: want afab or 1f1b\n", v), 2;
        } else if (!strcmp(a, "--ac")) {
            if (dt_ac_mode_parse(v, &s.ac) != DT_OK)
                return fprintf(stderr, "dtensor-explain: --ac: %s\n", dt_last_error()), 2;
        } else {
            return train_usage(a);
        }
    }
    FILE *json = NULL;
    if (json_path && !(json = fopen(json_path, "w")))
        return fprintf(stderr, "dtensor-explain: --json %s: cannot write it\n", json_path), 1;
    dt_status st = tl_explain(&s, rank, stdout, json);
    if (json && fclose(json) != 0 && st == DT_OK)
        st = dt_error_set(DT_ERR_IO, "--json %s: writing failed", json_path);
    if (st != DT_OK) return fprintf(stderr, "dtensor-explain: %s\n", dt_last_error()), 1;
    return 0;
}
