/* Ranks that wait on each other across groups (stuck.h): the positions and the verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/boot/boot.h"
#include "comm/stuck.h"
#include "core/check.h"

void dt_pos_fill(dt_pos *p, const dt_comm *c, const char *what, int peer, const char *caller) {
    memset(p, 0, sizeof *p);
    p->rank = c->ctx->rank;
    p->peer = peer;
    p->gid = c->gid;
    p->fp = peer >= 0 ? (dt_coll_fp){.kind = -1, .dtype = -1, .op = -1, .root = -1} : c->fp;
    snprintf(p->what, sizeof p->what, "%s", what);
    memcpy(p->label, c->label, sizeof p->label);
    snprintf(p->caller, sizeof p->caller, "%s", caller ? caller : "");
    for (int i = 0; i < c->size; i++)
        if (c->members[i] >= 0 && c->members[i] < DT_POS_WORLD_MAX)
            p->members[c->members[i] / 64] |= 1ull << (c->members[i] % 64);
}

dt_status dt_check_interval_ns(int world, int64_t *ns_out) {
    DT_CHECK(dt_boot_env_ns("DT_CHECK_S", DT_CHECK_DEFAULT_S, "turns the check off", ns_out));
    if (world > DT_POS_WORLD_MAX) *ns_out = 0;
    return DT_OK;
}

static int member(const dt_pos *p, int r) {
    return r < DT_POS_WORLD_MAX && (p->members[r / 64] >> (r % 64) & 1);
}

/* Whether rank q, waiting at p, waits for rank m: its send/recv peer, or a member of its group
 * not waiting in the same collective. */
static int waits_for(const dt_pos *const *board, const dt_pos *p, int m) {
    if (m == p->rank) return 0;
    if (p->peer >= 0) return m == p->peer;
    if (!member(p, m)) return 0;
    const dt_pos *o = board[m];
    return !(o && o->peer < 0 && o->gid == p->gid && o->fp.seq == p->fp.seq);
}

/* "all_reduce #3 (8 x f32, sum) on tp by matmul", "dt_recv from rank 2 on pp". */
static void where_str(const dt_pos *p, char *buf, size_t cap) {
    char call[112];
    if (p->peer >= 0)
        snprintf(call, sizeof call, "%s %s rank %d", p->what,
                 strstr(p->what, "send") ? "to" : "from", p->peer);
    else
        dt_coll_fp_str(&p->fp, call, sizeof call);
    snprintf(buf, cap, "%s on group %s%s%s", call, p->label, p->caller[0] ? " by " : "",
             p->caller);
}

/* "rank 4" or "ranks 1, 2, 3" for the set members of set[0..n), at buf + *len. */
static void append_ranks(const unsigned char *set, int n, char *buf, size_t cap, size_t *len) {
    int count = 0, shown = 0;
    for (int r = 0; r < n; r++) count += set[r];
    for (int r = 0; r < n && *len < cap; r++) {
        if (!set[r]) continue;
        int k = shown == 8 ? snprintf(buf + *len, cap - *len, ", ...")
                           : snprintf(buf + *len, cap - *len, "%s%d",
                                      shown ? ", " : count > 1 ? "ranks " : "rank ", r);
        if (k > 0) *len += (size_t)k;
        if (shown++ == 8) break;
    }
}

static void append(char *buf, size_t cap, size_t *len, const char *s) {
    if (*len >= cap) return;
    int k = snprintf(buf + *len, cap - *len, "%s", s);
    if (k > 0) *len += (size_t)k;
}

