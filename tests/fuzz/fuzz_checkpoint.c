/* libFuzzer target for the checkpoint readers: the input, after a selector byte, becomes a
 * checkpoint's metadata.json (beside one valid rank file, so that chunk reads are reached)
 * or a safetensors file to convert. Any input must give a status, never a crash or an
 * out-of-bounds read. Build and run with `make fuzz` (clang). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dtensor.h>

static char dir[64], ck[128], meta[160], rankf[160], st[128], out[128];

static void put(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (len && fwrite(data, 1, len, f) != len) abort();
    fclose(f);
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/dtfuzz-ckpt-XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(ck, sizeof ck, "%s/ck", dir);
    snprintf(meta, sizeof meta, "%s/metadata.json", ck);
    snprintf(rankf, sizeof rankf, "%s/rank-00000.safetensors", ck);
    snprintf(st, sizeof st, "%s/in.safetensors", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    /* a: f32 [2,2] = 1,2,3,4 */
    static const char hdr[] =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}  ";
    unsigned char file[8 + sizeof hdr - 1 + 16] = {sizeof hdr - 1};
    memcpy(file + 8, hdr, sizeof hdr - 1);
    float v[4] = {1, 2, 3, 4};
    memcpy(file + 8 + sizeof hdr - 1, v, 16);
    put(st, file, sizeof file);
    if (dt_checkpoint_convert(st, ck, "1", "R") != DT_OK) abort(); /* the valid rank file */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    if (size < 1) return 0;
    if (data[0] & 1) {
        put(meta, data + 1, size - 1);
        dt_checkpoint_check(ck, 1);
        size_t n;
        dt_checkpoint_blob(ck, NULL, 0, &n);
    } else {
        put(st, data + 1, size - 1);
        if (dt_checkpoint_convert(st, out, "2", "S(0)") == DT_OK &&
            dt_checkpoint_check(out, 1) != DT_OK)
            abort(); /* what convert accepts, it writes as a valid checkpoint */
    }
    return 0;
}
