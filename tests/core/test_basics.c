/* Status strings, dtypes and conversions, placements: everything that needs no ranks. */
#include <math.h>

#include "helpers.h"

Test(status, names_and_last_error) {
    cr_assert_str_eq(dt_status_str(DT_OK), "DT_OK");
    cr_assert_str_eq(dt_status_str(DT_ERR_SHAPE), "DT_ERR_SHAPE");
    cr_assert_str_eq(dt_status_str((dt_status)-999), "DT_ERR_UNKNOWN");
    for (int s = 0; s >= DT_ERR_SYSTEM; s--)
        cr_assert(strncmp(dt_status_str((dt_status)s), "DT_", 3) == 0);
    cr_assert_str_eq(dt_last_error(), "");
    T_ERR(dt_dtype_parse("f128", &(dt_dtype){0}), DT_ERR_PARSE, "f128");
    cr_assert_eq(dt_error_set(DT_ERR_COMM, "custom %d", 7), DT_ERR_COMM);
    cr_assert_str_eq(dt_last_error(), "custom 7");
}

Test(dtype, sizes_names_parse) {
    const char *names[] = {"f32", "f64", "bf16", "f16", "i32", "i64", "f8e4m3", "f8e5m2"};
    const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1, 1};
    _Static_assert(sizeof sizes / sizeof sizes[0] == DT_DTYPE_COUNT, "a dtype is missing");
    for (int i = 0; i < DT_DTYPE_COUNT; i++) {
        dt_dtype d;
        cr_assert_eq(dt_dtype_parse(names[i], &d), DT_OK);
        cr_assert_eq(d, (dt_dtype)i);
        cr_assert_str_eq(dt_dtype_name(d), names[i]);
        cr_assert_eq(dt_dtype_size(d), sizes[i]);
    }
    cr_assert_eq(dt_dtype_size((dt_dtype)42), 0);
    cr_assert_str_eq(dt_dtype_name((dt_dtype)42), "?");
    T_ERR(dt_dtype_parse(NULL, &(dt_dtype){0}), DT_ERR_ARG, "name");
}

/* bf16 keeps the top 16 bits of an f32: compare with a reference built bit by bit. */
static double bf16_reference(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lower = u & 0xffff, upper = u & 0xffff0000u;
    if (lower > 0x8000 || (lower == 0x8000 && (upper & 0x10000))) upper += 0x10000;
    memcpy(&f, &upper, 4);
    return f;
}

Test(dtype, half_conversions_round_to_nearest_even) {
    double cases[] = {0.0, -0.0, 1.0, -2.5, 65504.0, 1e-3, 3.14159265, 1.0 + 1.0 / 256,
                      1.0 + 3.0 / 512, 6.1e-5, 5.96e-8, 1e-9, 70000.0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h;
        double back;
        dt_convert_from_f64(DT_BF16, &cases[i], &h, 1);
        dt_convert_to_f64(DT_BF16, &h, &back, 1);
        cr_assert_eq(back, bf16_reference(cases[i]), "bf16(%g) = %g", cases[i], back);
        dt_convert_from_f64(DT_F16, &cases[i], &h, 1);
        dt_convert_to_f64(DT_F16, &h, &back, 1);
        /* f16: 11 significant bits, subnormals below 2^-14, overflow to inf above 65519. */
        double a = fabs(cases[i]);
        if (a > 65519.0) {
            cr_assert(isinf(back));
        } else if (a >= ldexp(1, -14)) {
            int e;
            frexp(a, &e);
            cr_assert_leq(fabs(back - cases[i]), ldexp(1, e - 12), "f16(%g) = %g", cases[i], back);
        } else {
            cr_assert_leq(fabs(back - cases[i]), ldexp(1, -25), "f16(%g) = %g", cases[i], back);
        }
    }
    /* Every f16 bit pattern that is a number survives f16 -> f32 -> f16. */
    for (uint32_t b = 0; b < 0x10000; b++) {
        uint16_t h = (uint16_t)b, h2;
        double v;
        dt_convert_to_f64(DT_F16, &h, &v, 1);
        if (isnan(v)) continue;
        dt_convert_from_f64(DT_F16, &v, &h2, 1);
        cr_assert_eq(h2, h, "f16 pattern 0x%04x -> %g -> 0x%04x", h, v, h2);
    }
}

