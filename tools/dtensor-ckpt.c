/* dtensor-ckpt: distributed checkpoints from the shell (see dtensor/checkpoint.h).
 *   dtensor-ckpt inspect DIR                 tensors, shapes, placements, files, sizes
 *   dtensor-ckpt verify DIR                  every file and every chunk checksum
 *   dtensor-ckpt consolidate DIR OUT         one safetensors file with full tensors
 *   dtensor-ckpt convert IN DIR MESH PLACEMENTS
 *                                            a safetensors file into a sharded checkpoint,
 *                                            e.g. convert model.safetensors ck 2x2 "S(0),S(1)"
 * Exit status: 0 on success, 1 on a failure (printed), 2 on a usage error. */
#include <stdio.h>
#include <string.h>

#include "checkpoint/ckpt_impl.h"
#include "core/box.h"
#include "core/text.h"

static int usage(void) {
    fprintf(stderr, "usage: dtensor-ckpt inspect DIR\n"
                    "       dtensor-ckpt verify DIR\n"
                    "       dtensor-ckpt consolidate DIR OUT.safetensors\n"
                    "       dtensor-ckpt convert IN.safetensors DIR MESH PLACEMENTS\n");
    return 2;
}

static int failed(void) {
    fprintf(stderr, "dtensor-ckpt: %s\n", dt_last_error());
    return 1;
}

static void bytes_text(double b, char *buf, size_t cap) {
    dt_text t = {.buf = buf, .cap = cap};
    dt_text_bytes(&t, b);
}

static int inspect(const char *dir) {
    ck_meta m;
    if (ck_meta_read(dir, &m, "dtensor-ckpt inspect") != DT_OK) return failed();
    uint64_t total = 0, chunks = 0;
    for (int f = 0; f < m.nfiles; f++)
        total += m.files[f].bytes;
    for (int i = 0; i < m.ntensors; i++)
        chunks += (uint64_t)m.tensors[i].nchunks;
    char b[32];
    bytes_text((double)total, b, sizeof b);
    printf("%s: complete checkpoint, %d tensors in %llu chunks, %d files (%s)", dir, m.ntensors,
           (unsigned long long)chunks, m.nfiles, b);
    if (m.has_blob) printf(", blob of %llu bytes", (unsigned long long)m.blob_bytes);
    if (m.block_bytes) {
        uint64_t tiled = 0;
        for (int i = 0; i < m.ntensors; i++)
            for (int c = 0; c < m.tensors[i].nchunks; c++)
                tiled += m.tensors[i].chunks[c].bands > 0;
        bytes_text((double)m.block_bytes, b, sizeof b);
        printf("\nchecksums: xxh64 per chunk, XXH3-64 per block of %s (loads check each block "
               "they read); %llu of %llu chunks in tiles (row groups x column bands)",
               b, (unsigned long long)tiled, (unsigned long long)chunks);
    } else {
        printf("\nchecksums: xxh64 per chunk only (saved before block checksums: loads read and "
               "check every chunk they touch in whole)");
    }
    printf("\n\nfiles:\n");
    for (int f = 0; f < m.nfiles; f++) {
        bytes_text((double)m.files[f].bytes, b, sizeof b);
        printf("  %-28s %12llu bytes (%s)\n", m.files[f].name, (unsigned long long)m.files[f].bytes,
               b);
    }
    printf("\ntensors:\n  %-32s %-5s %-16s %-8s %s\n", "name", "dtype", "shape", "chunks",
           "saved as");
    for (int i = 0; i < m.ntensors; i++) {
        const ck_tensor *t = &m.tensors[i];
        char shape[96];
        dt_shape_text(t->shape, t->ndim, shape, sizeof shape);
        printf("  %-32s %-5s %-16s %-8d [%s] on %s\n", t->name, dt_dtype_name(t->dtype), shape,
               t->nchunks, t->placements, t->mesh);
    }
    ck_meta_free(&m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "inspect") && argc == 3) return inspect(argv[2]);
    if (!strcmp(cmd, "verify") && argc == 3) {
        if (dt_checkpoint_check(argv[2], 1) != DT_OK) return failed();
        printf("%s: complete; every file and chunk checksum verified\n", argv[2]);
        return 0;
    }
    if (!strcmp(cmd, "consolidate") && argc == 4) {
        if (dt_checkpoint_consolidate(argv[2], argv[3]) != DT_OK) return failed();
        printf("wrote %s\n", argv[3]);
        return 0;
    }
    if (!strcmp(cmd, "convert") && argc == 6) {
        if (dt_checkpoint_convert(argv[2], argv[3], argv[4], argv[5]) != DT_OK) return failed();
        printf("wrote %s\n", argv[3]);
        return 0;
    }
    return usage();
}
