/* safetensors reader/writer and dtype conversion tests. Exits non-zero on any failure.
 *
 *   dtypes:     every bf16 and f16 bit pattern (NaNs included) survives dt -> f32 -> dt exactly;
 *               f32 -> dt rounding checked against an independent nearest-value search at every
 *               tie point (and one f32 ulp either side) and on a sweep of f32 patterns.
 *   round trip: F32/BF16/F16 (plus scalar and empty tensors) written single-file and sharded,
 *               read back; read -> write -> read gives identical bytes and identical files.
 *   writer:     a failing fill leaves no temporaries and the old files untouched; bad entries.
 *   bad files:  a table of malformed files / indexes, each must fail naming file and tensor.
 * Files go to a mkdtemp directory under /tmp, removed at the end when everything passed. */
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/safetensors.h"

static int failures;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            failures++;                                                   \
        }                                                                 \
    } while (0)

static char tmpdir[64];

/* ---- small file helpers ------------------------------------------------------------------------- */

static void path_in(char *dst, size_t cap, const char *sub, const char *name)
{
    snprintf(dst, cap, "%s/%s%s%s", tmpdir, sub, name ? "/" : "", name ? name : "");
}

static void make_dir(const char *sub)
{
    char p[512];
    path_in(p, sizeof p, sub, NULL);
    if (mkdir(p, 0755) != 0) {
        perror(p);
        exit(1);
    }
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* Returns a malloc'd buffer (NUL-terminated) or NULL if the file is missing. */
static unsigned char *read_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    unsigned char *x = read_bytes(a, &la), *y = read_bytes(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

/* A safetensors file: 8-byte length `hlen` (normally strlen(header)), header, data_len bytes. */
static void write_st(const char *path, const char *header, uint64_t hlen, size_t data_len)
{
    size_t h = strlen(header), n = 8 + h + data_len;
    unsigned char *b = calloc(n, 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++)
        b[8 + h + i] = (unsigned char)(i * 37 + 11);
    write_bytes(path, b, n);
    free(b);
}

static int count_tmp_files(const char *sub)
{
    char p[512];
    path_in(p, sizeof p, sub, NULL);
    DIR *d = opendir(p);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* ---- dtype conversion ----------------------------------------------------------------------------- */

/* Value of a non-negative bf16/f16 pattern by its fields; the all-ones exponent with zero
 * mantissa gives the "next power of two" that IEEE rounding treats as the step past the max. */
static double pattern_value(uint32_t k, int man_bits, int bias)
{
    uint32_t man = k & ((1u << man_bits) - 1), exp = k >> man_bits;
    if (exp == 0)
        return ldexp((double)man, 1 - bias - man_bits);
    return ldexp((double)(man | (1u << man_bits)), (int)exp - bias - man_bits);
}

/* Independent reference for f32 -> 16-bit rounding (non-NaN x): binary search the ordered
 * non-negative patterns [0, inf_pat], pick the nearer neighbour, ties to the even pattern. */
static uint16_t ref_round(float x, int man_bits, int bias, uint32_t inf_pat)
{
    double a = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isinf(x) || a >= pattern_value(inf_pat, man_bits, bias))
        return (uint16_t)(sign | inf_pat);
    uint32_t lo = 0, hi = inf_pat; /* invariant: value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (pattern_value(mid, man_bits, bias) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - pattern_value(lo, man_bits, bias), dh = pattern_value(hi, man_bits, bias) - a;
    uint32_t r = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

static int is_nan16(uint16_t h, hyla_dtype dt)
{
    return dt == HYLA_DT_BF16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00;
}

static void check_round(float x, hyla_dtype dt, int man_bits, int bias, uint32_t inf_pat)
{
    uint16_t got, want = ref_round(x, man_bits, bias, inf_pat);
    hyla_dtype_from_f32(&got, &x, dt, 1);
    uint32_t xb;
    memcpy(&xb, &x, 4);
    CHECK(got == want, "%s: f32 0x%08x (%.9g) rounds to 0x%04x, expected 0x%04x", hyla_dtype_name(dt), xb, x, got,
          want);
}

static void test_dtype_16(hyla_dtype dt, int man_bits, int bias, uint32_t inf_pat)
{
    const char *dn = hyla_dtype_name(dt);
    int bad = 0;
    /* Every pattern, unaligned source and destination: dt -> f32 -> dt is the identity. */
    unsigned char *src = malloc(2 * 65536 + 1), *back = malloc(2 * 65536 + 1);
    float *f = malloc(65536 * sizeof *f);
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t v = (uint16_t)h;
        memcpy(src + 1 + 2 * h, &v, 2);
    }
    hyla_dtype_to_f32(f, src + 1, dt, 65536);
    hyla_dtype_from_f32(back + 1, f, dt, 65536);
    for (uint32_t h = 0; h < 65536 && bad < 5; h++) {
        uint16_t r;
        memcpy(&r, back + 1 + 2 * h, 2);
        if (r != h || (is_nan16((uint16_t)h, dt) != (isnan(f[h]) != 0))) {
            CHECK(0, "%s: pattern 0x%04x -> %.9g -> 0x%04x", dn, h, f[h], r);
            bad++;
        }
        /* the widened value is the exact field value */
        if (!is_nan16((uint16_t)h, dt) && (h & 0x7fff) != inf_pat) {
            double want = pattern_value(h & 0x7fff, man_bits, bias) * ((h & 0x8000) ? -1 : 1);
            if ((double)f[h] != want || (signbit(f[h]) != 0) != ((h & 0x8000) != 0)) {
                CHECK(0, "%s: pattern 0x%04x widens to %.9g, expected %.9g", dn, h, f[h], want);
                bad++;
            }
        }
    }
    CHECK(isinf(f[inf_pat]) && f[inf_pat] > 0 && isinf(f[inf_pat | 0x8000]) && f[inf_pat | 0x8000] < 0,
          "%s: inf patterns", dn);
    free(src);
    free(back);
    free(f);

    /* Rounding: every tie point between neighbouring patterns and one f32 ulp either side. */
    for (uint32_t k = 0; k < inf_pat; k++) {
        float mid = (float)((pattern_value(k, man_bits, bias) + pattern_value(k + 1, man_bits, bias)) / 2);
        for (int s = 0; s < 2; s++) {
            float m = s ? -mid : mid;
            check_round(m, dt, man_bits, bias, inf_pat);
            check_round(nextafterf(m, INFINITY), dt, man_bits, bias, inf_pat);
            check_round(nextafterf(m, -INFINITY), dt, man_bits, bias, inf_pat);
        }
    }
    /* A sweep over f32 patterns (stride prime, both signs, every exponent). */
    for (uint64_t b = 0; b < 0x100000000ull; b += 65521) {
        float x;
        uint32_t xb = (uint32_t)b;
        memcpy(&x, &xb, 4);
        if (!isnan(x))
            check_round(x, dt, man_bits, bias, inf_pat);
    }
    float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1.0f, -1.0f, 3.4028235e38f, 65504.0f, 65519.99f, 65520.0f,
                        1e-45f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        check_round(specials[i], dt, man_bits, bias, inf_pat);
    /* NaNs stay NaN, sign kept, including payloads living only in the dropped low bits. */
    uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f801000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float x, y;
        memcpy(&x, &nans[i], 4);
        uint16_t h;
        hyla_dtype_from_f32(&h, &x, dt, 1);
        hyla_dtype_to_f32(&y, &h, dt, 1);
        CHECK(isnan(y) && signbit(y) == signbit(x), "%s: NaN 0x%08x -> 0x%04x is not a NaN of the same sign", dn,
              nans[i], h);
    }
}

