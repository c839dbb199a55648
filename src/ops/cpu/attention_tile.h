/* The portable tile steps of the CPU flash attention (ops/cpu/attention.c), written once and
 * included twice: for the f32 compute type (f32, bf16, f16 storage) and for f64. Before including,
 * define CT (float or double) and TN(name) (name##_f32 or name##_f64). Every product runs in
 * outer-product form (no reassociation, fixed order), so each output element sums its terms in
 * one order whatever the vector width or the thread count. */

/* c (m x n, rows ldc apart) += a . b, k terms per element added in order t = 0, 1, ...: a's
 * element (i, t) at a[i * ai + t * at], b's row t at b + t * ldb. Blocks of 4 rows x 2 vectors
 * stay in registers across the k terms; the tails run the same sums one lane at a time. */
DT_TILE_CLONES static void TN(gemm)(CT *restrict c, int64_t ldc, const CT *restrict a, int64_t ai,
                                    int64_t at, const CT *restrict b, int64_t ldb, int m, int64_t n,
                                    int64_t k) {
    typedef CT V __attribute__((vector_size(32)));
    enum { W = 32 / sizeof(CT) };
    int i = 0;
    for (; i + 4 <= m; i += 4) {
        int64_t j = 0;
        for (; j + 2 * W <= n; j += 2 * W) {
            V v[4][2];
            for (int r = 0; r < 4; r++)
                memcpy(v[r], c + (i + r) * ldc + j, sizeof v[r]);
            for (int64_t t = 0; t < k; t++) {
                V b0, b1;
                memcpy(&b0, b + t * ldb + j, sizeof b0);
                memcpy(&b1, b + t * ldb + j + W, sizeof b1);
                for (int r = 0; r < 4; r++) {
                    CT x = a[(i + r) * ai + t * at];
                    v[r][0] += x * b0;
                    v[r][1] += x * b1;
                }
            }
            for (int r = 0; r < 4; r++)
                memcpy(c + (i + r) * ldc + j, v[r], sizeof v[r]);
        }
        for (int r = 0; r < 4 && j < n; r++)
            for (int64_t e = j; e < n; e++) {
                CT x = c[(i + r) * ldc + e];
                for (int64_t t = 0; t < k; t++)
                    x += a[(i + r) * ai + t * at] * b[t * ldb + e];
                c[(i + r) * ldc + e] = x;
            }
    }
    for (; i < m; i++)
        for (int64_t e = 0; e < n; e++) {
            CT x = c[i * ldc + e];
            for (int64_t t = 0; t < k; t++)
                x += a[i * ai + t * at] * b[t * ldb + e];
            c[i * ldc + e] = x;
        }
}

/* s (nr x BC) = a (nr x D) . bt (D x BC) over the tile's first nc keys, rounded up to whole
 * vectors (bt's columns past the keys are zero; the rest of s is zero). */
static void TN(scores)(CT *s, const CT *a, const CT *bt, int nr, int nc, int64_t D) {
    int n = (nc + 15) / 16 * 16;
    memset(s, 0, sizeof(CT) * (size_t)nr * BC);
    TN(gemm)(s, BC, a, D, 1, bt, BC, nr, n < BC ? n : BC, D);
}

/* acc (nr x n) += p (nr x BC, first nc columns) . b (nc x n): y = P V and dq += dS K. */
static void TN(accum)(CT *acc, const CT *p, const CT *b, int nr, int nc, int64_t n) {
    TN(gemm)(acc, n, p, BC, 1, b, n, nr, n, nc);
}

/* acc (nc x n) += p^T (p: nr x BC, first nc columns) . b (nr x n): dv += P^T dO and
 * dk += dS^T q, summed over the tile's rows in order. */
static void TN(accum_t)(CT *acc, const CT *p, const CT *b, int nr, int nc, int64_t n) {
    TN(gemm)(acc, n, p, 1, BC, b, n, nc, n, nr);
}

/* Keys of tile [j0, j0 + nc) that query i sees: all, or (causal) those j <= i. */
static inline int TN(visible)(int causal, int64_t i, int64_t j0, int nc) {
    if (!causal) return nc;
    int64_t n = i - j0 + 1;
    return n < 0 ? 0 : n > nc ? nc : (int)n;
}

