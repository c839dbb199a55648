/* File-system steps of a checkpoint: whole writes and reads that survive short transfers and
 * EINTR, fsync of files and directories, mkdir -p, rm -rf, and keep_last rotation. Every
 * failure is DT_ERR_IO naming the call and the path. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/fs.h"
#include "core/check.h"

dt_status ck_write_all(int fd, const void *data, size_t bytes, const char *path, const char *fn) {
    const char *p = data;
    while (bytes > 0) {
        size_t step = bytes < ((size_t)1 << 30) ? bytes : ((size_t)1 << 30);
        ssize_t k = write(fd, p, step);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return dt_error(DT_ERR_IO, "%s: cannot write %s: %s", fn, path,
                            k < 0 ? strerror(errno) : "no progress");
        p += k, bytes -= (size_t)k;
    }
    return DT_OK;
}

dt_status ck_pread_all(int fd, void *dst, size_t bytes, uint64_t off, const char *path,
                       const char *fn) {
    char *p = dst;
    while (bytes > 0) {
        size_t step = bytes < ((size_t)1 << 30) ? bytes : ((size_t)1 << 30);
        ssize_t k = pread(fd, p, step, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return dt_error(DT_ERR_IO, "%s: cannot read %s: %s", fn, path, strerror(errno));
        if (k == 0)
            return dt_error(DT_ERR_IO, "%s: %s is truncated: no data at byte %llu", fn, path,
                            (unsigned long long)off);
        p += k, bytes -= (size_t)k, off += (uint64_t)k;
    }
    return DT_OK;
}

/* Written to path.tmp, fsynced, renamed onto path: path is either the old file or the new. */
dt_status ck_write_file(const char *path, const void *data, size_t bytes, const char *fn) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return dt_error(DT_ERR_IO, "%s: cannot create %s: %s", fn, tmp, strerror(errno));
    dt_status st = ck_write_all(fd, data, bytes, tmp, fn);
    if (st == DT_OK && fsync(fd) != 0)
        st = dt_error(DT_ERR_IO, "%s: cannot fsync %s: %s", fn, tmp, strerror(errno));
    close(fd);
    if (st == DT_OK && rename(tmp, path) != 0)
        st = dt_error(DT_ERR_IO, "%s: cannot rename %s: %s", fn, tmp, strerror(errno));
    if (st != DT_OK) unlink(tmp);
    return st;
}

dt_status ck_read_file(const char *path, char **data_out, size_t *bytes_out, size_t max,
                       const char *fn) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dt_error(DT_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    struct stat sb;
    dt_status st = DT_OK;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0) {
        st = dt_error(DT_ERR_IO, "%s: cannot stat %s: %s", fn, path, strerror(errno));
    } else if ((uint64_t)sb.st_size > max) {
        st = dt_error(DT_ERR_IO, "%s: %s is %lld bytes, over the %zu allowed", fn, path,
                      (long long)sb.st_size, max);
    } else if (!(buf = malloc((size_t)sb.st_size + 1))) {
        st = dt_error(DT_ERR_NOMEM, "%s: out of memory reading %s", fn, path);
    } else {
        st = ck_pread_all(fd, buf, (size_t)sb.st_size, 0, path, fn);
        buf[sb.st_size] = '\0';
    }
    close(fd);
    if (st != DT_OK) {
        free(buf);
        return st;
    }
    *data_out = buf, *bytes_out = (size_t)sb.st_size;
    return DT_OK;
}

dt_status ck_fsync_dir(const char *dir, const char *fn) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dt_error(DT_ERR_IO, "%s: cannot open directory %s: %s", fn, dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return dt_error(DT_ERR_IO, "%s: cannot fsync %s: %s", fn, dir, strerror(e));
    return DT_OK;
}

dt_status ck_mkdirs(const char *dir, const char *fn) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return dt_error(DT_ERR_ARG, "%s: path %.64s... is too long", fn, dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return dt_error(DT_ERR_IO, "%s: cannot create directory %s: %s", fn, p,
                            strerror(errno));
        *s = c;
        if (c == '\0') break;
    }
    return DT_OK;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

dt_status ck_remove_tree(const char *path, const char *fn) {
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return DT_OK;
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return dt_error(DT_ERR_IO, "%s: cannot remove %s: %s", fn, path, strerror(errno));
    return DT_OK;
}

void ck_split_path(const char *path, char *parent, size_t pcap, char *base, size_t bcap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--; /* "a/b/" is "a/b" */
    size_t cut = n;
    while (cut > 0 && path[cut - 1] != '/')
        cut--;
    snprintf(base, bcap, "%.*s", (int)(n - cut), path + cut);
    if (cut == 0)
        snprintf(parent, pcap, ".");
    else if (cut == 1)
        snprintf(parent, pcap, "/");
    else
        snprintf(parent, pcap, "%.*s", (int)(cut - 1), path);
}

