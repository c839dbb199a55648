/* Local CPU kernels of the neural-network families (softmax, norms, indexing, permute,
 * attention, rope, dropout, the fused optimizer step) against naive double-precision references; same conventions as
 * test_kernels.c. */
#include "core/philox.h"
#include "kernel_check.h"
#include "ops/cpu/optim_math.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h"

Test(kernels, softmax_and_log_softmax_stable) {
    struct {
        shp s;
        int dim;
        double shift; /* added to every value: exp would overflow without the max */
    } cases[] = {
        {SH(3, 4, 5), 0, 0}, {SH(3, 4, 5), 1, 0}, {SH(3, 4, 5), 2, 0},   {SH(2, 1), 1, 0},
        {SH(0, 3), 1, 0},    {SH(2, 3), 1, 500},  {SH(1, 300), 1, 0},    {SH(3, 300), 0, -400},
    };
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t c = 0; c < LEN(cases); c++) {
            for (int lg = 0; lg < 2; lg++) {
                shp s = cases[c].s;
                int dim = cases[c].dim;
                tens x = mk(dt, s, cases[c].shift - 4, cases[c].shift + 4), o = mk_out(dt, s);
                double *want = talloc(x.n * sizeof(double) + 1);
                int64_t idx[DT_MAX_NDIM];
                for (size_t i = 0; i < x.n; i++) {
                    unravel(i, s, idx);
                    double mx = -INFINITY, sum = 0, xi = x.v[i];
                    for (int64_t t = 0; t < s.s[dim]; t++) {
                        idx[dim] = t;
                        mx = fmax(mx, x.v[bidx(s, s.nd, idx)]);
                    }
                    for (int64_t t = 0; t < s.s[dim]; t++) {
                        idx[dim] = t;
                        sum += exp(x.v[bidx(s, s.nd, idx)] - mx);
                    }
                    want[i] = lg ? xi - mx - log(sum) : exp(xi - mx) / sum;
                }
                OK(dt_cpu_softmax(lg, dim, &x.t, &o.t));
                expect(lg ? "log_softmax" : "softmax", &o.t, want, x.n);
                OK(dt_cpu_softmax(lg, dim, &x.t, &x.t)); /* in place */
                expect(lg ? "log_softmax in place" : "softmax in place", &x.t, want, x.n);
            }
        }
    }
    tens x = mk(DT_I32, SH(2, 2), 0, 3), o = mk_out(DT_I32, SH(2, 2));
    T_ERR(dt_cpu_softmax(0, 1, &x.t, &o.t), DT_ERR_DTYPE, "i32");
}

Test(kernels, layer_norm_and_rms_norm) {
    shp shapes[] = {SH(3, 7), SH(2, 1, 5), SH(4, 1), SH(0, 5), SH(9)};
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t si = 0; si < LEN(shapes); si++) {
            for (int rms = 0; rms < 2; rms++) {
                for (int wb = 0; wb < 4; wb++) { /* bit 0: weight, bit 1: bias */
                    shp s = shapes[si];
                    int64_t H = s.s[s.nd - 1];
                    tens x = mk(dt, s, -3, 5), o = mk_out(dt, s);
                    tens w = mk(dt, SH(H), 0.5, 2), b = mk(dt, SH(H), -1, 1);
                    double *want = talloc(x.n * sizeof(double) + 1), eps = 1e-5;
                    for (size_t r = 0; H && r < x.n / (size_t)H; r++) {
                        const double *xr = x.v + r * (size_t)H;
                        double mean = 0, var = 0;
                        for (int64_t j = 0; j < H && !rms; j++) mean += xr[j] / (double)H;
                        for (int64_t j = 0; j < H; j++)
                            var += (xr[j] - mean) * (xr[j] - mean) / (double)H;
                        for (int64_t j = 0; j < H; j++)
                            want[r * (size_t)H + (size_t)j] =
                                (xr[j] - mean) / sqrt(var + eps) * (wb & 1 ? w.v[j] : 1) +
                                (wb & 2 && !rms ? b.v[j] : 0);
                    }
                    OK(dt_cpu_layer_norm(rms, eps, &x.t, wb & 1 ? &w.t : NULL,
                                         wb & 2 ? &b.t : NULL, &o.t));
                    expect(rms ? "rms_norm" : "layer_norm", &o.t, want, x.n);
                }
            }
        }
    }
    tens x = mk(DT_I64, SH(2, 2), 0, 3), o = mk_out(DT_I64, SH(2, 2));
    T_ERR(dt_cpu_layer_norm(0, 1e-5, &x.t, NULL, NULL, &o.t), DT_ERR_DTYPE, "i64");
}