/* Row r of a score tile: exp(s * a + b) over its first lim entries, zero to BC. */
static void TN(exp_row)(CT *s, int lim, CT a, CT b) {
#if DT_TILE_F32
    dt_vexpf_affine(s, s, lim, a, b);
#else
    for (int c = 0; c < lim; c++)
        s[c] = exp(s[c] * a + b);
#endif
    for (int c = lim; c < BC; c++)
        s[c] = 0;
}

/* One forward tile of keys for rows [i0, i0 + nr) of a query tile: s holds their scores
 * (unscaled); m (running max of scaled scores), l (running sum of exp(score - m), double) and
 * acc (nr x Dv, the unnormalised output) take the tile in, online softmax style. */
static void TN(fwd_tile)(CT *s, const CT *vb, CT *acc, CT *m, double *l, int nr, int nc, int64_t i0,
                         int64_t j0, int causal, CT scale, int64_t Dv) {
    for (int r = 0; r < nr; r++) {
        CT *sr = s + (size_t)r * BC;
        int lim = TN(visible)(causal, i0 + r, j0, nc);
        CT mx = m[r];
        for (int c = 0; c < lim; c++) {
            sr[c] *= scale;
            if (sr[c] > mx || sr[c] != sr[c]) mx = sr[c]; /* NaN wins, as in a full softmax */
        }
        if (lim == 0 || mx == -INFINITY) { /* no key yet: the row stays empty */
            for (int c = 0; c < BC; c++)
                sr[c] = 0;
            continue;
        }
        if (mx != m[r]) { /* rescale what earlier tiles summed against the old max */
            CT alpha = m[r] == -INFINITY ? (CT)0 : (CT)exp(m[r] - mx);
            l[r] *= alpha;
            for (int64_t e = 0; e < Dv; e++)
                acc[r * Dv + e] *= alpha;
            m[r] = mx;
        }
        TN(exp_row)(sr, lim, 1, -mx);
    }
    /* l += each row's sum in key order, 8 rows' chains side by side (one row's alone waits on
     * each add). Over all BC entries: those past lim (and empty rows) are +0 and leave the sum
     * (of terms >= 0) as it was, so these are the bits of a sum over the visible keys. */
    int r = 0;
    for (; r + 8 <= nr; r += 8) {
        double sum[8] = {0};
        for (int c = 0; c < BC; c++)
            for (int u = 0; u < 8; u++)
                sum[u] += (double)s[(size_t)(r + u) * BC + c];
        for (int u = 0; u < 8; u++)
            l[r + u] += sum[u];
    }
    for (; r < nr; r++) {
        double sum = 0;
        for (int c = 0; c < BC; c++)
            sum += (double)s[(size_t)r * BC + c];
        l[r] += sum;
    }
    TN(accum)(acc, s, vb, nr, nc, Dv);
}

/* The backward's probabilities: s (nr x BC scores, unscaled) becomes P = exp(s scale - lse),
 * zero where masked. */
static void TN(prob_tile)(CT *s, const CT *lse, int nr, int nc, int64_t i0, int64_t j0, int causal,
                          CT scale) {
    for (int r = 0; r < nr; r++)
        TN(exp_row)(s + (size_t)r * BC, TN(visible)(causal, i0 + r, j0, nc), scale, -lse[r]);
}

/* dsum[r] += sum_j P dP over the row's visible keys, in key order (double). */
static void TN(dot_rows)(const CT *p, const CT *dp, double *dsum, int nr, int nc, int64_t i0,
                         int64_t j0, int causal) {
    for (int r = 0; r < nr; r++) {
        int lim = TN(visible)(causal, i0 + r, j0, nc);
        double acc = dsum[r];
        for (int c = 0; c < lim; c++)
            acc += (double)p[(size_t)r * BC + c] * dp[(size_t)r * BC + c];
        dsum[r] = acc;
    }
}

/* dp (dO v^T) becomes dS scale = P (dP - dsum) scale, zero where masked. */
static void TN(ds_tile)(const CT *p, CT *dp, const double *dsum, int nr, int nc, int64_t i0,
                        int64_t j0, int causal, CT scale) {
    for (int r = 0; r < nr; r++) {
        const CT *pr = p + (size_t)r * BC;
        CT *dr = dp + (size_t)r * BC, ds = (CT)dsum[r];
        int lim = TN(visible)(causal, i0 + r, j0, nc);
        for (int c = 0; c < lim; c++)
            dr[c] = pr[c] * (dr[c] - ds) * scale;
        for (int c = lim; c < BC; c++)
            dr[c] = 0;
    }
}

