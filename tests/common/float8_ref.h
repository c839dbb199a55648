/* Naive OCP float8 references for the tests, written from the bit layout and independent of
 * src/core/float8.h: decode reads the fields; encode picks the nearest decoded value (ties
 * to the even code), saturating finite overflow and e4m3's infinities to +-max. */
#ifndef DT_TEST_FLOAT8_REF_H
#define DT_TEST_FLOAT8_REF_H

/* e5m2: 0 for e4m3 (bias 7, max 448, no inf), 1 for e5m2 (bias 15, max 57344, inf). */
double t_f8_decode(int e5m2, unsigned code);
unsigned t_f8_encode(int e5m2, double x);
/* decode(encode(x)). */
double t_f8_round(int e5m2, double x);

#endif