static void test_dtypes(void)
{
    CHECK(hyla_dtype_size(HYLA_DT_F32) == 4 && hyla_dtype_size(HYLA_DT_BF16) == 2 && hyla_dtype_size(HYLA_DT_F16) == 2,
          "dtype sizes");
    CHECK(!strcmp(hyla_dtype_name(HYLA_DT_F32), "F32") && !strcmp(hyla_dtype_name(HYLA_DT_BF16), "BF16") &&
              !strcmp(hyla_dtype_name(HYLA_DT_F16), "F16"),
          "dtype names");
    hyla_dtype d;
    CHECK(hyla_dtype_parse("bf16", &d) == HYLA_OK && d == HYLA_DT_BF16, "parse bf16");
    CHECK(hyla_dtype_parse("F8", &d) == HYLA_ERR_ARG && strstr(hyla_error_message(), "F8"), "parse F8 must fail");
    test_dtype_16(HYLA_DT_BF16, 7, 127, 0x7f80);
    test_dtype_16(HYLA_DT_F16, 10, 15, 0x7c00);
    /* spot values */
    uint16_t h[] = {0x3c00, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x8000};
    float want[] = {1.0f, 5.9604645e-8f, 6.0975552e-5f, 6.1035156e-5f, 65504.0f, -0.0f};
    float got[6];
    hyla_dtype_to_f32(got, h, HYLA_DT_F16, 6);
    for (int i = 0; i < 6; i++)
        CHECK(got[i] == want[i] && signbit(got[i]) == signbit(want[i]), "f16 0x%04x -> %.9g, want %.9g", h[i], got[i],
              want[i]);
    uint16_t one = 0x3f80;
    hyla_dtype_to_f32(got, &one, HYLA_DT_BF16, 1);
    CHECK(got[0] == 1.0f, "bf16 1.0");
    /* F32 is a byte copy, NaN payloads included */
    uint32_t fb[3] = {0x7fa00001u, 0x00000001u, 0xbf800000u}, fo[3];
    float ff[3];
    hyla_dtype_to_f32(ff, fb, HYLA_DT_F32, 3);
    hyla_dtype_from_f32(fo, ff, HYLA_DT_F32, 3);
    CHECK(!memcmp(fb, fo, sizeof fb), "f32 copy");
}

