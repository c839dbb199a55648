/* libFuzzer target for the text parsers (placements, mesh shapes, dtypes) and the placement
 * printer: any input must give a status, never a crash, and a parsed placement list must
 * print and parse back to itself.  Build and run with `make fuzz` (clang). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    dt_placement p[DT_MESH_MAX_NDIM], q[DT_MESH_MAX_NDIM];
    int n, m;
    if (dt_placements_parse(text, p, DT_MESH_MAX_NDIM, &n) == DT_OK) {
        char buf[256];
        if (dt_placements_format(p, n, buf, sizeof buf) != DT_OK) abort();
        if (dt_placements_parse(buf, q, DT_MESH_MAX_NDIM, &m) != DT_OK || m != n) abort();
        for (int i = 0; i < n; i++)
            if (!dt_placement_equal(p[i], q[i])) abort();
        dt_placements_normalize(p, n, 3);
    }
    int shape[DT_MESH_MAX_NDIM], ndim;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    dt_mesh_parse(text, shape, names, &ndim);
    dt_dtype dt;
    dt_dtype_parse(text, &dt);
    free(text);
    return 0;
}
