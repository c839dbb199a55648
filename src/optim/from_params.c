/* Optimizers over a parameter registry (dtensor/params.h): the registry's tensors, in order,
 * as one parameter group. */
#include <stdlib.h>

#include "core/check.h"
#include "dtensor/optim.h"
#include "dtensor/params.h"

dt_status dt_optim_adamw_create_params(const dt_adamw_options *options, const dt_params *params,
                                       dt_optim **out) {
    DT_ARG_NOT_NULL(params);
    int n = dt_params_count(params);
    /* as torch.optim's "optimizer got an empty parameter list" */
    DT_ARG(n > 0, "dt_optim_adamw_create_params: the registry holds no parameters");
    dt_tensor **t = malloc(sizeof *t * (size_t)(n ? n : 1));
    if (!t) return dt_error(DT_ERR_NOMEM, "dt_optim_adamw_create_params: out of memory");
    dt_status st = dt_params_arrays(params, NULL, t, n, NULL);
    for (int i = 0; st == DT_OK && i < n; i++)
        if (!t[i]) {
            const char *name;
            dt_params_at(params, i, &name, NULL);
            st = dt_error(DT_ERR_ARG,
                          "dt_optim_adamw_create_params: parameter \"%s\" is not "
                          "materialized (dt_params_materialize first)",
                          name);
        }
    dt_param_group all = {.params = t, .n = n};
    if (st == DT_OK) st = dt_optim_adamw_create(options, &all, 1, out);
    free(t);
    return st;
}