Test(placement, parse_and_format_round_trip) {
    const char *texts[] = {"S(0),R,P(sum)", "R", "P(avg)", "S(-1),P(max),P(min),S(2)"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        dt_placement p[DT_MESH_MAX_NDIM];
        int n;
        char buf[128];
        cr_assert_eq(dt_placements_parse(texts[i], p, DT_MESH_MAX_NDIM, &n), DT_OK, "%s",
                     dt_last_error());
        cr_assert_eq(dt_placements_format(p, n, buf, sizeof buf), DT_OK);
        cr_assert_str_eq(buf, texts[i]);
    }
}

Test(placement, pytorch_spelling) {
    dt_placement p[4];
    int n;
    cr_assert_eq(dt_placements_parse(" [Shard(1), Replicate(), Partial(\"avg\"), P] ", p, 4, &n),
                 DT_OK, "%s", dt_last_error());
    cr_assert_eq(n, 4);
    cr_assert(dt_placement_equal(p[0], dt_shard(1)));
    cr_assert(dt_placement_equal(p[1], dt_replicate()));
    cr_assert(dt_placement_equal(p[2], dt_partial(DT_REDUCE_AVG)));
    cr_assert(dt_placement_equal(p[3], dt_partial(DT_REDUCE_SUM)));
    cr_assert_not(dt_placement_equal(p[0], dt_shard(0)));
    cr_assert_not(dt_placement_equal(p[2], p[3]));
}

Test(placement, malformed_text_is_a_parse_error) {
    const char *bad[] = {"", "S", "S(", "S(x)", "S(1", "Q", "R,", "P(prod)", "P(sum",
                         "S(0) R", "S(99)", "R,R,R,R,R,R,R,R,R", "Shard(0)x", "[R"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_placement p[DT_MESH_MAX_NDIM];
        int n = -7;
        T_ERR(dt_placements_parse(bad[i], p, DT_MESH_MAX_NDIM, &n), DT_ERR_PARSE, "offset");
        cr_assert_eq(n, -7, "n_out written on failure for \"%s\"", bad[i]);
    }
    dt_placement p[2];
    int n;
    T_ERR(dt_placements_parse("R,R,R", p, 2, &n), DT_ERR_SIZE, "cap");
    T_ERR(dt_placements_parse(NULL, p, 2, &n), DT_ERR_ARG, "text");
}

Test(placement, normalize_negative_dims) {
    dt_placement p[3] = {dt_shard(-1), dt_shard(-3), dt_replicate()};
    cr_assert_eq(dt_placements_normalize(p, 3, 3), DT_OK);
    cr_assert_eq(p[0].dim, 2);
    cr_assert_eq(p[1].dim, 0);
    dt_placement q[1] = {dt_shard(-4)};
    T_ERR(dt_placements_normalize(q, 1, 3), DT_ERR_PLACEMENT, "S(-4)");
    dt_placement r[1] = {dt_shard(3)};
    T_ERR(dt_placements_normalize(r, 1, 3), DT_ERR_PLACEMENT, "3-D");
    dt_placement s[1] = {dt_partial(DT_REDUCE_PROD)};
    T_ERR(dt_placements_normalize(s, 1, 3), DT_ERR_PLACEMENT, "P(prod)");
    char small[4];
    dt_placement f[2] = {dt_shard(0), dt_replicate()};
    T_ERR(dt_placements_format(f, 2, small, sizeof small), DT_ERR_SIZE, "S(0),R");
}
