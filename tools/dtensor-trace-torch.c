/* dtensor-trace-torch: PyTorch profiler traces (one per rank, as bench/train_torch.py
 * --profile writes them) converted into one dtensor trace (tools/torch_trace.h).
 *   dtensor-trace-torch -o torch.json tp_rank0.json tp_rank1.json */
#include <stdio.h>
#include <string.h>

#include "torch_trace.h"

int main(int argc, char **argv) {
    const char *out = NULL;
    const char *inputs[1024];
    int nin = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            out = argv[++i];
        } else if (nin < 1024) {
            inputs[nin++] = argv[i];
        } else {
            fprintf(stderr, "dtensor-trace-torch: more than 1024 input files\n");
            return 2;
        }
    }
    if (!out || nin < 1) {
        fprintf(stderr, "usage: dtensor-trace-torch -o OUT.json IN_rank0.json [IN_rank1.json ...]\n"
                        "  (torch.profiler Chrome traces, plain or .gz, one per rank)\n");
        return 2;
    }
    char err[512];
    if (dt_torch_trace_convert(inputs, nin, out, err, sizeof err)) {
        fprintf(stderr, "dtensor-trace-torch: %s\n", err);
        return 1;
    }
    return 0;
}
