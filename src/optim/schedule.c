/* Learning-rate schedules as plain functions of the step: the caller sets the result on the
 * optimizer (dt_optim_set_lr) before each step, so there is no scheduler state to save. */
#include <math.h>

#include "core/check.h"
#include "dtensor/optim.h"

dt_status dt_lr_warmup_cosine(const dt_lr_schedule *schedule, int64_t step, double *out) {
    const char *fn = "dt_lr_warmup_cosine";
    DT_ARG(schedule != NULL, "%s: argument schedule is NULL", fn);
    DT_ARG(out != NULL, "%s: argument out is NULL", fn);
    const dt_lr_schedule *s = schedule;
    DT_ARG(s->warmup_steps >= 0 && s->stable_steps >= 0 && s->decay_steps >= 0,
           "%s: schedule has a negative count (warmup %lld, stable %lld, decay %lld)", fn,
           (long long)s->warmup_steps, (long long)s->stable_steps, (long long)s->decay_steps);
    DT_ARG(s->lr_min >= 0 && s->lr_min <= 1, "%s: schedule->lr_min = %g is outside [0, 1] (a "
                                             "fraction of lr)", fn, s->lr_min);
    DT_ARG(step >= 0, "%s: argument step = %lld is negative", fn, (long long)step);
    int64_t flat = s->warmup_steps + s->stable_steps, end = flat + s->decay_steps;
    if (step > end) step = end; /* past the last step: the value there */
    double f;
    if (step < s->warmup_steps) f = (double)(step + 1) / (double)(s->warmup_steps + 1);
    else if (step < flat || s->decay_steps == 0) f = 1;
    else {
        double p = (double)(step + 1 - flat) / (double)(s->decay_steps + 1);
        f = s->lr_min + (1 - s->lr_min) * 0.5 * (1 + cos(M_PI * p));
    }
    *out = s->lr * f;
    return DT_OK;
}