/* ---- indexing ----------------------------------------------------------------------------- */

Test(kernels, embedding_rows_outside_shard_are_zero) {
    shp ishapes[] = {SH(2, 3), SH(7), SH(0), SH0};
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (int i64 = 0; i64 < 2; i64++) {
            for (size_t si = 0; si < LEN(ishapes); si++) {
                for (int64_t offset = 0; offset <= 10; offset += 10) {
                    dt_dtype dt = ALL[di];
                    tens table = mk(dt, SH(5, 3), -9, 9);
                    tens ix = mk(i64 ? DT_I64 : DT_I32, ishapes[si], offset - 3, offset + 8);
                    shp os = ishapes[si];
                    os.s[os.nd++] = 3;
                    tens o = mk_out(dt, os);
                    double *want = talloc(o.n * sizeof(double) + 1);
                    for (size_t i = 0; i < ix.n; i++) {
                        int64_t r = (int64_t)ix.v[i] - offset;
                        for (int h = 0; h < 3; h++)
                            want[i * 3 + (size_t)h] = r >= 0 && r < 5 ? table.v[r * 3 + h] : 0;
                    }
                    OK(dt_cpu_embedding(&table.t, offset, &ix.t, &o.t));
                    expect("embedding", &o.t, want, o.n);
                }
            }
        }
    }
    tens table = mk(DT_F32, SH(5, 3), 0, 1), ix = mk(DT_F32, SH(2), 0, 3);
    tens o = mk_out(DT_F32, SH(2, 3));
    T_ERR(dt_cpu_embedding(&table.t, 0, &ix.t, &o.t), DT_ERR_DTYPE, "f32");
}

Test(kernels, pick_target_with_class_offset) {
    shp lshapes[] = {SH(4, 6), SH(2, 3, 5), SH(6), SH(0, 4)};
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (size_t si = 0; si < LEN(lshapes); si++) {
            dt_dtype dt = ALL[di];
            shp ls = lshapes[si], ts = ls;
            ts.nd--;
            int64_t C = ls.s[ls.nd - 1], off = 7;
            tens logits = mk(dt, ls, -9, 9);
            tens tg = mk(di % 2 ? DT_I64 : DT_I32, ts, off - 2, off + C + 2);
            tens o = mk_out(dt, ts);
            double *want = talloc(o.n * sizeof(double) + 1);
            for (size_t i = 0; i < tg.n; i++) {
                int64_t c = (int64_t)tg.v[i] - off;
                want[i] = c >= 0 && c < C ? logits.v[i * (size_t)C + (size_t)c] : 0;
            }
            OK(dt_cpu_pick(&logits.t, off, &tg.t, &o.t));
            expect("pick", &o.t, want, o.n);
        }
    }
}

Test(kernels, slice_boxes) {
    struct {
        shp x, start, box;
    } cases[] = {
        {SH(4, 5, 6), SH(1, 0, 2), SH(2, 5, 3)},
        {SH(3, 4), SH(0, 4), SH(3, 0)},
        {SH(7), SH(2), SH(5)},
        {SH(2, 3, 1, 4), SH(1, 1, 0, 0), SH(1, 2, 1, 4)},
    };
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (size_t c = 0; c < LEN(cases); c++) {
            dt_dtype dt = ALL[di];
            shp xs = cases[c].x, bs = cases[c].box;
            tens x = mk(dt, xs, -9, 9), o = mk_out(dt, bs);
            double *want = talloc(o.n * sizeof(double) + 1);
            int64_t idx[DT_MAX_NDIM];
            for (size_t i = 0; i < o.n; i++) {
                unravel(i, bs, idx);
                for (int d = 0; d < xs.nd; d++) idx[d] += cases[c].start.s[d];
                want[i] = x.v[bidx(xs, xs.nd, idx)];
            }
            OK(dt_cpu_slice(&x.t, cases[c].start.s, &o.t));
            expect("slice", &o.t, want, o.n);
        }
    }
    tens x = mk(DT_F32, SH(3, 4), 0, 1), o = mk_out(DT_F32, SH(2, 2));
    T_ERR(dt_cpu_slice(&x.t, (int64_t[]){2, 0}, &o.t), DT_ERR_SHAPE, "dim 0");
}

