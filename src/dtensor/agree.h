/* Argument agreement across ranks: a call's arguments written as a short list of labelled
 * values (op name, each input's shape, dtype, placements and mesh, a target...), exchanged
 * among the ranks the call spans, and compared with the first rank's, so that arguments that
 * depend on the rank fail every rank with one message naming the first difference instead of
 * leaving some ranks with DT_OK and the others hanging. The one place that describes,
 * exchanges and compares: ops, redistribute and checkpoint only say what their call holds.
 * Knows meshes and specs, not ops or plans. */
#ifndef DT_DTENSOR_AGREE_H
#define DT_DTENSOR_AGREE_H

#include <stdint.h>

#include "comm/comm_impl.h"
#include "dtensor/tensor_impl.h"

/* A description: items "label\037value\036", NUL-padded to whole words (they travel as I64). */
#define DT_AGREE_WORDS 256 /* 2 KiB of text */
typedef struct dt_agree {
    const char *fn; /* the public call, for messages ("dt_tensor_redistribute") */
    int len;        /* bytes of text used */
    int full;       /* an item did not fit (the text holds the items before it) */
    union {
        char text[DT_AGREE_WORDS * 8];
        uint64_t words[DT_AGREE_WORDS];
    } u;
} dt_agree;

/* DT_DEBUG_ARGS: checked before each op, redistribute and checkpoint call when on. The state
 * lives in the context's dtensor slot (dt_dtensor_state); 0 there means not read yet. */
enum { DT_AGREE_UNREAD = 0, DT_AGREE_OFF = 1, DT_AGREE_ON = 2 };
#define DT_AGREE_DEBUG_ENV "DT_DEBUG_ARGS"

/* 1 unless the debug mode is known to be off: the one branch a call pays when it is off. */
static inline int dt_agree_debug(const dt_ctx *ctx) {
    const dt_dtensor_state *s = dt_ctx_slot_peek(ctx, DT_CTX_SLOT_DTENSOR);
    return s->debug_args != DT_AGREE_OFF;
}

void dt_agree_init(dt_agree *a, const char *fn);
/* Appends one item; value printf-style. */
void dt_agree_add(dt_agree *a, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "<what> mesh": "dp=2,tp=2 on ranks [0-3]". */
void dt_agree_mesh(dt_agree *a, const char *what, const dt_mesh *m);
/* "<what> placements": "[S(0),R]". */
void dt_agree_placements(dt_agree *a, const char *what, const dt_placement *p, int n);
/* "<what> shape", "<what> dtype", "<what> placements", "<what> mesh". */
void dt_agree_tensor(dt_agree *a, const char *what, const dt_tensor *t);
/* "<label>": "[w0, w1, ...]" (a key whose fields are listed elsewhere). */
void dt_agree_words(dt_agree *a, const char *label, const uint64_t *w, int n);

/* Collective over the members of comm: DT_OK when every member described the same arguments,
 * else DT_ERR_ARG on every member with one message, "<fn>: ranks passed different arguments
 * (<why>): <label>: rank A passed X, rank B passed Y" (world ranks; A is the group's first;
 * B the first that differs, at its first differing item). why nullable. One all_gather of a
 * word when they agree; the texts are gathered only when they do not. */
dt_status dt_agree_comm(dt_comm *comm, const dt_agree *a, const char *why);

/* The same over mesh's ranks; DT_OK at once on a rank outside the mesh. */
dt_status dt_agree_on_mesh(dt_mesh *mesh, const dt_agree *a, const char *why);

/* The same over mesh's ranks and, besides them, the world ranks others (sorted, none in mesh)
 * that this rank's call also spans (a cross-mesh move's target ranks). Every rank that takes
 * part calls it: a rank outside mesh with the others its own call names (it among them).
 * The mesh's ranks compare among themselves and learn each other's others; its first rank then
 * receives each of those ranks' description, compares it, and sends every rank the verdict
 * (a broadcast on the mesh, a message to each other rank), so all learn the same outcome. A
 * rank outside mesh that none of mesh's ranks names waits on its send to the first rank. */
dt_status dt_agree_across(dt_mesh *mesh, const int *others, int nothers, const dt_agree *a,
                          const char *why);

/* DT_DEBUG_ARGS on ctx: *on = 1 or 0 (reads the environment the first time; DT_ERR_ARG for a
 * value that is not 0 or 1). */
dt_status dt_agree_debug_on(dt_ctx *ctx, int *on);

/* The checkpoint check (DT_DEBUG_ARGS only; DT_OK at once when off). world (nullable: a
 * save, collective over the world of that context): the world's ranks agree on dir first.
 * Then, for each tensor in order, the ranks of its mesh agree on dir, its name, shape, dtype,
 * placements and mesh; tensor k is the k-th of the call's tensors on that mesh (ranks of a
 * pipeline stage pass other tensors than the rest). Arguments the checkpoint rejects anyway
 * (NULL, n < 0, a released tensor) are left to it. */
dt_status dt_agree_checkpoint(const char *fn, dt_ctx *world, const char *dir,
                              const char *const *names, dt_tensor *const *tensors, int n);

#endif
