/* Sequence flags of the local backend: past a collective's entry barrier, every member says how
 * far it got by storing (epoch, phase) in a flag of its own and counting itself in the phase's
 * count, and a member waits only for the peers whose data it needs or who may still touch its
 * buffers (their flags), or for everyone (the count). A wait spins briefly while the ranks fit
 * on the cores and no other process keeps them busy (lw_spin), then waits on its futex word
 * (core/fiber.h: a sleep, or where ranks run as fibers, another rank's turn); a writer wakes a
 * flag only when someone sleeps on it, and a count only when it completes. The waits cannot
 * fail: every member has entered, and every path out of a collective publishes its last
 * phase. Also the futex word the entry barrier's waiters sleep on (sync.c). */
#include <sched.h>

#include "comm/local/local_impl.h"
#include "core/fiber.h"
#include "core/spin.h"

/* While every rank has a core, a wait first polls the flag this many times (a peer that is
 * nearly there), then yields up to lw_spin times as the entry barrier does, then sleeps.
 * Polls that do not yield keep a descheduled peer off the core on a loaded machine: at a load
 * of 12 on 2 cores, 2-rank collectives of 1 KiB took 46-56 us polling 30 us before sleeping,
 * 9-12 us after 128 polls and 6-9 us after 16, as with the mutex barriers before. */
#define LW_FLAG_POLLS 16

/* Flags are 32-bit (a futex word) and wrap. A peer's flag awaited is at most one collective
 * (LW_PHASES values) ahead of the target; a flag left behind by a peer that published nothing
 * for many collectives is behind it, however far: only a small distance ahead counts. */
static inline int reached(uint32_t v, uint32_t target) {
    return v - target < 2u * LW_PHASES;
}

static inline uint32_t target(const lw_comm *c, int phase) {
    return c->epoch * LW_PHASES + (uint32_t)phase;
}

void lw_publish(lw_comm *c, int phase) {
    lw_group *g = c->group;
    lw_flag *f = &g->flags[c->base.rank];
    /* Sequentially consistent store then load: a waiter counts itself, then reads the flag;
     * either it sees the new value or this sees it waiting (and the futex call, which
     * compares the word, sees the value change). The count likewise, woken by its last. */
    atomic_store(&f->seq, target(c, phase));
    if (atomic_load(&f->waiters)) dt_wake_word(&f->seq);
    lw_count *k = &g->counts[phase];
    uint32_t now = atomic_fetch_add(&k->n, 1) + 1;
    if (now - k->base == (uint32_t)g->n && atomic_load(&k->sleepers)) dt_wake_word(&k->n);
}

void lw_counts_rebase(lw_group *g) {
    for (int p = 0; p < LW_PHASES; p++)
        g->counts[p].base = atomic_load_explicit(&g->counts[p].n, memory_order_relaxed);
}

static int spin(const lw_flag *f, uint32_t t, int yields) {
    for (int i = 0; i < LW_FLAG_POLLS; i++) {
        if (reached(atomic_load_explicit(&f->seq, memory_order_acquire), t)) return 1;
        dt_cpu_relax();
    }
    for (int i = 0; i < yields; i++) {
        if (reached(atomic_load_explicit(&f->seq, memory_order_acquire), t)) return 1;
        sched_yield();
    }
    return 0;
}

void lw_wait_for(lw_comm *c, int peer, int phase) {
    if (peer == c->base.rank) return;
    lw_flag *f = &c->group->flags[peer];
    const uint32_t t = target(c, phase);
    if (reached(atomic_load_explicit(&f->seq, memory_order_acquire), t)) return;
    /* More ranks than cores, or a busy host: sleep at once (LW_SPIN). */
    const int yields = lw_spin(c->world);
    if (yields && spin(f, t, yields)) return;
    for (;;) {
        atomic_fetch_add(&f->waiters, 1);
        uint32_t v = atomic_load(&f->seq);
        if (!reached(v, t)) dt_wait_word(&f->seq, v, 0);
        atomic_fetch_sub(&f->waiters, 1);
        if (reached(atomic_load_explicit(&f->seq, memory_order_acquire), t)) return;
    }
}

/* Every member's count for the phase is in. */
static inline int all_in(const lw_count *k, uint32_t n) {
    return atomic_load_explicit(&k->n, memory_order_acquire) - k->base >= n;
}

void lw_wait_all(lw_comm *c, int phase) {
    lw_count *k = &c->group->counts[phase];
    const uint32_t n = (uint32_t)c->group->n;
    if (all_in(k, n)) return;
    const int yields = lw_spin(c->world);
    if (yields) { /* as spin(): polls, then yields */
        for (int i = 0; i < LW_FLAG_POLLS + yields; i++) {
            if (all_in(k, n)) return;
            if (i < LW_FLAG_POLLS)
                dt_cpu_relax();
            else
                sched_yield();
        }
    }
    for (;;) {
        atomic_fetch_add(&k->sleepers, 1);
        uint32_t v = atomic_load(&k->n);
        if (v - k->base < n) dt_wait_word(&k->n, v, 0);
        atomic_fetch_sub(&k->sleepers, 1);
        if (all_in(k, n)) return;
    }
}

void lw_group_wake(lw_group *g) {
    atomic_fetch_add(&g->wake, 1);
    if (atomic_load(&g->sleepers)) dt_wake_word(&g->wake);
}

void lw_group_sleep(lw_group *g, uint32_t seen, int64_t deadline_ns) {
    /* As lw_publish's waiters: counted first, then the word compared (here and by the kernel). */
    atomic_fetch_add(&g->sleepers, 1);
    if (atomic_load(&g->wake) == seen) dt_wait_word(&g->wake, seen, deadline_ns);
    atomic_fetch_sub(&g->sleepers, 1);
}
