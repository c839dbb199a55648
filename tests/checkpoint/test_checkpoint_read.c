/* What a load reads: each rank only the bytes of the chunks that overlap its shard (counted
 * by Linux's per-thread I/O accounting), and a target that cuts the saved rows into many short
 * runs copied out of a mapping of the chunk, bit-exactly, with truncated or grown data files
 * still an error naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include "ckpt_common.h"
#include "helpers.h"

/* Bytes this thread has read through read/pread (Linux's per-thread I/O accounting; bytes
 * copied out of a mapping are not counted). */
static long long thread_rchar(void) {
    FILE *f = fopen("/proc/thread-self/io", "r");
    if (!f) return -1;
    long long v = -1;
    char line[128];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %lld", &v) == 1) break;
    fclose(f);
    return v;
}

/* The counts are per thread, so each rank gets its own: threads, not fibers (core/fiber.h). */
static void threads_not_fibers(void) { setenv("DT_LOCAL_FIBERS", "0", 1); }
TestSuite(checkpoint_read, .init = threads_not_fibers);

typedef struct read_arg {
    const char *dir;
    long long read[4], shard_bytes;
    int verify;       /* the load's option */
    const char *pl;   /* the target's placement; NULL: S(1) */
    int64_t shape[2]; /* "big"'s; {0, 0}: [64, 4096] */
} read_arg;

/* Loads "big" [64, 4096] f32 onto 4 ranks [S(1)] (1024 columns each; or a->pl), counting what
 * each rank reads. */
static dt_status read_body(dt_ctx *ctx, void *arg) {
    read_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){4}, NULL, &mesh));
    dt_tensor *t;
    dt_placement pl;
    int np;
    R_OK(dt_placements_parse(a->pl ? a->pl : "S(1)", &pl, 1, &np));
    int64_t shape[2] = {a->shape[0] ? a->shape[0] : 64, a->shape[1] ? a->shape[1] : 4096};
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, shape, 1, &pl, &t));
    dt_checkpoint_load_options o = {.strict = 1, .verify = a->verify};
    long long before = thread_rchar();
    R_OK(dt_checkpoint_load(a->dir, (const char *[]){"big"}, &t, 1, &o));
    a->read[dt_ctx_rank(ctx)] = thread_rchar() - before;
    dt_tensor_info info;
    R_OK(dt_tensor_info_get(t, &info));
    a->shard_bytes = (long long)info.local_bytes;
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

/* "big" of shape saved from 2 ranks with placement pl, and the 4-rank [S(1)] load of it. */
static ct_run save_shaped(const char *path, const char *pl, const int64_t *shape,
                          ct_run *load_out) {
    ct_run r = {.dir = path, .mesh_ndim = 1, .mesh_shape = {2}};
    r.specs[r.n++] = ct_spec_make("big", DT_F32, 2, shape, pl, 9, 0);
    t_run(2, ct_body, &r);
    *load_out = r;
    load_out->load = 1, load_out->mesh_shape[0] = 4;
    snprintf(load_out->specs[0].placements, sizeof load_out->specs[0].placements, "S(1)");
    return r;
}

/* "big" [64, 4096] f32. */
static ct_run save_big(const char *path, const char *pl, ct_run *load_out) {
    return save_shaped(path, pl, (int64_t[]){64, 4096}, load_out);
}

static long long file_bytes(const char *path) {
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "stat %s", path);
    return (long long)sb.st_size;
}