int64_t ck_trailing_number(const char *base, size_t *prefix_len) {
    size_t n = strlen(base), k = n;
    while (k > 0 && base[k - 1] >= '0' && base[k - 1] <= '9')
        k--;
    if (k == n || n - k > 18) return -1;
    *prefix_len = k;
    return strtoll(base + k, NULL, 10);
}

int ck_is_ours(const char *path) {
    DIR *d = opendir(path);
    if (!d) return 0;
    int ours = 1;
    for (struct dirent *e; ours && (e = readdir(d)) != NULL;) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, CK_META_FILE) ||
            !strcmp(n, CK_META_FILE ".tmp") || !strcmp(n, CK_BLOB_FILE) ||
            !strcmp(n, CK_BLOB_FILE ".tmp"))
            continue;
        ours = len == strlen("rank-00000.safetensors") && !strncmp(n, "rank-", 5) &&
               !strcmp(n + 10, ".safetensors");
        for (int i = 5; ours && i < 10; i++)
            ours = n[i] >= '0' && n[i] <= '9';
    }
    closedir(d);
    return ours;
}

static int is_complete(const char *parent, const char *name) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s/%s", parent, name, CK_META_FILE);
    return access(p, F_OK) == 0;
}

typedef struct ck_sibling {
    int64_t num;
    char name[256];
} ck_sibling;

static int sibling_desc(const void *a, const void *b) {
    int64_t x = ((const ck_sibling *)a)->num, y = ((const ck_sibling *)b)->num;
    return (x < y) - (x > y);
}

dt_status ck_rotate(const char *dir, int keep_last, const char *fn) {
    char parent[4096], base[256];
    ck_split_path(dir, parent, sizeof parent, base, sizeof base);
    size_t plen;
    int64_t mine = ck_trailing_number(base, &plen);
    if (keep_last <= 0 || mine < 0) return DT_OK;
    DIR *d = opendir(parent);
    if (!d) return dt_error(DT_ERR_IO, "%s: cannot list %s: %s", fn, parent, strerror(errno));
    ck_sibling *sib = NULL;
    size_t n = 0, cap = 0;
    dt_status st = DT_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t elen = strlen(e->d_name), ep;
        if (elen >= sizeof sib->name || strncmp(e->d_name, base, plen) != 0) continue;
        /* "step-7" and "step-7.partial" (a save that never finished) */
        char name[256];
        snprintf(name, sizeof name, "%s", e->d_name);
        int partial = elen > 8 && strcmp(name + elen - 8, ".partial") == 0;
        if (partial) name[elen - 8] = '\0';
        int64_t num = ck_trailing_number(name, &ep);
        if (num < 0 || ep != plen || strcmp(e->d_name, base) == 0) continue;
        int complete = !partial && is_complete(parent, e->d_name);
        if (complete) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                ck_sibling *g = realloc(sib, cap * sizeof *sib);
                if (!g) {
                    st = dt_error(DT_ERR_NOMEM, "%s: out of memory listing %s", fn, parent);
                    break;
                }
                sib = g;
            }
            sib[n].num = num;
            snprintf(sib[n++].name, sizeof sib->name, "%s", e->d_name);
        } else if (num < mine) {
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", parent, e->d_name);
            if (st == DT_OK && ck_is_ours(p)) st = ck_remove_tree(p, fn);
        }
    }
    closedir(d);
    if (st == DT_OK) {
        /* newest first; dir takes its place in the order and is never removed */
        if (n) qsort(sib, n, sizeof *sib, sibling_desc); /* sib is NULL when n is 0 */
        int pos = 0, mine_placed = 0;
        for (size_t i = 0; i < n && st == DT_OK; i++) {
            if (!mine_placed && sib[i].num < mine) pos++, mine_placed = 1;
            if (pos++ >= keep_last) {
                char p[4400];
                snprintf(p, sizeof p, "%s/%s", parent, sib[i].name);
                if (ck_is_ours(p)) st = ck_remove_tree(p, fn);
            }
        }
    }
    free(sib);
    return st;
}

dt_status ck_fresh_dir(const char *partial, const char *fn) {
    struct stat sb;
    if (lstat(partial, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode) || !ck_is_ours(partial))
            return dt_error(DT_ERR_IO, "%s: %s exists and is not a checkpoint's; not removing it",
                            fn, partial);
        DT_CHECK(ck_remove_tree(partial, fn));
    }
    if (mkdir(partial, 0755) != 0)
        return dt_error(DT_ERR_IO, "%s: cannot create %s: %s", fn, partial, strerror(errno));
    return DT_OK;
}
