#include "io/fileio.h"

#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/error.h"

int hyla_open_regular(const char *path, int *out_fd, size_t *out_size)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return hyla_error_set(HYLA_ERR_IO, "%s: not a regular file", path);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    *out_fd = fd;
    *out_size = (size_t)sb.st_size;
    return HYLA_OK;
}

int hyla_read_file_max(const char *path, size_t max_bytes, char **out_text, size_t *out_len)
{
    *out_text = NULL;
    int fd;
    size_t size;
    HYLA_TRY(hyla_open_regular(path, &fd, &size));
    if (size > max_bytes) {
        close(fd);
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %zu bytes, more than the %zu this file may have", path, size, max_bytes);
    }
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != size) {
        free(buf);
        return hyla_error_set(HYLA_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, size);
    }
    buf[size] = '\0';
    *out_text = buf;
    if (out_len)
        *out_len = size;
    return HYLA_OK;
}

int hyla_read_text_file(const char *path, char **out_text, size_t *out_len)
{
    return hyla_read_file_max(path, SIZE_MAX - 1, out_text, out_len);
}

int hyla_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int hyla_atomic_open(hyla_atomic_file *f, const char *path)
{
    struct stat sb;
    memset(f, 0, sizeof *f);
    f->fd = -1;
    char target[PATH_MAX];
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) { /* replace what the link points at, not the link */
        if (!realpath(path, target)) {
            if (errno != ENOENT)
                return hyla_error_set(HYLA_ERR_IO, "%s: cannot resolve the symbolic link: %s", path, strerror(errno));
            return hyla_error_set(HYLA_ERR_IO, "%s: is a symbolic link to a missing file", path);
        }
        path = target;
    }
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path ||
        snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof f->tmp)
        return hyla_error_set(HYLA_ERR_IO, "%s: path too long", path);
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return hyla_error_set(HYLA_ERR_IO, "%s: is a directory", path);
        /* An existing device or FIFO (/dev/null, /dev/stdout, a pipe) is written in place: renaming a
         * new file over it would replace the device node itself. */
        f->in_place = !S_ISREG(sb.st_mode);
    }
    f->fd = f->in_place ? open(path, O_WRONLY | O_CLOEXEC) : open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot %s: %s", f->in_place ? path : f->tmp,
                              f->in_place ? "open for writing" : "create", strerror(errno));
    return HYLA_OK;
}

int hyla_atomic_write(hyla_atomic_file *f, const void *data, size_t len)
{
    if (f->err == 0 && hyla_write_all(f->fd, data, len) != 0)
        f->err = errno ? errno : EIO;
    return f->err ? hyla_error_set(HYLA_ERR_IO, "%s: write failed: %s", f->path, strerror(f->err)) : HYLA_OK;
}

int hyla_atomic_commit(hyla_atomic_file *f)
{
    if (f->err == 0 && !f->in_place && fsync(f->fd) != 0)
        f->err = errno;
    if (close(f->fd) != 0 && f->err == 0)
        f->err = errno;
    f->fd = -1;
    if (f->err) {
        if (!f->in_place)
            unlink(f->tmp);
        return hyla_error_set(HYLA_ERR_IO, "%s: write failed: %s", f->path, strerror(f->err));
    }
    if (!f->in_place && rename(f->tmp, f->path) != 0) {
        int e = errno;
        unlink(f->tmp);
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot rename into place: %s", f->path, strerror(e));
    }
    return HYLA_OK;
}

void hyla_atomic_abort(hyla_atomic_file *f)
{
    if (f->fd >= 0) {
        close(f->fd);
        if (!f->in_place)
            unlink(f->tmp);
    }
    f->fd = -1;
}

int hyla_write_file_atomic(const char *path, const void *data, size_t len)
{
    hyla_atomic_file f;
    HYLA_TRY(hyla_atomic_open(&f, path));
    hyla_atomic_write(&f, data, len);
    return hyla_atomic_commit(&f);
}

int hyla_write_json_atomic(const char *path, const cJSON *root, int pretty)
{
    char *text = pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
    if (!text)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    int st = hyla_write_file_atomic(path, text, strlen(text));
    cJSON_free(text);
    return st;
}

void hyla_drop_mapped_pages(const void *p, size_t len)
{
    if (!len)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)p & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + len + page - 1) & ~(page - 1);
    madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: a failure only leaves the pages resident */
}

int hyla_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int hyla_mkdir_p(const char *dir)
{
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf)
        return hyla_error_set(HYLA_ERR_IO, "bad directory path '%s'", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return hyla_error_set(HYLA_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
            buf[i] = saved;
        }
    }
    return HYLA_OK;
}

int hyla_path_join(char *dst, size_t cap, const char *dir, const char *name)
{
    if ((size_t)snprintf(dst, cap, "%s/%s", dir, name) >= cap)
        return hyla_error_set(HYLA_ERR_IO, "path too long: %s/%s", dir, name);
    return HYLA_OK;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int hyla_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return HYLA_OK;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return HYLA_OK;
}
