/* Property suite: random meshes (up to 3-D, up to 8 ranks), tensors of rank 1-4 with sizes
 * 0-13, every dtype, random source and target placements including Partial (property_cases.h).
 *
 * DT_PROPERTY_SEED replays a run; DT_PROPERTY_CASES sets the cases per mesh (default 300). */
#include <inttypes.h>
#include <stdlib.h>
#include <time.h>

#include "helpers.h"
#include "property_cases.h"

Test(redistribute_property, random_cases_are_exact, .timeout = 600) {
    const char *seed_env = getenv("DT_PROPERTY_SEED"), *cases_env = getenv("DT_PROPERTY_CASES");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL);
    int cases = cases_env ? atoi(cases_env) : 300;
    static const char *const meshes[] = {"1",   "2",   "3",   "4",   "6",     "8",     "2x2", "2x3",
                                         "3x2", "2x4", "4x2", "1x4", "2x2x2", "2x1x3", "2x2x1"};
    sweep sweeps[sizeof meshes / sizeof meshes[0]];
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++)
        sweeps[i] = (sweep){.mesh = meshes[i]};
    int total = 0;
    for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++) {
        sweep *s = &sweeps[i];
        s->nranks = 1;
        for (const char *p = s->mesh; *p; p++)
            if (*p >= '1' && *p <= '9' && (p == s->mesh || p[-1] == 'x')) s->nranks *= *p - '0';
        s->seed = seed + i;
        s->cases = cases;
        dt_status st = dt_local_run(s->nranks, property_body, s, NULL);
        cr_assert_eq(st, DT_OK, "replay with DT_PROPERTY_SEED=%" PRIu64 ": %s", seed,
                     dt_last_error());
        total += cases;
    }
    cr_log_info("%d random redistributions exact (DT_PROPERTY_SEED=%" PRIu64 ")", total, seed);
}
