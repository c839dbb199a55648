/* The CPU's fused optimizer step: every element of every item through ops/cpu/optim_math.h,
 * one pass over all parameters' local shards. */
#include "ops/cpu/optim_math.h"

dt_status dt_cpu_optim_step(const dt_optim_hyper *h, const dt_optim_item *items, int n) {
    for (int k = 0; k < n; k++) {
        const dt_optim_item *it = &items[k];
        for (uint64_t i = 0; i < it->numel; i++) dt_om_step(h, it, i);
    }
    return DT_OK;
}
