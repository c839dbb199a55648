/* Checkpoint throughput on 4 in-process ranks: save (2x2 [S(0),S(1)]), load onto the same
 * mesh, and a resharding load (onto 4 ranks [S(1)]: half of every saved 8 KiB row, which is
 * one of the chunk's two 4 KiB column bands, so a verified load reads and checks only that
 * band's tiles), each verified (the default) and unverified, next to
 * one plain sequential write (with fsync) and read of the same bytes in the same run, to the
 * same directory. Each figure is the median (min-max) of REPS rounds, each round running every
 * case and both references once.
 * DT_BENCH_DIR: where to write (default /tmp); DT_BENCH_MIB: total size (default 128). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dtensor.h>

#include "bench_util.h"

#define NT 4
#define REPS 7

typedef struct bench {
    char dir[700];
    int64_t rows, cols;
    int mode; /* 0 save, 1 load same mesh, 2 load resharded; 3, 4: those loads unverified; 5: 4
               * with max_gap 64 KiB */
    double secs;
} bench;

static dt_status body(dt_ctx *ctx, void *arg) {
    bench *b = arg;
    int reshard = b->mode == 2 || b->mode >= 4;
    dt_mesh *mesh;
    dt_status st = reshard ? dt_mesh_create(ctx, 1, (int[]){4}, NULL, &mesh)
                           : dt_mesh_create(ctx, 2, (int[]){2, 2}, NULL, &mesh);
    if (st != DT_OK) return st;
    dt_placement two[] = {dt_shard(0), dt_shard(1)}, one[] = {dt_shard(1)};
    dt_tensor *t[NT];
    char names[NT][16];
    const char *np[NT];
    int64_t shape[] = {b->rows, b->cols};
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "w%d", i);
        np[i] = names[i];
        st = dt_tensor_zeros(mesh, DT_F32, 2, shape, reshard ? 1 : 2, reshard ? one : two, &t[i]);
        if (st != DT_OK) return st;
        void *local;
        dt_tensor_info info;
        dt_tensor_to_local(t[i], &local);
        dt_tensor_info_get(t[i], &info);
        memset(local, 0x3c + i, info.local_bytes);
    }
    dt_comm *world;
    dt_ctx_world_comm(ctx, &world);
    dt_barrier(world);
    double t0 = bench_now();
    if (b->mode == 0)
        st = dt_checkpoint_save(ctx, b->dir, np, t, NT, NULL);
    else {
        dt_checkpoint_load_options lo = {
            .strict = 1,
            .verify = b->mode >= 3 ? DT_CHECKPOINT_VERIFY_OFF : DT_CHECKPOINT_VERIFY_BLOCKS,
            .max_gap = b->mode == 5 ? 65536 : 0};
        st = dt_checkpoint_load(b->dir, np, t, NT, &lo);
    }
    if (st == DT_OK) st = dt_barrier(world);
    if (dt_ctx_rank(ctx) == 0) b->secs = bench_now() - t0;
    for (int i = 0; i < NT; i++)
        dt_tensor_release(t[i]);
    dt_mesh_release(mesh);
    return st;
}

static double plain(const char *path, size_t bytes, int write_it) {
    size_t piece = (size_t)8 << 20;
    char *buf = malloc(piece);
    memset(buf, 0x5a, piece);
    double t0 = bench_now();
    int fd = write_it ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open(path, O_RDONLY);
    for (size_t done = 0; fd >= 0 && done < bytes;) {
        size_t n = bytes - done < piece ? bytes - done : piece;
        ssize_t k = write_it ? write(fd, buf, n) : read(fd, buf, n);
        if (k <= 0) break;
        done += (size_t)k;
    }
    if (write_it) fsync(fd);
    close(fd);
    free(buf);
    return bench_now() - t0;
}

int main(int argc, char **argv) {
    int table = argc > 1 && !strcmp(argv[1], "--table");
    const char *root = getenv("DT_BENCH_DIR") ? getenv("DT_BENCH_DIR") : "/tmp";
    long mib = getenv("DT_BENCH_MIB") ? atol(getenv("DT_BENCH_MIB")) : 128;
    char tmp[600], plainf[700];
    snprintf(tmp, sizeof tmp, "%s/dtbench-ckpt-XXXXXX", root);
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    snprintf(plainf, sizeof plainf, "%s/plain.bin", tmp);
    bench b = {.cols = 4096};
    b.rows = (int64_t)mib * (1 << 20) / (NT * 4 * b.cols);
    snprintf(b.dir, sizeof b.dir, "%s/ck", tmp);
    size_t bytes = (size_t)(NT * 4 * b.rows * b.cols);
#define NMODES 6
    double secs[NMODES][REPS], pw[REPS], pr[REPS];
    for (int rep = 0; rep < REPS; rep++) {
        for (int mode = 0; mode < NMODES; mode++) {
            b.mode = mode;
            if (dt_local_run(4, body, &b, NULL) != DT_OK)
                return fprintf(stderr, "bench_checkpoint: %s\n", dt_last_error()), 1;
            secs[mode][rep] = b.secs;
        }
        pw[rep] = plain(plainf, bytes, 1), pr[rep] = plain(plainf, bytes, 0);
    }
    double gb = (double)bytes / 1e9;
    bench_stat w = bench_stat_of(pw, REPS), r = bench_stat_of(pr, REPS);
    const char *names[NMODES] = {"checkpoint save, 4 ranks",   "checkpoint load, same mesh",
                                 "checkpoint load, resharded", "same mesh, unverified",
                                 "resharded, unverified",      "resharded, unverified, gap 64K"};
    for (int mode = 0; mode < NMODES; mode++) {
        bench_stat t = bench_stat_of(secs[mode], REPS), ref = mode == 0 ? w : r;
        printf(table ? "%s, %ld MiB\t%.2f GB/s (%.2f-%.2f)\tplain %s %.2f GB/s (%.2f-%.2f)"
                       "\t%.0f%%\n"
                     : "%-30s %ld MiB  %6.2f GB/s (%.2f-%.2f)   plain %-11s %6.2f GB/s "
                       "(%.2f-%.2f)   %4.0f%%\n",
               names[mode], mib, gb / t.med, gb / t.max, gb / t.min,
               mode == 0 ? "write+fsync" : "read", gb / ref.med, gb / ref.max, gb / ref.min,
               100 * ref.med / t.med);
    }
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) != 0;
}
