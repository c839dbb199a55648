/* The local runtime's check for ranks stuck across groups (comm/stuck.h): the board is the
 * ranks' lw_where records, which every rank of the process reads; a rank whose wait passed the
 * check interval reads it once a second and, on a verdict that holds, aborts the world in the
 * name of the rank the others wait for. */
#include <stdlib.h>
#include <string.h>

#include "comm/boot/boot.h"
#include "comm/local/local_impl.h"
#include "comm/stuck.h"
#include "core/check.h"

void lw_watch_start(lw_watch *wt, const lw_comm *c) {
    int64_t every = c->base.ctx->check_ns;
    *wt = (lw_watch){.next = every ? dt_boot_now_ns() + every : 0, .blamed = -1};
}

int64_t lw_watch_deadline(const lw_watch *wt, int64_t deadline) {
    if (!wt->next) return deadline;
    return deadline && deadline < wt->next ? deadline : wt->next;
}

/* The positions of the ranks that have waited at least one interval (NULL for the others). */
static int verdict(lw_world *w, int64_t every, char *msg, size_t cap, int *blamed) {
    dt_pos *pos = malloc(sizeof *pos * (size_t)w->size);
    const dt_pos **board = calloc((size_t)w->size, sizeof *board);
    int found = 0;
    if (pos && board) {
        int64_t now = dt_boot_now_ns();
        for (int r = 0; r < w->size; r++) {
            lw_where *at = &w->where[r];
            pthread_mutex_lock(&at->mu);
            /* The rank is inside a call on at->comm until it clears this record, which it
             * cannot while we hold the record's lock: the communicator and its fingerprint
             * are the call's. */
            if (at->comm && now - at->since_ns >= every) {
                const lw_comm *c = at->comm;
                int peer = at->peer >= 0 ? c->group->members[at->peer] : -1;
                dt_pos_fill(&pos[r], &c->base, at->what, peer, at->caller);
                board[r] = &pos[r];
            }
            pthread_mutex_unlock(&at->mu);
        }
        found = dt_pos_verdict(board, w->size, msg, cap, blamed);
    }
    free(board);
    free(pos);
    return found;
}

dt_status lw_watch_check(lw_watch *wt, lw_comm *c, const char *what) {
    int64_t now = dt_boot_now_ns(), every = c->base.ctx->check_ns;
    if (!wt->next || now < wt->next) return DT_OK;
    char msg[sizeof wt->first];
    int blamed = -1;
    if (!verdict(c->world, every, msg, sizeof msg, &blamed)) {
        wt->first[0] = '\0';
        wt->next = now + (every < DT_CHECK_AGAIN_NS ? every : DT_CHECK_AGAIN_NS);
        return DT_OK;
    }
    /* The same verdict a moment later: nobody it names moved. */
    if (!wt->first[0] || strcmp(wt->first, msg) != 0) {
        memcpy(wt->first, msg, sizeof msg);
        wt->next = now + (every / 2 < DT_CHECK_CONFIRM_NS ? every / 2 : DT_CHECK_CONFIRM_NS);
        return DT_OK;
    }
    wt->blamed = blamed;
    return dt_error(DT_ERR_COMM, "%s on group %s: %s", what, c->base.label, wt->first);
}

void lw_watch_abort(const lw_watch *wt, lw_comm *c, int expired, dt_status st) {
    if (expired)
        lw_abort(c->world, c->base.ctx->rank, st, dt_last_error());
    else if (wt->blamed >= 0)
        lw_abort(c->world, wt->blamed, st, wt->first);
}
