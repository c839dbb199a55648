/* Local CPU kernels of gather, scatter_add, one_hot, topk and cumsum against naive
 * double-precision references (same conventions as test_kernels.c): gather and scatter_add with
 * a block's shift and a masked dim offset, one_hot over a class range, topk order with ties
 * and NaN, cumsum on every dim. */
#include "kernel_check.h"

Test(kernels, gather_shifted_and_masked) {
    shp xs = SH(4, 5, 3);
    for (size_t di = 0; di < LEN(ALL); di++)
        for (int dim = 0; dim < 3; dim++)
            for (int64_t off = 0; off <= 2; off += 2) {
                dt_dtype dt = ALL[di];
                tens x = mk(dt, xs, -9, 9);
                shp is = SH(3, 4, 2);
                is.s[dim] = 6; /* the gather dim may be longer than x's */
                int64_t shift[DT_MAX_NDIM] = {0}, size = xs.s[dim] + off + 1;
                for (int d = 0; d < 3; d++)
                    if (d != dim) shift[d] = xs.s[d] - is.s[d]; /* the last block that fits */
                tens ix = mk(dim % 2 ? DT_I32 : DT_I64, is, 0, (double)size);
                tens o = mk_out(dt, is);
                double *want = talloc(o.n * sizeof(double) + 1);
                int64_t c[DT_MAX_NDIM];
                for (size_t i = 0; i < o.n; i++) {
                    unravel(i, is, c);
                    int64_t r = (int64_t)ix.v[i] - off, j[DT_MAX_NDIM];
                    for (int d = 0; d < 3; d++) j[d] = d == dim ? r : c[d] + shift[d];
                    want[i] = r >= 0 && r < xs.s[dim] ? x.v[bidx(xs, 3, j)] : 0;
                }
                OK(dt_cpu_gather(&x.t, dim, shift, off, size, &ix.t, &o.t));
                expect("gather", &o.t, want, o.n);
                if (dt != DT_F32) continue;
                int64_t bad[] = {size, -1}; /* the first past the global dim, and below 0 */
                for (int b = 0; b < 2; b++) {
                    if (ix.t.dtype == DT_I32)
                        ((int32_t *)ix.t.data)[o.n - 1] = (int32_t)bad[b];
                    else
                        ((int64_t *)ix.t.data)[o.n - 1] = bad[b];
                    T_ERR(dt_cpu_gather(&x.t, dim, shift, off, size, &ix.t, &o.t), DT_ERR_ARG,
                          b ? "] = -1 is outside" : "is outside [0,");
                }
            }
}

Test(kernels, one_hot_class_range) {
    for (int i64 = 0; i64 < 2; i64++)
        for (int64_t off = 0; off <= 4; off += 2) {
            tens ix = mk(i64 ? DT_I64 : DT_I32, SH(2, 3), 0, 7);
            tens o = mk_out(DT_I64, SH(2, 3, 3));
            double *want = talloc(o.n * sizeof(double));
            for (size_t i = 0; i < ix.n; i++)
                for (int64_t c = 0; c < 3; c++) want[i * 3 + (size_t)c] = ix.v[i] == off + c;
            OK(dt_cpu_one_hot(&ix.t, (int64_t[]){0, 0}, 7, off, &o.t));
            expect("one_hot", &o.t, want, o.n);
        }
    tens ix = mk(DT_I64, SH(3), 0, 7), o = mk_out(DT_I64, SH(3, 7));
    ((int64_t *)ix.t.data)[2] = 7;
    T_ERR(dt_cpu_one_hot(&ix.t, (int64_t[]){0}, 7, 0, &o.t), DT_ERR_ARG,
          "element at [2] (global) = 7");
    ((int64_t *)ix.t.data)[2] = -1;
    T_ERR(dt_cpu_one_hot(&ix.t, (int64_t[]){0}, 7, 0, &o.t), DT_ERR_ARG, "= -1");
    /* The block starts at global 5: its element 2 is global element 7. */
    T_ERR(dt_cpu_one_hot(&ix.t, (int64_t[]){5}, 7, 0, &o.t), DT_ERR_ARG, "at [7] (global) = -1");
    /* A 2-D block at global [4, 1]: local [1, 2] (flat 5) is global [5, 3]. */
    tens ix2 = mk(DT_I64, SH(2, 3), 0, 7), o2 = mk_out(DT_I64, SH(2, 3, 7));
    ((int64_t *)ix2.t.data)[5] = 9;
    T_ERR(dt_cpu_one_hot(&ix2.t, (int64_t[]){4, 1}, 7, 0, &o2.t), DT_ERR_ARG,
          "at [5, 3] (global) = 9");
}

