/* ncclsim's data path between processes (ncclsim_shm.h): one shared-memory segment per
 * communicator holds each rank's slot for a round of a collective and a byte ring per ordered
 * pair for sends and receives. Collectives run in rounds of at most SLOT bytes a rank, every rank
 * in the same order; reductions run in rank order, so every rank gets the same bits. */
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/half.h"
#include "ncclsim_shm.h"

namespace {

const size_t SLOT = 256 << 10; /* bytes a rank deposits per collective round */
const size_t RING = 64 << 10;  /* bytes in flight from one rank to another */
const size_t LINE = 128;       /* control words of different writers on their own lines */
const int64_t DEAD_GRACE_NS = 1000000000LL; /* a dead peer is reported this long after */

struct header {
    int32_t joined;  /* ranks mapped so far */
    int32_t aborted; /* 1 + the rank that aborted; 0: none */
};
struct rank_state {
    uint64_t posted, done; /* collective rounds deposited / done reading the others' slots */
    uint64_t desc;         /* what the posted round is (kind, count, type, op, root) */
    int32_t pid, joined, nranks;
};
struct ring_ctl {
    uint64_t head, tail; /* bytes written / read so far */
};
static_assert(sizeof(header) <= LINE && sizeof(rank_state) <= LINE && sizeof(ring_ctl) <= LINE,
              "control words outgrew their line");

int64_t now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int64_t timeout_ns() {
    const char *e = getenv("NCCLSIM_TIMEOUT_S");
    double s = e && *e ? atof(e) : 60.0;
    return (int64_t)((s > 0 ? s : 60.0) * 1e9);
}

template <typename T> T load(const T *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T> void store(T *p, T v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* A process that exited (or is a zombie) will never post again. */
bool alive(int pid) {
    if (pid <= 0) return true;
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    const char *p = strrchr(buf, ')'); /* the state follows the command name */
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

} // namespace

struct shm_comm {
    int n, rank;
    char name[64];
    char *base;
    size_t bytes;
    header *h;
    char *ranks, *ctls, *slots, *rings;
    uint64_t round; /* collective rounds this rank ran */
    int64_t joined_at;

    rank_state *rs(int q) { return (rank_state *)(ranks + (size_t)q * LINE); }
    ring_ctl *ctl(int from, int to) { return (ring_ctl *)(ctls + (size_t)(from * n + to) * LINE); }
    char *ring(int from, int to) { return rings + (size_t)(from * n + to) * RING; }
    char *slot(int q) { return slots + (size_t)q * SLOT; }
};

namespace {

size_t layout(shm_comm *s) {
    size_t n = (size_t)s->n;
    size_t o = LINE;
    s->ranks = (char *)(size_t)o;
    o += n * LINE;
    s->ctls = (char *)(size_t)o;
    o += n * n * LINE;
    s->slots = (char *)(size_t)o;
    o += n * SLOT;
    s->rings = (char *)(size_t)o;
    o += n * n * RING;
    return o;
}

/* Polls with backoff; every 20 ms looks for an abort, a dead peer and the timeout. */
struct waiter {
    shm_comm *s;
    const char *what;
    int64_t since, next_check = 0;
    unsigned spins = 0;
    int64_t dead_since = 0; /* when a peer was first seen gone (0: not) */
    waiter(shm_comm *s_, const char *what_) : s(s_), what(what_), since(now_ns()) {}
    void progressed() { since = now_ns(), spins = 0, dead_since = 0; }
    /* false when the wait must end (err says why). peers: those it waits for (nullptr: all). */
    bool pause(const std::vector<int> *peers, char *err, size_t cap) {
        if (++spins < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, (long)(spins < 256 ? 20000 : 500000)};
            nanosleep(&ts, nullptr);
        }
        int64_t t = now_ns();
        if (t < next_check) return true;
        next_check = t + 20000000LL;
        int ab = load(&s->h->aborted);
        if (ab) {
            snprintf(err, cap, "ncclsim: %s: rank %d aborted the communicator", what, ab - 1);
            return false;
        }
        for (int q = 0; q < s->n; q++) {
            bool wanted = !peers;
            for (size_t i = 0; peers && i < peers->size(); i++)
                wanted = wanted || (*peers)[i] == q;
            if (q != s->rank && wanted && !alive(load(&s->rs(q)->pid))) {
                /* The caller looks at the slots and rings again before this fails: the peer
                 * may have posted its part after the last look and then exited. And NCCL learns
                 * of a dead peer from its sockets, not at once: the launcher's notice of the
                 * death (dtrun's control plane) normally comes first, as on a GPU. */
                if (!dead_since) dead_since = t;
                if (t - dead_since < DEAD_GRACE_NS) return true;
                snprintf(err, cap, "ncclsim: %s: peer rank %d (pid %d) exited", what, q,
                         load(&s->rs(q)->pid));
                return false;
            }
        }
        if (t - since > timeout_ns()) {
            snprintf(err, cap,
                     "ncclsim: %s: rank %d of %d waited %.0f s for its peers without progress "
                     "(a rank never arrived; NCCLSIM_TIMEOUT_S)",
                     what, s->rank, s->n, (double)(t - since) / 1e9);
            fprintf(stderr, "%s\n", err);
            return false;
        }
        return true;
    }
};

/* ---- reductions, in rank order --------------------------------------------------------- */

template <typename T> T combine(T a, T b, ncclRedOp_t op) {
    switch (op) {
    case ncclProd:
        return (T)(a * b);
    case ncclMax:
        return b > a ? b : a;
    case ncclMin:
        return b < a ? b : a;
    default:
        return (T)(a + b);
    }
}

template <typename T>
void reduce_t(void *out, char *const *src, int n, size_t len, ncclRedOp_t op) {
    for (size_t i = 0; i < len; i++) {
        T a = ((const T *)src[0])[i];
        for (int q = 1; q < n; q++)
            a = combine(a, ((const T *)src[q])[i], op);
        if (op == ncclAvg) a = (T)(a / (T)n);
        ((T *)out)[i] = a;
    }
}

/* f16 and bf16 add in f32 and round once (as NCCL's kernels do per step; close enough here). */
template <float (*to)(uint16_t), uint16_t (*from)(float)>
void reduce_half(void *out, char *const *src, int n, size_t len, ncclRedOp_t op) {
    for (size_t i = 0; i < len; i++) {
        float a = to(((const uint16_t *)src[0])[i]);
        for (int q = 1; q < n; q++)
            a = combine(a, to(((const uint16_t *)src[q])[i]), op);
        if (op == ncclAvg) a /= (float)n;
        ((uint16_t *)out)[i] = from(a);
    }
}

void reduce(ncclDataType_t t, void *out, char *const *src, int n, size_t len, ncclRedOp_t op) {
    switch (t) {
    case ncclInt8:
        return reduce_t<int8_t>(out, src, n, len, op);
    case ncclUint8:
        return reduce_t<uint8_t>(out, src, n, len, op);
    case ncclInt32:
        return reduce_t<int32_t>(out, src, n, len, op);
    case ncclUint32:
        return reduce_t<uint32_t>(out, src, n, len, op);
    case ncclInt64:
        return reduce_t<int64_t>(out, src, n, len, op);
    case ncclUint64:
        return reduce_t<uint64_t>(out, src, n, len, op);
    case ncclFloat16:
        return reduce_half<dt_f16_to_f32, dt_f32_to_f16>(out, src, n, len, op);
    case ncclBfloat16:
        return reduce_half<dt_bf16_to_f32, dt_f32_to_bf16>(out, src, n, len, op);
    case ncclFloat32:
        return reduce_t<float>(out, src, n, len, op);
    default:
        return reduce_t<double>(out, src, n, len, op);
    }
}

const char *kind_name(shm_op::op_kind k) {
    static const char *const names[] = {"ncclAllReduce", "ncclBroadcast",     "ncclReduce",
                                        "ncclAllGather", "ncclReduceScatter", "ncclSend",
                                        "ncclRecv"};
    return names[k];
}

/* ---- collectives ------------------------------------------------------------------------- */

uint64_t describe(const shm_op &o) {
    uint64_t root = o.kind == shm_op::BROADCAST || o.kind == shm_op::REDUCE ? (uint64_t)o.peer : 0;
    return (uint64_t)o.kind | (uint64_t)o.type << 4 | (uint64_t)o.op << 8 | root << 12 |
           (uint64_t)o.count << 24;
}

/* Every rank's slots: waits until all posted round r (or done reading round r, done = 1).
 * When the wait must end (an abort, a dead peer), the slots get one more look first: the
 * others may have posted while this rank slept, then finished the round and aborted (a rank
 * that read a mismatch in a debug fingerprint gather does), and NCCL would not fail a
 * collective whose data had all arrived. */
bool wait_all(shm_comm *s, waiter &w, uint64_t r, int done, char *err, size_t cap) {
    auto all_there = [&] {
        for (int q = 0; q < s->n; q++)
            if ((done ? load(&s->rs(q)->done) : load(&s->rs(q)->posted)) < r) return false;
        return true;
    };
    while (!all_there())
        if (!w.pause(nullptr, err, cap)) return all_there();
    return true;
}

ncclResult_t collective(shm_comm *s, const shm_op &o, char *err, size_t cap) {
    int n = s->n, me = s->rank;
    size_t es = shm_type_size(o.type);
    size_t per = o.kind == shm_op::REDUCE_SCATTER ? SLOT / (es * (size_t)n) : SLOT / es;
    uint64_t desc = describe(o);
    const char *snd = (const char *)o.send;
    char *rcv = (char *)o.recv;
    waiter w(s, kind_name(o.kind));
    for (size_t off = 0; off < o.count; off += per) {
        size_t len = o.count - off < per ? o.count - off : per, b = len * es;
        uint64_t r = ++s->round;
        char *mine = s->slot(me);
        /* the peers have read the previous round out of this rank's slot */
        if (!wait_all(s, w, r - 1, 1, err, cap)) return ncclRemoteError;
        switch (o.kind) {
        case shm_op::REDUCE_SCATTER:
            for (int d = 0; d < n; d++)
                memcpy(mine + (size_t)d * b, snd + ((size_t)d * o.count + off) * es, b);
            break;
        case shm_op::BROADCAST:
            if (me == o.peer) memcpy(mine, snd + off * es, b);
            break;
        default:
            memcpy(mine, snd + off * es, b);
        }
        store(&s->rs(me)->desc, desc);
        store(&s->rs(me)->posted, r);
        if (!wait_all(s, w, r, 0, err, cap)) return ncclRemoteError;
        w.progressed();
        for (int q = 0; q < n; q++)
            if (load(&s->rs(q)->desc) != desc) {
                snprintf(err, cap,
                         "ncclsim: ranks disagree on a collective: rank %d calls %s of %zu "
                         "elements (type %d, op %d, root %d) where rank %d calls another "
                         "(descriptor %llx, not %llx)",
                         me, kind_name(o.kind), o.count, (int)o.type, (int)o.op, o.peer, q,
                         (unsigned long long)load(&s->rs(q)->desc), (unsigned long long)desc);
                fprintf(stderr, "%s\n", err);
                return ncclInvalidUsage;
            }
        std::vector<char *> src((size_t)n);
        for (int q = 0; q < n; q++)
            src[(size_t)q] = s->slot(q) + (o.kind == shm_op::REDUCE_SCATTER ? (size_t)me * b : 0);
        switch (o.kind) {
        case shm_op::ALL_REDUCE:
            reduce(o.type, rcv + off * es, src.data(), n, len, o.op);
            break;
        case shm_op::REDUCE:
            if (me == o.peer) reduce(o.type, rcv + off * es, src.data(), n, len, o.op);
            break;
        case shm_op::REDUCE_SCATTER:
            reduce(o.type, rcv + off * es, src.data(), n, len, o.op);
            break;
        case shm_op::BROADCAST:
            memmove(rcv + off * es, s->slot(o.peer), b);
            break;
        default: /* all_gather */
            for (int q = 0; q < n; q++)
                memmove(rcv + ((size_t)q * o.count + off) * es, s->slot(q), b);
        }
        store(&s->rs(me)->done, r);
    }
    return ncclSuccess;
}

/* ---- sends and receives ------------------------------------------------------------------ */

/* A message on a ring: its length (8 bytes), then its bytes. */
struct p2p {
    const shm_op *o;
    size_t bytes, at; /* message bytes; stream bytes moved so far (length word included) */
    uint64_t len_word;
    bool finished() const { return at == 8 + bytes; }
};

/* Moves what fits of one message: the sender's head or the receiver's tail moves. */
size_t move(shm_comm *s, p2p &m, bool sending) {
    int me = s->rank, peer = m.o->peer;
    ring_ctl *c = sending ? s->ctl(me, peer) : s->ctl(peer, me);
    char *ring = sending ? s->ring(me, peer) : s->ring(peer, me);
    uint64_t head = sending ? c->head : load(&c->head), tail = sending ? load(&c->tail) : c->tail;
    size_t room = sending ? RING - (size_t)(head - tail) : (size_t)(head - tail), moved = 0;
    uint64_t pos = sending ? head : tail;
    while (room && !m.finished()) {
        size_t k = (size_t)(pos % RING), run = RING - k;
        if (run > room) run = room;
        char *user = m.at < 8 ? (char *)&m.len_word + m.at
                              : (sending ? (char *)m.o->send : (char *)m.o->recv) + (m.at - 8);
        size_t left = m.at < 8 ? 8 - m.at : 8 + m.bytes - m.at;
        if (run > left) run = left;
        if (sending)
            memcpy(ring + k, user, run);
        else
            memcpy(user, ring + k, run);
        m.at += run, pos += run, room -= run, moved += run;
    }
    if (moved) store(sending ? &c->head : &c->tail, pos);
    return moved;
}

ncclResult_t point_to_point(shm_comm *s, const std::vector<const shm_op *> &ops, char *err,
                            size_t cap) {
    std::vector<p2p> ms;
    for (const shm_op *o : ops) {
        size_t b = o->count * shm_type_size(o->type);
        ms.push_back({o, b, 0, o->kind == shm_op::SEND ? (uint64_t)b : 0});
    }
    waiter w(s, "ncclSend/ncclRecv");
    bool last_look = false;
    for (;;) {
        size_t moved = 0, open = 0;
        std::vector<int> busy_send((size_t)s->n), busy_recv((size_t)s->n), peers;
        for (p2p &m : ms) {
            if (m.finished()) continue;
            open++;
            bool sending = m.o->kind == shm_op::SEND;
            std::vector<int> &busy = sending ? busy_send : busy_recv;
            peers.push_back(m.o->peer);
            if (busy[(size_t)m.o->peer]++) continue; /* an earlier message to it goes first */
            bool had_len = m.at >= 8;
            moved += move(s, m, sending);
            if (!sending && !had_len && m.at >= 8 && m.len_word != m.bytes) {
                snprintf(err, cap,
                         "ncclsim: ncclRecv of %zu bytes on rank %d from rank %d, which sent "
                         "%llu bytes (NCCL needs equal counts)",
                         m.bytes, s->rank, m.o->peer, (unsigned long long)m.len_word);
                fprintf(stderr, "%s\n", err);
                return ncclInvalidUsage;
            }
        }
        if (!open) return ncclSuccess;
        if (moved)
            w.progressed(), last_look = false;
        else if (last_look)
            return ncclRemoteError;
        else if (!w.pause(&peers, err, cap))
            last_look = true; /* one more pass first, as wait_all does */
    }
}

} // namespace

size_t shm_type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    default:
        return 8;
    }
}

