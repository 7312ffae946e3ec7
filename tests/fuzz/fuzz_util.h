/* Shared helpers for the libFuzzer harnesses in tests/fuzz/ (header-only; each harness is one
 * translation unit).
 *
 * hyla's readers take paths, so each harness writes its input into a per-process temporary
 * directory (made once, $TMPDIR or /tmp, "hyla-fuzz-<harness>-XXXXXX") and removes the whole
 * directory at exit. Harnesses never write anywhere else. */
#ifndef HYLA_FUZZ_UTIL_H
#define HYLA_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_FN static __attribute__((unused))

static char fuzz_dir_[PATH_MAX];

static int fuzz_rm_entry_(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)type, (void)ftw;
    remove(path);
    return 0;
}

/* Remove the tree at path (rm -rf); missing is fine. */
FUZZ_FN void fuzz_remove_tree(const char *path) { nftw(path, fuzz_rm_entry_, 16, FTW_DEPTH | FTW_PHYS); }

static void fuzz_cleanup_(void)
{
    if (fuzz_dir_[0])
        fuzz_remove_tree(fuzz_dir_);
}

FUZZ_FN void fuzz_die(const char *what)
{
    fprintf(stderr, "fuzz harness setup failed: %s (%s)\n", what, strerror(errno));
    abort();
}

/* The per-process temporary directory; created on first call, removed at exit. */
FUZZ_FN const char *fuzz_tmpdir(const char *tag)
{
    if (!fuzz_dir_[0]) {
        const char *base = getenv("TMPDIR");
        if (!base || !*base)
            base = "/tmp";
        snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/hyla-fuzz-%s-XXXXXX", base, tag ? tag : "x");
        if (!mkdtemp(fuzz_dir_))
            fuzz_die("mkdtemp");
        atexit(fuzz_cleanup_);
    }
    return fuzz_dir_;
}

/* dir/name into buf (aborts if it does not fit: a harness bug, not a finding). */
FUZZ_FN const char *fuzz_join(char *buf, size_t cap, const char *dir, const char *name)
{
    if ((size_t)snprintf(buf, cap, "%s/%s", dir, name) >= cap)
        fuzz_die("path too long");
    return buf;
}

/* Write exactly n bytes to path (create or truncate). */
FUZZ_FN void fuzz_write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        fuzz_die(path);
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            fuzz_die(path);
        }
        p += w, n -= (size_t)w;
    }
    close(fd);
}

/* Read a whole file into a malloc'd buffer (NUL-terminated, not counted in *n). */
FUZZ_FN char *fuzz_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf)
            fuzz_die("out of memory");
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        cap *= 2;
        buf = realloc(buf, cap + 1);
    }
    fclose(f);
    buf[len] = 0;
    if (n)
        *n = len;
    return buf;
}

/* The repository root: $HYLA_REPO, else three levels above the binary
 * (build-fuzz/fuzz/NAME -> repo), else ".". */
FUZZ_FN const char *fuzz_repo_root(void)
{
    static char root[PATH_MAX];
    if (root[0])
        return root;
    const char *env = getenv("HYLA_REPO");
    if (env && *env) {
        snprintf(root, sizeof root, "%s", env);
        return root;
    }
    ssize_t k = readlink("/proc/self/exe", root, sizeof root - 1);
    if (k > 0) {
        root[k] = 0;
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(root, '/');
            if (!slash)
                break;
            *slash = 0;
        }
        if (root[0])
            return root;
    }
    snprintf(root, sizeof root, ".");
    return root;
}

/* Little-endian uint32 at p. */
FUZZ_FN uint32_t fuzz_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The real Qwen3 tokenizer, for harnesses that tokenize: $HYLA_FUZZ_TOKENIZER, else
 * REPO/tests/tokenizer/qwen3/tokenizer.json (gunzip'd by tests/fuzz/smoke.sh). Exits when missing.
 * Needs io/tokenizer.h and core/error.h included before this header. */
#ifdef HYLA_IO_TOKENIZER_H
FUZZ_FN hyla_tokenizer *fuzz_qwen_tokenizer(const char *harness)
{
    char path[PATH_MAX + 64];
    const char *env = getenv("HYLA_FUZZ_TOKENIZER");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/tests/tokenizer/qwen3/tokenizer.json", fuzz_repo_root());
    hyla_tokenizer *tok;
    if (hyla_tokenizer_load(&tok, path) != HYLA_OK) {
        fprintf(stderr, "%s: %s\n(set HYLA_FUZZ_TOKENIZER or run: gunzip -c tests/tokenizer/qwen3/tokenizer.json.gz > "
                        "tests/tokenizer/qwen3/tokenizer.json)\n", harness, hyla_error_message());
        exit(1);
    }
    return tok;
}
#endif

#endif
