/* The forward scope of dtensor/scope.h: a growing list of tensors to release and the first
 * failure (status and message). */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dtensor/scope.h"

struct dt_scope {
    dt_tensor **held;
    int n, cap;
    dt_tensor *slot;
    dt_status st;
    char msg[512];
};

dt_status dt_scope_create(dt_scope **out) {
    DT_ARG_NOT_NULL(out);
    dt_scope *s = calloc(1, sizeof *s);
    if (!s) return dt_error(DT_ERR_NOMEM, "dt_scope_create: out of memory");
    *out = s;
    return DT_OK;
}

int dt_scope_ok(const dt_scope *scope) {
    return scope && scope->st == DT_OK;
}

dt_status dt_scope_status(const dt_scope *scope) {
    DT_ARG_NOT_NULL(scope);
    return scope->st;
}

dt_tensor **dt_scope_slot(dt_scope *scope) {
    scope->slot = NULL;
    return &scope->slot;
}

dt_tensor *dt_scope_fail(dt_scope *scope, dt_status status) {
    if (!scope || scope->st != DT_OK || status == DT_OK) return NULL;
    scope->st = status;
    snprintf(scope->msg, sizeof scope->msg, "%s", dt_last_error());
    return NULL;
}

dt_tensor *dt_scope_adopt(dt_scope *scope, dt_tensor *t) {
    if (!dt_scope_ok(scope) || !t) return NULL;
    if (scope->n == scope->cap) {
        int cap = scope->cap ? 2 * scope->cap : 32;
        dt_tensor **held = realloc(scope->held, sizeof *held * (size_t)cap);
        if (!held) {
            dt_error(DT_ERR_NOMEM, "dt_scope: out of memory holding %d tensors", scope->n + 1);
            return dt_scope_fail(scope, DT_ERR_NOMEM);
        }
        scope->held = held, scope->cap = cap;
    }
    return scope->held[scope->n++] = t;
}

dt_tensor *dt_scope_keep(dt_scope *scope, dt_status status) {
    if (!scope) return NULL;
    dt_tensor *t = scope->slot;
    scope->slot = NULL;
    if (scope->st != DT_OK) {
        if (status == DT_OK) dt_tensor_release(t); /* made by a call past the first failure */
        return NULL;
    }
    if (status != DT_OK) return dt_scope_fail(scope, status);
    if (!dt_scope_adopt(scope, t)) {
        dt_tensor_release(t);
        return NULL;
    }
    return t;
}

dt_status dt_scope_end(dt_scope *scope, dt_tensor *keep, dt_tensor **out) {
    DT_ARG_NOT_NULL(scope);
    dt_status st = scope->st;
    if (st == DT_OK && keep) {
        if (!out)
            st = dt_error(DT_ERR_ARG, "dt_scope_end: argument out is NULL");
        else if ((st = dt_tensor_retain(keep)) == DT_OK)
            *out = keep;
    }
    for (int i = 0; i < scope->n; i++)
        dt_tensor_release(scope->held[i]);
    free(scope->held);
    if (scope->st != DT_OK) dt_error(st, "%s", scope->msg);
    free(scope);
    return st;
}
