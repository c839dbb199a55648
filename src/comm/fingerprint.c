/* Collective fingerprints (dt_coll_fp): how one reads in a message, the error for members that
 * disagree, and the debug check of backends that do not compare them by themselves (UCX, NCCL
 * with DT_DEBUG_COLLECTIVES=1): one small all_gather of the fingerprint before the collective.
 * The local runtime compares them inside its entry barrier (local/sync.c). */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "core/check.h"

static const char *kind_name(int64_t kind) {
    return kind == DT_FP_EXCHANGE_BOXES ? "exchange_boxes" : dt_coll_kind_name((dt_coll_kind)kind);
}

void dt_coll_fp_str(const dt_coll_fp *fp, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s #%lld", kind_name(fp->kind), (long long)fp->seq);
    if (fp->dtype < 0 || n < 0 || (size_t)n >= cap) return;
    if (fp->count >= 0)
        n += snprintf(buf + n, cap - (size_t)n, " (%lld x %s", (long long)fp->count,
                      dt_dtype_name((dt_dtype)fp->dtype));
    else
        n += snprintf(buf + n, cap - (size_t)n, " (%s", dt_dtype_name((dt_dtype)fp->dtype));
    if (fp->op >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", %s", dt_reduce_op_name((dt_reduce_op)fp->op));
    if (fp->root >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", root %lld", (long long)fp->root);
    if ((size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ")");
}

dt_status dt_coll_fp_mismatch(const dt_comm *c, const char *what, int ra, const dt_coll_fp *a,
                              int rb, const dt_coll_fp *b) {
    char sa[96], sb[96];
    dt_coll_fp_str(a, sa, sizeof sa);
    dt_coll_fp_str(b, sb, sizeof sb);
    int same_call = a->kind == b->kind && a->seq == b->seq;
    return dt_error(DT_ERR_COMM, "%s on group %s of %d ranks: %s: rank %d is in %s, rank %d in %s",
                    what, c->label, c->size,
                    same_call ? "ranks disagree on its arguments"
                              : "ranks called different "
                                "collectives",
                    ra, sa, rb, sb);
}

dt_status dt_comm_check_fp(dt_comm *c) {
    enum { W = sizeof(dt_coll_fp) / sizeof(int64_t) };
    int n = c->size;
    dt_coll_fp *all = malloc(sizeof *all * (size_t)n);
    size_t *counts = malloc(sizeof(size_t) * 2 * (size_t)n), *displs = counts + n;
    dt_status st = DT_OK;
    if (!all || !counts) {
        st = dt_error(DT_ERR_NOMEM, "DT_DEBUG_COLLECTIVES: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        counts[i] = W;
        displs[i] = (size_t)i * W;
    }
    st = c->ops->all_gatherv(c, &c->fp, all, counts, displs, DT_I64);
    if (st != DT_OK) {
        dt_error_prefix("DT_DEBUG_COLLECTIVES: exchanging fingerprints");
        goto out;
    }
    /* Against group rank 0, so that every member names the same pair. */
    for (int j = 1; j < n; j++) {
        if (dt_coll_fp_equal(&all[0], &all[j])) continue;
        char what[48];
        snprintf(what, sizeof what, "dt_%s", kind_name(c->fp.kind));
        st = dt_coll_fp_mismatch(c, what, c->members[0], &all[0], c->members[j], &all[j]);
        break;
    }
out:
    free(counts);
    free(all);
    return st;
}