Test(kernels, permute_every_order) {
    struct {
        shp x;
        int perm[4];
    } cases[] = {
        {SH(2, 3, 4), {0, 1, 2}}, {SH(2, 3, 4), {0, 2, 1}}, {SH(2, 3, 4), {1, 0, 2}},
        {SH(2, 3, 4), {1, 2, 0}}, {SH(2, 3, 4), {2, 0, 1}}, {SH(2, 3, 4), {2, 1, 0}},
        {SH(2, 1, 3, 1), {3, 2, 1, 0}}, {SH(0, 3), {1, 0}}, {SH(5, 1, 7), {0, 2, 1}},
        {SH(33, 17), {1, 0}},
    };
    for (size_t di = 0; di < LEN(ALL); di++) {
        for (size_t c = 0; c < LEN(cases); c++) {
            dt_dtype dt = ALL[di];
            shp xs = cases[c].x, os = xs;
            for (int d = 0; d < xs.nd; d++) os.s[d] = xs.s[cases[c].perm[d]];
            tens x = mk(dt, xs, -9, 9), o = mk_out(dt, os);
            double *want = talloc(o.n * sizeof(double) + 1);
            int64_t oidx[DT_MAX_NDIM], xidx[DT_MAX_NDIM];
            for (size_t i = 0; i < o.n; i++) {
                unravel(i, os, oidx);
                for (int d = 0; d < xs.nd; d++) xidx[cases[c].perm[d]] = oidx[d];
                want[i] = x.v[bidx(xs, xs.nd, xidx)];
            }
            OK(dt_cpu_permute(&x.t, cases[c].perm, &o.t));
            expect("permute", &o.t, want, o.n);
        }
    }
    tens x = mk(DT_F32, SH(3, 4), 0, 1), o = mk_out(DT_F32, SH(4, 3));
    T_ERR(dt_cpu_permute(&x.t, (int[]){1, 1}, &o.t), DT_ERR_ARG, "permutation");
}

/* ---- the vectorisable exp the CPU softmax and attention kernels use --------------------- */

/* dt_vexpf_affine (16 lanes with AVX-512F, 8 with AVX2) gives the 4-lane form's bits for every
 * element, tails of every length included, over the whole range and the specials. */
Test(kernels, vexpf_affine_equals_four_lanes_bitwise) {
    enum { N = 4099 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)(-100.0 + 200.0 * i / (N - 1));
    x[7] = NAN, x[8] = INFINITY, x[9] = -INFINITY, x[10] = -0.0f;
    for (int n = 0; n <= 17; n++) {
        int len = n < 17 ? n : N;
        dt_vexpf_affine(y, x, len, -0.75f, 0.5f);
        for (int i = 0; i < len; i++) {
            float v = x[i] * -0.75f + 0.5f, want = dt_vexpf4((dt_v4f){v, v, v, v})[0];
            cr_assert(memcmp(&y[i], &want, sizeof want) == 0,
                      "length %d element %d: exp(%.9g) = %.9g, 4 lanes give %.9g", len, i, v,
                      y[i], want);
        }
    }
}

/* dt_vexpf within 2 ulp of exp in double over [-87.3, 88.7] (a million points and the ends),
 * 0 below, inf above, -inf -> 0, NaN -> NaN. */