/* ---- write / read round trips ----------------------------------------------------------------- */

#define N_ENT 7

typedef struct {
    hyla_st_entry e[N_ENT];
    unsigned char *data[N_ENT];
    size_t nbytes[N_ENT];
    int fail_at; /* fill fails at this index, or -1 */
} fixture;

static int fill_fixture(void *ctx, size_t i, void *dst)
{
    fixture *fx = ctx;
    if ((int)i == fx->fail_at)
        return hyla_error_set(HYLA_ERR_MODEL, "fill: deliberate failure at tensor '%s'", fx->e[i].name);
    memcpy(dst, fx->data[i], fx->nbytes[i]);
    return HYLA_OK;
}

static void make_fixture(fixture *fx)
{
    static const struct {
        const char *name;
        hyla_dtype dt;
        int ndim;
        int64_t shape[3];
    } spec[N_ENT] = {
        {"model.embed.weight", HYLA_DT_F32, 2, {3, 5}},  {"layers.0.w\"q\\", HYLA_DT_BF16, 2, {4, 7}},
        {"layers.0.norm", HYLA_DT_F16, 3, {2, 3, 2}},     {"scalar", HYLA_DT_F32, 0, {0}},
        {"empty", HYLA_DT_BF16, 2, {0, 4}},               {"tail.f32", HYLA_DT_F32, 1, {17}},
        {"z.bf16", HYLA_DT_BF16, 1, {3}},
    };
    uint32_t seed = 12345;
    memset(fx, 0, sizeof *fx);
    fx->fail_at = -1;
    for (int i = 0; i < N_ENT; i++) {
        hyla_st_entry *e = &fx->e[i];
        e->name = spec[i].name;
        e->dtype = spec[i].dt;
        e->ndim = spec[i].ndim;
        size_t n = 1;
        for (int d = 0; d < e->ndim; d++)
            n *= (size_t)(e->shape[d] = spec[i].shape[d]);
        fx->nbytes[i] = n * hyla_dtype_size(e->dtype);
        fx->data[i] = malloc(fx->nbytes[i] + 1);
        for (size_t b = 0; b < fx->nbytes[i]; b++) { /* arbitrary bytes: NaN patterns included */
            seed = seed * 1664525u + 1013904223u;
            fx->data[i][b] = (unsigned char)(seed >> 24);
        }
    }
}

static void free_fixture(fixture *fx)
{
    for (int i = 0; i < N_ENT; i++)
        free(fx->data[i]);
}

static void check_set_matches(const hyla_st_set *s, const fixture *fx, const char *what)
{
    CHECK(hyla_st_count(s) == N_ENT, "%s: %zu tensors, expected %d", what, hyla_st_count(s), N_ENT);
    for (size_t i = 0; i < N_ENT && i < hyla_st_count(s); i++) {
        const hyla_st_tensor *t = hyla_st_at(s, i), *f = hyla_st_find(s, fx->e[i].name);
        const hyla_st_entry *e = &fx->e[i];
        CHECK(!strcmp(t->name, e->name), "%s: tensor %zu is '%s', expected '%s' (order)", what, i, t->name, e->name);
        CHECK(f == t, "%s: find('%s') does not return tensor %zu", what, e->name, i);
        CHECK(t->dtype == e->dtype && t->ndim == e->ndim && t->nbytes == fx->nbytes[i], "%s: '%s' dtype/ndim/nbytes",
              what, e->name);
        for (int d = 0; d < e->ndim; d++)
            CHECK(t->shape[d] == e->shape[d], "%s: '%s' shape[%d]", what, e->name, d);
        CHECK(!memcmp(t->data, fx->data[i], fx->nbytes[i]), "%s: '%s' data differs", what, e->name);
    }
    CHECK(hyla_st_find(s, "nope") == NULL && hyla_st_at(s, N_ENT) == NULL, "%s: absent lookups", what);
}

/* Header sanity of one written file: length multiple of 8, metadata format pt. */
static void check_written_header(const char *path)
{
    size_t len;
    unsigned char *b = read_bytes(path, &len);
    CHECK(b != NULL, "%s missing", path);
    if (!b)
        return;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | b[i];
    CHECK(n % 8 == 0 && 8 + n <= len, "%s: header length %llu", path, (unsigned long long)n);
    CHECK(strstr((char *)b + 8, "\"__metadata__\":{\"format\":\"pt\"}") != NULL, "%s: no __metadata__ format pt", path);
    free(b);
}

typedef struct {
    const hyla_st_set *s;
} copy_ctx;

static int fill_copy(void *ctx, size_t i, void *dst)
{
    const hyla_st_tensor *t = hyla_st_at(((copy_ctx *)ctx)->s, i);
    memcpy(dst, t->data, t->nbytes);
    return HYLA_OK;
}

