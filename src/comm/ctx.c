/* The backend-independent part of a rank context: identity, the world communicator and
 * user-created groups (matched across ranks by how often each member list was created). */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/check.h"

struct dt_user_group_count {
    dt_user_group_count *next;
    int n;
    uint64_t created;
    int ranks[];
};

int dt_ctx_rank(const dt_ctx *ctx) { return ctx ? ctx->rank : -1; }
int dt_ctx_size(const dt_ctx *ctx) { return ctx ? ctx->size : -1; }

dt_status dt_ctx_world_comm(dt_ctx *ctx, dt_comm **comm_out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(comm_out);
    *comm_out = ctx->world;
    return DT_OK;
}

dt_status dt_ctx_comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                             dt_comm **comm_out) {
    return ctx->backend->comm_create(ctx, key, members, n, comm_out);
}

void dt_ctx_free_user_groups(dt_ctx *ctx) {
    while (ctx->user_groups) {
        dt_user_group_count *next = ctx->user_groups->next;
        free(ctx->user_groups);
        ctx->user_groups = next;
    }
}

/* How many times this rank created a group over exactly these ranks, counting this one. */
static dt_status next_user_key(dt_ctx *ctx, const int *ranks, int n, uint64_t *seq_out) {
    dt_user_group_count *g = ctx->user_groups;
    for (; g; g = g->next)
        if (g->n == n && memcmp(g->ranks, ranks, sizeof(int) * (size_t)n) == 0) break;
    if (!g) {
        g = calloc(1, sizeof *g + sizeof(int) * (size_t)n);
        if (!g) return dt_error(DT_ERR_NOMEM, "dt_comm_create: out of memory");
        g->n = n;
        memcpy(g->ranks, ranks, sizeof(int) * (size_t)n);
        g->next = ctx->user_groups;
        ctx->user_groups = g;
    }
    *seq_out = g->created++;
    return DT_OK;
}

dt_status dt_comm_create(dt_ctx *ctx, const int *ranks, int n, dt_comm **comm_out) {
    DT_ARG_NOT_NULL(ctx);
    DT_ARG_NOT_NULL(ranks);
    DT_ARG_NOT_NULL(comm_out);
    DT_ARG(n >= 1 && n <= ctx->size, "dt_comm_create: argument n = %d is not in [1, %d]", n,
           ctx->size);
    int self = 0;
    for (int i = 0; i < n; i++) {
        DT_ARG(ranks[i] >= 0 && ranks[i] < ctx->size,
               "dt_comm_create: ranks[%d] = %d is not a rank of the world of %d", i, ranks[i],
               ctx->size);
        for (int j = 0; j < i; j++)
            DT_ARG(ranks[j] != ranks[i], "dt_comm_create: rank %d appears twice in ranks (at %d "
                                         "and %d)", ranks[i], j, i);
        self |= ranks[i] == ctx->rank;
    }
    DT_ARG(self, "dt_comm_create: the calling rank %d is not in ranks", ctx->rank);
    uint64_t seq = 0;
    DT_CHECK(next_user_key(ctx, ranks, n, &seq));
    uint64_t key[2] = {DT_COMM_KEY(DT_KEY_USER, seq), 0};
    return dt_ctx_comm_create(ctx, key, ranks, n, comm_out);
}
