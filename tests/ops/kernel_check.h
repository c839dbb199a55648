/* Plumbing shared by the kernel tests: test data, outputs poisoned to catch unwritten
 * slots, tolerance-checked comparisons and broadcasting index helpers. */
#ifndef DT_TEST_KERNEL_CHECK_H
#define DT_TEST_KERNEL_CHECK_H

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "helpers.h"
#include "ops/kernels.h"

#define SEED 0x5eed2024u

/* ---- test plumbing ------------------------------------------------------------------------ */

/* Every buffer a test allocates, freed after the test (so the sanitizer sees no leaks). The
 * list is locked: multi-rank tests call talloc from every rank's thread. */
static void **allocs;
static size_t nallocs, cap;
static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void *talloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert(p);
    pthread_mutex_lock(&allocs_lock);
    if (nallocs == cap) {
        cap = cap ? 2 * cap : 256;
        allocs = realloc(allocs, cap * sizeof *allocs);
    }
    if (allocs) allocs[nallocs++] = p;
    pthread_mutex_unlock(&allocs_lock);
    cr_assert(allocs);
    return p;
}

static inline void free_all(void) {
    while (nallocs > 0) free(allocs[--nallocs]);
    free(allocs);
    allocs = NULL;
    cap = 0;
}

TestSuite(kernels, .fini = free_all);

static uint64_t rng = SEED;
static inline double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static const dt_dtype FLOATS[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
static const dt_dtype ALL[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_I64};
#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static inline int is_int(dt_dtype dt) { return dt == DT_I32 || dt == DT_I64; }

typedef struct shp {
    int nd;
    int64_t s[DT_MAX_NDIM];
} shp;
#define SH(...) ((shp){sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), {__VA_ARGS__}})
#define SH0 ((shp){0, {0}})

static inline size_t numel(shp s) {
    size_t n = 1;
    for (int d = 0; d < s.nd; d++) n *= (size_t)s.s[d];
    return n;
}

/* A tensor and its values as stored, in double. */
typedef struct tens {
    dt_local t;
    double *v;
    size_t n;
} tens;

static inline tens mk_shape(dt_dtype dt, shp s) {
    tens r = {.t = {.dtype = dt, .ndim = s.nd}, .n = numel(s)};
    memcpy(r.t.shape, s.s, sizeof r.t.shape);
    r.t.data = talloc(r.n * dt_dtype_size(dt));
    r.v = talloc(r.n * sizeof(double));
    return r;
}

/* Stores v[] into t and reads back what the kernel will see. */
static inline void store(tens *r) {
    dt_convert_from_f64(r->t.dtype, r->v, r->t.data, r->n);
    dt_convert_to_f64(r->t.dtype, r->t.data, r->v, r->n);
}

/* Uniform in [lo, hi); integer dtypes (every dtype when ints) take the floor. */
static inline tens mk_any(dt_dtype dt, shp s, double lo, double hi, int ints) {
    tens r = mk_shape(dt, s);
    for (size_t i = 0; i < r.n; i++) {
        double x = lo + (hi - lo) * urand();
        r.v[i] = ints || is_int(dt) ? floor(x) : x;
    }
    store(&r);
    return r;
}
static inline tens mk(dt_dtype dt, shp s, double lo, double hi) { return mk_any(dt, s, lo, hi, 0); }

/* An output poisoned with 0x7f bytes (a huge value in every dtype) to catch unwritten slots. */
static inline tens mk_out(dt_dtype dt, shp s) {
    tens r = mk_shape(dt, s);
    memset(r.t.data, 0x7f, r.n * dt_dtype_size(dt));
    return r;
}

static inline double tol_of(dt_dtype dt) {
    switch (dt) {
    case DT_F32: return 1e-5;
    case DT_F64: return 1e-12;
    case DT_BF16:
    case DT_F16: return 1e-2;
    default: return 0.0;
    }
}

static inline void expect(const char *what, const dt_local *got, const double *want, size_t n) {
    double tol = tol_of(got->dtype);
    for (size_t i = 0; i < n; i++) {
        double g = t_get(got->dtype, got->data, i), w = want[i];
        int ok = (isnan(w) && isnan(g)) || g == w || fabs(g - w) <= tol * fmax(1.0, fabs(w));
        cr_assert(ok, "%s [%s] element %zu: got %.10g, want %.10g (tol %g, seed %#x)", what,
                  dt_dtype_name(got->dtype), i, g, w, tol, SEED);
    }
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        dt_status st_ = (call);                                                                    \
        cr_assert_eq(st_, DT_OK, "%s: %s: %s", #call, dt_status_str(st_), dt_last_error());        \
    } while (0)

static inline void unravel(size_t i, shp s, int64_t *idx) {
    for (int d = s.nd - 1; d >= 0; d--) {
        idx[d] = s.s[d] ? (int64_t)(i % (size_t)s.s[d]) : 0;
        i = s.s[d] ? i / (size_t)s.s[d] : 0;
    }
}

/* Flat index into a tensor of shape s broadcast against out index oidx of ond dims. */
static inline size_t bidx(shp s, int ond, const int64_t *oidx) {
    size_t off = 0;
    for (int d = 0; d < s.nd; d++) {
        int64_t i = s.s[d] == 1 ? 0 : oidx[d + ond - s.nd];
        off = off * (size_t)s.s[d] + (size_t)i;
    }
    return off;
}

static inline shp bshape(shp a, shp b) {
    shp o = {a.nd > b.nd ? a.nd : b.nd, {0}};
    for (int d = 0; d < o.nd; d++) {
        int da = d - (o.nd - a.nd), db = d - (o.nd - b.nd);
        int64_t x = da < 0 ? 1 : a.s[da], y = db < 0 ? 1 : b.s[db];
        o.s[d] = x == 1 ? y : x;
    }
    return o;
}

/* ---- pointwise ---------------------------------------------------------------------------- */

#endif
