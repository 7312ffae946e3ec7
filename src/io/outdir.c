/* Output directories published atomically, and only over hyla's own (see outdir.h). */
#include "io/outdir.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/fileio.h"

#define MARKER_FORMAT "hyla-output-1"
#define MARKER_MAX_BYTES 4096

const char *hyla_outdir_kind_name(hyla_outdir_kind kind) { return kind == HYLA_OUTDIR_CHECKPOINT ? "checkpoint" : "model"; }

/* 1 if `dir` holds no entries, 0 if it holds some, -1 if it cannot be read. */
static int dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int empty = 1;
    struct dirent *e;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

static int path_in(char *dst, size_t cap, const char *dir, const char *name)
{
    return (size_t)snprintf(dst, cap, "%s/%s", dir, name) < cap;
}

/* The directory holding `final` ("/" for "/x", "." for a bare name) and final's own name. */
static const char *parent_of(const char *final, char *parent, size_t cap)
{
    const char *slash = strrchr(final, '/');
    if (!slash)
        snprintf(parent, cap, ".");
    else
        snprintf(parent, cap, "%.*s", slash == final ? 1 : (int)(slash - final), final);
    return slash ? slash + 1 : final;
}

/* A small JSON file hyla wrote (marker, trainer state), parsed; NULL if absent or not JSON. */
static cJSON *read_small_json(const char *dir, const char *name)
{
    char path[4300], *text = NULL;
    if (!path_in(path, sizeof path, dir, name) || hyla_read_file_max(path, MARKER_MAX_BYTES, &text, NULL) != HYLA_OK)
        return NULL;
    cJSON *o = cJSON_Parse(text);
    free(text);
    return o;
}

static int string_field_is(const cJSON *o, const char *key, const char *value)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && !strcmp(v->valuestring, value);
}

int hyla_outdir_kind_of(const char *dir)
{
    int kind = -1;
    cJSON *o = read_small_json(dir, HYLA_OUTDIR_MARKER);
    if (o) {
        if (string_field_is(o, "format", MARKER_FORMAT))
            kind = string_field_is(o, "kind", "checkpoint") ? HYLA_OUTDIR_CHECKPOINT
                 : string_field_is(o, "kind", "model")      ? HYLA_OUTDIR_MODEL : -1;
    } else if ((o = read_small_json(dir, "trainer_state.json")) != NULL) {
        /* a checkpoint written before the marker existed: its trainer_state.json names hyla's format */
        if (string_field_is(o, "format", "hyla-train-state-1"))
            kind = HYLA_OUTDIR_CHECKPOINT;
    }
    cJSON_Delete(o);
    return kind;
}

/* May `dir` (which exists) be replaced by a new directory of `kind`? */
static int check_replaceable(const char *dir, hyla_outdir_kind kind)
{
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot stat: %s", dir, strerror(errno));
    if (S_ISLNK(sb.st_mode))
        return hyla_error_set(HYLA_ERR_IO, "%s: is a symbolic link; refusing to replace it (give the directory itself)", dir);
    if (!S_ISDIR(sb.st_mode))
        return hyla_error_set(HYLA_ERR_IO, "%s: exists and is not a directory; refusing to replace it", dir);
    int empty = dir_is_empty(dir);
    if (empty < 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot read directory: %s", dir, strerror(errno));
    if (empty)
        return HYLA_OK;
    int have = hyla_outdir_kind_of(dir);
    if (have < 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: exists and is not a directory hyla wrote (no %s); refusing to replace it, "
                              "choose a new or empty directory", dir, HYLA_OUTDIR_MARKER);
    if (have != (int)kind)
        return hyla_error_set(HYLA_ERR_IO, "%s: is a hyla %s, not a %s; refusing to replace it", dir,
                              hyla_outdir_kind_name((hyla_outdir_kind)have), hyla_outdir_kind_name(kind));
    return HYLA_OK;
}

static int remove_unless_marker(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag;
    if (ftw->level == 0 || (ftw->level == 1 && !strcmp(path + ftw->base, HYLA_OUTDIR_MARKER)))
        return 0;
    return remove(path);
}

/* Remove a directory hyla wrote, its marker last: a kill part-way leaves a directory that
 * still carries the marker, so the next cleanup still recognises it as hyla's. */
static void remove_marked_tree(const char *dir)
{
    nftw(dir, remove_unless_marker, 16, FTW_DEPTH | FTW_PHYS);
    char marker[4500];
    if (path_in(marker, sizeof marker, dir, HYLA_OUTDIR_MARKER))
        unlink(marker);
    rmdir(dir);
}

/* Remove DIR.tmp.<pid> directories of processes that no longer run (ours included: a save of
 * this process that failed to clean up), when they hold hyla's marker or nothing. A live pid
 * may be another hyla writing the same DIR right now: left alone. */
static void remove_stale_temporaries(const char *final)
{
    char parent[4096];
    const char *base = parent_of(final, parent, sizeof parent);
    DIR *d = opendir(parent);
    if (!d)
        return;
    size_t nb = strlen(base);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, base, nb) || strncmp(n + nb, ".tmp.", 5))
            continue;
        const char *digits = n + nb + 5;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (!*digits || *end || errno || pid <= 0 || pid > 0x3fffffff)
            continue;
        if (pid != (long)getpid() && !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        char path[4400];
        struct stat sb;
        if (!path_in(path, sizeof path, parent, n) || lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        char marker[4500];
        if (path_in(marker, sizeof marker, path, HYLA_OUTDIR_MARKER) && (access(marker, F_OK) == 0 || dir_is_empty(path) == 1))
            remove_marked_tree(path);
    }
    closedir(d);
}

