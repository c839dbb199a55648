/* What a load checks, and how every rank learns the outcome: 200 random one-byte flips (over
 * every file, and aimed at the rank files' safetensors headers, metadata.json and the data)
 * loaded onto other layouts either fail on every rank with one status and message or load the
 * saved data exactly; a header length of 2^63 and garbage header JSON fail by name; a partial
 * read checks every block it touches (its edge blocks in whole) and nothing else; a failure on
 * one rank fails all of them naming that rank, the tensor and the file, unless no_dist; and
 * checkpoints without block checksums load by the whole-chunk rule. Expected shards come from
 * ckpt_common.c's full tensors (index arithmetic written there). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include "ckpt_common.h"
#include "helpers.h"

static uint64_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* --- a load whose outcome every rank records ------------------------------------------- */

#define MAXR 8

typedef struct outcome {
    ct_run r;     /* the target layout (r.load is ignored) */
    int odd_rank; /* this rank asks for odd_names (nullable) instead */
    const char *const *odd_names;
    int no_dist, verify;
    dt_status st[MAXR];
    char msg[MAXR][1024];
    int wrong[MAXR]; /* DT_OK, but the shard differs from the saved tensor */
} outcome;

static dt_status outcome_body(dt_ctx *ctx, void *arg) {
    outcome *o = arg;
    const ct_run *r = &o->r;
    int rank = dt_ctx_rank(ctx);
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, r->mesh_ndim, r->mesh_shape, NULL, &mesh));
    dt_tensor *t[CT_MAX] = {0};
    const char *names[CT_MAX];
    for (int i = 0; i < r->n; i++) {
        dt_placement pl[DT_MESH_MAX_NDIM];
        int np;
        R_OK(dt_placements_parse(r->specs[i].placements, pl, DT_MESH_MAX_NDIM, &np));
        R_OK(dt_tensor_zeros(mesh, r->specs[i].dtype, r->specs[i].ndim, r->specs[i].shape, np, pl,
                             &t[i]));
        names[i] = o->odd_names && rank == o->odd_rank ? o->odd_names[i] : r->specs[i].name;
    }
    dt_checkpoint_load_options lo = {.strict = 1, .no_dist = o->no_dist, .verify = o->verify};
    o->st[rank] = dt_checkpoint_load(r->dir, names, t, r->n, &lo);
    snprintf(o->msg[rank], sizeof o->msg[rank], "%s", o->st[rank] ? dt_last_error() : "");
    for (int i = 0; i < r->n && o->st[rank] == DT_OK; i++) {
        size_t bytes;
        void *full = ct_full(&r->specs[i], &bytes);
        R_CHECK(full, "out of memory");
        o->wrong[rank] |= ct_check_shard(t[i], full) != DT_OK;
        free(full);
    }
    for (int i = 0; i < r->n; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return DT_OK;
}

static int world_of(const ct_run *r) {
    int w = 1;
    for (int d = 0; d < r->mesh_ndim; d++)
        w *= r->mesh_shape[d];
    return w;
}

static void run_outcome(outcome *o) {
    memset(o->st, 0, sizeof o->st), memset(o->wrong, 0, sizeof o->wrong);
    t_run(world_of(&o->r), outcome_body, o);
}

/* The fixed 2x2 save's tensors onto `world` ranks of a 1-D mesh, cut along dim `dim` of each
 * tensor (its last dim when dim < 0; 0-d tensors replicated). */
static ct_run onto(ct_run r, int world, int dim) {
    r.load = 1, r.mesh_ndim = 1, r.mesh_shape[0] = world;
    for (int i = 0; i < r.n; i++) {
        int nd = r.specs[i].ndim, d = dim < 0 ? nd - 1 : dim;
        if (nd == 0)
            snprintf(r.specs[i].placements, sizeof r.specs[i].placements, "R");
        else
            snprintf(r.specs[i].placements, sizeof r.specs[i].placements, "S(%d)",
                     d < nd ? d : nd - 1);
    }
    return r;
}

/* The ranks agree: one status and one message everywhere. */
static void expect_agreed(const outcome *o, const char *what) {
    for (int k = 1; k < world_of(&o->r); k++) {
        cr_expect_eq(o->st[k], o->st[0], "%s: rank %d returned %s, rank 0 %s", what, k,
                     dt_status_str(o->st[k]), dt_status_str(o->st[0]));
        cr_expect_str_eq(o->msg[k], o->msg[0], "%s: rank %d's message differs", what, k);
    }
}

