/* safetensors writer (see safetensors.h for the contract): every file is written to a temporary
 * name, fsynced and renamed, so a file either is complete or is not there. The page cache a large
 * write leaves dirty is bounded: every HYLA_ST_FLUSH_BYTES the file is synced and its cached pages
 * dropped, so saving a model many times the size of memory neither stalls on writeback nor
 * pushes the process's memory (or its cgroup's) past its working set. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/fileio.h"

#define HYLA_ST_FLUSH_BYTES ((size_t)64 << 20)

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *p, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) {
            b->oom = true;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, uint64_t v)
{
    char tmp[24];
    sb_put(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v));
}

/* JSON string literal; bytes >= 0x80 pass through (names are UTF-8). */
static void sb_json_string(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            char esc[8];
            sb_put(b, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", c));
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static char *path_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *path_fmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = n < 0 ? NULL : malloc((size_t)n + 1);
    if (p) {
        va_start(ap, fmt);
        vsnprintf(p, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return p;
}

/* One output file: where it is written, where it goes, which tensors it holds. */
typedef struct {
    char *tmp, *final;
    size_t lo, hi;      /* entries [lo, hi); unused for the index */
    bool created;       /* tmp exists on disk */
} out_file;

/* The header for entries [lo, hi), padded with spaces to a multiple of 8 bytes. */
static void shard_header(sbuf *b, const hyla_st_entry *e, const size_t *nbytes, size_t lo, size_t hi)
{
    sb_str(b, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (size_t i = lo; i < hi; i++) {
        sb_put(b, ",", 1);
        sb_json_string(b, e[i].name);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, hyla_dtype_name(e[i].dtype));
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < e[i].ndim; d++) {
            if (d)
                sb_put(b, ",", 1);
            sb_u64(b, (uint64_t)e[i].shape[d]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_u64(b, off);
        sb_put(b, ",", 1);
        sb_u64(b, off + nbytes[i]);
        sb_str(b, "]}");
        off += nbytes[i];
    }
    sb_put(b, "}", 1);
    while (b->len % 8)
        sb_put(b, " ", 1);
}

static int tmp_open(out_file *o, int *fd)
{
    *fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (*fd < 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot create %s: %s", o->final, o->tmp, strerror(errno));
    o->created = true;
    return HYLA_OK;
}

/* fsync and close; `ok` false means an earlier write already failed (errno set by it). */
static int tmp_close(const out_file *o, int fd, bool ok)
{
    int e = ok ? 0 : errno;
    if (ok && fsync(fd) != 0) {
        ok = false;
        e = errno;
    }
    if (ok) /* on disk: its cached pages need not stay (advice) */
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    return ok ? HYLA_OK : hyla_error_set(HYLA_ERR_IO, "%s: writing %s failed: %s", o->final, o->tmp, strerror(e));
}

static int write_shard(out_file *o, const hyla_st_entry *e, const size_t *nbytes, hyla_st_fill_fn fill, void *ctx,
                       void *scratch)
{
    sbuf h = {0};
    shard_header(&h, e, nbytes, o->lo, o->hi);
    if (h.oom) {
        free(h.buf);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for the header", o->final);
    }
    int fd, st = tmp_open(o, &fd);
    if (st != HYLA_OK) {
        free(h.buf);
        return st;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    bool ok = hyla_write_all(fd, len8, 8) == 0 && hyla_write_all(fd, h.buf, h.len) == 0;
    free(h.buf);
    size_t dirty = 0;
    for (size_t i = o->lo; ok && i < o->hi; i++) {
        if ((st = fill(ctx, i, scratch)) != HYLA_OK) {
            close(fd);
            return st < 0 ? st
                          : hyla_error_set(HYLA_ERR_ARG, "%s: fill failed for tensor '%s' (status %d)", o->final,
                                           e[i].name, st);
        }
        ok = hyla_write_all(fd, scratch, nbytes[i]) == 0;
        if (ok && (dirty += nbytes[i]) >= HYLA_ST_FLUSH_BYTES) { /* bound the dirty page cache */
            ok = fdatasync(fd) == 0;
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            dirty = 0;
        }
    }
    return tmp_close(o, fd, ok);
}

static int write_index(out_file *o, const hyla_st_entry *e, size_t n, const out_file *shards, size_t n_shards,
                       uint64_t total)
{
    sbuf b = {0};
    sb_str(&b, "{\n  \"metadata\": {\n    \"total_size\": ");
    sb_u64(&b, total);
    sb_str(&b, "\n  },\n  \"weight_map\": {");
    for (size_t k = 0; k < n_shards; k++) {
        const char *shard = strrchr(shards[k].final, '/') + 1;
        for (size_t i = shards[k].lo; i < shards[k].hi; i++) {
            sb_str(&b, i ? ",\n    " : "\n    ");
            sb_json_string(&b, e[i].name);
            sb_str(&b, ": ");
            sb_json_string(&b, shard);
        }
    }
    sb_str(&b, "\n  }\n}\n");
    int fd = -1, st = b.oom ? hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", o->final) : tmp_open(o, &fd);
    if (st == HYLA_OK)
        st = tmp_close(o, fd, hyla_write_all(fd, b.buf, b.len) == 0);
    free(b.buf);
    return st;
}

/* Sizes, totals and name checks for the entries. nbytes: [n]. */
static int check_entries(const char *dir, const hyla_st_entry *e, size_t n, size_t *nbytes, uint64_t *total,
                         size_t *largest)
{
    *total = 0;
    *largest = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = e[i].name;
        if (!name || !name[0] || !strcmp(name, "__metadata__"))
            return hyla_error_set(HYLA_ERR_ARG, "%s: entry %zu has an invalid tensor name '%s'", dir, i,
                                  name ? name : "(null)");
        if (hyla_dtype_size(e[i].dtype) == 0)
            return hyla_error_set(HYLA_ERR_ARG, "%s: tensor '%s': invalid dtype %d", dir, name, (int)e[i].dtype);
        if (e[i].ndim < 0 || e[i].ndim > HYLA_ST_MAX_NDIM)
            return hyla_error_set(HYLA_ERR_ARG, "%s: tensor '%s': ndim %d out of range", dir, name, e[i].ndim);
        if (!hyla_st_tensor_nbytes(e[i].ndim, e[i].shape, hyla_dtype_size(e[i].dtype), &nbytes[i]) ||
            __builtin_add_overflow(*total, (uint64_t)nbytes[i], total) || *total > (uint64_t)HYLA_ST_JSON_MAX_EXACT)
            return hyla_error_set(HYLA_ERR_ARG, "%s: tensor '%s': negative dimension or size overflow", dir, name);
        if (nbytes[i] > *largest)
            *largest = nbytes[i];
    }
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", dir);
    for (size_t i = 0; i < n; i++)
        names[i] = e[i].name;
    qsort(names, n, sizeof *names, hyla_st_cmp_names);
    int st = HYLA_OK;
    for (size_t i = 1; i < n && st == HYLA_OK; i++)
        if (!strcmp(names[i - 1], names[i]))
            st = hyla_error_set(HYLA_ERR_ARG, "%s: duplicate tensor name '%s'", dir, names[i]);
    free(names);
    return st;
}

/* Greedy split into shards; fills out[k].lo/hi and returns the count (>= 1). out: [n + 1]. */
static size_t plan_shards(const size_t *nbytes, size_t n, size_t max_bytes, uint64_t total, out_file *out)
{
    if (max_bytes == 0 || total <= max_bytes) {
        out[0].lo = 0;
        out[0].hi = n;
        return 1;
    }
    size_t k = 0, cur = 0;
    out[0].lo = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > out[k].lo && nbytes[i] > max_bytes - cur) {
            out[k].hi = i;
            out[++k].lo = i;
            cur = 0;
        }
        cur = nbytes[i] > max_bytes - cur ? max_bytes : cur + nbytes[i]; /* an oversize tensor fills it */
    }
    out[k].hi = n;
    return k + 1;
}

static int name_files(const char *dir, const char *single, out_file *f, size_t n_shards, bool sharded)
{
    for (size_t k = 0; k <= n_shards; k++) {
        char base[64];
        if (k == n_shards && !sharded)
            break;
        if (k == n_shards)
            snprintf(base, sizeof base, "%s", HYLA_ST_INDEX_NAME);
        else if (sharded)
            snprintf(base, sizeof base, "model-%05zu-of-%05zu.safetensors", k + 1, n_shards);
        else
            snprintf(base, sizeof base, "%s", single);
        f[k].final = path_fmt("%s/%s", dir, base);
        f[k].tmp = path_fmt("%s/.%s.tmp.%ld", dir, base, (long)getpid());
        if (!f[k].final || !f[k].tmp)
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", dir);
    }
    return HYLA_OK;
}

static int rename_all(const char *dir, out_file *f, size_t n_files)
{
    for (size_t k = 0; k < n_files; k++) {
        if (rename(f[k].tmp, f[k].final) != 0)
            return hyla_error_set(HYLA_ERR_IO, "%s: cannot rename %s into place: %s", f[k].final, f[k].tmp,
                                  strerror(errno));
        f[k].created = false;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* make the renames durable; some file systems refuse, which is harmless */
        fsync(dfd);
        close(dfd);
    }
    return HYLA_OK;
}

static int write_files(const char *dir, const char *single, const hyla_st_entry *entries, size_t n,
                       size_t max_shard_bytes, hyla_st_fill_fn fill, void *ctx)
{
    if (!dir || (n && !entries) || !fill)
        return hyla_error_set(HYLA_ERR_ARG, "hyla_st_write: null argument (dir %s)", dir ? dir : "(null)");
    size_t *nbytes = malloc((n ? n : 1) * sizeof *nbytes);
    out_file *files = calloc(n + 2, sizeof *files); /* at most n shards (>= 1) + index */
    void *scratch = NULL;
    size_t n_files = 0, largest;
    uint64_t total;
    int st = HYLA_OK;
    if (!nbytes || !files) {
        st = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    if ((st = check_entries(dir, entries, n, nbytes, &total, &largest)) != HYLA_OK)
        goto done;
    size_t n_shards = plan_shards(nbytes, n, max_shard_bytes, total, files);
    bool sharded = n_shards > 1;
    if (n_shards > 99999) {
        st = hyla_error_set(HYLA_ERR_ARG, "%s: %zu shards is more than 99999", dir, n_shards);
        goto done;
    }
    n_files = n_shards + sharded;
    if ((st = name_files(dir, single, files, n_shards, sharded)) != HYLA_OK)
        goto done;
    if (!(scratch = malloc(largest ? largest : 1))) {
        st = hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate a %zu-byte tensor buffer", dir, largest);
        goto done;
    }
    for (size_t k = 0; k < n_shards && st == HYLA_OK; k++)
        st = write_shard(&files[k], entries, nbytes, fill, ctx, scratch);
    if (st == HYLA_OK && sharded)
        st = write_index(&files[n_shards], entries, n, files, n_shards, total);
    if (st == HYLA_OK)
        st = rename_all(dir, files, n_files);
done:
    for (size_t k = 0; files && k < n + 2; k++) {
        if (files[k].created)
            unlink(files[k].tmp);
        free(files[k].tmp);
        free(files[k].final);
    }
    free(files);
    free(nbytes);
    free(scratch);
    return st;
}

int hyla_st_write(const char *dir, const hyla_st_entry *entries, size_t n, size_t max_shard_bytes,
                  hyla_st_fill_fn fill, void *ctx)
{
    return write_files(dir, HYLA_ST_SINGLE_NAME, entries, n, max_shard_bytes, fill, ctx);
}

int hyla_st_write_named(const char *dir, const char *file_name, const hyla_st_entry *entries, size_t n,
                        hyla_st_fill_fn fill, void *ctx)
{
    if (!file_name || !file_name[0] || strchr(file_name, '/') || strlen(file_name) > 48)
        return hyla_error_set(HYLA_ERR_ARG, "hyla_st_write_named: bad file name");
    return write_files(dir, file_name, entries, n, 0, fill, ctx);
}
