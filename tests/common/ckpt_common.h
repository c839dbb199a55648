/* Shared by the checkpoint tests (test_checkpoint.c, test_checkpoint_props.c): tensors made
 * from a seed on any mesh, a check of a rank's shard against the full tensor computed by
 * naive index loops, and save/load bodies run on local ranks. */
#ifndef DT_TEST_CKPT_COMMON_H
#define DT_TEST_CKPT_COMMON_H

#include <dtensor.h>

#define CT_MAX 8

typedef struct ct_spec {
    char name[64];
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    char placements[64]; /* on the mesh of the run */
    uint64_t seed;
    int small; /* small exact integers (a Partial save sums them) rather than any bytes */
} ct_spec;

typedef struct ct_run {
    const char *dir;
    int mesh_ndim, mesh_shape[DT_MESH_MAX_NDIM];
    int n;
    ct_spec specs[CT_MAX];
    const char *blob;
    int load;  /* 0: save; 1: load into zeros and compare */
    int async; /* save asynchronously, overwriting the tensors before the wait */
    int keep_last;
    int cuda; /* the ranks' tensors on their GPU (dt_ctx_set_device) */
    size_t max_gap; /* the load's dt_checkpoint_load_options.max_gap */
    int verify, no_dist; /* the load's options of those names */
    size_t block_bytes;  /* the save's dt_checkpoint_save_options.block_bytes */
    dt_checkpoint_progress_fn progress; /* nullable */
    void *progress_arg;
} ct_run;

/* The full tensor of a spec (host, malloc'd): arbitrary bytes, or small exact integers. */
void *ct_full(const ct_spec *s, size_t *bytes_out);
/* DT_OK when this rank's shard of t holds exactly the full tensor's box (for a Partial
 * P(sum) dim off coordinate 0: zeros). */
dt_status ct_check_shard(dt_tensor *t, const void *full);
/* The SPMD body: save or load (and check) r's tensors on r's mesh. */
dt_status ct_body(dt_ctx *ctx, void *arg);

ct_spec ct_spec_make(const char *name, dt_dtype dt, int ndim, const int64_t *shape,
                     const char *placements, uint64_t seed, int small);
/* Eight tensors on a 2x2 mesh: uneven sizes, replicated, Partial, empty and 0-d tensors, every
 * dtype; their data differs with step. */
ct_run ct_fixed(const char *dir, uint64_t step);

#endif
