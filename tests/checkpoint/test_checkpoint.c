/* Distributed checkpoints on local ranks: save on one mesh, load on others bit-exactly (2x2
 * [S(0),S(1)] onto 4 [S(1)], 8 [S(0)], 3 and 1 ranks, then random meshes, placements and
 * uneven shapes); the per-rank files read back by a minimal safetensors reader written here;
 * strict and non-strict errors naming the tensor; corrupt, truncated and lying files;
 * incomplete checkpoints, keep_last rotation and asynchronous saves. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#undef R_OK /* unistd.h's access() flag; helpers.h has its own R_OK */

#include "ckpt_common.h"
#include "helpers.h"

/* Removes and frees a t_tmpdir(). */
#define spec ct_spec_make

static ct_run fixed_save(const char *dir) {
    return ct_fixed(dir, 0);
}

static ct_run retarget(ct_run r, int ndim, const int *shape, const char *pl) {
    r.load = 1, r.mesh_ndim = ndim;
    for (int d = 0; d < ndim; d++)
        r.mesh_shape[d] = shape[d];
    for (int i = 0; i < r.n; i++) {
        /* the placement text names tensor dims; clamp them to each tensor's rank */
        const char *p = pl;
        if (r.specs[i].ndim == 0)
            p = ndim == 1 ? "R" : "R,R";
        else if (strstr(pl, "S(1)") && r.specs[i].ndim < 2)
            p = ndim == 1 ? "S(0)" : "S(0),R";
        snprintf(r.specs[i].placements, sizeof r.specs[i].placements, "%s", p);
    }
    return r;
}

Test(checkpoint, reshard_2x2_onto_4_8_3_1) {
    char *dir = t_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/step-1", dir);
    ct_run r = fixed_save(path);
    t_run(4, ct_body, &r);
    cr_assert_eq(dt_checkpoint_check(path, 1), DT_OK, "%s", dt_last_error());
    ct_run a = retarget(r, 1, (int[]){4}, "S(1)");
    t_run(4, ct_body, &a);
    ct_run b = retarget(r, 1, (int[]){8}, "S(0)");
    t_run(8, ct_body, &b);
    ct_run c = retarget(r, 1, (int[]){3}, "S(0)");
    t_run(3, ct_body, &c);
    ct_run c2 = retarget(r, 2, (int[]){3, 1}, "S(1),P(sum)");
    t_run(3, ct_body, &c2);
    ct_run d = retarget(r, 1, (int[]){1}, "R");
    t_run(1, ct_body, &d);
    ct_run same = r;
    same.load = 1;
    t_run(4, ct_body, &same);
    char blob[32] = {0};
    size_t len;
    cr_assert_eq(dt_checkpoint_blob(path, blob, sizeof blob, &len), DT_OK, "%s", dt_last_error());
    cr_expect_eq(len, 7);
    cr_expect_str_eq(blob, "step=42");
    t_rmtree(dir);
}

/* --- a minimal safetensors reader, independent of the library's -------------------------- */

typedef struct st_ent {
    char name[64], dtype[8];
    long long shape[8], off[8], begin, end;
    int ndim, noff;
} st_ent;