/* ---- work items: each writes rows no other item writes ------------------------------------ */

/* The rows of query tile t of query head hh of kv head b: first row (of q, out, lse, dq) and
 * count. */
static int64_t TN(qrows)(const sdpa_job *J, int64_t b, int64_t hh, int64_t t, int *nr) {
    int64_t i0 = t * BR, left = J->d.Tq - i0;
    *nr = left < BR ? (int)left : BR;
    return b * J->d.R + hh * J->d.Tq + i0;
}

/* The saved log-sum-exp of query rows [row0, row0 + nr) (dsum stays in heads-first order). */
static void TN(lse_rows)(const sdpa_job *J, int64_t row0, int nr, CT *out) {
    const CT *lse = (const CT *)J->lse->data;
    for (int r = 0; r < nr; r++)
        out[r] = lse[row_at(&J->rq, row0 + r, 1)];
}

/* The keys a query tile [i0, i0 + nr) reads: all, or (causal) up to its last row. */
static int64_t TN(key_end)(const sdpa_job *J, int64_t i0, int nr) {
    return J->causal && i0 + nr < J->d.Tk ? i0 + nr : J->d.Tk;
}

/* Forward item (batch, query head, query tile): out and lse rows. */
static void TN(fwd_item)(const sdpa_job *J, CT *w, int64_t it) {
    const dt_sdpa_dims *d = &J->d;
    int64_t bh = it / J->nqt, t = it % J->nqt, b = bh / d->g, i0 = t * BR;
    int nr;
    int64_t row0 = TN(qrows)(J, b, bh % d->g, t, &nr), D = d->D, Dv = d->Dv;
    double *l = (double *)(void *)w; /* first: w is aligned for doubles */
    CT *qb = (CT *)(l + BR), *kt = qb + BR * D, *vb = kt + D * BC, *s = vb + BC * Dv;
    CT *acc = s + BR * BC, *m = acc + BR * Dv, scale = (CT)J->scale;
    TN(load)(qb, D, 0, J->q, &J->rq, row0, nr, D);
    for (int r = 0; r < nr; r++)
        m[r] = -INFINITY, l[r] = 0;
    memset(acc, 0, sizeof(CT) * (size_t)(BR * Dv));
    int64_t jend = TN(key_end)(J, i0, nr);
    for (int64_t j0 = 0; j0 < jend; j0 += BC) { /* causal: tiles past the diagonal never load */
        int nc = jend - j0 < BC ? (int)(jend - j0) : BC;
        TN(load)(kt, BC, 1, J->k, &J->rk, b * d->Tk + j0, nc, D);
        TN(load)(vb, Dv, 0, J->v, &J->rk, b * d->Tk + j0, nc, Dv);
        TN(scores)(s, qb, kt, nr, nc, D);
        TN(fwd_tile)(s, vb, acc, m, l, nr, nc, i0, j0, J->causal, scale, Dv);
    }
    CT *lse = J->lse ? (CT *)J->lse->data : NULL;
    for (int r = 0; r < nr; r++) {
        CT inv = l[r] > 0 ? (CT)(1.0 / l[r]) : (CT)0; /* no key: zeros, lse -inf */
        for (int64_t e = 0; e < Dv; e++)
            acc[r * Dv + e] *= inv;
        if (lse) lse[row_at(&J->rq, row0 + r, 1)] = l[r] > 0 ? m[r] + (CT)log(l[r]) : (CT)-INFINITY;
    }
    TN(store)(J->out, &J->rq, row0, nr, Dv, acc);
}

/* Backward item (batch, query head, query tile): its rows' dsum = sum_j P dP (which the dk/dv
 * items read) and dq. P and dP of the whole key range stay in w until dsum is known. */
