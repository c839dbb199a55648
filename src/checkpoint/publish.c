/* Publishing a save: the metadata checked as a loader will check it, the partial directory
 * renamed into place, metadata.json written last. Above fs.c and meta.c, which know nothing
 * of each other's work. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/ckpt_impl.h"
#include "core/check.h"

dt_status ck_publish(const ck_meta *m, const char *partial, const char *dir,
                     void (*renamed)(void *), void *arg, const char *fn) {
    size_t len;
    char *text = ck_meta_format(m, &len), err[512];
    if (!text) return dt_error(DT_ERR_NOMEM, "%s: out of memory for the metadata", fn);
    ck_meta back;
    if (ck_meta_parse(text, len, &back, err, sizeof err)) {
        free(text);
        return dt_error(DT_ERR_ARG, "%s: the shards do not make a checkpoint: %s", fn, err);
    }
    ck_meta_free(&back);
    char parent[4096], base[256], old[4200], meta[4300];
    ck_split_path(dir, parent, sizeof parent, base, sizeof base);
    snprintf(old, sizeof old, "%s.old", dir);
    snprintf(meta, sizeof meta, "%s/%s", dir, CK_META_FILE);
    dt_status st = ck_fsync_dir(partial, fn);
    struct stat sb;
    int replacing = stat(dir, &sb) == 0;
    if (st == DT_OK && replacing && !ck_is_ours(dir))
        st = dt_error(DT_ERR_IO,
                      "%s: %s exists and is not a checkpoint (files other than a "
                      "checkpoint's in it); not replacing it",
                      fn, dir);
    if (st == DT_OK && replacing) { /* the checkpoint being replaced moves aside until done */
        st = ck_remove_tree(old, fn);
        if (st == DT_OK && rename(dir, old) != 0)
            st = dt_error(DT_ERR_IO, "%s: cannot move %s aside: %s", fn, dir, strerror(errno));
    }
    if (st == DT_OK && rename(partial, dir) != 0)
        st = dt_error(DT_ERR_IO, "%s: cannot rename %s to %s: %s", fn, partial, dir,
                      strerror(errno));
    if (st == DT_OK) st = ck_fsync_dir(parent, fn);
    if (st == DT_OK && renamed) renamed(arg);
    if (st == DT_OK) st = ck_write_file(meta, text, len, fn);
    if (st == DT_OK) st = ck_fsync_dir(dir, fn);
    free(text);
    if (st == DT_OK && replacing) st = ck_remove_tree(old, fn);
    return st;
}