Test(checkpoint_read, load_reads_only_the_overlap) {
    if (thread_rchar() < 0) cr_skip_test("no /proc/thread-self/io");
    char *dir = t_tmpdir(), path[600], meta[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    ct_run l;
    save_big(path, "S(0)", &l); /* two chunks of 32 rows; each rank of the load wants a quarter
                                   of every row: runs too sparse to map, one pread each */
    read_arg a = {path, .verify = DT_CHECKPOINT_VERIFY_OFF};
    t_run(4, read_body, &a);
    /* its shard, the metadata, the two files' headers (~200 B each) and what reading
     * /proc/thread-self/io itself counts (~200 B); the two chunks it touches are 1 MiB */
    for (int k = 0; k < 4; k++)
        cr_expect_leq(a.read[k], a.shard_bytes + file_bytes(meta) + 2048,
                      "rank %d read %lld bytes for a %lld-byte shard", k, a.read[k], a.shard_bytes);
    t_run(4, ct_body, &l);
    t_rmtree(dir);
}

/* A verified load reads its range in whole tiles: with blocks of 24 KiB, a chunk of [32, 4096]
 * f32 is tiled as 4 bands of 4 KiB, 6 rows a tile; each rank of a 4-rank [S(0)] load (16 of
 * the chunk's 32 rows, every band) reads the row groups its rows touch, its file's header and
 * the metadata, and nothing else; unverified, its rows alone. */
Test(checkpoint_read, a_verified_load_reads_its_edge_row_groups_whole) {
    if (thread_rchar() < 0) cr_skip_test("no /proc/thread-self/io");
    char *dir = t_tmpdir(), path[600], meta[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    ct_run r = {.dir = path, .mesh_ndim = 1, .mesh_shape = {2}, .block_bytes = 24576};
    r.specs[r.n++] = ct_spec_make("big", DT_F32, 2, (int64_t[]){64, 4096}, "S(0)", 9, 0);
    t_run(2, ct_body, &r);
    long long hend[2];
    for (int f = 0; f < 2; f++) {
        char fp[700];
        snprintf(fp, sizeof fp, "%s/rank-%05d.safetensors", path, f);
        FILE *fh = fopen(fp, "rb");
        unsigned char b[8];
        cr_assert(fh && fread(b, 1, 8, fh) == 8);
        fclose(fh);
        hend[f] = 8;
        for (int i = 0; i < 8; i++)
            hend[f] += (long long)b[i] << (8 * i);
    }
    for (int verify = DT_CHECKPOINT_VERIFY_OFF; verify <= DT_CHECKPOINT_VERIFY_BLOCKS; verify++) {
        read_arg a = {path, .verify = verify, .pl = "S(0)"};
        t_run(4, read_body, &a);
        for (int k = 0; k < 4; k++) {
            long long G = 6, row = 16384, lo = (k % 2) * 16, hi = lo + 16; /* rows */
            if (verify == DT_CHECKPOINT_VERIFY_BLOCKS) {
                lo = lo / G * G;
                hi = (hi + G - 1) / G * G < 32 ? (hi + G - 1) / G * G : 32;
            }
            lo *= row, hi *= row;
            long long want = hi - lo + file_bytes(meta) + hend[k / 2];
            cr_expect(a.read[k] >= want && a.read[k] <= want + 512,
                      "verify %d: rank %d read %lld bytes, %lld expected (%lld of its chunk, "
                      "its shard is %lld)",
                      verify, k, a.read[k], want, hi - lo, a.shard_bytes);
        }
    }
    t_rmtree(dir);
}

/* A column split of tiled chunks reads exactly its bands: "big" [8, 262144] f32 saved from 2
 * ranks [S(0)] (chunks [4, 262144]: rows of 1 MiB, 64 bands of 16 KiB) or [S(1)] (chunks
 * [8, 131072]: 64 bands of 8 KiB), loaded verified onto 4 ranks [S(1)], where rank k's columns
 * are 16 or 32 whole bands (256 KiB a row, read with pread straight into the shard): its
 * shard's bytes, the metadata and the headers, nothing more. With [64, 4096] (4 or 2 bands of
 * 4 KiB), a rank's 4 KiB a row come out of a mapping: no data through read(). Both load the
 * saved data (ct_body). */
Test(checkpoint_read, a_column_split_reads_exactly_its_bands) {
    if (thread_rchar() < 0) cr_skip_test("no /proc/thread-self/io");
    static const char *const saved[] = {"S(0)", "S(1)"};
    for (int wide = 0; wide < 2; wide++)
        for (int i = 0; i < 2; i++) {
            char *dir = t_tmpdir(), path[600], meta[700];
            snprintf(path, sizeof path, "%s/ck", dir);
            snprintf(meta, sizeof meta, "%s/metadata.json", path);
            ct_run l;
            int64_t shape[2] = {wide ? 8 : 64, wide ? 262144 : 4096};
            save_shaped(path, saved[i], shape, &l);
            read_arg a = {path, .verify = DT_CHECKPOINT_VERIFY_BLOCKS,
                          .shape = {shape[0], shape[1]}};
            t_run(4, read_body, &a);
            const char *what = wide ? "wide" : "narrow";
            for (int k = 0; k < 4; k++) {
                long long least = wide ? a.shard_bytes : 0;
                cr_expect(a.read[k] >= least, "%s, saved %s: rank %d read %lld bytes", what,
                          saved[i], k, a.read[k]);
                cr_expect_leq(a.read[k], least + file_bytes(meta) + 2048,
                              "%s, saved %s: rank %d read %lld bytes for a %lld-byte shard", what,
                              saved[i], k, a.read[k], a.shard_bytes);
            }
            t_run(4, ct_body, &l);
            t_rmtree(dir);
        }
}

Test(checkpoint_read, short_dense_runs_come_from_a_mapping) {
    char *dir = t_tmpdir(), path[600], f1[700], meta[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f1, sizeof f1, "%s/rank-00001.safetensors", path);
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    ct_run l;
    save_big(path, "S(1)", &l); /* chunks of 2048 columns: each loading rank wants 4 KiB of
                                   every 8 KiB row of one of them (64 runs) */
    t_run(4, ct_body, &l);      /* bit-exact */
    if (thread_rchar() >= 0) {  /* and through the mapping: no data bytes through read() */
        read_arg a = {path, .verify = DT_CHECKPOINT_VERIFY_OFF};
        t_run(4, read_body, &a);
        for (int k = 0; k < 4; k++)
            cr_expect_leq(a.read[k], file_bytes(meta) + 2048,
                          "rank %d read %lld bytes with read(): not the mapped path", k, a.read[k]);
    }
    size_t len;
    char *orig = t_slurp(f1, &len);
    memset(orig + len, 0, 8);
    for (int grow = 0; grow < 2; grow++) { /* 5 bytes short, then 8 too many */
        t_spit(f1, orig, grow ? len + 8 : len - 5);
        cr_expect_neq(dt_local_run(4, ct_body, &l, NULL), DT_OK, "a %s file loaded",
                      grow ? "grown" : "truncated");
        cr_expect(strstr(dt_last_error(), "truncated or overwritten") &&
                      strstr(dt_last_error(), "rank-00001.safetensors"),
                  "%s", dt_last_error());
    }
    t_spit(f1, orig, len);
    t_run(4, ct_body, &l);
    free(orig);
    t_rmtree(dir);
}

static uint64_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Random shapes whose last dim is cut finer on load than on save (or the other way round),
 * uneven included, with leading dims that give enough runs to be mapped: bit-exact loads. */
Test(checkpoint_read, random_short_runs) {
    uint64_t seed = getenv("DT_CKPT_SEED") ? strtoull(getenv("DT_CKPT_SEED"), NULL, 10) : 20261202;
    cr_log_info("seed %llu (DT_CKPT_SEED replays it)", (unsigned long long)seed);
    static const dt_dtype dts[] = {DT_F32, DT_BF16, DT_I64, DT_F16};
    char *dir = t_tmpdir(), path[600];
    for (int c = 0; c < 12; c++) {
        uint64_t s = seed * 1000 + (uint64_t)c;
        snprintf(path, sizeof path, "%s/ck%d", dir, c);
        int nd = 2 + (int)(rnd(&s) % 2), ws = 1 + (int)(rnd(&s) % 3), wl = 1 + (int)(rnd(&s) % 4);
        int64_t shape[3];
        for (int d = 0; d < nd - 1; d++)
            shape[d] = 3 + (int64_t)(rnd(&s) % 10);
        shape[nd - 1] = 2 + (int64_t)(rnd(&s) % 200);
        char last[8], lead[8];
        snprintf(last, sizeof last, "S(%d)", nd - 1);
        snprintf(lead, sizeof lead, "S(%d)", (int)(rnd(&s) % (uint64_t)(nd - 1)));
        ct_run r = {.dir = path, .mesh_ndim = 1, .mesh_shape = {ws}};
        r.specs[r.n++] =
            ct_spec_make("t", dts[rnd(&s) % 4], nd, shape, rnd(&s) % 3 ? last : lead, s, 0);
        ct_run l = r;
        l.load = 1, l.mesh_shape[0] = wl;
        snprintf(l.specs[0].placements, sizeof l.specs[0].placements, "%s", last);
        dt_status st = dt_local_run(ws, ct_body, &r, NULL);
        cr_assert_eq(st, DT_OK, "seed %llu case %d save: %s", (unsigned long long)seed, c,
                     dt_last_error());
        st = dt_local_run(wl, ct_body, &l, NULL);
        cr_assert_eq(st, DT_OK, "seed %llu case %d: [%s] on %d -> [%s] on %d: %s",
                     (unsigned long long)seed, c, r.specs[0].placements, ws, last, wl,
                     dt_last_error());
    }
    t_rmtree(dir);
}
