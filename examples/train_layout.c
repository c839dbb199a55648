/* make train's table of what each rank holds: train_layout.h. */
#include "train_layout.h"
#include "trainer.h"

#include <stdlib.h>
#include <string.h>

/* A rank's row: blocks [first, end), embedding and head held (1/0), parameters stored (elements
 * here, and in all: the whole of the ones it holds part of). */
enum { FIRST, END, EMBED, HEAD, HELD, WHOLE, NCOL };

static dt_status row_of(dt_params *params, int64_t *row) {
    row[FIRST] = -1, row[END] = -1, row[EMBED] = row[HEAD] = row[HELD] = row[WHOLE] = 0;
    for (int i = 0; i < dt_params_count(params); i++) {
        const char *name;
        dt_tensor *t;
        dt_tensor_info info;
        TR_TRY(dt_params_at(params, i, &name, &t));
        TR_TRY(dt_tensor_info_get(t, &info));
        row[HELD] += (int64_t)info.local_numel, row[WHOLE] += (int64_t)info.numel;
        int block;
        if (sscanf(name, "layers.%d.", &block) == 1) {
            if (row[FIRST] < 0 || block < row[FIRST]) row[FIRST] = block;
            if (block + 1 > row[END]) row[END] = block + 1;
        }
        if (!strncmp(name, "tok_embeddings.", 15)) row[EMBED] = 1;
        if (!strncmp(name, "output.", 7)) row[HEAD] = 1;
    }
    return DT_OK;
}

/* The size of mesh dim name (1 when the mesh has none). */
static int size_of(const dt_mesh *mesh, const char *name) {
    int d;
    return dt_mesh_dim_index(mesh, name, &d) == DT_OK ? dt_mesh_dim_size(mesh, d) : 1;
}

dt_status tr_layout_print(dt_ctx *ctx, const tr_config *c, dt_mesh *mesh, dt_params *params,
                          FILE *f) {
    int nd = dt_mesh_ndim(mesh), world = dt_mesh_nranks(mesh);
    int64_t row[NCOL], shape[2] = {world, NCOL}, local[2] = {1, NCOL};
    TR_TRY(row_of(params, row));
    /* every mesh dim shards the rows, in mesh order: row r is mesh rank r's */
    dt_placement pl[DT_MESH_MAX_NDIM];
    for (int d = 0; d < nd; d++)
        pl[d] = dt_shard(0);
    dt_tensor *t;
    TR_TRY(dt_tensor_from_local(mesh, row, DT_I64, 2, local, nd, pl, shape, 0, &t));
    int64_t *all = malloc(sizeof *all * (size_t)(world * NCOL));
    dt_status st = all ? dt_tensor_full_tensor(t, all, sizeof *all * (size_t)(world * NCOL))
                       : dt_error_set(DT_ERR_NOMEM, "train: out of memory");
    dt_tensor_release(t);
    if (st != DT_OK || dt_ctx_rank(ctx) != 0) return free(all), st;
    int batch_shards = size_of(mesh, "dp_replicate") * size_of(mesh, "dp_shard") *
                       size_of(mesh, "dp") * size_of(mesh, "ep");
    int cp = size_of(mesh, "cp");
    fprintf(f,
            "parallel layout: mesh %s, %d ranks; pp %d, dp_replicate %d, dp_shard %d, cp %d, "
            "tp %d, ep %d\n",
            c->mesh, world, size_of(mesh, "pp"), size_of(mesh, "dp_replicate"),
            size_of(mesh, "dp_shard") * size_of(mesh, "dp"), cp, size_of(mesh, "tp"),
            size_of(mesh, "ep"));
    fprintf(f, "rank ");
    for (int d = 0; d < nd; d++)
        fprintf(f, " %*s",
                (int)strlen(dt_mesh_dim_name(mesh, d)) < 2 ? 2
                                                           : (int)strlen(dt_mesh_dim_name(mesh, d)),
                dt_mesh_dim_name(mesh, d));
    fprintf(f, "  blocks       parameters held (of the whole)  batch rows  seq positions\n");
    for (int r = 0; r < world; r++) {
        const int64_t *w = all + (size_t)r * NCOL;
        int coord[DT_MESH_MAX_NDIM];
        st = dt_mesh_coord_of(mesh, r, coord);
        if (st != DT_OK) break;
        fprintf(f, "%4d ", r);
        for (int d = 0; d < nd; d++) {
            int wd = (int)strlen(dt_mesh_dim_name(mesh, d));
            fprintf(f, " %*d", wd < 2 ? 2 : wd, coord[d]);
        }
        char blocks[64];
        snprintf(blocks, sizeof blocks, "%s[%lld, %lld)%s", w[EMBED] ? "emb " : "",
                 (long long)w[FIRST], (long long)w[END], w[HEAD] ? " head" : "");
        fprintf(f, "  %-12s %10lld (%5.1f%% of %lld)       %4d of %-4d %4d of %d\n", blocks,
                (long long)w[HELD], w[WHOLE] ? 100.0 * (double)w[HELD] / (double)w[WHOLE] : 0,
                (long long)w[WHOLE], c->model.batch / batch_shards, c->model.batch,
                c->model.seq / cp, c->model.seq);
    }
    free(all);
    return st;
}
