/* Communicators of the UCX backend. Creating one needs no communication: every member derives
 * the same 28-bit group id from the key and member list, and tags carry it with the group's
 * sequence number, so messages of different groups, or of successive collectives of one group,
 * never match each other. */
#include <stdlib.h>
#include <string.h>

#include "comm/ucx/ucx_impl.h"
#include "core/alloc.h"
#include "core/check.h"

/* FNV-1a over the key and members, folded to UX_GID_BITS. */
static uint32_t group_id(const uint64_t key[2], const int *members, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    unsigned char buf[8];
    for (int k = 0; k < 2 + n; k++) {
        uint64_t v = k < 2 ? key[k] : (uint64_t)(uint32_t)members[k - 2];
        memcpy(buf, &v, sizeof buf);
        for (int i = 0; i < 8; i++)
            h = (h ^ buf[i]) * 0x100000001b3ull;
    }
    h ^= h >> 32;
    return (uint32_t)(h ^ (h >> UX_GID_BITS)) & ((1u << UX_GID_BITS) - 1);
}

static dt_status group_get(ux_world *w, const uint64_t key[2], const int *members, int n,
                           ux_group **out) {
    uint32_t gid = group_id(key, members, n);
    for (ux_group *g = w->groups; g; g = g->next) {
        int same = g->key[0] == key[0] && g->key[1] == key[1] && g->n == n &&
                   memcmp(g->members, members, sizeof(int) * (size_t)n) == 0;
        if (same) {
            g->refs++;
            *out = g;
            return DT_OK;
        }
        /* Two live groups whose tags could match each other's messages: refuse rather than
         * risk mixing them (about one chance in 2^28 per pair of groups). */
        if (g->gid == gid)
            return dt_error(DT_ERR_COMM,
                            "communicator of %d ranks: group id 0x%x collides with a "
                            "live group of %d ranks; destroy one of them first",
                            n, gid, g->n);
    }
    ux_group *g = calloc(1, sizeof *g);
    int *m = malloc(sizeof(int) * (size_t)n);
    if (!g || !m) {
        free(g);
        free(m);
        return dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", n);
    }
    memcpy(m, members, sizeof(int) * (size_t)n);
    memcpy(g->key, key, sizeof g->key);
    g->n = n;
    g->members = m;
    g->gid = gid;
    g->refs = 1;
    g->next = w->groups;
    w->groups = g;
    *out = g;
    return DT_OK;
}

dt_status ux_comm_create(dt_ctx *ctx, const uint64_t key[2], const int *members, int n,
                         dt_comm **comm_out) {
    ux_world *w = ctx->backend_state;
    DT_ARG(n <= DT_UX_MAX_RANKS, "communicator of %d ranks: the UCX backend takes at most %d", n,
           DT_UX_MAX_RANKS);
    ux_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_error(DT_ERR_NOMEM, "communicator of %d ranks: out of memory", n);
    dt_status st = dt_comm_init_base(&c->base, &ux_comm_ops, ctx, key, members, n);
    if (st != DT_OK) {
        free(c);
        return st;
    }
    pthread_mutex_lock(&w->groups_mu);
    st = group_get(w, key, members, n, &c->g);
    pthread_mutex_unlock(&w->groups_mu);
    if (st != DT_OK) {
        dt_comm_free_base(&c->base);
        free(c);
        return st;
    }
    c->w = w;
    *comm_out = &c->base;
    return DT_OK;
}

void ux_comm_destroy(dt_comm *base) {
    ux_comm *c = ux(base);
    ux_world *w = c->w;
    ux_hier_free(c);
    pthread_mutex_lock(&w->groups_mu);
    if (--c->g->refs == 0) {
        ux_group **pp = &w->groups;
        while (*pp != c->g)
            pp = &(*pp)->next;
        *pp = c->g->next;
        ux_shm_free(c->g->shm);
        free(c->g->members);
        free(c->g);
    }
    pthread_mutex_unlock(&w->groups_mu);
    dt_host_free(c->scratch);
    dt_comm_free_base(base);
    free(c);
}

void ux_groups_free(ux_world *w) {
    while (w->groups) {
        ux_group *next = w->groups->next;
        ux_shm_free(w->groups->shm);
        free(w->groups->members);
        free(w->groups);
        w->groups = next;
    }
}