static int write_marker(const char *dir, hyla_outdir_kind kind, const char *writer)
{
    char path[4300], text[512];
    if (!path_in(path, sizeof path, dir, HYLA_OUTDIR_MARKER))
        return hyla_error_set(HYLA_ERR_IO, "%s: path too long", dir);
    int n = snprintf(text, sizeof text, "{\"format\": \"" MARKER_FORMAT "\", \"kind\": \"%s\", \"writer\": \"%s\"}\n",
                     hyla_outdir_kind_name(kind), writer);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    int ok = write(fd, text, (size_t)n) == n;
    ok = close(fd) == 0 && ok;
    return ok ? HYLA_OK : hyla_error_set(HYLA_ERR_IO, "%s: write failed: %s", path, strerror(errno));
}

/* final = dir without trailing slashes; an error for an empty or over-long path. */
static int normalise(char *final, size_t cap, const char *dir)
{
    size_t n = dir ? strlen(dir) : 0;
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (n == 0 || n >= cap - 32)
        return hyla_error_set(HYLA_ERR_ARG, "bad output directory path '%s'", dir ? dir : "");
    memcpy(final, dir, n);
    final[n] = '\0';
    return HYLA_OK;
}

/* The destination may be absent or replaceable (check_replaceable). */
static int check_destination(const char *final, hyla_outdir_kind kind)
{
    struct stat sb;
    if (lstat(final, &sb) == 0)
        return check_replaceable(final, kind);
    return errno == ENOENT ? HYLA_OK : hyla_error_set(HYLA_ERR_IO, "%s: cannot stat: %s", final, strerror(errno));
}

int hyla_outdir_check(const char *dir, hyla_outdir_kind kind)
{
    char final[sizeof ((hyla_outdir *)0)->final];
    HYLA_TRY(normalise(final, sizeof final, dir));
    HYLA_TRY(check_destination(final, kind));
    remove_stale_temporaries(final);
    return HYLA_OK;
}

int hyla_outdir_begin(hyla_outdir *o, const char *dir, hyla_outdir_kind kind, const char *writer)
{
    memset(o, 0, sizeof *o);
    HYLA_TRY(normalise(o->final, sizeof o->final, dir));
    char parent[4096];
    const char *base = parent_of(o->final, parent, sizeof parent);
    if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(o->final, "/"))
        return hyla_error_set(HYLA_ERR_ARG, "%s: name a directory to write (not '.', '..' or '/')", o->final);
    o->kind = kind;
    HYLA_TRY(check_destination(o->final, kind));
    if (strcmp(parent, ".") && strcmp(parent, "/"))
        HYLA_TRY(hyla_mkdir_p(parent));
    remove_stale_temporaries(o->final);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%d", o->final, (int)getpid());
    if (mkdir(o->tmp, 0755) != 0)
        return hyla_error_set(HYLA_ERR_IO, "%s: cannot create directory: %s", o->tmp, strerror(errno));
    int st = write_marker(o->tmp, kind, writer);
    if (st != HYLA_OK)
        hyla_outdir_abort(o);
    return st;
}

static void sync_parent(const char *final)
{
    char parent[4096];
    parent_of(final, parent, sizeof parent);
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int hyla_outdir_commit(hyla_outdir *o)
{
    int rc = HYLA_OK;
    struct stat sb;
    if (lstat(o->final, &sb) != 0) {
        if (rename(o->tmp, o->final) != 0)
            rc = hyla_error_set(HYLA_ERR_IO, "%s: cannot rename the new %s into place: %s", o->final,
                                hyla_outdir_kind_name(o->kind), strerror(errno));
    } else if ((rc = check_replaceable(o->final, o->kind)) == HYLA_OK && /* again: it may have changed since begin */
               renameat2(AT_FDCWD, o->tmp, AT_FDCWD, o->final, RENAME_EXCHANGE) != 0) {
        rc = hyla_error_set(HYLA_ERR_IO, "%s: cannot swap the new %s in: %s", o->final, hyla_outdir_kind_name(o->kind),
                            strerror(errno));
    }
    if (rc == HYLA_OK)
        sync_parent(o->final);
    hyla_outdir_abort(o); /* success: the previous contents, now at tmp; failure: the partial new one */
    return rc;
}

void hyla_outdir_abort(hyla_outdir *o)
{
    if (o->tmp[0])
        remove_marked_tree(o->tmp);
    o->tmp[0] = '\0';
}
