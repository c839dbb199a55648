/* dtensor-trace: renders a dtensor Chrome trace as a self-contained HTML timeline, or merges
 * per-rank trace files (see dtensor/trace.h).
 *   dtensor-trace trace.json -o timeline.html
 *   dtensor-trace merge rank0.json rank1.json ... -o trace.json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

int main(int argc, char **argv) {
    const char *out = NULL;
    const char *inputs[256];
    int nin = 0, merge = argc > 1 && !strcmp(argv[1], "merge");
    for (int i = 1 + merge; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (nin < 256) inputs[nin++] = argv[i];
    }
    if (!out || nin < 1 || (!merge && nin != 1)) {
        fprintf(stderr, "usage: dtensor-trace trace.json -o timeline.html\n"
                        "       dtensor-trace merge a.json b.json ... -o merged.json\n");
        return 2;
    }
    if (merge) {
        if (dt_trace_merge(inputs, nin, out) != DT_OK)
            return fprintf(stderr, "dtensor-trace: %s\n", dt_last_error()), 1;
        return 0;
    }
    if (dt_trace_render_html(inputs[0], out) != DT_OK)
        return fprintf(stderr, "dtensor-trace: %s\n", dt_last_error()), 1;
    return 0;
}