/* 1 when a sorts before b in topk order: NaN highest, ties to the lower index. */
static int before(double va, int64_t a, double vb, int64_t b, int smallest) {
    if (isnan(va) || isnan(vb)) {
        if (isnan(va) && isnan(vb)) return a < b;
        return smallest ? isnan(vb) : isnan(va);
    }
    if (va != vb) return smallest ? va < vb : va > vb;
    return a < b;
}

Test(kernels, topk_sorted_ties_to_lower_index_nan_highest) {
    shp s = SH(4, 9, 3);
    for (size_t di = 0; di < LEN(ALL); di++)
        for (int dim = 0; dim < 3; dim++)
            for (int smallest = 0; smallest < 2; smallest++) {
                int64_t L = s.s[dim], ks[] = {0, 1, 3, L};
                dt_dtype dt = ALL[di];
                tens x = mk_any(dt, s, -3, 4, 1); /* few values: many ties */
                if (!is_int(dt)) {
                    x.v[5] = x.v[17] = NAN;
                    store(&x);
                }
                for (size_t ki = 0; ki < LEN(ks); ki++) {
                    int64_t k = ks[ki];
                    shp os = s;
                    os.s[dim] = k;
                    tens o = mk_out(DT_I64, os);
                    double *want = talloc(o.n * sizeof(double) + 1);
                    int64_t c[DT_MAX_NDIM];
                    for (size_t i = 0; i < o.n; i++) {
                        unravel(i, os, c);
                        int64_t rank = c[dim], best = -1;
                        /* the element with exactly rank elements before it */
                        for (int64_t t = 0; t < L && best < 0; t++) {
                            int64_t n = 0, ct[DT_MAX_NDIM], cu[DT_MAX_NDIM];
                            memcpy(ct, c, sizeof ct), memcpy(cu, c, sizeof cu);
                            ct[dim] = t;
                            double vt = x.v[bidx(s, 3, ct)];
                            for (int64_t u = 0; u < L; u++) {
                                cu[dim] = u;
                                n += before(x.v[bidx(s, 3, cu)], u, vt, t, smallest);
                            }
                            if (n == rank) best = t;
                        }
                        want[i] = (double)best;
                    }
                    OK(dt_cpu_topk(&x.t, k, dim, smallest, &o.t));
                    expect(smallest ? "topk smallest" : "topk", &o.t, want, o.n);
                }
            }
    tens x = mk(DT_F32, SH(3, 4), 0, 1), o = mk_out(DT_I64, SH(3, 5));
    T_ERR(dt_cpu_topk(&x.t, 5, 1, 0, &o.t), DT_ERR_ARG, "k = 5");
}

Test(kernels, cumsum_every_dim_and_in_place) {
    shp s = SH(3, 4, 5);
    for (size_t di = 0; di < LEN(ALL); di++)
        for (int dim = 0; dim < 3; dim++) {
            dt_dtype dt = ALL[di];
            tens x = mk(dt, s, -3, 3), o = mk_out(dt, s);
            double *want = talloc(x.n * sizeof(double));
            int64_t c[DT_MAX_NDIM];
            for (size_t i = 0; i < x.n; i++) {
                unravel(i, s, c);
                double acc = 0;
                for (int64_t t = c[dim]; t >= 0; t--) {
                    c[dim] = t;
                    acc += x.v[bidx(s, 3, c)];
                }
                want[i] = acc;
            }
            OK(dt_cpu_cumsum(&x.t, dim, &o.t));
            expect("cumsum", &o.t, want, x.n);
            OK(dt_cpu_cumsum(&x.t, dim, &x.t));
            expect("cumsum in place", &x.t, want, x.n);
        }
}

