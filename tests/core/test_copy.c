/* The memory-speed primitives against naive loops: streaming copies at every alignment and
 * tail length, box copies and n-way reductions on both sides of the size from which they
 * stream (DT_STREAM_MIN_BYTES). */
#include <stdint.h>

#include "core/box.h"
#include "core/copy.h"
#include "core/pool.h"
#include "core/reduce.h"
#include "core/reduce_sum_f32.h"
#include "helpers.h"

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 9));
}

Test(copy, stream_every_alignment_and_tail) {
    const size_t big = DT_STREAM_MIN_BYTES + 1000;
    unsigned char *src = malloc(big + 256), *dst = malloc(big + 256);
    cr_assert(src && dst);
    fill(src, big + 256, 1);
    const size_t lens[] = {0, 1, 63, 64, 65, 127, 1000, 4096 + 17, big - 3};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (int so = 0; so < 64; so += 13)
            for (int dof = 0; dof < 64; dof += 7) {
                memset(dst, 0xee, big + 256);
                dt_copy_stream(dst + dof, src + so, lens[l]);
                for (size_t i = 0; i < lens[l]; i++)
                    if (dst[dof + i] != src[so + i])
                        cr_assert_fail("len %zu, src+%d, dst+%d: byte %zu differs", lens[l], so,
                                       dof, i);
                /* nothing outside the block */
                for (int i = 0; i < dof; i++)
                    cr_assert_eq(dst[i], 0xee);
                cr_assert_eq(dst[dof + lens[l]], 0xee, "len %zu: byte past the end", lens[l]);
            }
    free(src);
    free(dst);
}

/* dt_copy_large on both sides of each threshold (memcpy, split plain pieces, streamed pieces),
 * odd offsets and a ragged last piece, with 1 and 2 pool threads: the bytes, and nothing past
 * the block. */
Test(copy, large_copies_on_every_path) {
    const size_t big = DT_COPY_STREAM_MIN_BYTES + 4096;
    unsigned char *src = malloc(big + 64), *dst = malloc(big + 64);
    cr_assert(src && dst);
    fill(src, big + 64, 2);
    const size_t at[] = {DT_STREAM_MIN_BYTES, DT_COPY_SPLIT_MIN_BYTES, DT_COPY_STREAM_MIN_BYTES};
    for (int threads = 1; threads <= 2; threads++) {
        cr_assert_eq(dt_pool_set_threads(threads), DT_OK);
        for (size_t t = 0; t < sizeof at / sizeof at[0]; t++)
            for (size_t n = at[t] - 1; n <= at[t] + 1001; n += n == at[t] + 1 ? 1000 : 1) {
                memset(dst, 0xee, big + 64);
                dt_copy_large(dst + 3, src + 5, n);
                cr_assert(memcmp(dst + 3, src + 5, n) == 0, "dt_copy_large %zu bytes", n);
                cr_assert(dst[2] == 0xee && dst[3 + n] == 0xee, "%zu bytes: wrote outside", n);
            }
    }
    free(src);
    free(dst);
}

/* A (rows, cols) f32 column block of a wider array, large enough to stream, against a loop. */
Test(copy, box_copy_streams_large_boxes) {
    const int64_t rows = 1000, scols = 1000, dcols = 800, bcols = 300; /* 1200-byte runs */
    float *src = malloc(sizeof(float) * rows * scols), *dst = malloc(sizeof(float) * rows * dcols);
    cr_assert(src && dst);
    for (int64_t i = 0; i < rows * scols; i++)
        src[i] = (float)i;
    for (int64_t i = 0; i < rows * dcols; i++)
        dst[i] = -1;
    cr_assert(rows * bcols * 4 >= (int64_t)DT_STREAM_MIN_BYTES);
    const int64_t sshape[2] = {rows, scols}, dshape[2] = {rows, dcols}, box[2] = {rows, bcols};
    const int64_t soff[2] = {0, 123}, doff[2] = {0, 401};
    dt_box_copy(dst, dshape, doff, src, sshape, soff, box, 2, sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < dcols; c++) {
            float want = c >= 401 && c < 701 ? (float)(r * scols + 123 + c - 401) : -1.0f;
            cr_assert_eq(dst[r * dcols + c], want, "(%lld, %lld)", (long long)r, (long long)c);
        }
    free(src);
    free(dst);
}