Test(kernels, vexpf_is_within_two_ulp) {
    double worst = 0;
    for (int k = 0; k <= 1000000; k++) {
        float x = (float)(-87.3 + 176.0 * k / 1000000.0);
        double want = exp((double)x), got = dt_vexpf(x);
        double ulp = nextafterf((float)want, INFINITY) - (float)want;
        double err = fabs(got - want) / ulp;
        if (err > worst) worst = err;
        cr_assert(err <= 2.0, "dt_vexpf(%.9g) = %.9g, exp = %.9g (%.2f ulp)", x, got, want, err);
    }
    cr_log_info("dt_vexpf: worst %.2f ulp", worst);
    cr_assert_eq(dt_vexpf(-INFINITY), 0.0f);
    cr_assert_eq(dt_vexpf(-100.0f), 0.0f);
    cr_assert(isinf(dt_vexpf(89.0f)) && isinf(dt_vexpf(INFINITY)));
    cr_assert(isnan(dt_vexpf(NAN)));
    cr_assert_eq(dt_vexpf(0.0f), 1.0f);
}

/* ---- attention ---------------------------------------------------------------------------- */

Test(kernels, sdpa_causal_and_full) {
    struct {
        shp batch;
        int64_t Tq, Tk, D, Dv;
    } cases[] = {
        {SH(2, 3), 5, 5, 4, 3}, {SH(2), 3, 6, 4, 4}, {SH(1), 6, 3, 2, 5},
        {SH(1, 1), 1, 1, 1, 1}, {SH(2), 0, 4, 3, 3}, {SH0, 4, 4, 8, 2},
    };
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t c = 0; c < LEN(cases); c++) {
            for (int causal = 0; causal < 2; causal++) {
                shp qs = cases[c].batch, ks = qs, vs = qs, os = qs;
                int nb = qs.nd;
                int64_t Tq = cases[c].Tq, Tk = cases[c].Tk, D = cases[c].D, Dv = cases[c].Dv;
                qs.s[nb] = Tq, qs.s[nb + 1] = D;
                ks.s[nb] = Tk, ks.s[nb + 1] = D;
                vs.s[nb] = Tk, vs.s[nb + 1] = Dv;
                os.s[nb] = Tq, os.s[nb + 1] = Dv;
                qs.nd = ks.nd = vs.nd = os.nd = nb + 2;
                tens q = mk(dt, qs, -2, 2), k = mk(dt, ks, -2, 2), v = mk(dt, vs, -2, 2);
                tens o = mk_out(dt, os);
                double scale = 1.0 / sqrt((double)D), *p = talloc((size_t)Tk * 8 + 8);
                double *want = talloc(o.n * sizeof(double) + 1);
                size_t B = numel(cases[c].batch);
                for (size_t b = 0; b < B; b++) {
                    for (int64_t i = 0; i < Tq; i++) {
                        double mx = -INFINITY, sum = 0;
                        for (int64_t j = 0; j < Tk; j++) {
                            double s = 0;
                            for (int64_t d = 0; d < D; d++)
                                s += q.v[(b * Tq + i) * D + d] * k.v[(b * Tk + j) * D + d];
                            p[j] = causal && j > i ? -INFINITY : s * scale;
                            mx = fmax(mx, p[j]);
                        }
                        for (int64_t j = 0; j < Tk; j++) sum += p[j] = exp(p[j] - mx);
                        for (int64_t e = 0; e < Dv; e++) {
                            double acc = 0;
                            for (int64_t j = 0; j < Tk; j++)
                                acc += p[j] / sum * v.v[(b * Tk + j) * Dv + e];
                            want[(b * Tq + i) * Dv + e] = acc;
                        }
                    }
                }
                OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, 0, DT_SDPA_ALL_HEADS, scale, &o.t, NULL));
                expect(causal ? "sdpa causal" : "sdpa", &o.t, want, o.n);
            }
        }
    }
    tens q = mk(DT_I32, SH(2, 2), 0, 3), o = mk_out(DT_I32, SH(2, 2));
    T_ERR(dt_cpu_sdpa(&q.t, &q.t, &q.t, 0, 0, DT_SDPA_ALL_HEADS, 1.0, &o.t, NULL), DT_ERR_DTYPE,
          "dt_cpu_sdpa");
}

/* Grouped-query attention forward with its log-sum-exp, and the backward from that lse,
 * against the textbook formulas in double (probabilities from a fresh softmax, not from the
 * lse): dP = g v^T, dS = P (dP - sum_j P dP), dq = scale dS k, dk = scale dS^T q and
 * dv = P^T g, dk and dv summed over each kv head's query heads. */
