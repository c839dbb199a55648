/* The naive float8 references of float8_ref.h: a linear search, fine for tests. */
#include "float8_ref.h"

#include <math.h>

double t_f8_decode(int e5m2, unsigned code) {
    int man = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, ebits = 7 - man;
    int sign = (code >> 7) & 1;
    unsigned e = (code >> man) & ((1u << ebits) - 1u), m = code & ((1u << man) - 1u);
    unsigned emax = (1u << ebits) - 1u;
    double v;
    if (e5m2 && e == emax)
        v = m ? NAN : INFINITY;
    else if (!e5m2 && e == emax && m == (1u << man) - 1u)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m / (1 << man), 1 - bias);
    else
        v = ldexp(1.0 + (double)m / (1 << man), (int)e - bias);
    return sign ? -v : v;
}

unsigned t_f8_encode(int e5m2, double x) {
    unsigned sign = signbit(x) ? 0x80u : 0u;
    if (isnan(x)) return sign | (e5m2 ? 0x7eu : 0x7fu);
    double a = fabs(x), max = e5m2 ? 57344.0 : 448.0;
    if (isinf(a)) return sign | (e5m2 ? 0x7cu : 0x7eu);
    if (a >= max) return sign | (e5m2 ? 0x7bu : 0x7eu);
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c < 0x80u; c++) {
        double v = t_f8_decode(e5m2, c);
        if (!isfinite(v)) continue;
        double d = fabs(v - a);
        if (d < bd || (d == bd && (c & 1u) == 0)) bd = d, best = c;
    }
    return sign | best;
}

double t_f8_round(int e5m2, double x) { return t_f8_decode(e5m2, t_f8_encode(e5m2, x)); }
