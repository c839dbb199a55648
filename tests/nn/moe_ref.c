/* The dense MoE reference (moe_ref.h). */
#include <math.h>
#include <string.h>

#include "helpers.h"
#include "moe_ref.h"

/* Uniform in [-1, 1), from (seed, i) by splitmix64: no ties among the logits. */
double moe_rnd(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / (double)(1ull << 52) - 1;
}

/* ---- the dense reference: one token at a time, all experts on one rank ------------------ */

static double sigm(double v) {
    return 1 / (1 + exp(-v));
}

/* scores, the top-k (larger score first, ties to the lower expert) and the gates. */
void moe_ref_route(ref *r) {
    int k = r->o.top_k;
    for (int64_t t = 0; t < r->N; t++) {
        double *p = r->score + t * E, mx = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++) {
            double l = 0;
            for (int d = 0; d < D; d++)
                l += r->x[t * D + d] * r->rw[e * D + d];
            p[e] = l, mx = l > mx ? l : mx;
        }
        for (int e = 0; e < E; e++) {
            if (r->o.score == DT_MOE_SOFTMAX)
                p[e] = exp(p[e] - mx), sum += p[e];
            else
                p[e] = sigm(p[e]);
        }
        for (int e = 0; r->o.score == DT_MOE_SOFTMAX && e < E; e++)
            p[e] /= sum;
        unsigned char taken[E] = {0};
        double gs = 0;
        for (int s = 0; s < k; s++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
            taken[best] = 1;
            r->choice[t * k + s] = best, r->gate[t * k + s] = p[best], gs += p[best];
        }
        for (int s = 0; r->o.route_norm && s < k; s++)
            r->gate[t * k + s] /= gs;
    }
}

/* y = w2_e^T (silu(w1_e^T x) * w3_e^T x), with h1, h3 kept for the gradients. */
static void expert(const ref *r, int e, const double *x, double *h1, double *h3, double *y) {
    for (int j = 0; j < H; j++) {
        h1[j] = h3[j] = 0;
        for (int d = 0; d < D; d++) {
            h1[j] += x[d] * r->w1[(e * D + d) * H + j];
            h3[j] += x[d] * r->w3[(e * D + d) * H + j];
        }
    }
    for (int d = 0; d < D; d++) {
        y[d] = 0;
        for (int j = 0; j < H; j++)
            y[d] += h1[j] * sigm(h1[j]) * h3[j] * r->w2[(e * H + j) * D + d];
    }
}

/* out (N, D) and sum(out * wgt) with the keep mask as it is. */
double moe_ref_forward(ref *r, const double *wgt, double *out) {
    moe_ref_route(r);
    int k = r->o.top_k;
    double loss = 0, h1[H], h3[H], y[D];
    for (int64_t t = 0; t < r->N; t++) {
        double o[D] = {0};
        for (int s = 0; s < k; s++) {
            if (!r->keep[t * k + s]) continue;
            expert(r, (int)r->choice[t * k + s], r->x + t * D, h1, h3, y);
            for (int d = 0; d < D; d++)
                o[d] += r->gate[t * k + s] * y[d];
        }
        for (int d = 0; d < D; d++)
            loss += o[d] * wgt[t * D + d];
        if (out) memcpy(out + t * D, o, sizeof o);
    }
    return loss;
}

/* d sum(out * wgt) / d (x, rw, w1, w2, w3), by hand. */
void moe_ref_gradients(ref *r, const double *wgt, double *g[5]) {
    int k = r->o.top_k;
    memset(g[0], 0, sizeof(double) * (size_t)(r->N * D));
    memset(g[1], 0, sizeof(double) * E * D);
    for (int i = 2; i < 5; i++)
        memset(g[i], 0, sizeof(double) * E * D * H);
    moe_ref_route(r);
    for (int64_t t = 0; t < r->N; t++) {
        const double *x = r->x + t * D, *dout = wgt + t * D;
        double dgate[8] = {0}, h1[H], h3[H], y[D];
        for (int s = 0; s < k; s++) {
            if (!r->keep[t * k + s]) continue;
            int e = (int)r->choice[t * k + s];
            double gt = r->gate[t * k + s], da[H];
            expert(r, e, x, h1, h3, y);
            for (int d = 0; d < D; d++)
                dgate[s] += dout[d] * y[d];
            for (int j = 0; j < H; j++) {
                da[j] = 0;
                for (int d = 0; d < D; d++) {
                    da[j] += r->w2[(e * H + j) * D + d] * gt * dout[d];
                    g[3][(e * H + j) * D + d] += h1[j] * sigm(h1[j]) * h3[j] * gt * dout[d];
                }
                double sg = sigm(h1[j]);
                double dh1 = da[j] * h3[j] * sg * (1 + h1[j] * (1 - sg)), dh3 = da[j] * h1[j] * sg;
                for (int d = 0; d < D; d++) {
                    g[2][(e * D + d) * H + j] += x[d] * dh1;
                    g[4][(e * D + d) * H + j] += x[d] * dh3;
                    g[0][t * D + d] +=
                        r->w1[(e * D + d) * H + j] * dh1 + r->w3[(e * D + d) * H + j] * dh3;
                }
            }
        }
        /* through the gates: route_norm, then the scores, then the logits */
        double dp[E] = {0}, *p = r->score + t * E, vs = 0, dot = 0;
        for (int s = 0; s < k; s++)
            vs += p[r->choice[t * k + s]];
        for (int s = 0; s < k; s++)
            dot += dgate[s] * r->gate[t * k + s];
        for (int s = 0; s < k; s++)
            dp[r->choice[t * k + s]] += r->o.route_norm ? (dgate[s] - dot) / vs : dgate[s];
        double pdp = 0;
        for (int e = 0; e < E; e++)
            pdp += p[e] * dp[e];
        for (int e = 0; e < E; e++) {
            double dl =
                r->o.score == DT_MOE_SOFTMAX ? p[e] * (dp[e] - pdp) : dp[e] * p[e] * (1 - p[e]);
            for (int d = 0; d < D; d++) {
                g[1][e * D + d] += dl * x[d];
                g[0][t * D + d] += dl * r->rw[e * D + d];
            }
        }
    }
}

/* The reference's gradients against central differences of its own forward. */
void moe_ref_check_fd(ref *r, const double *wgt, double *const g[5]) {
    double *param[5] = {r->x, r->rw, r->w1, r->w2, r->w3};
    int64_t n[5] = {r->N * D, E * D, E * D * H, E * H * D, E * D * H};
    for (int i = 0; i < 5; i++)
        for (int64_t j = 0; j < n[i]; j++) {
            double v = param[i][j], h = 1e-6;
            param[i][j] = v + h;
            double lp = moe_ref_forward(r, wgt, NULL);
            param[i][j] = v - h;
            double lm = moe_ref_forward(r, wgt, NULL);
            param[i][j] = v;
            double fd = (lp - lm) / (2 * h);
            cr_assert(fabs(fd - g[i][j]) <= 1e-6 * (1 + fabs(fd)),
                      "reference gradient %d[%lld] = %.12g, finite differences %.12g", i,
                      (long long)j, g[i][j], fd);
        }
    moe_ref_route(r);
}