/* scatter_add against a naive sum: src blocks placed with a shift that fits and one that
 * hangs over out's block (masked), a dim offset, an index longer than out along dim, and an
 * index broadcast along another dim.
 * Integer values keep the sums exact in every float dtype. */
Test(kernels, scatter_add_shifted_and_masked) {
    shp os = SH(4, 5, 3);
    for (size_t di = 0; di < LEN(FLOATS); di++)
        for (int dim = 0; dim < 3; dim++)
            for (int over = 0; over < 3; over++) /* 2: index broadcast on a dim */
                for (int64_t off = 0; off <= 2; off += 2) {
                    dt_dtype dt = FLOATS[di];
                    shp ss = SH(3, 4, 2);
                    ss.s[dim] = 6; /* more src rows than out has along dim */
                    int64_t shift[DT_MAX_NDIM] = {0}, size = os.s[dim] + off + 1;
                    for (int d = 0; d < 3; d++)
                        if (d != dim) shift[d] = over == 1 ? 2 : os.s[d] - ss.s[d];
                    tens src = mk_any(dt, ss, -9, 9, 1);
                    shp xs = ss;
                    if (over == 2) xs.s[(dim + 1) % 3] = 1;
                    tens ix = mk(dim % 2 ? DT_I32 : DT_I64, xs, 0, (double)size);
                    tens o = mk_out(dt, os);
                    double *want = talloc(o.n * sizeof(double) + 1);
                    for (size_t i = 0; i < o.n; i++) want[i] = 0;
                    int64_t c[DT_MAX_NDIM], j[DT_MAX_NDIM];
                    for (size_t i = 0; i < src.n; i++) {
                        unravel(i, ss, c);
                        int in = 1;
                        for (int d = 0; d < 3; d++) {
                            j[d] = d == dim ? (int64_t)ix.v[bidx(xs, 3, c)] - off
                                            : c[d] + shift[d];
                            in = in && j[d] >= 0 && j[d] < os.s[d];
                        }
                        if (in) want[bidx(os, 3, j)] += src.v[i];
                    }
                    OK(dt_cpu_scatter_add(&src.t, dim, shift, off, size, &ix.t, &o.t));
                    expect("scatter_add", &o.t, want, o.n);
                    if (dt != DT_F32) continue;
                    int64_t bad[] = {size, -1};
                    for (int b = 0; b < 2; b++) {
                        if (ix.t.dtype == DT_I32)
                            ((int32_t *)ix.t.data)[ix.n - 1] = (int32_t)bad[b];
                        else
                            ((int64_t *)ix.t.data)[ix.n - 1] = bad[b];
                        T_ERR(dt_cpu_scatter_add(&src.t, dim, shift, off, size, &ix.t, &o.t),
                              DT_ERR_ARG, b ? "] = -1 is outside" : "is outside [0,");
                    }
                }
}

/* scatter_add when index is broadcast over every dim after dim (an embedding's gradient): the
 * kernel adds whole rows; rows shifted off out's block along an earlier dim are masked, a dim
 * offset drops some, and the bad-index error still names the element. */