static void TN(dq_item)(const sdpa_job *J, CT *w, int64_t it) {
    const dt_sdpa_dims *d = &J->d;
    int64_t bh = it / J->nqt, t = it % J->nqt, b = bh / d->g, i0 = t * BR;
    int nr;
    int64_t row0 = TN(qrows)(J, b, bh % d->g, t, &nr), D = d->D, Dv = d->Dv;
    CT *qb = w, *gb = qb + BR * D, *kt = gb + BR * Dv, *vt = kt + D * BC, *kb = vt + Dv * BC;
    CT *dq = kb + BC * D, *P = dq + BR * D, *dP = P + J->nkt * BR * BC, scale = (CT)J->scale;
    CT lse[BR];
    TN(lse_rows)(J, row0, nr, lse);
    double *dsum = J->dsum + row0;
    TN(load)(qb, D, 0, J->q, &J->rq, row0, nr, D);
    TN(load)(gb, Dv, 0, J->g, &J->rq, row0, nr, Dv);
    for (int r = 0; r < nr; r++)
        dsum[r] = 0;
    int64_t jend = TN(key_end)(J, i0, nr);
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        int nc = jend - j0 < BC ? (int)(jend - j0) : BC;
        CT *p = P + j0 / BC * BR * BC, *dp = dP + j0 / BC * BR * BC;
        TN(load)(kt, BC, 1, J->k, &J->rk, b * d->Tk + j0, nc, D);
        TN(load)(vt, BC, 1, J->v, &J->rk, b * d->Tk + j0, nc, Dv);
        TN(scores)(p, qb, kt, nr, nc, D);   /* q k^T */
        TN(scores)(dp, gb, vt, nr, nc, Dv); /* dO v^T */
        TN(prob_tile)(p, lse, nr, nc, i0, j0, J->causal, scale);
        TN(dot_rows)(p, dp, dsum, nr, nc, i0, j0, J->causal);
    }
    memset(dq, 0, sizeof(CT) * (size_t)(BR * D));
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        int nc = jend - j0 < BC ? (int)(jend - j0) : BC;
        CT *p = P + j0 / BC * BR * BC, *dp = dP + j0 / BC * BR * BC;
        TN(load)(kb, D, 0, J->k, &J->rk, b * d->Tk + j0, nc, D);
        TN(ds_tile)(p, dp, dsum, nr, nc, i0, j0, J->causal, scale);
        TN(accum)(dq, dp, kb, nr, nc, D); /* dq += dS k */
    }
    TN(store)(J->dq, &J->rq, row0, nr, D, dq);
}

/* Backward item (batch, kv head, key tile): its dk and dv rows, summed over the group's query
 * heads and their query tiles in order (causal: tiles wholly before the keys skipped). */
static void TN(dkv_item)(const sdpa_job *J, CT *w, int64_t it) {
    const dt_sdpa_dims *d = &J->d;
    int64_t b = it / J->nkt, j0 = it % J->nkt * BC, krow = b * d->Tk + j0, D = d->D, Dv = d->Dv;
    int nc = d->Tk - j0 < BC ? (int)(d->Tk - j0) : BC;
    CT *kt = w, *vt = kt + D * BC, *qb = vt + Dv * BC, *gb = qb + BR * D, *s = gb + BR * Dv;
    CT *dp = s + BR * BC, *dk = dp + BR * BC, *dv = dk + BC * D, scale = (CT)J->scale;
    TN(load)(kt, BC, 1, J->k, &J->rk, krow, nc, D);
    TN(load)(vt, BC, 1, J->v, &J->rk, krow, nc, Dv);
    memset(dk, 0, sizeof(CT) * (size_t)(BC * D));
    memset(dv, 0, sizeof(CT) * (size_t)(BC * Dv));
    for (int64_t hh = 0; hh < d->g; hh++)
        for (int64_t t = 0; t < J->nqt; t++) {
            int nr;
            int64_t row0 = TN(qrows)(J, b, hh, t, &nr), i0 = t * BR;
            if (J->causal && i0 + nr - 1 < j0) continue; /* no row of the tile sees these keys */
            TN(load)(qb, D, 0, J->q, &J->rq, row0, nr, D);
            TN(load)(gb, Dv, 0, J->g, &J->rq, row0, nr, Dv);
            TN(scores)(s, qb, kt, nr, nc, D);
            TN(scores)(dp, gb, vt, nr, nc, Dv);
            CT lse[BR];
            TN(lse_rows)(J, row0, nr, lse);
            TN(prob_tile)(s, lse, nr, nc, i0, j0, J->causal, scale);
            TN(ds_tile)(s, dp, J->dsum + row0, nr, nc, i0, j0, J->causal, scale);
            TN(accum_t)(dv, s, gb, nr, nc, Dv); /* dv += P^T dO */
            TN(accum_t)(dk, dp, qb, nr, nc, D); /* dk += dS^T q */
        }
    TN(store)(J->dk, &J->rk, krow, nc, D, dk);
    TN(store)(J->dv, &J->rk, krow, nc, Dv, dv);
}