int dt_pos_verdict(const dt_pos *const *board, int n, char *msg, size_t cap, int *blamed) {
    if (n > DT_POS_WORLD_MAX) return 0;
    unsigned char may[DT_POS_WORLD_MAX], set[DT_POS_WORLD_MAX], done[DT_POS_WORLD_MAX];
    int waited[DT_POS_WORLD_MAX] = {0};
    for (int r = 0; r < n; r++) may[r] = board[r] == NULL;
    /* May proceed: running, or every member it waits for may proceed (and so may come). */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (may[r]) continue;
            int all = 1;
            for (int m = 0; m < n && all; m++)
                if (waits_for(board, board[r], m) && !may[m]) all = 0;
            if (all) may[r] = 1, changed = 1;
        }
    }
    int top = 0, stuck = 0;
    for (int r = 0; r < n; r++) {
        if (may[r]) continue;
        stuck++;
        for (int m = 0; m < n; m++)
            if (waits_for(board, board[r], m) && !may[m] && ++waited[m] > top) top = waited[m];
    }
    if (!stuck) return 0;
    /* The diverging ranks: those the others wait for most. */
    memset(set, 0, (size_t)n);
    *blamed = -1;
    for (int r = 0; r < n; r++)
        if (!may[r] && waited[r] == top) {
            set[r] = 1;
            if (*blamed < 0) *blamed = r;
        }
    size_t len = 0;
    append_ranks(set, n, msg, cap, &len);
    append(msg, cap, &len, " diverged (ranks wait on each other across groups and none can go on): ");
    memset(done, 0, (size_t)n);
    /* The blamed positions first, then the others, each with the ranks at the same place. */
    int listed = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < n; r++) {
            if (may[r] || done[r] || (pass == 0) != (set[r] == 1)) continue;
            char at[192], other[192];
            where_str(board[r], at, sizeof at);
            unsigned char same[DT_POS_WORLD_MAX] = {0}, wait[DT_POS_WORLD_MAX] = {0};
            for (int q = r; q < n; q++) {
                if (may[q] || done[q]) continue;
                where_str(board[q], other, sizeof other);
                if (strcmp(at, other) != 0) continue;
                same[q] = done[q] = 1;
                for (int m = 0; m < n; m++)
                    if (waits_for(board, board[q], m)) wait[m] = 1;
            }
            if (listed++) append(msg, cap, &len, "; ");
            append_ranks(same, n, msg, cap, &len);
            append(msg, cap, &len, " in ");
            append(msg, cap, &len, at);
            append(msg, cap, &len, ", waiting for ");
            append_ranks(wait, n, msg, cap, &len);
        }
    return 1;
}

dt_status dt_board_init(dt_board *b, int n) {
    *b = (dt_board){.n = n};
    if (n > DT_POS_WORLD_MAX) return DT_OK;
    b->pos = calloc((size_t)n, sizeof *b->pos);
    b->on = calloc((size_t)n, 1);
    if (b->pos && b->on) return DT_OK;
    dt_board_fini(b);
    return dt_error(DT_ERR_NOMEM, "the board of stuck ranks: out of memory for %d ranks", n);
}

void dt_board_fini(dt_board *b) {
    free(b->pos);
    free(b->on);
    b->pos = NULL;
    b->on = NULL;
}

void dt_board_set(dt_board *b, int r, const dt_pos *p) {
    if (!b->pos || r < 0 || r >= b->n) return;
    b->count += (p != NULL) - (b->on[r] != 0);
    b->on[r] = p != NULL;
    if (p) {
        b->pos[r] = *p;
        b->pos[r].rank = r; /* the sender's, whatever it wrote */
    }
}

int dt_board_judge(dt_board *b, int64_t now_ns, char *msg, int *blamed) {
    const dt_pos **view = b->count ? calloc((size_t)b->n, sizeof *view) : NULL;
    int found = 0;
    if (view) {
        for (int r = 0; r < b->n; r++)
            if (b->on[r]) view[r] = &b->pos[r];
        found = dt_pos_verdict(view, b->n, msg, sizeof b->verdict, blamed);
        free(view);
    }
    if (!found) {
        b->verdict[0] = '\0';
        return 0;
    }
    if (strcmp(b->verdict, msg) != 0) {
        memcpy(b->verdict, msg, sizeof b->verdict);
        b->verdict_ns = now_ns;
        return 0;
    }
    return now_ns - b->verdict_ns >= DT_CHECK_CONFIRM_NS;
}
