/* File-backed host tier with one I/O thread; see host_store.h. */
#include "engine/host_store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/profile.h"

enum { QUEUE_CAP = 1024 }; /* copies in flight; a full queue makes the submitter wait */
enum { BOUNCE_VALUES = 1 << 15 }; /* bf16 copies go through the I/O thread's buffer in pieces this long */

typedef struct {
    int is_read;
    int bf16;             /* buf holds fp32 values stored as bf16 (bytes: store bytes, 2 per value) */
    size_t offset, bytes;
    unsigned char *buf;
} request;

struct hyla_host_store_s {
    int fd, regular;
    char path[4096];
    size_t limit, reserved;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    request queue[QUEUE_CAP];
    uint64_t submitted, completed; /* tickets: request k (1-based) is done when completed >= k */
    int stop;
    int failed;                    /* sticky first error */
    char error[4608];
    hyla_host_store_stats stats;
    uint16_t bounce[BOUNCE_VALUES]; /* the I/O thread's: bf16 copies in pieces */
};

/* One whole copy of bytes at offset; returns 0 or an errno value (EIO for a short transfer at
 * end of file). */
static int copy_bytes(int fd, int is_read, unsigned char *buf, size_t offset, size_t bytes)
{
    size_t done = 0;
    while (done < bytes) {
        ssize_t k = is_read ? pread(fd, buf + done, bytes - done, (off_t)(offset + done))
                            : pwrite(fd, buf + done, bytes - done, (off_t)(offset + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno;
        if (k == 0)
            return EIO;
        done += (size_t)k;
    }
    return 0;
}

/* A request: raw bytes, or fp32 values through the bounce buffer as bf16 (converted on this
 * thread, which is not an OpenMP team's). The values of a bf16 request hold bf16 values already, so
 * packing is exact and the round trip is the identity. */
static int copy_all(hyla_host_store *s, const request *r)
{
    if (!r->bf16)
        return copy_bytes(s->fd, r->is_read, r->buf, r->offset, r->bytes);
    float *values = (float *)(void *)r->buf;
    for (size_t v0 = 0; v0 < r->bytes / 2; v0 += BOUNCE_VALUES) {
        size_t n = r->bytes / 2 - v0 < BOUNCE_VALUES ? r->bytes / 2 - v0 : BOUNCE_VALUES;
        if (!r->is_read)
            hyla_bf16_pack_serial(s->bounce, values + v0, (int64_t)n);
        int err = copy_bytes(s->fd, r->is_read, (unsigned char *)s->bounce, r->offset + 2 * v0, 2 * n);
        if (err)
            return err;
        if (r->is_read)
            hyla_bf16_unpack_serial(values + v0, s->bounce, (int64_t)n);
    }
    return 0;
}

static void *io_thread(void *arg)
{
    hyla_host_store *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->completed == s->submitted && !s->stop)
            pthread_cond_wait(&s->work, &s->mu);
        if (s->completed == s->submitted)
            break;
        request r = s->queue[s->completed % QUEUE_CAP];
        int skip = s->failed;
        pthread_mutex_unlock(&s->mu);
        double t0 = hyla_now();
        int err = skip ? 0 : copy_all(s, &r);
        double dt = hyla_now() - t0;
        pthread_mutex_lock(&s->mu);
        if (err && !s->failed) {
            s->failed = 1;
            snprintf(s->error, sizeof s->error, "offload store '%s': %s of %zu bytes at offset %zu failed: %s", s->path,
                     r.is_read ? "read" : "write", r.bytes, r.offset, err == EIO && !skip ? "short transfer or I/O error" : strerror(err));
        }
        if (!skip) {
            s->stats.io_seconds += dt;
            if (r.is_read)
                s->stats.bytes_read += r.bytes, s->stats.reads++;
            else
                s->stats.bytes_written += r.bytes, s->stats.writes++;
        }
        s->completed++;
        pthread_cond_broadcast(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int open_file(hyla_host_store *s, const char *path)
{
    if (!path) {
        const char *dir = getenv("TMPDIR");
        snprintf(s->path, sizeof s->path, "%s/hyla-offload-XXXXXX", dir && *dir ? dir : "/tmp");
        s->fd = mkstemp(s->path);
        if (s->fd < 0)
            return hyla_error_set(HYLA_ERR_IO, "offload store: cannot create a temporary file '%s': %s", s->path, strerror(errno));
        s->regular = 1;
        unlink(s->path);
        return HYLA_OK;
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    s->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (s->fd >= 0) {
        s->regular = 1;
        unlink(path); /* the store lives as long as the descriptor */
        return HYLA_OK;
    }
    if (errno != EEXIST)
        return hyla_error_set(HYLA_ERR_IO, "offload store '%s': cannot create: %s", path, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
        return hyla_error_set(HYLA_ERR_IO, "offload store '%s' already exists; refusing to overwrite it (give a new "
                              "path, or a device)", path);
    s->fd = open(path, O_RDWR | O_CLOEXEC);
    if (s->fd < 0)
        return hyla_error_set(HYLA_ERR_IO, "offload store '%s': cannot open: %s", path, strerror(errno));
    return HYLA_OK;
}

int hyla_host_store_open(hyla_host_store **out, const char *path, size_t limit)
{
    *out = NULL;
    hyla_host_store *s = calloc(1, sizeof *s);
    if (!s)
        return hyla_error_set(HYLA_ERR_NOMEM, "offload store: out of memory");
    s->fd = -1;
    s->limit = limit;
    int st = open_file(s, path);
    if (st != HYLA_OK) {
        free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    if (pthread_create(&s->thread, NULL, io_thread, s) != 0) {
        st = hyla_error_set(HYLA_ERR_NOMEM, "offload store '%s': cannot start the I/O thread", s->path);
        close(s->fd);
        free(s);
        return st;
    }
    *out = s;
    return HYLA_OK;
}

void hyla_host_store_close(hyla_host_store *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    close(s->fd);
    free(s);
}

const char *hyla_host_store_path(const hyla_host_store *s) { return s->path; }
size_t hyla_host_store_limit(const hyla_host_store *s) { return s->limit; }

int hyla_host_store_reserve(hyla_host_store *s, size_t bytes)
{
    if (s->limit && bytes > s->limit)
        return hyla_error_set(HYLA_ERR_ARG, "offload store '%s' is full: this step offloads %zu bytes but the store's "
                              "limit is %zu bytes", s->path, bytes, s->limit);
    if (!s->regular || bytes <= s->reserved)
        return HYLA_OK;
    int err = posix_fallocate(s->fd, 0, (off_t)bytes);
    if (err)
        return hyla_error_set(HYLA_ERR_IO, "offload store '%s': cannot reserve %zu bytes: %s", s->path, bytes, strerror(err));
    s->reserved = bytes;
    return HYLA_OK;
}

static hyla_xfer_ticket submit(hyla_host_store *s, int is_read, int bf16, size_t offset, void *buf, size_t bytes)
{
    pthread_mutex_lock(&s->mu);
    while (s->submitted - s->completed == QUEUE_CAP)
        pthread_cond_wait(&s->done, &s->mu);
    if (s->limit && offset + bytes > s->limit && !s->failed) { /* the executor reserves first: a bug if seen */
        s->failed = 1;
        snprintf(s->error, sizeof s->error, "offload store '%s': copy of %zu bytes at offset %zu passes its limit of %zu",
                 s->path, bytes, offset, s->limit);
    }
    s->queue[s->submitted % QUEUE_CAP] = (request){is_read, bf16, offset, bytes, buf};
    hyla_xfer_ticket t = ++s->submitted;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return t;
}

hyla_xfer_ticket hyla_host_store_write(hyla_host_store *s, size_t offset, const void *src, size_t bytes)
{
    return submit(s, 0, 0, offset, (void *)src, bytes);
}

hyla_xfer_ticket hyla_host_store_write_bf16(hyla_host_store *s, size_t offset, const float *src, size_t values)
{
    return submit(s, 0, 1, offset, (void *)src, 2 * values);
}

hyla_xfer_ticket hyla_host_store_read_bf16(hyla_host_store *s, size_t offset, float *dst, size_t values)
{
    return submit(s, 1, 1, offset, dst, 2 * values);
}

hyla_xfer_ticket hyla_host_store_read(hyla_host_store *s, size_t offset, void *dst, size_t bytes)
{
    return submit(s, 1, 0, offset, dst, bytes);
}

int hyla_host_store_wait(hyla_host_store *s, hyla_xfer_ticket t)
{
    pthread_mutex_lock(&s->mu);
    if (s->completed < t) {
        double t0 = hyla_now();
        while (s->completed < t)
            pthread_cond_wait(&s->done, &s->mu);
        s->stats.wait_seconds += hyla_now() - t0;
    }
    int failed = s->failed;
    pthread_mutex_unlock(&s->mu);
    return failed ? hyla_error_set(HYLA_ERR_IO, "%s", s->error) : HYLA_OK;
}

void hyla_host_store_drain(hyla_host_store *s)
{
    pthread_mutex_lock(&s->mu);
    while (s->completed < s->submitted)
        pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void hyla_host_store_stats_get(const hyla_host_store *s, hyla_host_store_stats *out)
{
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    *out = s->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
}

void hyla_host_store_stats_reset(hyla_host_store *s)
{
    pthread_mutex_lock(&s->mu);
    memset(&s->stats, 0, sizeof s->stats);
    pthread_mutex_unlock(&s->mu);
}
