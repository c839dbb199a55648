/* The strategy search (ops/strategy.h), shared by op dispatch (pricing with its mesh's plan
 * cache) and dt_op_choose (pricing with plans made from the specs). Nothing here may reach a
 * mesh or a rank. */
#include <string.h>

#include "core/check.h"
#include "dtensor/tensor_impl.h"
#include "ops/strategy.h"

#define MAX_COMBOS 20000 /* beyond this, each mesh dim keeps its few closest rows */

static int valid_for(const dt_placement *p, int mnd, int ndim) {
    for (int m = 0; m < mnd; m++)
        if (p[m].kind == DT_PLACEMENT_SHARD && (p[m].dim < 0 || p[m].dim >= ndim)) return 0;
    return 1;
}

/* A pending norm is only ever reduced, never made (dtensor/placement.h): a row asking for
 * NormP on a mesh dim where the input does not hold that very NormP cannot be reached. */
static int norm_reachable(const dt_placement *want, const dt_placement *have, int mnd) {
    for (int m = 0; m < mnd; m++)
        if (want[m].kind == DT_PLACEMENT_PARTIAL && want[m].op == DT_REDUCE_NORM &&
            !dt_placement_equal(want[m], have[m]))
            return 0;
    return 1;
}

/* Many mesh dims multiply the combinations: keep, per mesh dim, the keep rows that leave the
 * most inputs as they are on that dim (row order breaks ties, so R -> R, first, stays). */
static int closest_rows(rule_row *rows, int nrows, const dt_strategy_query *q, int m, int keep) {
    if (nrows <= keep) return nrows;
    int score[DT_OP_MAX_ROWS];
    for (int r = 0; r < nrows; r++) {
        score[r] = 0;
        for (int i = 0; i < q->n; i++)
            score[r] += q->have[i] && dt_placement_equal(rows[r].in[i], q->have[i][m]);
    }
    for (int k = 0; k < keep; k++) { /* selection: move the best remaining row to slot k */
        int best = k;
        for (int r = k + 1; r < nrows; r++)
            if (score[r] > score[best]) best = r;
        rule_row tr = rows[k];
        int ts = score[k];
        rows[k] = rows[best], score[k] = score[best];
        rows[best] = tr, score[best] = ts;
    }
    return keep;
}

