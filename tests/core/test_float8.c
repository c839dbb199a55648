/* float8 (e4m3, e5m2) element conversions: all 256 codes against a decoder written here from
 * the bit layout, and f32 -> f8 against the nearest of the decoded values (ties to the even
 * code, finite overflow saturating) over boundaries, midpoints, subnormals, specials and a
 * large random sample. Through the public dt_convert_* and through dt_cast of a sharded tensor. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "float8_ref.h"
#include "helpers.h"

typedef struct fmt {
    dt_dtype dtype;
    int man, e5m2;
} fmt;

static const fmt E4M3 = {DT_F8E4M3, 3, 0};
static const fmt E5M2 = {DT_F8E5M2, 2, 1};

static double naive_decode(const fmt *f, unsigned code) { return t_f8_decode(f->e5m2, code); }
static unsigned naive_encode(const fmt *f, double x) { return t_f8_encode(f->e5m2, x); }

static void check_decode(const fmt *f) {
    for (unsigned c = 0; c < 256; c++) {
        uint8_t b = (uint8_t)c;
        double got;
        cr_assert_eq(dt_convert_to_f64(f->dtype, &b, &got, 1), DT_OK);
        double want = naive_decode(f, c);
        if (isnan(want))
            cr_assert(isnan(got), "%s code 0x%02x: got %g, want NaN", dt_dtype_name(f->dtype), c,
                      got);
        else
            cr_assert(got == want && signbit(got) == signbit(want),
                      "%s code 0x%02x: got %.9g, want %.9g", dt_dtype_name(f->dtype), c, got, want);
    }
}

Test(float8, decode_all_codes_e4m3) { check_decode(&E4M3); }
Test(float8, decode_all_codes_e5m2) { check_decode(&E5M2); }

static void check_one(const fmt *f, float x) {
    double in = x;
    uint8_t got;
    cr_assert_eq(dt_convert_from_f64(f->dtype, &in, &got, 1), DT_OK);
    unsigned want = naive_encode(f, x);
    cr_assert_eq(got, want, "%s of %a (%.9g): got 0x%02x, want 0x%02x", dt_dtype_name(f->dtype),
                 (double)x, (double)x, got, want);
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Every representable value, the midpoints between neighbours and one f32 ulp either side of
 * each (the ties and near-ties), the range's edges, specials, and 2^20 random f32 patterns
 * plus 2^20 random values spread over the format's exponents. */
static void check_encode(const fmt *f, unsigned seed) {
    double vals[128];
    int nv = 0;
    for (unsigned c = 0; c < 0x80u; c++) {
        double v = naive_decode(f, c);
        if (isfinite(v)) vals[nv++] = v;
    }
    for (int i = 0; i < nv; i++) {
        for (int s = 0; s < 2; s++) {
            float v = (float)(s ? -vals[i] : vals[i]);
            check_one(f, v);
            check_one(f, nextafterf(v, INFINITY));
            check_one(f, nextafterf(v, -INFINITY));
            double mid = i + 1 < nv ? (vals[i] + vals[i + 1]) / 2 : vals[i] + (vals[i] - vals[i - 1]) / 2;
            float m = (float)(s ? -mid : mid); /* exact: a few bits past the format's */
            check_one(f, m);
            check_one(f, nextafterf(m, INFINITY));
            check_one(f, nextafterf(m, -INFINITY));
        }
    }
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e30f, -1e30f,
                                     FLT_MAX, -FLT_MAX, 1e-30f, -1e-30f, 1e-45f, 1.17549435e-38f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) check_one(f, specials[i]);
    printf("float8 %s encode seed %u\n", dt_dtype_name(f->dtype), seed);
    srand(seed);
    for (int i = 0; i < (1 << 20); i++) {
        uint32_t u = (uint32_t)rand() << 16 ^ (uint32_t)rand();
        check_one(f, from_bits(u));
        double r = (double)rand() / RAND_MAX;
        int bias = f->e5m2 ? 15 : 7;
        int e = rand() % (2 * bias + 8) - bias - f->man - 3; /* subnormals .. overflow */
        check_one(f, (float)ldexp(rand() % 2 ? r : -r, e));
    }
}

Test(float8, encode_against_nearest_e4m3) { check_encode(&E4M3, 1234); }
Test(float8, encode_against_nearest_e5m2) { check_encode(&E5M2, 5678); }

/* A sharded f32 tensor cast to float8 and back keeps placements; every element equals the
 * reference decode(encode(x)). */
static dt_status cast_body(dt_ctx *ctx, void *arg) {
    const fmt *f = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create_str(ctx, "2x2", &mesh));
    int64_t shape[2] = {7, 9};
    float full[63], back[63];
    for (int i = 0; i < 63; i++) full[i] = (float)ldexp((i % 2 ? -1.0 : 1.0) * (i + 0.37), i % 23 - 12);
    full[5] = INFINITY, full[6] = NAN, full[7] = 1e9f, full[8] = -1e-12f;
    dt_placement pl[2] = {dt_shard(0), dt_shard(1)};
    dt_tensor *x, *y, *z;
    R_OK(dt_tensor_distribute(mesh, full, DT_F32, 2, shape, 2, pl, DT_ALL_RANKS, &x));
    R_OK(dt_cast(x, f->dtype, &y));
    R_OK(dt_cast(y, DT_F32, &z));
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(y, &info));
    R_CHECK(info.dtype == f->dtype && dt_placement_equal(info.placements[1], dt_shard(1)),
            "the cast changed dtype or placements");
    R_OK(dt_tensor_full_tensor(z, back, sizeof back));
    for (int i = 0; i < 63; i++) {
        double want = naive_decode(f, naive_encode(f, full[i]));
        R_CHECK(isnan(want) ? isnan(back[i]) : back[i] == want, "element %d: %g -> %g, want %g",
                i, (double)full[i], (double)back[i], want);
    }
    dt_tensor_release(x), dt_tensor_release(y), dt_tensor_release(z);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(float8, sharded_cast_e4m3) { t_run(4, cast_body, (void *)&E4M3); }
Test(float8, sharded_cast_e5m2) { t_run(4, cast_body, (void *)&E5M2); }

Test(float8, names_parse) {
    dt_dtype d;
    cr_assert_eq(dt_dtype_parse("f8e4m3", &d), DT_OK);
    cr_assert_eq(d, DT_F8E4M3);
    cr_assert_eq(dt_dtype_size(DT_F8E5M2), 1);
    cr_assert_str_eq(dt_dtype_name(DT_F8E5M2), "f8e5m2");
}
