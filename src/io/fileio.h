/* Small file helpers shared by the readers and writers. */
#ifndef HYLA_IO_FILEIO_H
#define HYLA_IO_FILEIO_H

#include <stddef.h>

/* Open a regular file for reading (a FIFO, device or directory is an error, never a hang). */
int hyla_open_regular(const char *path, int *out_fd, size_t *out_size);
/* Read a whole regular file of at most max_bytes into a NUL-terminated malloc'd buffer. */
int hyla_read_file_max(const char *path, size_t max_bytes, char **out_text, size_t *out_len);
/* Read a whole file into a NUL-terminated malloc'd buffer (owned by the caller). */
int hyla_read_text_file(const char *path, char **out_text, size_t *out_len);
/* Write `len` bytes to `path` atomically: write to a temporary name in the same directory,
 * flush, then rename over `path`. On failure nothing replaces an existing file. */
int hyla_write_file_atomic(const char *path, const void *data, size_t len);
/* root printed (pretty: indented; else on one line) and written to `path` atomically. */
struct cJSON;
int hyla_write_json_atomic(const char *path, const struct cJSON *root, int pretty);
/* The same, streamed: open, write any number of times, then commit (or abort, which leaves an
 * existing file untouched). A write error is remembered and reported again by commit. An
 * existing device or FIFO is written in place; a symlink is replaced at its target. */
typedef struct {
    int fd, in_place, err;
    char path[4096], tmp[4096 + 32];
} hyla_atomic_file;
int hyla_atomic_open(hyla_atomic_file *f, const char *path);
int hyla_atomic_write(hyla_atomic_file *f, const void *data, size_t len);
int hyla_atomic_commit(hyla_atomic_file *f);
void hyla_atomic_abort(hyla_atomic_file *f);
int hyla_file_exists(const char *path);
/* A read-only file mapping's pages covering [p, p + len) leave this process's resident set (they
 * stay in the page cache; touching them again maps them back), so a loader that has copied a
 * tensor out of a mapped file does not hold the file's pages beside the copy. */
void hyla_drop_mapped_pages(const void *p, size_t len);
/* write(2) until all of data is written (EINTR retried); 0, or -1 with errno set. */
int hyla_write_all(int fd, const void *data, size_t len);
int hyla_mkdir_p(const char *dir);
/* Remove a directory tree (like rm -rf); missing is not an error. */
int hyla_remove_tree(const char *path);
/* dst = dir + "/" + name; error if it does not fit. */
int hyla_path_join(char *dst, size_t cap, const char *dir, const char *name);

#endif