dt_status dt_strategy_search(const dt_strategy_query *q, dt_strategy_found *best) {
    const op_family *f = q->family;
    int mnd = q->mesh_ndim, n = q->n, total = 1;
    for (int m = 0; m < mnd; m++)
        total *= q->mesh_shape[m];
    /* float8 is storage: only the float8 GEMM and ops that move elements take it. */
    for (int i = 0; i < n && f != &dt_family_matmul && f != &dt_family_shape && f != &dt_family_cat;
         i++)
        if (q->in[i].ndim >= 0 && (q->in[i].dtype == DT_F8E4M3 || q->in[i].dtype == DT_F8E5M2))
            return dt_error(DT_ERR_DTYPE, "%s: input %d is %s; float8 tensors only move, cast and "
                            "multiply (dt_mm): cast it first (dt_cast_scaled)", dt_op_name(q->op),
                            i, dt_dtype_name(q->in[i].dtype));
    DT_CHECK(f->infer(q->op, q->in, n, q->args, &best->spec));
    /* Output shapes come from arguments too (view, expand): the one checked size product. */
    DT_CHECK(dt_shape_dtype_check(dt_op_name(q->op), best->spec.ndim, best->spec.shape,
                                  best->spec.dtype));
    /* Scratch for this call only: nothing here waits, so ranks run as fibers on one thread
     * (core/fiber.h) may share it. */
    static _Thread_local rule_row rows[DT_MESH_MAX_NDIM][DT_OP_MAX_ROWS];
    int nrows[DT_MESH_MAX_NDIM];
    long combos = 1;
    for (int m = 0; m < mnd; m++) {
        nrows[m] = f->rules(q->op, q->in, n, q->args, q->mesh_shape[m], total, rows[m]);
        combos *= nrows[m];
    }
    for (int keep = 4; combos > MAX_COMBOS && keep >= 1; keep--) {
        combos = 1;
        for (int m = 0; m < mnd; m++) {
            nrows[m] = closest_rows(rows[m], nrows[m], q, m, keep);
            combos *= nrows[m];
        }
    }
    double best_cost = 0;
    int best_changed = 0, found = 0;
    int pick[DT_MESH_MAX_NDIM] = {0};
    /* The combinations that leave every input as it is cost nothing and move nothing: none can
     * beat the first valid one in the order below, so it is the answer, found without pricing a
     * single plan (pricing is what many mesh dims make slow). Only rows that keep every input
     * on their mesh dim take part; their order is the full search's. */
    int keep_rows[DT_MESH_MAX_NDIM][DT_OP_MAX_ROWS], nkeep[DT_MESH_MAX_NDIM];
    long kept = 1;
    for (int m = 0; m < mnd; m++) {
        nkeep[m] = 0;
        for (int r = 0; r < nrows[m]; r++) {
            int same = 1;
            for (int i = 0; i < n && same; i++)
                same = !q->have[i] || dt_placement_equal(rows[m][r].in[i], q->have[i][m]);
            if (same) keep_rows[m][nkeep[m]++] = r;
        }
        kept *= nkeep[m];
    }
    for (long k = 0; k < kept && !found; k++) {
        dt_placement in[DT_OP_MAX_INPUTS][DT_MESH_MAX_NDIM] = {{{0}}}, out[DT_MESH_MAX_NDIM];
        long rem = k;
        for (int m = mnd - 1; m >= 0; m--)
            pick[m] = keep_rows[m][rem % nkeep[m]], rem /= nkeep[m];
        for (int m = 0; m < mnd; m++) {
            for (int i = 0; i < n; i++)
                in[i][m] = rows[m][pick[m]].in[i];
            out[m] = rows[m][pick[m]].out;
        }
        int ok = valid_for(out, mnd, best->spec.ndim);
        for (int i = 0; i < n && ok; i++)
            ok = !q->have[i] || valid_for(in[i], mnd, q->in[i].ndim);
        if (ok && f->combine_ok)
            ok = f->combine_ok(q->op, q->in, n, q->args, mnd, q->mesh_shape,
                               (const dt_placement(*)[DT_MESH_MAX_NDIM])in, out);
        if (!ok) continue;
        found = 1;
        memcpy(best->in, in, sizeof in);
        memcpy(best->out, out, sizeof out);
    }
    for (long k = 0, quick = found; k < combos && !quick; k++) {
        dt_placement in[DT_OP_MAX_INPUTS][DT_MESH_MAX_NDIM] = {{{0}}}, out[DT_MESH_MAX_NDIM];
        long rem = k;
        for (int m = mnd - 1; m >= 0; m--)
            pick[m] = (int)(rem % nrows[m]), rem /= nrows[m];
        for (int m = 0; m < mnd; m++) {
            for (int i = 0; i < n; i++)
                in[i][m] = rows[m][pick[m]].in[i];
            out[m] = rows[m][pick[m]].out;
        }
        if (!valid_for(out, mnd, best->spec.ndim)) continue;
        if (f->combine_ok && !f->combine_ok(q->op, q->in, n, q->args, mnd, q->mesh_shape,
                                            (const dt_placement(*)[DT_MESH_MAX_NDIM])in, out))
            continue;
        double cost = 0;
        int changed = 0, ok = 1;
        for (int i = 0; i < n && ok; i++) {
            if (!q->have[i]) continue;
            ok = valid_for(in[i], mnd, q->in[i].ndim) && norm_reachable(in[i], q->have[i], mnd);
            int same = 1;
            for (int m = 0; m < mnd; m++)
                same &= dt_placement_equal(in[i][m], q->have[i][m]);
            if (!ok || same) continue;
            double c;
            DT_CHECK(q->price(q->user, i, in[i], &c));
            cost += c;
            changed++;
        }
        if (!ok) continue;
        if (!found || cost < best_cost || (cost == best_cost && changed < best_changed)) {
            found = 1;
            best_cost = cost;
            best_changed = changed;
            memcpy(best->in, in, sizeof in);
            memcpy(best->out, out, sizeof out);
        }
    }
    if (!found)
        return dt_error(DT_ERR_PLACEMENT, "%s: no sharding strategy fits these inputs",
                        dt_op_name(q->op));
    best->cost_us = best_cost;
    best->changed = best_changed;
    return DT_OK;
}