/* Reads the ints of "[a,b,...]" at p; returns the count. */
static int ints_at(const char *p, long long *out) {
    int n = 0;
    p = strchr(p, '[') + 1;
    while (*p != ']') {
        out[n++] = strtoll(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    return n;
}

/* Entries of a header written as {"name":{"dtype":"F32","shape":[..],"data_offsets":[a,b]},...}
 * with "__metadata__":{"format":"pt","offset:name":"[..]"}. */
static int st_entries(const char *json, st_ent *e, int cap) {
    int n = 0;
    for (const char *p = json; (p = strstr(p, "\":{\"dtype\":\"")) != NULL && n < cap; p++) {
        const char *q = p;
        while (q[-1] != '"')
            q--;
        snprintf(e[n].name, sizeof e[n].name, "%.*s", (int)(p - q), q);
        sscanf(p + 12, "%7[A-Z0-9]", e[n].dtype);
        e[n].ndim = ints_at(strstr(p, "\"shape\":"), e[n].shape);
        long long o[2];
        ints_at(strstr(p, "\"data_offsets\":"), o);
        e[n].begin = o[0], e[n].end = o[1];
        char key[80];
        snprintf(key, sizeof key, "\"offset:%.63s\":\"", e[n].name);
        const char *m = strstr(json, key);
        e[n].noff = m ? ints_at(m + strlen(key) - 1, e[n].off) : -1;
        n++;
    }
    return n;
}

Test(checkpoint, rank_files_are_safetensors) {
    char *dir = t_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/ck", dir);
    ct_run r = fixed_save(path);
    t_run(4, ct_body, &r);
    int b_chunks = 0, files = 0;
    for (int rank = 0; rank < 4; rank++) {
        char fp[4200];
        snprintf(fp, sizeof fp, "%s/rank-%05d.safetensors", path, rank);
        FILE *f = fopen(fp, "rb");
        if (!f) continue;
        files++;
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        unsigned char *all = malloc((size_t)size + 1);
        cr_assert_eq(fread(all, 1, (size_t)size, f), (size_t)size);
        fclose(f);
        unsigned long long hlen = 0;
        for (int b = 0; b < 8; b++)
            hlen |= (unsigned long long)all[b] << (8 * b);
        cr_assert(hlen % 8 == 0 && 8 + hlen <= (unsigned long long)size, "%s: header %llu", fp,
                  hlen);
        char *json = strndup((char *)all + 8, hlen);
        st_ent e[16];
        int n = st_entries(json, e, 16);
        cr_assert(n > 0, "%s: no entries in %s", fp, json);
        long long cursor = 0;
        for (int k = 0; k < n; k++) { /* written in order, back to back, to the end */
            cr_expect_eq(e[k].begin, cursor, "%s: %s begins at %lld", fp, e[k].name, e[k].begin);
            cursor = e[k].end;
            b_chunks += strcmp(e[k].name, "b") == 0;
            int s = -1;
            for (int i = 0; i < r.n; i++)
                if (strcmp(r.specs[i].name, e[k].name) == 0) s = i;
            cr_assert(s >= 0, "unknown entry %s", e[k].name);
            const ct_spec *sp = &r.specs[s];
            static const char *const st_names[] = {"F32", "F64", "BF16", "F16", "I32", "I64"};
            cr_expect_str_eq(e[k].dtype, st_names[sp->dtype]);
            cr_assert_eq(e[k].ndim, sp->ndim);
            cr_assert_eq(e[k].noff, sp->ndim);
            size_t fb, es = dt_dtype_size(sp->dtype), cnt = 1;
            unsigned char *full = ct_full(sp, &fb);
            for (int d = 0; d < e[k].ndim; d++)
                cnt *= (size_t)e[k].shape[d];
            cr_assert_eq((size_t)(e[k].end - e[k].begin), cnt * es);
            long long idx[8] = {0};
            for (size_t i = 0; i < cnt; i++) {
                size_t g = 0;
                for (int d = 0; d < sp->ndim; d++)
                    g = g * (size_t)sp->shape[d] + (size_t)(e[k].off[d] + idx[d]);
                cr_assert(memcmp(all + 8 + hlen + e[k].begin + i * es, full + g * es, es) == 0,
                          "%s: %s element %zu", fp, e[k].name, i);
                for (int d = sp->ndim - 1; d >= 0 && ++idx[d] == e[k].shape[d]; d--)
                    idx[d] = 0;
            }
            free(full);
        }
        cr_expect_eq(8 + (long long)hlen + cursor, size, "%s: data does not end the file", fp);
        free(json), free(all);
    }
    cr_expect_eq(files, 4);
    cr_expect_eq(b_chunks, 2, "b is replicated over mesh dim 0: written by 2 ranks, not %d",
                 b_chunks);
    /* Python's safetensors, when it is there: opens each file and reads every tensor (numpy
     * has no bfloat16: those are checked for shape only) */
    char cmd[1400];
    snprintf(
        cmd, sizeof cmd,
        "python3 -c 'import safetensors' 2>/dev/null || exit 0; for f in %s/rank-*.safetensors; "
        "do python3 -c 'import sys\nfrom safetensors import safe_open\n"
        "with safe_open(sys.argv[1], \"np\") as h:\n"
        " assert h.metadata()[\"format\"] == \"pt\"\n"
        " for k in h.keys():\n"
        "  s = h.get_slice(k)\n"
        "  if s.get_dtype() != \"BF16\": assert list(h.get_tensor(k).shape) == s.get_shape()\n"
        "' $f || exit 1; done",
        path);
    cr_expect_eq(system(cmd), 0, "Python's safetensors rejected a rank file");
    t_rmtree(dir);
}

/* --- errors ------------------------------------------------------------------------------ */

typedef struct err_arg {
    const char *dir;
} err_arg;

static dt_status errors_body(dt_ctx *ctx, void *arg) {
    const err_arg *a = arg;
    dt_mesh *mesh;
    R_OK(dt_mesh_create(ctx, 1, (int[]){2}, NULL, &mesh));
    dt_placement pl[] = {dt_shard(0)};
    dt_tensor *w, *b, *w3, *wd;
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, (int64_t[]){4, 3}, 1, pl, &w));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 1, (int64_t[]){5}, 1, pl, &b));
    R_OK(dt_tensor_zeros(mesh, DT_F32, 2, (int64_t[]){4, 4}, 1, pl, &w3));
    R_OK(dt_tensor_zeros(mesh, DT_F64, 2, (int64_t[]){4, 3}, 1, pl, &wd));
    const char *names[] = {"w", "b"};
    dt_tensor *ts[] = {w, b};
    R_ERR(dt_checkpoint_save(ctx, a->dir, (const char *[]){"w", "w"}, ts, 2, NULL), DT_ERR_ARG,
          "\"w\" is given twice");
    R_ERR(dt_checkpoint_save(ctx, a->dir, (const char *[]){"w x", "b"}, ts, 2, NULL), DT_ERR_ARG,
          "name 0");
    R_OK(dt_checkpoint_save(ctx, a->dir, names, ts, 2, NULL));
    dt_checkpoint_load_options strict = {.strict = 1}, loose = {0};
    R_ERR(dt_checkpoint_load(a->dir, (const char *[]){"w", "c"}, ts, 2, &strict), DT_ERR_ARG,
          "\"c\" is not in the checkpoint");
    R_ERR(dt_checkpoint_load(a->dir, names, ts, 1, &strict), DT_ERR_ARG,
          "\"b\", which was not asked");
    R_OK(dt_checkpoint_load(a->dir, names, ts, 1, &loose));
    R_OK(dt_checkpoint_load(a->dir, (const char *[]){"w", "c"}, ts, 2, &loose));
    R_ERR(dt_checkpoint_load(a->dir, names, (dt_tensor *[]){w3, b}, 2, &loose), DT_ERR_SHAPE,
          "\"w\" has shape [4,3] in the checkpoint, [4,4] here");
    R_ERR(dt_checkpoint_load(a->dir, names, (dt_tensor *[]){wd, b}, 2, &loose), DT_ERR_DTYPE,
          "\"w\" is f32 in the checkpoint, f64 here");
    dt_tensor_release(w), dt_tensor_release(b), dt_tensor_release(w3), dt_tensor_release(wd);
    dt_mesh_release(mesh);
    return DT_OK;
}