shm_comm *shm_join(const ncclUniqueId &id, int n, int rank, char *err, size_t cap) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        h = (h ^ (unsigned char)id.internal[i]) * 0x100000001b3ull;
    shm_comm *s = new shm_comm();
    s->n = n;
    s->rank = rank;
    snprintf(s->name, sizeof s->name, "/ncclsim-%016llx", (unsigned long long)h);
    s->bytes = layout(s);
    int fd = shm_open(s->name, O_RDWR | O_CREAT, 0600);
    struct stat st;
    const char *why = fd < 0 ? "shm_open" : fstat(fd, &st) ? "fstat" : nullptr;
    /* Every rank grows it to the same size (which keeps what another rank wrote). */
    if (!why && (size_t)st.st_size > s->bytes) why = "a larger segment (ranks disagree on n)";
    if (!why && (size_t)st.st_size < s->bytes && ftruncate(fd, (off_t)s->bytes)) why = "ftruncate";
    void *p = why ? MAP_FAILED : mmap(nullptr, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!why && p == MAP_FAILED) why = "mmap";
    int e = errno;
    if (fd >= 0) close(fd);
    if (why) {
        snprintf(err, cap, "ncclsim: communicator segment %s of %zu bytes: %s: %s", s->name,
                 s->bytes, why, strerror(e));
        if (fd >= 0) shm_unlink(s->name);
        delete s;
        return nullptr;
    }
    s->base = (char *)p;
    s->h = (header *)s->base;
    s->ranks += (size_t)s->base, s->ctls += (size_t)s->base;
    s->slots += (size_t)s->base, s->rings += (size_t)s->base;
    rank_state *mine = s->rs(rank);
    if (__atomic_exchange_n(&mine->joined, 1, __ATOMIC_ACQ_REL)) {
        snprintf(err, cap, "ncclsim: rank %d of communicator %s joined twice", rank, s->name);
        munmap(s->base, s->bytes);
        delete s;
        return nullptr;
    }
    store(&mine->nranks, (int32_t)n);
    store(&mine->pid, (int32_t)getpid());
    s->joined_at = now_ns();
    /* The last to join removes the name: nothing is left in /dev/shm once all have left. */
    if (__atomic_add_fetch(&s->h->joined, 1, __ATOMIC_ACQ_REL) == n) shm_unlink(s->name);
    return s;
}