/* A box packed and unpacked piece by piece (pieces of every length, from runs of one element to
 * more than the box) against the box's elements listed by a naive loop over its indices: 3-D
 * boxes that cover no dim, the last dim, or the last two dims whole (folded runs). */
Test(copy, box_ranges_in_pieces) {
    const int64_t shape[3] = {5, 6, 7};
    const int64_t boxes[4][2][3] = {{{1, 2, 3}, {3, 3, 2}},
                                    {{0, 1, 0}, {5, 4, 7}},
                                    {{2, 0, 0}, {2, 6, 7}},
                                    {{0, 0, 0}, {1, 1, 1}}};
    const size_t pieces[] = {1, 2, 5, 7, 13, 64, 1000};
    int32_t arr[5 * 6 * 7], back[5 * 6 * 7], want[5 * 6 * 7], buf[5 * 6 * 7];
    for (int i = 0; i < 5 * 6 * 7; i++)
        arr[i] = i * 3 + 1;
    for (int b = 0; b < 4; b++) {
        const int64_t *off = boxes[b][0], *ext = boxes[b][1];
        size_t numel = 0;
        for (int64_t i = 0; i < ext[0]; i++)
            for (int64_t j = 0; j < ext[1]; j++)
                for (int64_t k = 0; k < ext[2]; k++)
                    want[numel++] = arr[((off[0] + i) * 6 + off[1] + j) * 7 + off[2] + k];
        for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++) {
            memset(buf, 0, sizeof buf);
            for (size_t e = 0; e < numel; e += pieces[p]) {
                size_t len = numel - e < pieces[p] ? numel - e : pieces[p];
                dt_box_pack_range(buf + e, arr, shape, off, ext, 3, 4, e, len);
            }
            cr_assert(!memcmp(buf, want, numel * 4), "box %d, pieces of %zu: packed", b, pieces[p]);
            memset(back, 0, sizeof back);
            for (size_t e = 0; e < numel; e += pieces[p]) {
                size_t len = numel - e < pieces[p] ? numel - e : pieces[p];
                dt_box_unpack_range(back, shape, off, ext, 3, 4, e, len, buf + e, (int)(p & 1));
            }
            dt_stream_fence();
            for (int i = 0; i < 5 * 6 * 7; i++) {
                int64_t x = i / 42, y = i / 7 % 6, z = i % 7;
                int in = x >= off[0] && x < off[0] + ext[0] && y >= off[1] && y < off[1] + ext[1] &&
                         z >= off[2] && z < off[2] + ext[2];
                cr_assert_eq(back[i], in ? arr[i] : 0, "box %d, pieces of %zu: element %d", b,
                             pieces[p], i);
            }
        }
    }
}

/* Sums of 3 sources: below and above the streaming size, unaligned destination, in place. */
Test(copy, reduce_n_streams_large_results) {
    const size_t counts[] = {1000, DT_STREAM_MIN_BYTES / 4 + 77};
    for (int k = 0; k < 2; k++) {
        size_t n = counts[k];
        float *a = malloc(4 * n), *b = malloc(4 * n), *c = malloc(4 * n), *d = malloc(4 * n + 4);
        cr_assert(a && b && c && d);
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)(i % 97);
            b[i] = (float)(i % 13) * 0.5f;
            c[i] = -(float)(i % 5);
        }
        const void *srcs[3] = {a, b, c};
        dt_reduce_n(DT_F32, DT_REDUCE_SUM, d + 1, srcs, 3, n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(d[1 + i], a[i] + b[i] + c[i], "count %zu, element %zu", n, i);
        dt_reduce_n(DT_F32, DT_REDUCE_MAX, a, srcs, 3, n); /* in place into the first source */
        for (size_t i = 0; i < n; i++) {
            float m = (float)(i % 97), bb = (float)(i % 13) * 0.5f;
            cr_assert_eq(a[i], m > bb ? m : bb, "max, count %zu, element %zu", n, i);
        }
        free(a);
        free(b);
        free(c);
        free(d);
    }
}

/* Sums and averages of 1 to 8 sources, bit for bit against a loop that adds them in source order
 * (the fused passes must not reorder), f32 and f64, both sides of the streaming size. */