Test(kernels, sdpa_grouped_query_heads_and_backward) {
    struct {
        int64_t B, Hq, Hkv, Tq, Tk, D;
    } cases[] = {{2, 8, 2, 5, 5, 4}, {1, 6, 3, 4, 6, 3}, {2, 4, 1, 3, 3, 2}, {1, 3, 3, 4, 4, 2},
                 {1, 2, 1, 6, 2, 3}, {1, 2, 2, 3, 0, 2}};
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di], lt = dt == DT_F64 ? DT_F64 : DT_F32;
        for (size_t c = 0; c < LEN(cases); c++) {
            for (int causal = 0; causal < 2; causal++) {
                int64_t B = cases[c].B, Hq = cases[c].Hq, Hkv = cases[c].Hkv, Tq = cases[c].Tq,
                        Tk = cases[c].Tk, D = cases[c].D, g = Hq / Hkv;
                tens q = mk(dt, SH(B, Hq, Tq, D), -2, 2), k = mk(dt, SH(B, Hkv, Tk, D), -2, 2);
                tens v = mk(dt, SH(B, Hkv, Tk, D), -2, 2), o = mk_out(dt, SH(B, Hq, Tq, D));
                tens go = mk(dt, SH(B, Hq, Tq, D), -2, 2), l = mk_out(lt, SH(B, Hq, Tq));
                tens dq = mk_out(dt, SH(B, Hq, Tq, D)), dk = mk_out(dt, SH(B, Hkv, Tk, D));
                tens dv = mk_out(dt, SH(B, Hkv, Tk, D));
                double scale = 1.0 / sqrt((double)D), *p = talloc((size_t)Tk * 8 + 8);
                double *dp = talloc((size_t)Tk * 8 + 8);
                double *want = talloc(o.n * sizeof(double) + 1);
                double *wl = talloc(l.n * sizeof(double) + 1);
                double *wdq = talloc(q.n * 8 + 8), *wdk = talloc(k.n * 8 + 8);
                double *wdv = talloc(v.n * 8 + 8);
                memset(wdk, 0, k.n * 8), memset(wdv, 0, v.n * 8);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t h = 0; h < Hq; h++) {
                        size_t qh = (size_t)(b * Hq + h), kh = (size_t)(b * Hkv + h / g);
                        for (int64_t i = 0; i < Tq; i++) {
                            double mx = -INFINITY, sum = 0, dot = 0;
                            size_t qi = qh * (size_t)Tq + (size_t)i;
                            for (int64_t j = 0; j < Tk; j++) {
                                double s = 0;
                                for (int64_t d = 0; d < D; d++)
                                    s += q.v[qi * D + d] * k.v[(kh * Tk + j) * D + d];
                                p[j] = causal && j > i ? -INFINITY : s * scale;
                                mx = fmax(mx, p[j]);
                            }
                            for (int64_t j = 0; j < Tk; j++) sum += p[j] = exp(p[j] - mx);
                            wl[qi] = Tk ? mx + log(sum) : -INFINITY;
                            for (int64_t e = 0; e < D; e++) {
                                double acc = 0;
                                for (int64_t j = 0; j < Tk; j++)
                                    acc += p[j] / sum * v.v[(kh * Tk + j) * D + e];
                                want[qi * D + e] = acc;
                            }
                            for (int64_t j = 0; j < Tk; j++) {
                                p[j] /= sum, dp[j] = 0;
                                for (int64_t e = 0; e < D; e++)
                                    dp[j] += go.v[qi * D + e] * v.v[(kh * Tk + j) * D + e];
                                dot += p[j] * dp[j];
                            }
                            for (int64_t d = 0; d < D; d++) wdq[qi * D + d] = 0;
                            for (int64_t j = 0; j < Tk; j++) {
                                double ds = p[j] * (dp[j] - dot) * scale;
                                size_t kj = (kh * Tk + j) * D;
                                for (int64_t d = 0; d < D; d++) {
                                    wdq[qi * D + d] += ds * k.v[kj + d];
                                    wdk[kj + d] += ds * q.v[qi * D + d];
                                    wdv[kj + d] += p[j] * go.v[qi * D + d];
                                }
                            }
                        }
                    }
                const char *what = causal ? "sdpa gqa causal" : "sdpa gqa";
                OK(dt_cpu_sdpa(&q.t, &k.t, &v.t, causal, 0, DT_SDPA_ALL_HEADS, scale, &o.t, &l.t));
                expect(what, &o.t, want, o.n);
                expect(what, &l.t, wl, l.n);
                OK(dt_cpu_sdpa_backward(&go.t, &q.t, &k.t, &v.t, &l.t, causal, 0, DT_SDPA_ALL_HEADS,
                                        scale, &dq.t, &dk.t, &dv.t));
                expect("sdpa backward dq", &dq.t, wdq, q.n);
                expect("sdpa backward dk", &dk.t, wdk, k.n);
                expect("sdpa backward dv", &dv.t, wdv, v.n);
            }
        }
    }
    tens q = mk(DT_F32, SH(1, 6, 2, 2), -1, 1), k = mk(DT_F32, SH(1, 4, 2, 2), -1, 1);
    tens o = mk_out(DT_F32, SH(1, 6, 2, 2)), l = mk_out(DT_F64, SH(1, 6, 2));
    T_ERR(dt_cpu_sdpa(&q.t, &k.t, &k.t, 0, 0, DT_SDPA_ALL_HEADS, 1.0, &o.t, NULL), DT_ERR_SHAPE,
          "divisor");
    T_ERR(dt_cpu_sdpa(&q.t, &q.t, &q.t, 0, 0, DT_SDPA_ALL_HEADS, 1.0, &o.t, &l.t), DT_ERR_DTYPE,
          "lse is f64");
    tens l2 = mk_out(DT_F32, SH(1, 6, 3));
    T_ERR(dt_cpu_sdpa(&q.t, &q.t, &q.t, 0, 0, DT_SDPA_ALL_HEADS, 1.0, &o.t, &l2.t), DT_ERR_SHAPE,
          "query row");
    tens lf = mk_out(DT_F32, SH(1, 6, 2)), d1 = mk_out(DT_F32, SH(1, 6, 2, 2));
    T_ERR(dt_cpu_sdpa_backward(&o.t, &q.t, &q.t, &q.t, &lf.t, 0, 0, DT_SDPA_ALL_HEADS, 1.0, &d1.t,
                               &k.t, &d1.t),
          DT_ERR_SHAPE, "dq, dk, dv");
}

