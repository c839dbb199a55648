#include "helpers.h"

void t_run(int n, dt_spmd_fn body, void *arg) {
    dt_status st = dt_local_run(n, body, arg, NULL);
    cr_assert_eq(st, DT_OK, "%d ranks: %s: %s", n, dt_status_str(st), dt_last_error());
}