static uint64_t header_end(const char *path) {
    size_t len;
    unsigned char *b = (unsigned char *)t_slurp(path, &len);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)b[i] << (8 * i);
    free(b);
    cr_assert(h + 8 <= len, "%s: header %llu", path, (unsigned long long)h);
    return 8 + h;
}

static void xor_byte(const char *path, long at, unsigned char x) {
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0, "open %s", path);
    unsigned char c;
    cr_assert_eq(pread(fd, &c, 1, at), 1);
    c ^= x;
    cr_assert_eq(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

/* --- 200 flips ---------------------------------------------------------------------------- */

Test(checkpoint_verify, flipped_bytes_never_load_wrong_data) {
    uint64_t seed = getenv("DT_CKPT_SEED") ? strtoull(getenv("DT_CKPT_SEED"), NULL, 10) : 20261206;
    int trials = getenv("DT_CKPT_FLIPS") ? atoi(getenv("DT_CKPT_FLIPS")) : 200;
    cr_log_info("seed %llu (DT_CKPT_SEED replays it), %d flips (DT_CKPT_FLIPS)",
                (unsigned long long)seed, trials);
    char *dir = t_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/ck", dir);
    ct_run saved = ct_fixed(path, 0);
    saved.block_bytes = 64; /* chunks of several tiles (bands of 8 bytes or more), cut by the
                               targets below along their first and last dims */
    t_run(4, ct_body, &saved);
    char meta[700];
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    size_t mlen;
    char *mtext = t_slurp(meta, &mlen);
    cr_assert(strstr(mtext, "\"block_bands\":2,\"block_rows\":"), "no tiled chunk: %s", mtext);
    free(mtext);
    /* the files: rank files (header and data sections), metadata.json, blob.bin */
    char files[6][700];
    size_t size[6];
    uint64_t hend[6] = {0};
    int nf = 0;
    for (int k = 0; k < 4; k++)
        snprintf(files[nf++], sizeof files[0], "%s/rank-%05d.safetensors", path, k);
    snprintf(files[nf++], sizeof files[0], "%s/metadata.json", path);
    snprintf(files[nf++], sizeof files[0], "%s/blob.bin", path);
    size_t total = 0;
    for (int f = 0; f < nf; f++) {
        free(t_slurp(files[f], &size[f]));
        if (f < 4) hend[f] = header_end(files[f]);
        total += size[f];
    }
    static const char *const kinds[] = {"uniform", "header", "metadata", "data"};
    int errored = 0, identical = 0, per_kind[4][2] = {{0}};
    uint64_t s = seed;
    for (int trial = 0; trial < trials; trial++) {
        int kind = trial % 4, f;
        size_t at;
        if (kind == 0) { /* any byte of any file */
            size_t u = (size_t)(rnd(&s) % total);
            for (f = 0; u >= size[f]; f++)
                u -= size[f];
            at = u;
        } else if (kind == 2) {
            f = 4, at = (size_t)(rnd(&s) % size[4]);
        } else {
            f = (int)(rnd(&s) % 4);
            at = kind == 1 ? (size_t)(rnd(&s) % hend[f])
                           : (size_t)(hend[f] + rnd(&s) % (size[f] - hend[f]));
        }
        unsigned char x = (unsigned char)(1 + rnd(&s) % 255);
        xor_byte(files[f], (long)at, x);
        outcome o = {.r = onto(saved, trial % 3 ? 3 : 4, trial % 2 ? 0 : -1)};
        run_outcome(&o);
        char what[1200];
        snprintf(what, sizeof what,
                 "seed %llu trial %d (%s): byte %zu of %.700s ^= 0x%02x onto %d ranks",
                 (unsigned long long)seed, trial, kinds[kind], at, files[f], x, world_of(&o.r));
        expect_agreed(&o, what);
        if (o.st[0] == DT_OK) {
            for (int k = 0; k < world_of(&o.r); k++)
                cr_expect(!o.wrong[k], "%s: DT_OK with wrong data on rank %d", what, k);
            identical++, per_kind[kind][1]++;
        } else {
            cr_expect(strstr(o.msg[0], "dt_checkpoint_load: rank "), "%s: %s", what, o.msg[0]);
            errored++, per_kind[kind][0]++;
        }
        char blob[16] = {0}; /* the blob: its checksum or its bytes */
        size_t blen;
        dt_status bst = dt_checkpoint_blob(path, blob, sizeof blob, &blen);
        cr_expect(bst != DT_OK || (blen == 7 && !memcmp(blob, "step=42", 7)), "%s: blob", what);
        xor_byte(files[f], (long)at, x); /* back as it was */
    }
    cr_log_info("%d flips: %d failed on every rank, %d loaded the saved data", trials, errored,
                identical);
    for (int k = 0; k < 4; k++)
        cr_log_info("  %-8s %d failed, %d loaded the saved data", kinds[k], per_kind[k][0],
                    per_kind[k][1]);
    printf("flips: %d failed on every rank, %d loaded the saved data (uniform %d/%d, header "
           "%d/%d, metadata %d/%d, data %d/%d)\n",
           errored, identical, per_kind[0][0], per_kind[0][1], per_kind[1][0], per_kind[1][1],
           per_kind[2][0], per_kind[2][1], per_kind[3][0], per_kind[3][1]);
    /* every flip in the data changes a block some rank reads */
    cr_expect_eq(per_kind[3][1], 0, "%d data flips loaded", per_kind[3][1]);
    outcome clean = {.r = onto(saved, 3, 0)};
    run_outcome(&clean);
    cr_expect_eq(clean.st[0], DT_OK, "%s", clean.msg[0]);
    t_rmtree(dir);
}

/* --- a rank file's header --------------------------------------------------------------- */

Test(checkpoint_verify, header_length_2_63_and_garbage_json_fail_by_name) {
    char *dir = t_tmpdir(), path[600], f1[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f1, sizeof f1, "%s/rank-00001.safetensors", path);
    ct_run saved = ct_fixed(path, 0);
    t_run(4, ct_body, &saved);
    size_t len;
    char *orig = t_slurp(f1, &len), *bad = malloc(len);
    uint64_t hend = header_end(f1);
    outcome o = {.r = onto(saved, 3, 0)};

    memcpy(bad, orig, len);
    memset(bad, 0, 8), bad[7] = (char)0x80; /* 2^63, little-endian */
    t_spit(f1, bad, len);
    run_outcome(&o);
    expect_agreed(&o, "header length 2^63");
    cr_expect_eq(o.st[0], DT_ERR_PARSE, "%s", o.msg[0]);
    cr_expect(strstr(o.msg[0], "header length 9223372036854775808") &&
                  strstr(o.msg[0], "rank-00001.safetensors") && strstr(o.msg[0], "rank "),
              "%s", o.msg[0]);
    T_ERR(dt_checkpoint_check(path, 1), DT_ERR_PARSE, "header length 9223372036854775808");

    memcpy(bad, orig, len); /* the JSON replaced by garbage of the same length */
    memset(bad + 8, 'x', (size_t)hend - 8);
    memcpy(bad + 8, "{\"w\":", 5);
    t_spit(f1, bad, len);
    run_outcome(&o);
    expect_agreed(&o, "garbage header");
    cr_expect_eq(o.st[0], DT_ERR_PARSE, "%s", o.msg[0]);
    cr_expect(strstr(o.msg[0], "bad safetensors header") && strstr(o.msg[0], "rank-00001"), "%s",
              o.msg[0]);
    T_ERR(dt_checkpoint_check(path, 1), DT_ERR_PARSE, "bad safetensors header");

    /* valid JSON that lies: a chunk's shape [7,5] written as [5,7] (same bytes) */
    memcpy(bad, orig, len);
    char *sh = memmem(bad, len, "\"shape\":[7,5]", 13);
    cr_assert(sh, "rank 1's layers.0.w chunk");
    sh[9] = '5', sh[11] = '7';
    t_spit(f1, bad, len);
    run_outcome(&o);
    expect_agreed(&o, "lying header");
    cr_expect_eq(o.st[0], DT_ERR_IO, "%s", o.msg[0]);
    cr_expect(strstr(o.msg[0], "does not describe tensor \"layers.0.w\""), "%s", o.msg[0]);

    t_spit(f1, orig, len);
    run_outcome(&o);
    cr_expect_eq(o.st[0], DT_OK, "%s", o.msg[0]);
    free(orig), free(bad);
    t_rmtree(dir);
}

/* --- partial reads, and who fails ---------------------------------------------------------- */

/* "big" [64, 256] f32 saved by one rank (one chunk of 64 KiB, blocks of 1536 bytes: a row is
 * 1 KiB, so blocks straddle the row ranges of a 4-rank [S(0)] load: rank k reads bytes
 * [16k, 16k+16) KiB of the chunk and the rest of its two edge blocks). */
static ct_run save_big(const char *path, size_t block_bytes) {
    ct_run r = {.dir = path, .mesh_ndim = 1, .mesh_shape = {1}, .block_bytes = block_bytes};
    r.specs[r.n++] = ct_spec_make("big", DT_F32, 2, (int64_t[]){64, 256}, "R", 11, 0);
    t_run(1, ct_body, &r);
    r.load = 1, r.mesh_shape[0] = 4;
    snprintf(r.specs[0].placements, sizeof r.specs[0].placements, "S(0)");
    return r;
}

/* metadata.json as the first block-checksum saves (2026-12-06, before tiles) wrote it: no
 * "block_bands" or "block_rows", and "block_xxh3" listing XXH3-64 of each block_bytes piece of
 * the chunk (hashed here from the data file), for a checkpoint with one rank file, f0. */
static void untile(const char *meta, const char *f0, uint64_t block_bytes) {
    size_t len, flen;
    char *m = t_slurp(meta, &len), *data = t_slurp(f0, &flen), *out = malloc(len * 4 + 4096), *w = out;
    unsigned long long begin = 0, end = 0;
    int file = -1;
    for (const char *p = m; *p;) {
        if (sscanf(p, "{\"file\":%d,\"begin\":%llu,\"end\":%llu", &file, &begin, &end) == 3) {
            cr_assert(file == 0 && end <= flen);
            *w++ = *p++;
        } else if (!strncmp(p, ",\"block_bands\":", 15)) {
            p = strchr(strstr(p, "\"block_rows\":"), ',');
        } else if (!strncmp(p, ",\"block_xxh3\":[", 15)) {
            p = strchr(p, ']') + 1;
            w += sprintf(w, ",\"block_xxh3\":[");
            for (unsigned long long b = begin; b < end; b += block_bytes)
                w += sprintf(w, "%s\"%016llx\"", b > begin ? "," : "",
                             (unsigned long long)XXH3_64bits(
                                 data + b, end - b < block_bytes ? end - b : block_bytes));
            *w++ = ']';
        } else {
            *w++ = *p++;
        }
    }
    t_spit(meta, out, (size_t)(w - out));
    free(m), free(data), free(out);
}

/* Saved tiled (bands of 256 bytes, 6 rows a tile), loaded as the pre-tile format: contiguous
 * blocks of 1536 bytes, which still load and are checked as such. */
Test(checkpoint_verify, a_partial_read_checks_its_blocks_edges_in_whole) {
    char *dir = t_tmpdir(), path[600], f0[700], meta[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f0, sizeof f0, "%s/rank-00000.safetensors", path);
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    ct_run l = save_big(path, 1536);
    size_t mlen;
    char *tiled = t_slurp(meta, &mlen);
    cr_assert(strstr(tiled, "\"block_bands\":4,\"block_rows\":6,"), "%s", tiled);
    free(tiled);
    untile(meta, f0, 1536);
    cr_assert_eq(dt_checkpoint_check(path, 1), DT_OK, "%s", dt_last_error());
    long data = (long)header_end(f0);
    outcome o = {.r = l, .no_dist = 1};
    run_outcome(&o);
    for (int k = 0; k < 4; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);

    /* byte 15400 of the chunk: rank 0's row 15, in block 10 ([15360, 16896)), which rank 1's
     * range [16384, 32768) starts in: both fail, naming block 10; ranks 2 and 3 load */
    xor_byte(f0, data + 15400, 0x40);
    run_outcome(&o);
    for (int k = 0; k < 2; k++) {
        cr_expect_eq(o.st[k], DT_ERR_IO, "rank %d: %s", k, o.msg[k]);
        cr_expect(strstr(o.msg[k], "tensor \"big\": block 10 ") &&
                      strstr(o.msg[k], "rank-00000.safetensors fails its checksum"),
                  "rank %d: %s", k, o.msg[k]);
    }
    for (int k = 2; k < 4; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);
    xor_byte(f0, data + 15400, 0x40);

    /* byte 60000, in rank 3's rows only: it alone fails (non-collective) */
    xor_byte(f0, data + 60000, 0x01);
    run_outcome(&o);
    cr_expect_eq(o.st[3], DT_ERR_IO, "%s", o.msg[3]);
    for (int k = 0; k < 3; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);

    /* collective (the default): every rank fails with rank 3's message, naming it, the tensor
     * and the file */
    o.no_dist = 0;
    run_outcome(&o);
    expect_agreed(&o, "one corrupt block, collective");
    cr_expect_eq(o.st[0], DT_ERR_IO, "%s", o.msg[0]);
    cr_expect(strstr(o.msg[0], "dt_checkpoint_load: rank 3 failed: tensor \"big\": block 39 ") &&
                  strstr(o.msg[0], "/rank-00000.safetensors fails its checksum"),
              "%s", o.msg[0]);
    /* DT_CHECKPOINT_VERIFY_CHUNKS: every rank reads the whole chunk, and fails */
    o.no_dist = 1, o.verify = DT_CHECKPOINT_VERIFY_CHUNKS;
    run_outcome(&o);
    for (int k = 0; k < 4; k++)
        cr_expect(o.st[k] == DT_ERR_IO && strstr(o.msg[k], "block 39 "), "rank %d: %s", k,
                  o.msg[k]);
    xor_byte(f0, data + 60000, 0x01);
    run_outcome(&o);
    for (int k = 0; k < 4; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);
    t_rmtree(dir);
}

/* Blocks larger than a read (256 KiB) are hashed as a stream of reads: 8 MiB in blocks of 3 MiB
 * and 5 bytes (rows of 4 KiB: too narrow for two bands, so contiguous blocks), loaded onto 3
 * ranks by rows. */
Test(checkpoint_verify, blocks_larger_than_a_read) {
    char *dir = t_tmpdir(), path[600], f0[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f0, sizeof f0, "%s/rank-00000.safetensors", path);
    ct_run r = {.dir = path, .mesh_ndim = 1, .mesh_shape = {1}, .block_bytes = (3 << 20) + 5};
    r.specs[r.n++] = ct_spec_make("large", DT_F32, 2, (int64_t[]){2048, 1024}, "R", 12, 0);
    t_run(1, ct_body, &r);
    r.load = 1, r.mesh_shape[0] = 3; /* rows [0,683), [683,1366), [1366,2048): 4 KiB each */
    snprintf(r.specs[0].placements, sizeof r.specs[0].placements, "S(0)");
    outcome o = {.r = r, .no_dist = 1};
    run_outcome(&o);
    for (int k = 0; k < 3; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);
    /* byte 7 MiB, in block 2 ([6 MiB + 10, 8 MiB)): rank 2's rows only */
    long data = (long)header_end(f0);
    xor_byte(f0, data + (7 << 20), 0x08);
    run_outcome(&o);
    cr_expect(o.st[2] == DT_ERR_IO && strstr(o.msg[2], "block 2 "), "%s", o.msg[2]);
    for (int k = 0; k < 2; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);
    t_rmtree(dir);
}

/* Tiles: "big" [64, 4096] f32 saved from 2 ranks [S(0)] (chunks [32, 4096]: rows of 16 KiB,
 * 4 bands of 1024 columns, one row group at the default 1 MiB blocks). A load onto 4 ranks
 * [S(1)] takes band k of each chunk on rank k: a flip in band 1 fails rank 1 alone (no_dist).
 * Onto 3 ranks [S(1)] (columns [0,1366), [1366,2732), [2732,4096): bands 0-1, 1-2, 2-3), it
 * fails ranks 0 and 1, and rank 2 loads. */
Test(checkpoint_verify, a_column_split_checks_only_its_bands) {
    char *dir = t_tmpdir(), path[600], f0[700], meta[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f0, sizeof f0, "%s/rank-00000.safetensors", path);
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    ct_run r = {.dir = path, .mesh_ndim = 1, .mesh_shape = {2}};
    r.specs[r.n++] = ct_spec_make("big", DT_F32, 2, (int64_t[]){64, 4096}, "S(0)", 13, 0);
    t_run(2, ct_body, &r);
    size_t mlen;
    char *mtext = t_slurp(meta, &mlen);
    cr_assert(strstr(mtext, "\"block_bands\":4,\"block_rows\":256,\"block_xxh3\":[\""), "%s",
              mtext);
    free(mtext);
    long at = (long)header_end(f0) + (5 * 4096 + 1500) * 4; /* row 5, column 1500: band 1 */
    for (int world = 4; world >= 3; world--) {
        outcome o = {.r = onto(r, world, 1), .no_dist = 1};
        run_outcome(&o);
        for (int k = 0; k < world; k++)
            cr_expect(o.st[k] == DT_OK && !o.wrong[k], "%d ranks, rank %d: %s", world, k, o.msg[k]);
        xor_byte(f0, at, 0x10);
        run_outcome(&o);
        for (int k = 0; k < world; k++) {
            int needs = world == 4 ? k == 1 : k <= 1;
            if (needs)
                cr_expect(o.st[k] == DT_ERR_IO &&
                              strstr(o.msg[k], "tensor \"big\": tile 1 (rows 0-31, band 1 of 4)"),
                          "%d ranks, rank %d: %s", world, k, o.msg[k]);
            else
                cr_expect(o.st[k] == DT_OK && !o.wrong[k], "%d ranks, rank %d: %s", world, k,
                          o.msg[k]);
        }
        xor_byte(f0, at, 0x10);
    }
    t_rmtree(dir);
}

/* Rows wider than a read (512 KiB; 64 bands of 8 KiB) with a target that cuts bands: a rank's
 * bands are read in pieces through a buffer, and still checked in whole. */
Test(checkpoint_verify, tiles_wider_than_a_read) {
    char *dir = t_tmpdir(), path[600], f0[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f0, sizeof f0, "%s/rank-00000.safetensors", path);
    ct_run r = {.dir = path, .mesh_ndim = 1, .mesh_shape = {1}};
    r.specs[r.n++] = ct_spec_make("wide", DT_F32, 2, (int64_t[]){6, 131072}, "R", 14, 0);
    t_run(1, ct_body, &r);
    outcome o = {.r = onto(r, 3, 1),
                 .no_dist = 1}; /* 43691 columns each: bands 0-21, 21-42, 42-63 */
    run_outcome(&o);
    for (int k = 0; k < 3; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);
    long at = (long)header_end(f0) + (4 * 131072 + 2048 * 50 + 7) * 4; /* row 4, band 50 */
    xor_byte(f0, at, 0x02);
    run_outcome(&o);
    cr_expect(o.st[2] == DT_ERR_IO && strstr(o.msg[2], "band 50 of 64"), "%s", o.msg[2]);
    for (int k = 0; k < 2; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);
    t_rmtree(dir);
}

/* A rank that fails before it reads anything (a name not in the checkpoint) still reaches the
 * agreement: no rank waits forever, and all return its error. */
Test(checkpoint_verify, an_early_failure_on_one_rank_fails_every_rank) {
    char *dir = t_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/ck", dir);
    ct_run l = save_big(path, 0);
    static const char *const wrong[] = {"bigger"};
    outcome o = {.r = l, .odd_rank = 2, .odd_names = wrong};
    run_outcome(&o);
    expect_agreed(&o, "rank 2 asks for \"bigger\"");
    cr_expect_eq(o.st[0], DT_ERR_ARG, "%s", o.msg[0]);
    cr_expect(strstr(o.msg[0], "rank 2 failed: tensor \"bigger\" is not in the checkpoint"), "%s",
              o.msg[0]);
    o.no_dist = 1; /* on its own, only rank 2 fails */
    run_outcome(&o);
    cr_expect_eq(o.st[2], DT_ERR_ARG, "%s", o.msg[2]);
    for (int k = 0; k < 4; k++)
        cr_expect(k == 2 || (o.st[k] == DT_OK && !o.wrong[k]), "rank %d: %s", k, o.msg[k]);
    t_rmtree(dir);
}

/* --- checkpoints written before block checksums ------------------------------------------ */

/* metadata.json without "block_bytes" and the chunks' "block_xxh3" lists, as saves before
 * 2026-12-06 wrote it. */
static void strip_blocks(const char *meta) {
    size_t len;
    char *m = t_slurp(meta, &len), *out = malloc(len + 1), *w = out;
    for (const char *p = m; *p;) {
        if (!strncmp(p, "\"block_bytes\":", 14)) {
            p = strchr(p, ',') + 1;
        } else if (!strncmp(p, ",\"block_xxh3\":[", 15)) {
            p = strchr(p, ']') + 1;
        } else if (!strncmp(p, ",\"block_bands\":", 15)) {
            p = strchr(strstr(p, "\"block_rows\":"), ',');
        } else {
            *w++ = *p++;
        }
    }
    t_spit(meta, out, (size_t)(w - out));
    free(m), free(out);
}

Test(checkpoint_verify, old_checkpoints_are_checked_chunk_by_chunk) {
    char *dir = t_tmpdir(), path[600], f0[700], meta[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f0, sizeof f0, "%s/rank-00000.safetensors", path);
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    ct_run l = save_big(path, 1536);
    size_t mlen;
    char *with = t_slurp(meta, &mlen);
    cr_assert(strstr(with, "\"block_bytes\":1536,") && strstr(with, "\"block_xxh3\":["), "%s",
              with);
    strip_blocks(meta);
    cr_assert_eq(dt_checkpoint_check(path, 1), DT_OK, "%s", dt_last_error());
    outcome o = {.r = l, .no_dist = 1};
    run_outcome(&o);
    for (int k = 0; k < 4; k++)
        cr_expect(o.st[k] == DT_OK && !o.wrong[k], "rank %d: %s", k, o.msg[k]);
    /* one chunk, one checksum: a flip in rank 3's rows fails every rank that reads the chunk */
    long data = (long)header_end(f0);
    xor_byte(f0, data + 60000, 0x01);
    run_outcome(&o);
    for (int k = 0; k < 4; k++)
        cr_expect(o.st[k] == DT_ERR_IO && strstr(o.msg[k], "fails its checksum (xxh64"),
                  "rank %d: %s", k, o.msg[k]);
    xor_byte(f0, data + 60000, 0x01);
    /* block checksums without a block size (or the other way round) are malformed */
    char *half = strdup(with), *bb = strstr(half, "\"block_bytes\"");
    memcpy(bb, "\"block_bytez\"", 13);
    t_spit(meta, half, mlen);
    T_ERR(dt_checkpoint_check(path, 0), DT_ERR_PARSE, "lists block checksums, the checkpoint no");
    t_spit(meta, with, mlen);
    cr_expect_eq(dt_checkpoint_check(path, 1), DT_OK, "%s", dt_last_error());
    free(half), free(with);
    t_rmtree(dir);
}

/* --- bad options --------------------------------------------------------------------------- */

static dt_status bad_options_body(dt_ctx *ctx, void *arg) {
    const char *dir = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){2}, NULL, &mesh));
    dt_tensor *t;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, (int64_t[]){4}, 1, (dt_placement[]){dt_shard(0)}, &t));
    const char *names[] = {"t"};
    dt_checkpoint_save_options so = {.block_bytes = (size_t)1 << 41};
    R_ERR(dt_checkpoint_save(ctx, dir, names, &t, 1, &so), DT_ERR_ARG,
          "block_bytes = 2199023255552 is over 1099511627776");
    R_OK(dt_checkpoint_save(ctx, dir, names, &t, 1, NULL));
    dt_checkpoint_load_options lo = {.verify = 7};
    R_ERR(dt_checkpoint_load(dir, names, &t, 1, &lo), DT_ERR_ARG, "opts->verify = 7 is not");
    /* a rank with no tensors names the world in opts->ctx, or cannot agree */
    R_ERR(dt_checkpoint_load(dir, NULL, NULL, 0, NULL), DT_ERR_ARG, "no world to agree over");
    dt_checkpoint_load_options with_ctx = {.ctx = ctx};
    if (dt_ctx_rank(ctx) == 0)
        R_OK(dt_checkpoint_load(dir, NULL, NULL, 0, &with_ctx));
    else
        R_OK(dt_checkpoint_load(dir, names, &t, 1, &with_ctx));
    dt_tensor_release(t);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(checkpoint_verify, bad_options_name_the_option) {
    char *dir = t_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/ck", dir);
    t_run(2, bad_options_body, path);
    t_rmtree(dir);
}