Test(kernels, rope_rotates_interleaved_pairs) {
    shp shapes[] = {SH(2, 3, 2, 4), SH(1, 5, 3, 6), SH(1, 1, 1, 2), SH(0, 2, 2, 4)};
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (size_t si = 0; si < LEN(shapes); si++) {
            shp s = shapes[si];
            int64_t T = s.s[1], H = s.s[2], P = s.s[3] / 2;
            tens x = mk(dt, s, -2, 2), o = mk_out(dt, s);
            tens c = mk(dt, SH(T, P), -1, 1), sn = mk(dt, SH(T, P), -1, 1);
            double *want = talloc(x.n * sizeof(double) + 1);
            for (size_t e = 0; e < x.n; e += 2) {
                int64_t i = (int64_t)(e / 2 % (size_t)P), t = (int64_t)(e / (size_t)(2 * P * H) %
                                                                         (size_t)T);
                double x0 = x.v[e], x1 = x.v[e + 1], cv = c.v[t * P + i], sv = sn.v[t * P + i];
                want[e] = x0 * cv - x1 * sv;
                want[e + 1] = x0 * sv + x1 * cv;
            }
            OK(dt_cpu_rope(&x.t, &c.t, &sn.t, &o.t));
            expect("rope", &o.t, want, x.n);
            OK(dt_cpu_rope(&x.t, &c.t, &sn.t, &x.t)); /* in place */
            expect("rope in place", &x.t, want, x.n);
        }
    }
    tens x = mk(DT_F32, SH(1, 2, 1, 3), -1, 1), o = mk_out(DT_F32, SH(1, 2, 1, 3));
    tens c = mk(DT_F32, SH(2, 1), -1, 1);
    T_ERR(dt_cpu_rope(&x.t, &c.t, &c.t, &o.t), DT_ERR_SHAPE, "D even");
}

/* rope's f32 rows on AVX-512 (eight pairs a vector, masked past the last) give the plain loop's
 * bits on every element, out of place and in place, for pair counts around the vector's. */