/* Entries describing an open set, in its order. */
static hyla_st_entry *entries_of(const hyla_st_set *s)
{
    hyla_st_entry *e = calloc(hyla_st_count(s) + 1, sizeof *e);
    for (size_t i = 0; i < hyla_st_count(s); i++) {
        const hyla_st_tensor *t = hyla_st_at(s, i);
        e[i].name = t->name;
        e[i].dtype = t->dtype;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof t->shape);
    }
    return e;
}

static void test_round_trip(void)
{
    fixture fx;
    make_fixture(&fx);
    char dir[512], p[512], q[512];
    hyla_st_set s;
    int st;

    /* single file, both with max 0 and with a limit that everything fits in */
    const size_t limits[2] = {0, 100000};
    for (int li = 0; li < 2; li++) {
        const char *sub = li ? "single_big" : "single0";
        make_dir(sub);
        path_in(dir, sizeof dir, sub, NULL);
        st = hyla_st_write(dir, fx.e, N_ENT, limits[li], fill_fixture, &fx);
        CHECK(st == HYLA_OK, "write %s: %s", sub, hyla_error_message());
        path_in(p, sizeof p, sub, "model.safetensors");
        check_written_header(p);
        path_in(p, sizeof p, sub, "model.safetensors.index.json");
        CHECK(access(p, F_OK) != 0, "%s: unexpected index file", sub);
        st = hyla_st_open(&s, dir);
        CHECK(st == HYLA_OK, "open %s: %s", sub, hyla_error_message());
        if (st == HYLA_OK)
            check_set_matches(&s, &fx, sub);
        hyla_st_close(&s);
        CHECK(count_tmp_files(sub) == 0, "%s: temporaries left", sub);
    }

    /* sharded: 64-byte shards; total = 60+56+24+4+0+68+6 = 218 bytes */
    make_dir("sharded");
    path_in(dir, sizeof dir, "sharded", NULL);
    st = hyla_st_write(dir, fx.e, N_ENT, 64, fill_fixture, &fx);
    CHECK(st == HYLA_OK, "write sharded: %s", hyla_error_message());
    /* greedy: [60] [56] [24 4 0] [68] [6] -> 5 shards */
    for (int k = 1; k <= 5; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-00005.safetensors", k);
        path_in(p, sizeof p, "sharded", name);
        check_written_header(p);
    }
    path_in(p, sizeof p, "sharded", "model.safetensors.index.json");
    size_t len;
    unsigned char *idx = read_bytes(p, &len);
    CHECK(idx && strstr((char *)idx, "\"total_size\": 218"), "index total_size");
    CHECK(idx && strstr((char *)idx, "\"layers.0.w\\\"q\\\\\": \"model-00002-of-00005.safetensors\""),
          "index entry with escaped name");
    free(idx);
    st = hyla_st_open(&s, dir);
    CHECK(st == HYLA_OK, "open sharded: %s", hyla_error_message());
    if (st == HYLA_OK) {
        check_set_matches(&s, &fx, "sharded");
        CHECK(s.n_files == 5 && hyla_st_find(&s, "tail.f32")->file == 3, "sharded: file assignment");
    }

    /* read -> write -> read: copy the sharded set into one file and into shards again */
    if (st == HYLA_OK) {
        hyla_st_entry *e = entries_of(&s);
        copy_ctx cc = {&s};
        make_dir("copy1");
        make_dir("copy5");
        path_in(q, sizeof q, "copy1", NULL);
        CHECK(hyla_st_write(q, e, hyla_st_count(&s), 0, fill_copy, &cc) == HYLA_OK, "copy1: %s", hyla_error_message());
        path_in(q, sizeof q, "copy5", NULL);
        CHECK(hyla_st_write(q, e, hyla_st_count(&s), 64, fill_copy, &cc) == HYLA_OK, "copy5: %s", hyla_error_message());
        free(e);
        hyla_st_set s2;
        path_in(q, sizeof q, "copy1", NULL);
        CHECK(hyla_st_open(&s2, q) == HYLA_OK, "open copy1: %s", hyla_error_message());
        check_set_matches(&s2, &fx, "copy1");
        hyla_st_close(&s2);
        path_in(p, sizeof p, "single0", "model.safetensors");
        path_in(q, sizeof q, "copy1", "model.safetensors");
        CHECK(same_file(p, q), "copy1/model.safetensors differs from single0/model.safetensors");
        const char *names[] = {"model-00001-of-00005.safetensors", "model-00003-of-00005.safetensors",
                               "model-00005-of-00005.safetensors", "model.safetensors.index.json"};
        for (int i = 0; i < 4; i++) {
            path_in(p, sizeof p, "sharded", names[i]);
            path_in(q, sizeof q, "copy5", names[i]);
            CHECK(same_file(p, q), "copy5/%s differs", names[i]);
        }
    }
    hyla_st_close(&s);
    hyla_st_close(&s); /* idempotent */

    /* one tensor larger than the limit gets a shard of its own */
    make_dir("oversize");
    path_in(dir, sizeof dir, "oversize", NULL);
    CHECK(hyla_st_write(dir, fx.e, N_ENT, 30, fill_fixture, &fx) == HYLA_OK, "oversize: %s", hyla_error_message());
    CHECK(hyla_st_open(&s, dir) == HYLA_OK, "open oversize: %s", hyla_error_message());
    check_set_matches(&s, &fx, "oversize");
    hyla_st_close(&s);

    /* a shard filled exactly to the limit stays one shard: [60 56] [24 4 0 68 6] */
    make_dir("exact");
    path_in(dir, sizeof dir, "exact", NULL);
    CHECK(hyla_st_write(dir, fx.e, N_ENT, 116, fill_fixture, &fx) == HYLA_OK, "exact: %s", hyla_error_message());
    CHECK(hyla_st_open(&s, dir) == HYLA_OK, "open exact: %s", hyla_error_message());
    check_set_matches(&s, &fx, "exact");
    CHECK(s.n_files == 2 && hyla_st_at(&s, 1)->file == 0 && hyla_st_at(&s, 2)->file == 1, "exact: shard split");
    hyla_st_close(&s);

    /* an empty set */
    make_dir("none");
    path_in(dir, sizeof dir, "none", NULL);
    CHECK(hyla_st_write(dir, NULL, 0, 0, fill_fixture, &fx) == HYLA_OK, "empty write: %s", hyla_error_message());
    CHECK(hyla_st_open(&s, dir) == HYLA_OK && hyla_st_count(&s) == 0, "empty open: %s", hyla_error_message());
    hyla_st_close(&s);

    /* hyla_st_open_file on a shard */
    path_in(p, sizeof p, "sharded", "model-00004-of-00005.safetensors");
    CHECK(hyla_st_open_file(&s, p) == HYLA_OK && hyla_st_count(&s) == 1 && hyla_st_find(&s, "tail.f32"),
          "open_file on a shard: %s", hyla_error_message());
    hyla_st_close(&s);
    free_fixture(&fx);
}

