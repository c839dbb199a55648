/* dtensor-explain --train-mesh: one rank's view of one training step of examples/train.c's
 * model (examples/tl_explain.h), the flags as train's:
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

int explain_train_main(int argc, char **argv) {
    tl_explain_setup s = {.fsdp = 1,
                          .fsdp_units = -1,
                          .sp = 1,
                          .bucket_kb = -1,
                          .micro = 2,
                          .schedule = DT_PIPELINE_1F1B,
                          .cfg = {.vocab = 256,
                                  .seq = 64,
                                  .batch = 8,
                                  .dim = 128,
                                  .layers = 2,
                                  .heads = 4,
                                  .kv_heads = 2,
                                  .hidden = 384,
                                  .top_k = 2}};
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
