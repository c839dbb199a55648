/* A forward scope: writing model code without a check and a release after every op. Each
 * call made through a scope hands its output to the scope, which releases them all at
 * dt_scope_end; the first failure is kept (status and message) and every later call through
 * the scope is skipped, so a forward reads as a list of ops and is checked once:
 *
 *     dt_scope *s;
 *     DT_CHECK(dt_scope_create(&s));
 *     dt_tensor *h = DT_DO(s, dt_rms_norm, x, w, 1e-5);
 *     dt_tensor *y = DT_DO(s, dt_add, x, DT_DO(s, dt_linear, h, wo, NULL));
 *     return dt_scope_end(s, y, out); // y retained for the caller, the rest released
 *
 * A scope belongs to one thread (one rank); nothing here is collective, but the calls made
 * through it are whatever they are (an op is collective over its mesh). */
#ifndef DTENSOR_SCOPE_H
#define DTENSOR_SCOPE_H

#include "dtensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_scope dt_scope;

/* A new, empty scope; the caller ends it with dt_scope_end (which frees it). */
DT_API dt_status dt_scope_create(dt_scope **out);

/* 1 while no call through the scope has failed; 0 after (and for NULL). */
DT_API int dt_scope_ok(const dt_scope *scope);
/* The first failure's status (DT_OK while none). */
DT_API dt_status dt_scope_status(const dt_scope *scope);

/* Where the next call writes its output; DT_DO passes it as the call's last argument. */
DT_API dt_tensor **dt_scope_slot(dt_scope *scope);
/* Takes the result of the call that wrote the slot: on DT_OK the scope owns the new tensor
 * and returns it (borrowed, valid until dt_scope_end); on failure the first one is recorded
 * (status and dt_last_error()) and NULL returned. Once the scope has failed it returns NULL
 * and records nothing (the call was skipped, or failed on the NULL a failed call gave it). */
DT_API dt_tensor *dt_scope_keep(dt_scope *scope, dt_status status);
/* Hands a tensor the caller owns to the scope (released at dt_scope_end) and returns it;
 * NULL and nothing taken once the scope has failed (the caller keeps t then). */
DT_API dt_tensor *dt_scope_adopt(dt_scope *scope, dt_tensor *t);
/* Records a failure made outside a call (a layer's own argument check, say) as DT_DO
 * would, with the message of dt_last_error(); returns NULL for use in an expression. */
DT_API dt_tensor *dt_scope_fail(dt_scope *scope, dt_status status);

/* Releases every tensor the scope holds and frees it. keep (nullable; one of its tensors or
 * any other) is retained into *out when the scope has not failed. Returns the first failure,
 * with its message restored as dt_last_error(), else DT_OK. out may be NULL when keep is. */
DT_API dt_status dt_scope_end(dt_scope *scope, dt_tensor *keep, dt_tensor **out);

/* Calls fn(args..., slot) unless the scope has failed, and keeps its output in the scope:
 * the value is the new tensor (borrowed), or NULL once anything failed. fn is any call whose
 * last argument is a dt_tensor ** output (every op of dtensor/ops.h). */
#define DT_DO(s, fn, ...)                                                                          \
    dt_scope_keep((s), dt_scope_ok(s) ? fn(__VA_ARGS__, dt_scope_slot(s)) : DT_OK)

#ifdef __cplusplus
}
#endif
#endif