int shm_connected(shm_comm *s, char *err, size_t cap) {
    bool going = true;
    if (load(&s->h->joined) < s->n) {
        waiter w(s, "ncclCommInitRank");
        w.since = s->joined_at;
        w.spins = 1000; /* a short sleep, then the checks */
        std::vector<int> joined;
        for (int q = 0; q < s->n; q++)
            if (load(&s->rs(q)->pid)) joined.push_back(q);
        going = w.pause(&joined, err, cap);
    }
    /* all joined (perhaps during the pause): connected, whatever happened since */
    if (load(&s->h->joined) < s->n) return going ? 0 : -1;
    for (int q = 0; q < s->n; q++)
        if (load(&s->rs(q)->nranks) != s->n) {
            snprintf(err, cap,
                     "ncclsim: rank %d made the communicator with %d ranks, rank %d with %d",
                     s->rank, s->n, q, load(&s->rs(q)->nranks));
            return -1;
        }
    return 1;
}

ncclResult_t shm_run(shm_comm *s, const std::vector<shm_op> &ops, char *err, size_t cap) {
    std::vector<const shm_op *> p2ps;
    for (const shm_op &o : ops) {
        if (o.kind == shm_op::SEND || o.kind == shm_op::RECV) {
            p2ps.push_back(&o);
            continue;
        }
        ncclResult_t r = collective(s, o, err, cap);
        if (r != ncclSuccess) return r;
    }
    return p2ps.empty() ? ncclSuccess : point_to_point(s, p2ps, err, cap);
}

void shm_abort(shm_comm *s) {
    int32_t none = 0;
    __atomic_compare_exchange_n(&s->h->aborted, &none, s->rank + 1, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    shm_unlink(s->name);
}

void shm_leave(shm_comm *s) {
    if (load(&s->h->joined) < s->n) shm_unlink(s->name);
    munmap(s->base, s->bytes);
    delete s;
}