Test(kernels, rope_f32_avx512_rows_equal_the_plain_loop) {
    if (dt_simd_cpu_best() < DT_SIMD_AVX512) cr_skip_test("no AVX-512 on this CPU");
    static const int64_t PS[] = {1, 3, 7, 8, 9, 16, 17, 23};
    for (size_t pi = 0; pi < sizeof PS / sizeof PS[0]; pi++)
        for (int64_t H = 1; H <= 3; H++) {
            int64_t P = PS[pi], B = 2, T = 5, n = B * T * H * 2 * P;
            float *x = malloc(4 * (size_t)n), *y0 = malloc(4 * (size_t)n),
                  *y1 = malloc(4 * (size_t)n), *cs = malloc(4 * (size_t)(T * P)),
                  *sn = malloc(4 * (size_t)(T * P));
            cr_assert(x && y0 && y1 && cs && sn);
            for (int64_t i = 0; i < n; i++)
                x[i] = (float)sin(0.731 * (double)i + 0.2) * 3;
            for (int64_t i = 0; i < T * P; i++)
                cs[i] = (float)cos(0.37 * (double)i), sn[i] = (float)sin(0.37 * (double)i);
            dt_local X = {.data = x, .dtype = DT_F32, .ndim = 4, .shape = {B, T, H, 2 * P}};
            dt_local C = {.data = cs, .dtype = DT_F32, .ndim = 2, .shape = {T, P}}, S = C;
            S.data = sn;
            dt_local Y0 = X, Y1 = X;
            Y0.data = y0, Y1.data = y1;
            dt_simd_set_cap(DT_SIMD_SCALAR);
            OK(dt_cpu_rope(&X, &C, &S, &Y0));
            dt_simd_set_cap(DT_SIMD_AVX512);
            OK(dt_cpu_rope(&X, &C, &S, &Y1));
            cr_assert(memcmp(y0, y1, 4 * (size_t)n) == 0, "P %lld H %lld: AVX-512 rows differ",
                      (long long)P, (long long)H);
            OK(dt_cpu_rope(&X, &C, &S, &X)); /* in place */
            dt_simd_set_cap(DT_SIMD_COUNT);
            cr_assert(memcmp(y0, x, 4 * (size_t)n) == 0, "P %lld H %lld: in place differs",
                      (long long)P, (long long)H);
            free(x), free(y0), free(y1), free(cs), free(sn);
        }
}

/* The uniform of global element i as an independent reading of the Philox stream: f32, bf16
 * and f16 take 32-bit lane i % 4 of block offset + i / 4 (top `bits` bits), f64 the 64-bit
 * lane i % 2 of block offset + i / 2. */
static double naive_unit(dt_dtype dt, uint64_t seed, uint64_t offset, uint64_t i) {
    int wide = dt == DT_F64, bits = wide ? 53 : dt == DT_BF16 ? 8 : dt == DT_F16 ? 11 : 24;
    dt_philox4 b = dt_philox_block(seed, offset + (wide ? i / 2 : i / 4));
    uint64_t w = wide ? (uint64_t)b.v[2 * (i % 2)] | (uint64_t)b.v[2 * (i % 2) + 1] << 32
                      : (uint64_t)b.v[i % 4] << 32;
    return ldexp((double)(w >> (64 - bits)), -bits);
}

