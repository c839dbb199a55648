/* What the local-runtime benchmarks share: a monotonic clock, the median with min and max of
 * repeated timings, the last-level cache size, a cache flush and a filled input tensor.
 * Header-only: each benchmark
 * is one executable. */
#ifndef DT_BENCH_UTIL_H
#define DT_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dtensor.h>

/* Every figure is the median of at least this many repetitions, interleaved with the other
 * cases and references of the same run, so that a slow spell of a loaded machine falls on all
 * of them alike instead of on one. */
#define BENCH_REPS 15

typedef struct bench_stat {
    double med, min, max;
} bench_stat;

static inline double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median (the mean of the middle two for an even count), min and max of v[0..n). */
static inline bench_stat bench_stat_of(const double *v, int n) {
    double s[256];
    if (n > 256) n = 256;
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), bench_cmp_double);
    double med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    return (bench_stat){med, s[0], s[n - 1]};
}

/* The last-level cache in bytes as this CPU's cores see it (sysfs: the slice a core shares;
 * sysconf may add up every slice of the socket), 32 MiB when the system does not say. */
static inline size_t bench_llc_bytes(void) {
    long v = -1;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long k;
    if (f && fscanf(f, "%luK", &k) == 1) v = (long)k << 10;
    if (f) fclose(f);
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (v <= 0) v = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return v > 0 ? (size_t)v : (size_t)32 << 20;
}

/* Evicts what a timed run left in the caches: every rank writes then reads its part of a
 * buffer four times the last-level cache (the caller sizes buf at 4 x LLC / ranks). */
static inline void bench_flush(char *buf, size_t bytes) {
    static volatile unsigned long sink;
    memset(buf, (int)(sink & 0x7f), bytes);
    unsigned long acc = 0;
    for (size_t i = 0; i < bytes; i += 64)
        acc += (unsigned char)buf[i];
    sink += acc;
}

/* A 2-D f32 tensor on a 1-D mesh with placement pl ("S(0)", "P(sum)", ...), every local byte
 * 0x01 (small normal floats): a redistribute's input. */
static inline dt_status bench_input(dt_mesh *mesh, const int64_t shape[2], const char *pl,
                                    dt_tensor **out) {
    dt_placement p[1];
    int np;
    dt_tensor_info info;
    dt_status st = dt_placements_parse(pl, p, 1, &np);
    if (st == DT_OK) st = dt_tensor_zeros(mesh, DT_F32, 2, shape, 1, p, out);
    if (st == DT_OK) st = dt_tensor_info_get(*out, &info);
    if (st == DT_OK) memset(info.local_data, 1, info.local_bytes);
    return st;
}

/* One timed run, barrier to barrier on world: in redistributed to dst_text ("R", "S(0)", ...)
 * or, copy != 0, a memcpy of bytes from src to dst on every rank at once (the reference). */
static inline dt_status bench_redistribute_or_copy(dt_comm *world, dt_tensor *in,
                                                   const char *dst_text, int copy, char *dst,
                                                   const char *src, size_t bytes, double *out) {
    dt_placement p[1];
    int np;
    dt_tensor *u = NULL;
    dt_status st = dt_placements_parse(dst_text, p, 1, &np);
    if (st == DT_OK) st = dt_barrier(world);
    double t0 = bench_now();
    if (st == DT_OK && !copy)
        st = dt_tensor_redistribute(in, 1, p, &u);
    else if (st == DT_OK)
        memcpy(dst, src, bytes);
    if (st == DT_OK) st = dt_barrier(world);
    *out = bench_now() - t0;
    dt_tensor_release(u);
    return st;
}

#endif