Test(copy, reduce_n_sums_in_source_order) {
    const size_t counts[] = {300, DT_STREAM_MIN_BYTES / 4 + 5};
    for (int c = 0; c < 2; c++) {
        size_t n = counts[c];
        float *f[8], *got = malloc(4 * n);
        double *g[8], *gotd = malloc(8 * n);
        cr_assert(got && gotd);
        for (int k = 0; k < 8; k++) {
            f[k] = malloc(4 * n);
            g[k] = malloc(8 * n);
            cr_assert(f[k] && g[k]);
            for (size_t i = 0; i < n; i++) /* magnitudes apart, so the order shows in the bits */
                g[k][i] = f[k][i] =
                    (float)(((i * 2654435761u + (size_t)k * 40503u) % 2001) - 1000) *
                    (k % 2 ? 1e-4f : 3.3f);
        }
        for (int ns = 1; ns <= 8; ns++)
            for (int avg = 0; avg < 2; avg++) {
                dt_reduce_op op = avg ? DT_REDUCE_AVG : DT_REDUCE_SUM;
                dt_reduce_n(DT_F32, op, got, (const void *const *)f, ns, n);
                dt_reduce_n(DT_F64, op, gotd, (const void *const *)g, ns, n);
                for (size_t i = 0; i < n; i++) {
                    float want = f[0][i];
                    double wantd = g[0][i];
                    for (int k = 1; k < ns; k++)
                        want += f[k][i], wantd += g[k][i];
                    if (avg) want /= (float)ns, wantd /= (double)ns;
                    cr_assert(memcmp(&got[i], &want, 4) == 0 && memcmp(&gotd[i], &wantd, 8) == 0,
                              "%d sources, %s, count %zu, element %zu: %.9g / %.17g, expected "
                              "%.9g / %.17g",
                              ns, avg ? "avg" : "sum", n, i, got[i], gotd[i], want, wantd);
                }
            }
        for (int k = 0; k < 8; k++) {
            free(f[k]);
            free(g[k]);
        }
        free(got);
        free(gotd);
    }
}

/* The one-pass f32 sums (core/reduce_sum_f32.c), AVX2 and SSE2 paths: every destination
 * alignment and short count around the vector steps, streamed or not, into a separate array and
 * in place into a source, bit for bit against the loop in source order. */
Test(copy, sum_f32_every_alignment_and_path) {
    enum { MAXC = 300, NS = 5 };
    float *f[NS], *got = malloc(4 * (MAXC + 16)), *keep = malloc(4 * (MAXC + 16));
    cr_assert(got && keep);
    for (int k = 0; k < NS; k++) {
        f[k] = malloc(4 * (MAXC + 16));
        cr_assert(f[k]);
        for (size_t i = 0; i < MAXC + 16; i++)
            f[k][i] = (float)(((i * 2654435761u + (size_t)k * 40503u) % 2001) - 1000) *
                      (k % 2 ? 1e-4f : 3.3f);
    }
    memcpy(keep, f[1], 4 * (MAXC + 16));
    for (int path = 0; path < 2; path++) {
        dt_sum_f32_use_avx2(path);
        for (size_t count = 0; count <= MAXC; count += count < 70 ? 1 : 23)
            for (int off = 0; off < 9; off++)
                for (int mode = 0; mode < 6; mode++) { /* stream x avg x in place */
                    int stream = mode & 1, avg = (mode >> 1) & 1, inplace = mode >> 2;
                    const float *srcs[NS];
                    for (int k = 0; k < NS; k++)
                        srcs[k] = f[k] + off;
                    float *dst = inplace ? f[1] + off : got + off;
                    cr_assert(dt_sum_f32(dst, srcs, NS, count, avg, stream));
                    if (stream) dt_stream_fence();
                    for (size_t i = 0; i < count; i++) {
                        float want = f[0][off + i];
                        for (int k = 1; k < NS; k++)
                            want += k == 1 ? keep[off + i] : f[k][off + i];
                        if (avg) want /= (float)NS;
                        cr_assert(memcmp(&dst[i], &want, 4) == 0,
                                  "path %d, count %zu, offset %d, mode %d, element %zu: %.9g, "
                                  "expected %.9g",
                                  path, count, off, mode, i, dst[i], want);
                    }
                    if (inplace) memcpy(f[1], keep, 4 * (MAXC + 16));
                }
    }
    dt_sum_f32_use_avx2(1);
    for (int k = 0; k < NS; k++)
        free(f[k]);
    free(got);
    free(keep);
}