Test(kernels, dropout_mask_from_global_index) {
    const uint64_t seed = 0x1234abcdull, offset = 5;
    shp full = SH(5, 7, 3);
    for (size_t di = 0; di < LEN(FLOATS); di++) {
        dt_dtype dt = FLOATS[di];
        for (double p = 0; p <= 1.0; p += 0.25) {
            tens x = mk(dt, full, -2, 2), o = mk_out(dt, full);
            double *want = talloc(x.n * sizeof(double) + 1);
            size_t kept = 0;
            for (size_t i = 0; i < x.n; i++) {
                int keep = naive_unit(dt, seed, offset, i) >= p;
                kept += keep;
                want[i] = keep ? x.v[i] / (1 - p) : 0;
            }
            int64_t zero[3] = {0, 0, 0};
            OK(dt_cpu_dropout(p, seed, offset, full.s, zero, &x.t, &o.t));
            expect("dropout", &o.t, want, x.n);
            if (p == 1) cr_assert_eq(kept, 0, "p = 1 keeps %zu", kept);
            if (p == 0) cr_assert_eq(kept, x.n, "p = 0 drops %zu", x.n - kept);
            if (p == 0.5)
                cr_assert(kept > x.n / 4 && kept < 3 * x.n / 4, "p = 0.5 keeps %zu", kept);
            /* A box (rows 1..3, cols 2..6, all of dim 2) equals the full result there. */
            int64_t off[3] = {1, 2, 0};
            tens b = mk_shape(dt, SH(3, 5, 3)), bo = mk_out(dt, SH(3, 5, 3));
            double *bw = talloc(b.n * sizeof(double) + 1);
            size_t k = 0;
            for (int64_t r = 0; r < 3; r++)
                for (int64_t cc = 0; cc < 5; cc++)
                    for (int64_t l = 0; l < 3; l++, k++) {
                        size_t gi = (size_t)(((r + 1) * 7 + cc + 2) * 3 + l);
                        b.v[k] = x.v[gi];
                        bw[k] = want[gi];
                    }
            store(&b);
            OK(dt_cpu_dropout(p, seed, offset, full.s, off, &b.t, &bo.t));
            expect("dropout box", &bo.t, bw, b.n);
        }
    }
    tens x = mk(DT_I32, SH(2, 2), 0, 3), o = mk_out(DT_I32, SH(2, 2));
    int64_t z[2] = {0, 0}, fs[2] = {2, 2};
    T_ERR(dt_cpu_dropout(0.5, 1, 0, fs, z, &x.t, &o.t), DT_ERR_DTYPE, "float");
}

/* The fused AdamW step's all-f32 loops (sixteen lanes where the CPU has AVX-512, four, one)
 * give the bits of the per-element form (optim_math.h) on every element, tails included, with
 * weight decay and a later step's bias corrections, on every SIMD path this CPU runs. */
Test(kernels, adamw_f32_loop_equals_per_element_bitwise) {
    enum { N = 1031 };
    static float p[N], g[N], m[N], v[N], p2[N], m2[N], v2[N];
    for (int i = 0; i < N; i++) {
        p[i] = p2[i] = (float)sin(0.37 * i);
        g[i] = (float)(cos(1.3 * i) * (i % 7 ? 1e-2 : 3.0));
        m[i] = m2[i] = (float)(0.01 * sin(0.11 * i));
        v[i] = v2[i] = (float)(1e-4 * (1 + cos(0.7 * i)));
    }
    dt_optim_hyper h = {.rule = DT_OPTIM_RULE_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    static const uint64_t lens[] = {0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 33, 47, N};
    for (int c = 0; c < 2 * (int)(sizeof lens / sizeof lens[0]); c++) {
        int avx512 = c % 2; /* both paths in turn on the evolving state */
        if (avx512 && dt_simd_cpu_best() < DT_SIMD_AVX512) continue;
        dt_simd_set_cap(avx512 ? DT_SIMD_AVX512 : DT_SIMD_AVX2);
        uint64_t len = lens[c / 2];
        dt_optim_item it = {.param = p, .grad = g, .state = {m, v}, .numel = len,
                            .param_dtype = DT_F32, .grad_dtype = DT_F32, .state_dtype = DT_F32,
                            .lr = 3e-3, .weight_decay = 0.01, .step_size = 3e-3 / (1 - 0.9 * 0.9),
                            .bc2_sqrt = sqrt(1 - 0.95 * 0.95)};
        OK(dt_cpu_optim_step(&h, &it, 1));
        dt_optim_item ref = it;
        ref.param = p2, ref.state[0] = m2, ref.state[1] = v2;
        for (uint64_t i = 0; i < len; i++) dt_om_step_f(&h, &ref, i);
        dt_simd_set_cap(DT_SIMD_COUNT);
        cr_assert(memcmp(p, p2, sizeof p) == 0 && memcmp(m, m2, sizeof m) == 0 &&
                      memcmp(v, v2, sizeof v) == 0,
                  "%s, length %llu: the f32 loop differs from the per-element form",
                  avx512 ? "avx512" : "four lanes", (unsigned long long)len);
    }
}
