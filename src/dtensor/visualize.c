/* A text picture of a 1-D or 2-D tensor's layout: the grid of distinct shard boundaries, each
 * cell listing the mesh ranks that hold it (like jax.debug.visualize_sharding). Spec only. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/text.h"
#include "dtensor/tensor_impl.h"
#include "mesh/mesh_impl.h"

/* Sorted distinct cut points of one tensor dim over all shards, including 0 and the size. */
static int cuts(const int64_t (*lo)[2], int nranks, int64_t size, int64_t *out) {
    int n = 0;
    out[n++] = 0;
    out[n++] = size;
    for (int r = 0; r < nranks; r++) {
        for (int k = 0; k < 2; k++) {
            int64_t v = lo[r][k];
            int seen = 0;
            for (int i = 0; i < n; i++) seen |= out[i] == v;
            if (!seen) out[n++] = v;
        }
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int64_t tmp = out[j];
            out[j] = out[j - 1];
            out[j - 1] = tmp;
        }
    return n;
}

dt_status dt_tensor_visualize(const dt_tensor *tensor, char *buf, size_t cap, size_t *len_out) {
    DT_TENSOR_ARG(tensor);
    DT_ARG(buf != NULL || cap == 0, "dt_tensor_visualize: argument buf is NULL with cap %zu", cap);
    if (tensor->ndim < 1 || tensor->ndim > 2)
        return dt_error(DT_ERR_UNSUPPORTED, "dt_tensor_visualize: only 1-D and 2-D tensors are "
                                            "drawn, this one is %d-D", tensor->ndim);
    const dt_mesh *mesh = tensor->mesh;
    int nr = mesh->nranks, two = tensor->ndim == 2;
    int64_t (*rows)[2] = calloc((size_t)nr, sizeof *rows), (*cols)[2] = calloc((size_t)nr, sizeof *cols);
    int64_t *rc = malloc(sizeof(int64_t) * (size_t)(2 * nr + 2));
    int64_t *cc = malloc(sizeof(int64_t) * (size_t)(2 * nr + 2));
    char *cell = malloc((size_t)nr * 8 + 16);
    if (!rows || !cols || !rc || !cc || !cell) {
        free(rows), free(cols), free(rc), free(cc), free(cell);
        return dt_error(DT_ERR_NOMEM, "dt_tensor_visualize: out of memory");
    }
    for (int r = 0; r < nr; r++) {
        int64_t shape[2], off[2];
        dt_tensor_layout_of(tensor, r, shape, off);
        rows[r][0] = two ? off[0] : 0;
        rows[r][1] = two ? off[0] + shape[0] : 1;
        cols[r][0] = off[two];
        cols[r][1] = off[two] + shape[two];
    }
    int nrc = cuts(rows, nr, two ? tensor->shape[0] : 1, rc);
    int ncc = cuts(cols, nr, tensor->shape[two], cc);
    dt_text t = {buf, cap, 0};
    char pl[16 * DT_MESH_MAX_NDIM];
    dt_placements_format(tensor->placements, mesh->ndim, pl, sizeof pl);
    dt_text_put(&t, "%s[", dt_dtype_name(tensor->dtype));
    for (int d = 0; d < tensor->ndim; d++) dt_text_put(&t, d ? ",%lld" : "%lld", (long long)tensor->shape[d]);
    dt_text_put(&t, "] on mesh (");
    for (int m = 0; m < mesh->ndim; m++) dt_text_put(&t, m ? ", %s=%d" : "%s=%d", mesh->names[m], mesh->shape[m]);
    dt_text_put(&t, ") as %s\n", pl);
    /* Cell text is "r0 r1 ..." for the mesh ranks whose shard covers the cell. */
    const int width = 14;
    dt_text_put(&t, "%-12s", "");
    for (int j = 0; j + 1 < ncc; j++) {
        char hdr[48];
        snprintf(hdr, sizeof hdr, "[%lld:%lld)", (long long)cc[j], (long long)cc[j + 1]);
        dt_text_put(&t, " %-*s", width, hdr);
    }
    dt_text_put(&t, "\n");
    for (int i = 0; i + 1 < nrc; i++) {
        char hdr[48] = "";
        if (two) snprintf(hdr, sizeof hdr, "[%lld:%lld)", (long long)rc[i], (long long)rc[i + 1]);
        dt_text_put(&t, "%-12s", hdr);
        for (int j = 0; j + 1 < ncc; j++) {
            size_t o = 0;
            cell[0] = '\0';
            for (int r = 0; r < nr; r++)
                if (rows[r][0] <= rc[i] && rc[i + 1] <= rows[r][1] && cols[r][0] <= cc[j] &&
                    cc[j + 1] <= cols[r][1])
                    o += (size_t)sprintf(cell + o, o ? " r%d" : "r%d", r);
            dt_text_put(&t, " %-*s", width, o ? cell : "-");
        }
        dt_text_put(&t, "\n");
    }
    int empty = 0;
    for (int r = 0; r < nr; r++)
        if (rows[r][0] == rows[r][1] || cols[r][0] == cols[r][1])
            dt_text_put(&t, empty++ ? " r%d" : "empty shards: r%d", r);
    if (empty) dt_text_put(&t, "\n");
    for (int m = 0; m < mesh->ndim; m++)
        if (tensor->placements[m].kind == DT_PLACEMENT_PARTIAL &&
            tensor->placements[m].op == DT_REDUCE_NORM)
            dt_text_put(&t, "NormP(%g) on %s: ranks along %s hold p-norms of their parts; the "
                            "tensor is the %g-norm of those\n", tensor->placements[m].norm_ord,
                        mesh->names[m], mesh->names[m], tensor->placements[m].norm_ord);
        else if (tensor->placements[m].kind == DT_PLACEMENT_PARTIAL)
            dt_text_put(&t, "P(%s) on %s: ranks along %s hold partial values; the tensor is their %s\n",
                dt_reduce_op_name(tensor->placements[m].op), mesh->names[m], mesh->names[m],
                dt_reduce_op_name(tensor->placements[m].op));
    free(rows), free(cols), free(rc), free(cc), free(cell);
    return dt_text_finish(&t, "dt_tensor_visualize", len_out);
}

dt_status dt_tensor_print_layout(const dt_tensor *tensor, FILE *f) {
    DT_ARG_NOT_NULL(f);
    size_t len = 0;
    dt_status st = dt_tensor_visualize(tensor, NULL, 0, &len);
    if (st != DT_OK && st != DT_ERR_SIZE) return st;
    char *buf = malloc(len);
    if (!buf) return dt_error(DT_ERR_NOMEM, "dt_tensor_print_layout: out of memory");
    st = dt_tensor_visualize(tensor, buf, len, NULL);
    if (st == DT_OK) fputs(buf, f);
    free(buf);
    return st;
}