Test(kernels, scatter_add_whole_rows) {
    struct {
        shp src, out;
        int dim;
        int64_t shift0, off;
    } cases[] = {
        {SH(5, 6, 9), SH(4, 4, 9), 1, 1, 1},
        {SH(7, 2, 12), SH(5, 2, 12), 0, 0, 2},
        {SH(3, 40), SH(6, 40), 0, 0, 0},
    };
    for (size_t di = 0; di < LEN(FLOATS); di++)
        for (size_t k = 0; k < LEN(cases); k++) {
            dt_dtype dt = FLOATS[di];
            shp ss = cases[k].src, os = cases[k].out, xs = ss;
            int dim = cases[k].dim, nd = ss.nd;
            for (int d = dim + 1; d < nd; d++) xs.s[d] = 1;
            int64_t shift[DT_MAX_NDIM] = {0}, off = cases[k].off, size = os.s[dim] + off + 1;
            if (dim > 0) shift[0] = cases[k].shift0;
            tens src = mk_any(dt, ss, -9, 9, 1);
            tens ix = mk(k % 2 ? DT_I32 : DT_I64, xs, 0, (double)size);
            tens o = mk_out(dt, os);
            double *want = talloc(o.n * sizeof(double) + 1);
            for (size_t i = 0; i < o.n; i++) want[i] = 0;
            int64_t c[DT_MAX_NDIM], j[DT_MAX_NDIM];
            for (size_t i = 0; i < src.n; i++) {
                unravel(i, ss, c);
                int in = 1;
                for (int d = 0; d < nd; d++) {
                    j[d] = d == dim ? (int64_t)ix.v[bidx(xs, nd, c)] - off : c[d] + shift[d];
                    in = in && j[d] >= 0 && j[d] < os.s[d];
                }
                if (in) want[bidx(os, nd, j)] += src.v[i];
            }
            OK(dt_cpu_scatter_add(&src.t, dim, shift, off, size, &ix.t, &o.t));
            expect("scatter_add rows", &o.t, want, o.n);
            if (ix.t.dtype == DT_I32)
                ((int32_t *)ix.t.data)[ix.n - 1] = (int32_t)size;
            else
                ((int64_t *)ix.t.data)[ix.n - 1] = size;
            T_ERR(dt_cpu_scatter_add(&src.t, dim, shift, off, size, &ix.t, &o.t), DT_ERR_ARG,
                  "is outside [0,");
        }
}

/* expand writes whole runs and fills: every split of out's dims into walked, repeated and
 * copied ones (broadcast last, first, in the middle, alternating, new leading dims, nothing
 * broadcast, empty) in every dtype, against the element-by-element broadcast index. */
Test(kernels, expand_runs_and_fills) {
    static const struct {
        shp x, out;
    } cases[] = {
        {SH(1), SH(7)},
        {SH(5, 1), SH(5, 6)},
        {SH(1, 6), SH(5, 6)},
        {SH(3, 1, 4), SH(3, 5, 4)},
        {SH(1, 5, 1), SH(3, 5, 4)},
        {SH(4), SH(2, 3, 4)},
        {SH(3, 1), SH(2, 3, 4)},
        {SH(2, 1, 1, 3), SH(2, 4, 5, 3)},
        {SH(1, 3, 1, 2), SH(2, 3, 4, 2)},
        {SH(1, 1), SH(3, 4)},
        {SH(3, 4), SH(3, 4)},
        {SH(1, 4, 1), SH(1, 4, 1)},
        {SH(0, 1), SH(0, 5)},
        {SH(3, 1), SH(3, 0)},
    };
    for (size_t k = 0; k < LEN(cases); k++)
        for (size_t di = 0; di < LEN(ALL); di++) {
            shp xs = cases[k].x, os = cases[k].out;
            tens x = mk(ALL[di], xs, -50, 50), o = mk_out(ALL[di], os);
            double *want = talloc(o.n * sizeof(double) + 1);
            int64_t c[DT_MAX_NDIM];
            for (size_t i = 0; i < o.n; i++) {
                unravel(i, os, c);
                want[i] = x.v[bidx(xs, os.nd, c)];
            }
            OK(dt_cpu_expand(&x.t, &o.t));
            expect("expand", &o.t, want, o.n);
        }
}