/* Many tensors: the hash table grows several times; every name is found, absent ones are not. */
#define N_MANY 5000

static int fill_many(void *ctx, size_t i, void *dst)
{
    uint16_t v = (uint16_t)(i * 7);
    memcpy(dst, &v, 2);
    return HYLA_OK;
}

static void test_many(void)
{
    static char names[N_MANY][16];
    static hyla_st_entry e[N_MANY];
    for (int i = 0; i < N_MANY; i++) {
        snprintf(names[i], sizeof names[i], "t.%d", i);
        e[i] = (hyla_st_entry){.name = names[i], .dtype = HYLA_DT_F16, .ndim = 1, .shape = {1}};
    }
    make_dir("many");
    char dir[512];
    path_in(dir, sizeof dir, "many", NULL);
    CHECK(hyla_st_write(dir, e, N_MANY, 2 * 1000, fill_many, NULL) == HYLA_OK, "many: %s", hyla_error_message());
    hyla_st_set s;
    int st = hyla_st_open(&s, dir);
    CHECK(st == HYLA_OK, "open many: %s", hyla_error_message());
    if (st != HYLA_OK)
        return;
    CHECK(hyla_st_count(&s) == N_MANY && s.n_files == 5, "many: %zu tensors in %d files", hyla_st_count(&s), s.n_files);
    int bad = 0;
    for (int i = 0; i < N_MANY && bad < 5; i++) {
        const hyla_st_tensor *t = hyla_st_find(&s, names[i]);
        uint16_t v = 0;
        if (t)
            memcpy(&v, t->data, 2);
        if (!t || t != hyla_st_at(&s, (size_t)i) || v != (uint16_t)(i * 7) || t->file != i / 1000) {
            CHECK(0, "many: tensor '%s' lookup/data/file", names[i]);
            bad++;
        }
        char absent[24];
        snprintf(absent, sizeof absent, "t.%d", N_MANY + i);
        if (hyla_st_find(&s, absent)) {
            CHECK(0, "many: found absent tensor '%s'", absent);
            bad++;
        }
    }
    hyla_st_close(&s);
}

/* ---- writer failures ---------------------------------------------------------------------------- */