Test(checkpoint, strict_and_mismatch_errors_name_the_tensor) {
    char *dir = t_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/ck", dir);
    err_arg a = {path};
    t_run(2, errors_body, &a);
    t_rmtree(dir);
}

static void flip_byte(const char *path, long at) {
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0, "open %s", path);
    unsigned char c;
    cr_assert_eq(pread(fd, &c, 1, at), 1);
    c ^= 0x10;
    cr_assert_eq(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

/* A flipped byte, a truncated file, metadata that lies: errors, never a crash or a wrong load. */
Test(checkpoint, corrupt_truncated_and_lying_files) {
    char *dir = t_tmpdir(), path[600], f1[700], meta[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(f1, sizeof f1, "%s/rank-00001.safetensors", path);
    snprintf(meta, sizeof meta, "%s/metadata.json", path);
    ct_run r = fixed_save(path);
    t_run(4, ct_body, &r);
    ct_run same = r;
    same.load = 1;
    size_t mlen, flen;
    char *orig_meta = t_slurp(meta, &mlen), *orig_file = t_slurp(f1, &flen);

    flip_byte(f1, (long)flen - 3); /* in the last chunk's data */
    T_ERR(dt_checkpoint_check(path, 1), DT_ERR_IO, "fails its checksum");
    cr_expect_neq(dt_local_run(4, ct_body, &same, NULL), DT_OK, "a corrupt chunk loaded");
    cr_expect(strstr(dt_last_error(), "fails its checksum"), "%s", dt_last_error());
    t_spit(f1, orig_file, flen);

    /* a rank file's header that lies: a shape that does not fit its bytes, or one that does
     * ([7,5] written as [5,7]) but is not the chunk's */
    char *lie = malloc(flen), *sh;
    memcpy(lie, orig_file, flen);
    cr_assert((sh = memmem(lie, flen, "\"shape\":[7,5]", 13)) != NULL, "rank 1's w chunk");
    sh[9] = '8';
    t_spit(f1, lie, flen);
    T_ERR(dt_checkpoint_check(path, 1), DT_ERR_PARSE, "bad safetensors header");
    sh[9] = '5', sh[11] = '7';
    t_spit(f1, lie, flen);
    T_ERR(dt_checkpoint_check(path, 1), DT_ERR_IO, "does not describe tensor \"layers.0.w\"");
    free(lie);
    t_spit(f1, orig_file, flen);

    t_spit(f1, orig_file, flen - 5);
    T_ERR(dt_checkpoint_check(path, 0), DT_ERR_IO, "truncated or overwritten");
    cr_expect_neq(dt_local_run(4, ct_body, &same, NULL), DT_OK, "a truncated file loaded");
    t_spit(f1, orig_file, flen);

    /* every byte of metadata.json changed in turn: an error or a correct load, never a crash */
    int errors = 0;
    for (size_t i = 0; i < mlen; i += 7) {
        char *m = strdup(orig_meta);
        m[i] = m[i] == '9' ? '1' : (char)(m[i] + 1);
        t_spit(meta, m, mlen);
        dt_status st = dt_checkpoint_check(path, 1);
        errors += st != DT_OK;
        free(m);
    }
    cr_expect(errors > 0);
    /* a byte range that lies about where the chunk is: the size check catches it */
    char *m = strdup(orig_meta), *e = strstr(m, "\"end\":");
    cr_assert(e);
    e[6] = e[6] == '9' ? '8' : '9';
    t_spit(meta, m, mlen);
    T_ERR(dt_checkpoint_check(path, 0), DT_ERR_PARSE, "metadata.json");
    free(m);
    /* a negative chunk offset is named as such, not as a malformed list */
    const char *off = strstr(orig_meta, "\"offset\":[0");
    cr_assert(off, "a chunk at offset 0");
    size_t at = (size_t)(off - orig_meta) + 10, nlen = mlen + 1; /* its 0 becomes -5 */
    m = malloc(nlen + 1);
    memcpy(m, orig_meta, at), memcpy(m + at, "-5", 2), memcpy(m + at + 2, off + 11, mlen - at - 1);
    m[nlen] = 0;
    t_spit(meta, m, nlen);
    T_ERR(dt_checkpoint_check(path, 0), DT_ERR_PARSE, "offset[0] = -5 is negative");
    free(m);
    t_spit(meta, orig_meta, mlen);
    cr_assert_eq(dt_checkpoint_check(path, 1), DT_OK, "%s", dt_last_error());
    t_run(4, ct_body, &same);

    unlink(meta);
    T_ERR(dt_checkpoint_check(path, 0), DT_ERR_IO, "incomplete");
    cr_expect_neq(dt_local_run(4, ct_body, &same, NULL), DT_OK);
    cr_expect(strstr(dt_last_error(), "not a complete checkpoint"), "%s", dt_last_error());
    /* saved without a blob: a status and message of its own, not 0 bytes of DT_OK */
    ct_run bare = fixed_save(path);
    bare.blob = NULL;
    t_run(4, ct_body, &bare);
    size_t blob_len = 7;
    T_ERR(dt_checkpoint_blob(path, NULL, 0, &blob_len), DT_ERR_ARG, "holds no blob");
    cr_expect_eq(blob_len, 7, "bytes_out written on failure");
    free(orig_meta), free(orig_file);
    t_rmtree(dir);
}

/* --- publishing, rotation, asynchronous saves -------------------------------------------- */

Test(checkpoint, keep_last_latest_and_stale_partials) {
    char *dir = t_tmpdir(), path[600], got[700];
    snprintf(path, sizeof path, "%s/step-3.partial", dir);
    cr_assert_eq(mkdir(path, 0755), 0); /* a save that crashed */
    for (int step = 1; step <= 5; step++) {
        snprintf(path, sizeof path, "%s/step-%d", dir, step);
        ct_run r = fixed_save(path);
        r.keep_last = 2;
        r.n = 2;
        t_run(4, ct_body, &r);
    }
    for (int step = 1; step <= 5; step++) {
        snprintf(path, sizeof path, "%s/step-%d", dir, step);
        cr_expect_eq(access(path, 0) == 0, step >= 4, "step-%d kept: %d", step, step >= 4);
    }
    snprintf(path, sizeof path, "%s/step-3.partial", dir);
    cr_expect_neq(access(path, 0), 0, "the stale partial save was not removed");
    cr_assert_eq(dt_checkpoint_latest(dir, "step-", got, sizeof got), DT_OK, "%s", dt_last_error());
    snprintf(path, sizeof path, "%s/step-5", dir);
    cr_expect_str_eq(got, path);
    /* saved again over itself: replaced, still complete */
    ct_run r = fixed_save(path);
    t_run(4, ct_body, &r);
    r.load = 1;
    t_run(4, ct_body, &r);
    snprintf(path, sizeof path, "%s/step-9", dir);
    cr_assert_eq(mkdir(path, 0755), 0); /* renamed but never finished: not the latest */
    cr_assert_eq(dt_checkpoint_latest(dir, "step-", got, sizeof got), DT_OK);
    cr_expect(strstr(got, "step-5"), "%s", got);
    T_ERR(dt_checkpoint_check(path, 0), DT_ERR_IO, "incomplete");
    /* a directory holding anything else is never replaced, rotated away or removed */
    char keep[700];
    snprintf(keep, sizeof keep, "%s/step-9/notes.txt", dir);
    t_spit(keep, "mine", 4);
    snprintf(keep, sizeof keep, "%s/step-2", dir);
    cr_assert_eq(mkdir(keep, 0755), 0);
    snprintf(keep, sizeof keep, "%s/step-2/notes.txt", dir);
    t_spit(keep, "mine", 4);
    ct_run again = fixed_save(path);
    again.n = 2, again.keep_last = 1;
    cr_expect_neq(dt_local_run(4, ct_body, &again, NULL), DT_OK);
    cr_expect(strstr(dt_last_error(), "is not a checkpoint"), "%s", dt_last_error());
    snprintf(path, sizeof path, "%s/step-10", dir);
    again.dir = path;
    t_run(4, ct_body, &again);
    cr_expect_eq(access(keep, 0), 0, "rotation removed a directory that was not a checkpoint");
    snprintf(keep, sizeof keep, "%s/step-9/notes.txt", dir);
    cr_expect_eq(access(keep, 0), 0);
    snprintf(keep, sizeof keep, "%s/step-5", dir);
    cr_expect_neq(access(keep, 0), 0, "keep_last 1 kept step-5");
    t_rmtree(dir);
}

Test(checkpoint, async_save_snapshots_before_returning) {
    char *dir = t_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/ck", dir);
    ct_run r = fixed_save(path);
    r.async = 1; /* the body overwrites every shard between the save and the wait */
    t_run(4, ct_body, &r);
    ct_run b = retarget(r, 1, (int[]){3}, "S(0)");
    b.async = 0;
    t_run(3, ct_body, &b);
    t_rmtree(dir);
}

/* --- random meshes, placements and shapes ------------------------------------------------ */

static uint64_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void random_mesh(uint64_t *s, ct_run *r, int *world) {
    static const int worlds[] = {1, 2, 3, 4, 6, 8};
    int w = worlds[rnd(s) % 6], left = w;
    r->mesh_ndim = 0;
    int nd = 1 + (int)(rnd(s) % 3);
    for (int d = 0; d < nd - 1; d++) {
        int f = 1;
        for (int c = 2; c <= left; c++)
            if (left % c == 0 && rnd(s) % 2) {
                f = c;
                break;
            }
        r->mesh_shape[r->mesh_ndim++] = f, left /= f;
    }
    r->mesh_shape[r->mesh_ndim++] = left;
    *world = w;
}

static void random_placements(uint64_t *s, const ct_run *r, ct_spec *sp, int allow_partial) {
    size_t len = 0;
    for (int d = 0; d < r->mesh_ndim; d++) {
        unsigned k = (unsigned)(rnd(s) % 5);
        const char *sep = d ? "," : "";
        if (k <= 1 && sp->ndim > 0)
            len += (size_t)snprintf(sp->placements + len, sizeof sp->placements - len, "%sS(%d)",
                                    sep, (int)(rnd(s) % (uint64_t)sp->ndim));
        else if (k == 2 && allow_partial && sp->small)
            len += (size_t)snprintf(sp->placements + len, sizeof sp->placements - len, "%sP(sum)",
                                    sep);
        else
            len += (size_t)snprintf(sp->placements + len, sizeof sp->placements - len, "%sR", sep);
    }
}

Test(checkpoint, random_meshes_placements_and_shapes) {
    uint64_t seed = getenv("DT_CKPT_SEED") ? strtoull(getenv("DT_CKPT_SEED"), NULL, 10) : 20261201;
    int cases = getenv("DT_CKPT_CASES") ? atoi(getenv("DT_CKPT_CASES")) : 16;
    cr_log_info("seed %llu (DT_CKPT_SEED replays it), %d cases", (unsigned long long)seed, cases);
    char *dir = t_tmpdir();
    for (int c = 0; c < cases; c++) {
        uint64_t s = seed * 1000 + (uint64_t)c;
        char path[600];
        snprintf(path, sizeof path, "%s/c%d", dir, c);
        ct_run r = {.dir = path};
        int wsave, wload;
        random_mesh(&s, &r, &wsave);
        r.n = 1 + (int)(rnd(&s) % 4);
        for (int i = 0; i < r.n; i++) {
            ct_spec *sp = &r.specs[i];
            snprintf(sp->name, sizeof sp->name, "t%d.weight", i);
            sp->dtype = (dt_dtype)(rnd(&s) % T_NUMERIC_DTYPES);
            sp->ndim = (int)(rnd(&s) % 4);
            for (int d = 0; d < sp->ndim; d++)
                sp->shape[d] = (int64_t)(rnd(&s) % 10);
            sp->seed = s;
            sp->small = rnd(&s) % 3 == 0 && sp->dtype != DT_I32 && sp->dtype != DT_I64;
            random_placements(&s, &r, sp, 1);
        }
        ct_run l = r;
        l.load = 1;
        random_mesh(&s, &l, &wload);
        for (int i = 0; i < l.n; i++)
            random_placements(&s, &l, &l.specs[i], 1);
        static const size_t gaps[] = {0, 0, 4, 64, 1 << 20};
        l.max_gap = gaps[rnd(&s) % 5];
        char what[1024] = "";
        size_t wl = (size_t)snprintf(what, sizeof what, " max_gap %zu;", l.max_gap);
        for (int i = 0; i < r.n; i++)
            wl += (size_t)snprintf(what + wl, sizeof what - wl,
                                   " %s %s: [%s] on %d ranks -> [%s] on %d;", r.specs[i].name,
                                   dt_dtype_name(r.specs[i].dtype), r.specs[i].placements, wsave,
                                   l.specs[i].placements, wload);
        dt_status st = dt_local_run(wsave, ct_body, &r, NULL);
        cr_assert_eq(st, DT_OK, "seed %llu case %d save:%s %s", (unsigned long long)seed, c, what,
                     dt_last_error());
        st = dt_local_run(wload, ct_body, &l, NULL);
        cr_assert_eq(st, DT_OK, "seed %llu case %d load:%s %s", (unsigned long long)seed, c, what,
                     dt_last_error());
    }
    t_rmtree(dir);
}

/* --- consolidate and convert -------------------------------------------------------------- */

Test(checkpoint, consolidate_then_convert_to_another_mesh) {
    char *dir = t_tmpdir(), path[600], file[700], conv[700];
    snprintf(path, sizeof path, "%s/ck", dir);
    snprintf(file, sizeof file, "%s/full.safetensors", dir);
    snprintf(conv, sizeof conv, "%s/converted", dir);
    ct_run r = fixed_save(path);
    t_run(4, ct_body, &r);
    cr_assert_eq(dt_checkpoint_consolidate(path, file), DT_OK, "%s", dt_last_error());
    /* the single file holds every tensor in full, read by the minimal reader */
    size_t len;
    unsigned char *all = (unsigned char *)t_slurp(file, &len);
    unsigned long long hlen = 0;
    for (int b = 0; b < 8; b++)
        hlen |= (unsigned long long)all[b] << (8 * b);
    char *json = strndup((char *)all + 8, hlen);
    st_ent e[16];
    int n = st_entries(json, e, 16);
    cr_assert_eq(n, r.n, "%d entries in %s", n, json);
    for (int k = 0; k < n; k++) {
        int s = -1;
        for (int i = 0; i < r.n; i++)
            if (!strcmp(r.specs[i].name, e[k].name)) s = i;
        cr_assert(s >= 0, "unknown entry %s", e[k].name);
        size_t fb;
        unsigned char *full = ct_full(&r.specs[s], &fb);
        cr_assert_eq((size_t)(e[k].end - e[k].begin), fb, "%s", e[k].name);
        cr_expect(memcmp(all + 8 + hlen + e[k].begin, full, fb) == 0, "%s differs", e[k].name);
        free(full);
    }
    free(json), free(all);
    T_ERR(dt_checkpoint_convert(file, conv, "2x3", "S(0)"), DT_ERR_ARG, "1 placements");
    T_ERR(dt_checkpoint_convert(file, conv, "3", "P(sum)"), DT_ERR_PLACEMENT, "Partial");
    cr_assert_eq(dt_checkpoint_convert(file, conv, "3", "S(0)"), DT_OK, "%s", dt_last_error());
    cr_assert_eq(dt_checkpoint_check(conv, 1), DT_OK, "%s", dt_last_error());
    ct_run l = retarget(r, 1, (int[]){4}, "S(1)");
    l.dir = conv;
    t_run(4, ct_body, &l);
    cr_assert_eq(dt_checkpoint_convert(file, conv, "dp=2,tp=2", "S(1),S(0)"), DT_OK, "%s",
                 dt_last_error());
    ct_run l2 = retarget(r, 1, (int[]){3}, "S(0)");
    l2.dir = conv;
    t_run(3, ct_body, &l2);
    t_rmtree(dir);
}
