/* dtensor-explain: prints the redistribute plan for a tensor on a mesh, without ranks.
 *   dtensor-explain --mesh 2x4 --shape 8,6 --dtype f32 --from "S(0),R" --to "R,S(1)" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dtensor.h>

static int usage(const char *why) {
    if (why) fprintf(stderr, "dtensor-explain: %s\n", why);
    fprintf(stderr,
            "usage: dtensor-explain --mesh 2x4|dp=2,tp=4 --shape 8,6 --from PLACEMENTS --to "
            "PLACEMENTS\n"
            "                       [--dtype f32] [--latency-us 5] [--step-us 1] "
            "[--bandwidth-gbps 10]\n"
            "placements: one per mesh dim, e.g. \"S(0),R\", \"P(sum),S(1)\"\n");
    return 2;
}

static int parse_shape(const char *text, int64_t *shape, int *ndim) {
    *ndim = 0;
    if (strcmp(text, "") == 0 || strcmp(text, "()") == 0) return 0;
    for (const char *p = text;;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || *ndim == DT_MAX_NDIM) return -1;
        shape[(*ndim)++] = v;
        if (*end == '\0') return 0;
        if (*end != ',' && *end != 'x') return -1;
        p = end + 1;
    }
}

int main(int argc, char **argv) {
    const char *mesh = NULL, *shape_text = NULL, *from = NULL, *to = NULL, *dtype_text = "f32";
    dt_cost_model model = dt_cost_model_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return usage(NULL), 0;
        if (!v) return usage("every option takes a value");
        if (strcmp(a, "--mesh") == 0) mesh = v;
        else if (strcmp(a, "--shape") == 0) shape_text = v;
        else if (strcmp(a, "--from") == 0) from = v;
        else if (strcmp(a, "--to") == 0) to = v;
        else if (strcmp(a, "--dtype") == 0) dtype_text = v;
        else if (strcmp(a, "--latency-us") == 0) model.latency_us = atof(v);
        else if (strcmp(a, "--step-us") == 0) model.step_us = atof(v);
        else if (strcmp(a, "--bandwidth-gbps") == 0) model.bandwidth_gbps = atof(v);
        else return usage("unknown option");
        i++;
    }
    if (!mesh || !shape_text || !from || !to) return usage("--mesh, --shape, --from and --to are needed");
    int mesh_shape[DT_MESH_MAX_NDIM], mnd, nsrc, ndst, ndim;
    char names[DT_MESH_MAX_NDIM][DT_MESH_NAME_MAX + 1];
    const char *name_ptrs[DT_MESH_MAX_NDIM];
    int64_t shape[DT_MAX_NDIM];
    dt_placement src[DT_MESH_MAX_NDIM], dst[DT_MESH_MAX_NDIM];
    dt_dtype dtype;
    dt_status st = dt_mesh_parse(mesh, mesh_shape, names, &mnd);
    if (st == DT_OK) st = dt_dtype_parse(dtype_text, &dtype);
    if (st == DT_OK) st = dt_placements_parse(from, src, DT_MESH_MAX_NDIM, &nsrc);
    if (st == DT_OK) st = dt_placements_parse(to, dst, DT_MESH_MAX_NDIM, &ndst);
    if (st != DT_OK) return fprintf(stderr, "dtensor-explain: %s\n", dt_last_error()), 1;
    if (parse_shape(shape_text, shape, &ndim) != 0) return usage("--shape takes sizes like 8,6");
    if (nsrc != mnd || ndst != mnd) {
        fprintf(stderr, "dtensor-explain: the mesh has %d dims but --from has %d placements and "
                        "--to %d\n", mnd, nsrc, ndst);
        return 1;
    }
    for (int m = 0; m < mnd; m++) name_ptrs[m] = names[m];
    size_t len = 0;
    st = dt_redistribute_explain(mnd, mesh_shape, name_ptrs, ndim, shape, dtype, src, dst, &model,
                                 NULL, 0, &len);
    char *buf = st == DT_ERR_SIZE ? malloc(len) : NULL;
    if (buf)
        st = dt_redistribute_explain(mnd, mesh_shape, name_ptrs, ndim, shape, dtype, src, dst,
                                     &model, buf, len, NULL);
    if (st != DT_OK) {
        fprintf(stderr, "dtensor-explain: %s\n", dt_last_error());
        free(buf);
        return 1;
    }
    fputs(buf, stdout);
    free(buf);
    return 0;
}