static void test_write_failures(void)
{
    fixture fx;
    make_fixture(&fx);
    char dir[512], p[512], saved[512];
    size_t limits[2] = {0, 64};
    const char *subs[2] = {"fail_single", "fail_sharded"};
    const char *check_name[2] = {"model.safetensors", "model-00002-of-00005.safetensors"};
    for (int li = 0; li < 2; li++) {
        make_dir(subs[li]);
        path_in(dir, sizeof dir, subs[li], NULL);
        CHECK(hyla_st_write(dir, fx.e, N_ENT, limits[li], fill_fixture, &fx) == HYLA_OK, "%s: first write: %s",
              subs[li], hyla_error_message());
        path_in(p, sizeof p, subs[li], check_name[li]);
        snprintf(saved, sizeof saved, "%s/%s.saved", tmpdir, subs[li]);
        size_t len;
        unsigned char *b = read_bytes(p, &len);
        write_bytes(saved, b, len);
        free(b);
        /* the second write would change the data, then fails at the last tensor */
        fx.data[1][0] ^= 0xff;
        fx.fail_at = N_ENT - 1;
        int st = hyla_st_write(dir, fx.e, N_ENT, limits[li], fill_fixture, &fx);
        CHECK(st == HYLA_ERR_MODEL && strstr(hyla_error_message(), "deliberate"), "%s: failing fill gave %d (%s)",
              subs[li], st, hyla_error_message());
        CHECK(count_tmp_files(subs[li]) == 0, "%s: temporaries left after a failed write", subs[li]);
        CHECK(same_file(p, saved), "%s: %s was replaced by a failed write", subs[li], check_name[li]);
        fx.data[1][0] ^= 0xff;
        fx.fail_at = -1;
        hyla_st_set s;
        CHECK(hyla_st_open(&s, dir) == HYLA_OK, "%s: reopen: %s", subs[li], hyla_error_message());
        check_set_matches(&s, &fx, subs[li]);
        hyla_st_close(&s);
    }

    /* bad arguments */
    path_in(dir, sizeof dir, "fail_single", NULL);
    hyla_st_entry e[2] = {fx.e[0], fx.e[0]};
    CHECK(hyla_st_write(dir, e, 2, 0, fill_fixture, &fx) == HYLA_ERR_ARG &&
              strstr(hyla_error_message(), "duplicate") && strstr(hyla_error_message(), fx.e[0].name),
          "duplicate entry names: %s", hyla_error_message());
    e[1].name = "neg";
    e[1].shape[0] = -1;
    CHECK(hyla_st_write(dir, e, 2, 0, fill_fixture, &fx) == HYLA_ERR_ARG && strstr(hyla_error_message(), "neg"),
          "negative dim entry: %s", hyla_error_message());
    e[1].shape[0] = 1;
    e[1].ndim = 9;
    CHECK(hyla_st_write(dir, e, 2, 0, fill_fixture, &fx) == HYLA_ERR_ARG, "ndim 9 entry");
    e[1].ndim = 1;
    e[1].name = "__metadata__";
    CHECK(hyla_st_write(dir, e, 2, 0, fill_fixture, &fx) == HYLA_ERR_ARG, "__metadata__ entry name");
    path_in(dir, sizeof dir, "does_not_exist", NULL);
    CHECK(hyla_st_write(dir, fx.e, N_ENT, 0, fill_fixture, &fx) == HYLA_ERR_IO &&
              strstr(hyla_error_message(), "does_not_exist"),
          "missing directory: %s", hyla_error_message());
    CHECK(count_tmp_files("fail_single") == 0, "temporaries left after bad arguments");
    free_fixture(&fx);
}

/* ---- malformed files ---------------------------------------------------------------------------- */

#define W8(dt, off) "{\"dtype\":\"" dt "\",\"shape\":[2],\"data_offsets\":" off "}"

typedef struct {
    const char *label;
    const char *header;   /* NULL: the file is `short_bytes` bytes of junk */
    int64_t hlen;         /* -1: strlen(header) */
    size_t data_len;
    const char *want[2];  /* substrings the message must contain besides the path */
} bad_file;

static const bad_file bad_files[] = {
    {"short", NULL, 0, 5, {NULL, NULL}},
    {"hlen_past_eof", "{}", 1000, 0, {"past", NULL}},
    {"hlen_huge", "{}", (int64_t)1 << 62, 0, {"past", NULL}},
    {"not_json", "{\"w\": ", -1, 0, {"JSON", NULL}},
    {"empty_header", "", -1, 8, {"JSON", NULL}},
    {"not_object", "[1, 2]  ", -1, 0, {"not an object", NULL}},
    {"trailing", "{} x", -1, 0, {"trailing", NULL}},
    {"missing_dtype", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, {"'w'", "dtype"}},
    {"dtype_not_string", "{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, {"'w'", "dtype"}},
    {"dtype_Q7", "{\"w\":" W8("Q7", "[0,4]") "}", -1, 8, {"'w'", "Q7"}},
    {"dtype_F64", "{\"w\":" W8("F64", "[0,16]") "}", -1, 16, {"'w'", "unsupported dtype 'F64'"}},
    {"dtype_I64", "{\"w\":" W8("I64", "[0,16]") "}", -1, 16, {"'w'", "unsupported"}},
    {"dtype_BOOL", "{\"w\":" W8("BOOL", "[0,2]") "}", -1, 2, {"'w'", "unsupported"}},
    {"entry_not_object", "{\"w\": 5}", -1, 0, {"'w'", NULL}},
    {"shape_not_array", "{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", -1, 8, {"'w'", "shape"}},
    {"shape_negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, 8, {"'w'", "shape"}},
    {"shape_fraction", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", -1, 8, {"'w'", "shape"}},
    {"shape_string", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", -1, 8, {"'w'", "shape"}},
    {"shape_9_dims", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", -1, 4,
     {"'w'", "dims"}},
    {"shape_overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,0]}}",
     -1, 0, {"'w'", "overflow"}},
    {"offsets_missing", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", -1, 8, {"'w'", "data_offsets"}},
    {"offsets_one", "{\"w\":" W8("F32", "[0]") "}", -1, 8, {"'w'", "data_offsets"}},
    {"offsets_negative", "{\"w\":" W8("F32", "[-8,0]") "}", -1, 8, {"'w'", "data_offsets"}},
    {"offsets_out_of_range", "{\"w\":" W8("F32", "[8,16]") "}", -1, 8, {"'w'", "past the data block"}},
    {"offsets_begin_gt_end", "{\"w\":" W8("F32", "[8,0]") "}", -1, 8, {"'w'", "begin > end"}},
    {"span_mismatch", "{\"w\":" W8("F32", "[0,4]") "}", -1, 8, {"'w'", "needs 8"}},
    {"span_mismatch_bf16", "{\"w\":" W8("BF16", "[0,8]") "}", -1, 8, {"'w'", "needs 4"}},
    {"overlap", "{\"w\":" W8("F32", "[0,8]") ",\"v\":" W8("F32", "[4,12]") "}", -1, 12, {"'w'", "'v'"}},
    {"overlap_contained", "{\"a\":" W8("F32", "[8,16]") ",\"big\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}",
     -1, 24, {"'a'", "'big'"}},
    {"dup_names", "{\"w\":" W8("F32", "[0,8]") ",\"w\":" W8("F32", "[8,16]") "}", -1, 16, {"duplicate", "'w'"}},
    {"metadata_not_strings", "{\"__metadata__\":{\"format\":1}}", -1, 0, {"__metadata__", "format"}},
    {"metadata_not_object", "{\"__metadata__\":[]}", -1, 0, {"__metadata__", NULL}},
};

static void check_fails(int st, const char *label, const char *path, const char *want0, const char *want1)
{
    const char *m = hyla_error_message(), *at = strstr(m, path);
    CHECK(st < 0, "%s: accepted (status %d)", label, st);
    CHECK(at != NULL, "%s: message does not name %s: %s", label, path, m);
    /* look for the other words after the path, which itself contains the label */
    const char *rest = at ? at + strlen(path) : m;
    CHECK(!want0 || strstr(rest, want0), "%s: message lacks \"%s\" after the path: %s", label, want0, m);
    CHECK(!want1 || strstr(rest, want1), "%s: message lacks \"%s\" after the path: %s", label, want1, m);
}

static void test_bad_files(void)
{
    make_dir("bad");
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        const bad_file *b = &bad_files[i];
        char path[512], name[128];
        snprintf(name, sizeof name, "%s.safetensors", b->label);
        path_in(path, sizeof path, "bad", name);
        if (!b->header)
            write_bytes(path, "\x01\x02\x03\x04\x05\x06\x07", b->data_len);
        else
            write_st(path, b->header, b->hlen < 0 ? strlen(b->header) : (uint64_t)b->hlen, b->data_len);
        hyla_st_set s;
        int st = hyla_st_open_file(&s, path);
        check_fails(st, b->label, path, b->want[0], b->want[1]);
        CHECK(hyla_st_count(&s) == 0 && s.files == NULL, "%s: set not left empty", b->label);
        hyla_st_close(&s);
    }
    /* sanity: the same helper makes files that do open (gaps and empty tensors allowed) */
    char path[512];
    path_in(path, sizeof path, "bad", "good.safetensors");
    write_st(path, "{\"__metadata__\":{\"k\":\"v\"},\"w\":" W8("F32", "[16,24]") ",\"e\":{\"dtype\":\"F16\",\"shape\":[0],"
             "\"data_offsets\":[20,20]},\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]}}  ",
             strlen("{\"__metadata__\":{\"k\":\"v\"},\"w\":" W8("F32", "[16,24]") ",\"e\":{\"dtype\":\"F16\",\"shape\":[0],"
                    "\"data_offsets\":[20,20]},\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]}}  "),
             24);
    hyla_st_set s;
    int st = hyla_st_open_file(&s, path);
    CHECK(st == HYLA_OK, "good hand-written file: %s", hyla_error_message());
    if (st == HYLA_OK) {
        const hyla_st_tensor *w = hyla_st_find(&s, "w");
        CHECK(hyla_st_count(&s) == 3 && w && w->nbytes == 8 && w->data == s.files[0].map + s.files[0].size - 8,
              "good file contents");
        CHECK(!strcmp(hyla_st_at(&s, 0)->name, "w") && !strcmp(hyla_st_at(&s, 2)->name, "s"), "header order");
    }
    hyla_st_close(&s);
    path_in(path, sizeof path, "bad", "missing.safetensors");
    check_fails(hyla_st_open_file(&s, path), "missing file", path, NULL, NULL);
}

/* ---- malformed sharded directories -------------------------------------------------------------- */

static const char *const SHARD_A = "{\"a\":" W8("F32", "[0,8]") ",\"b\":" W8("F32", "[8,16]") "}";
static const char *const SHARD_B = "{\"c\":" W8("F32", "[0,8]") "}";

typedef struct {
    const char *label;
    const char *index;      /* contents of model.safetensors.index.json; NULL: none */
    const char *want[2];
} bad_index;

#define WM(body) "{\"metadata\":{\"total_size\":24},\"weight_map\":{" body "}}"
#define SA "\"a.safetensors\""
#define SB "\"b.safetensors\""

static const bad_index bad_indexes[] = {
    {"missing_shard", WM("\"a\":" SA ",\"b\":" SA ",\"c\":\"gone.safetensors\""), {"gone.safetensors", NULL}},
    {"not_json", "{\"weight_map\": {", {"JSON", NULL}},
    {"no_weight_map", "{\"metadata\":{}}", {"weight_map", NULL}},
    {"weight_map_not_object", "{\"weight_map\":[1]}", {"weight_map", NULL}},
    {"in_index_not_shard", WM("\"a\":" SA ",\"b\":" SA ",\"c\":" SB ",\"x\":" SB), {"'x'", "b.safetensors"}},
    {"in_shard_not_index", WM("\"a\":" SA ",\"c\":" SB), {"'b'", "a.safetensors"}},
    {"wrong_shard", WM("\"a\":" SA ",\"b\":" SB ",\"c\":" SB), {"'b'", "b.safetensors"}},
    {"listed_twice", WM("\"a\":" SA ",\"b\":" SA ",\"c\":" SB ",\"a\":" SA), {"'a'", "twice"}},
    {"dotdot_shard", WM("\"a\":" SA ",\"b\":" SA ",\"c\":\"..b.safetensors\""), {"'c'", NULL}},
    {"slash_shard", WM("\"a\":" SA ",\"b\":" SA ",\"c\":\"x/b.safetensors\""), {"'c'", NULL}},
    {"shard_not_string", WM("\"a\":" SA ",\"b\":" SA ",\"c\":3"), {"'c'", NULL}},
    {"bad_shard", WM("\"a\":" SA ",\"b\":" SA ",\"c\":\"junk.safetensors\""), {"junk.safetensors", "JSON"}},
    {"neither", NULL, {"model.safetensors", NULL}},
};

static void test_bad_indexes(void)
{
    make_dir("idx");
    for (size_t i = 0; i < sizeof bad_indexes / sizeof bad_indexes[0]; i++) {
        const bad_index *b = &bad_indexes[i];
        char sub[128], dir[512], p[512];
        snprintf(sub, sizeof sub, "idx/%s", b->label);
        make_dir(sub);
        path_in(dir, sizeof dir, sub, NULL);
        path_in(p, sizeof p, sub, "a.safetensors");
        write_st(p, SHARD_A, strlen(SHARD_A), 16);
        path_in(p, sizeof p, sub, "b.safetensors");
        write_st(p, SHARD_B, strlen(SHARD_B), 8);
        path_in(p, sizeof p, sub, "junk.safetensors");
        write_st(p, "{oops", 5, 0);
        path_in(p, sizeof p, sub, "model.safetensors.index.json");
        if (b->index)
            write_bytes(p, b->index, strlen(b->index));
        hyla_st_set s;
        int st = hyla_st_open(&s, dir);
        check_fails(st, b->label, b->index ? p : dir, b->want[0], b->want[1]);
        CHECK(hyla_st_count(&s) == 0 && s.files == NULL, "%s: set not left empty", b->label);
        hyla_st_close(&s);
    }
    /* control: the same shards with a correct index open */
    char dir[512], p[512];
    path_in(dir, sizeof dir, "idx/in_index_not_shard", NULL);
    path_in(p, sizeof p, "idx/in_index_not_shard", "model.safetensors.index.json");
    const char *good = WM("\"c\":" SB ",\"a\":" SA ",\"b\":" SA);
    write_bytes(p, good, strlen(good));
    hyla_st_set s;
    int st = hyla_st_open(&s, dir);
    CHECK(st == HYLA_OK, "good index: %s", hyla_error_message());
    CHECK(st != HYLA_OK || (hyla_st_count(&s) == 3 && !strcmp(hyla_st_at(&s, 0)->name, "a") &&
                            hyla_st_find(&s, "c")->file == 1),
          "good index: shards in sorted order");
    hyla_st_close(&s);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hyla_test_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_dtypes();
    test_round_trip();
    test_many();
    test_write_failures();
    test_bad_files();
    test_bad_indexes();
    if (failures) {
        fprintf(stderr, "test_safetensors: %d FAILED (files kept in %s)\n", failures, tmpdir);
        return 1;
    }
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("test_safetensors: all passed\n");
    return 0;
}
