/* Byte-level BPE tokenizer tests. Exits non-zero on any failure. Run from the repository root
 * (argv[1], a cases directory, is ignored).
 *
 *   oracle:     every text of tests/tokenizer/texts.json encodes with the real Qwen3
 *               tokenizer.json (tests/tokenizer/qwen3/) to exactly the ids in expected.json,
 *               written by tests/tokenizer/oracle.py (Hugging Face's tokenizers library), decomposed,
 *               combining-mark and unusual-whitespace (U+0085, U+180E, U+2000-U+200A, U+3000, U+FEFF)
 *               texts included.
 *   round trip: decode(encode(x)) == x byte for byte for those texts (x with its valid UTF-8 runs
 *               NFC-normalised by utf8proc where x is not NFC: Qwen's normalizer), for random byte strings
 *               (invalid UTF-8 included) and for long runs of one character class.
 *   rules:      invalid bytes become byte tokens and cut the regex; added tokens are matched
 *               leftmost-longest; merge order by rank, leftmost on ties; both merges formats;
 *               ignore_merges; the GPT-2 ByteLevel regex; decode errors name the id.
 *   bad files:  a table of malformed tokenizer.json files, each must fail naming file and field.
 * Small tokenizers are written to a mkdtemp directory under /tmp, removed when all passed. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/error.h"
#include "io/fileio.h"
#include "io/tokenizer.h"

#include <utf8proc.h>

#define QWEN_DIR "tests/tokenizer"
#define QWEN_JSON QWEN_DIR "/qwen3/tokenizer.json"
#define QWEN_PATTERN                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static char tmpdir[64];

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Print up to `max` bytes of s, escaping non-printable ASCII. */
static void print_escaped(FILE *f, const char *s, size_t n, size_t max)
{
    fputc('"', f);
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
    fputs(n > max ? "\"..." : "\"", f);
}

/* Encode, requiring success. */
static int32_t *encode_ok(const hyla_tokenizer *t, const char *s, size_t n, size_t *n_ids)
{
    int32_t *ids = NULL;
    int st = hyla_tokenizer_encode(t, s, n, &ids, n_ids);
    CHECK(st == HYLA_OK && ids, "encode of %zu bytes failed: %s", n, hyla_error_message());
    return ids;
}

/* decode(encode(s)) == s; returns 1 when it holds. */
/* s with each well-formed UTF-8 run NFC-normalised by utf8proc and every other byte kept: what
 * decode(encode(s)) must give with Qwen's NFC normalizer (s itself when it is already NFC). */
static char *nfc_runs(const char *s, size_t n, size_t *out_len)
{
    char *out = malloc(4 * n + 1);
    size_t o = 0;
    for (size_t i = 0; out && i < n;) {
        size_t run = i;
        utf8proc_int32_t cp;
        utf8proc_ssize_t k;
        while (run < n && (k = utf8proc_iterate((const utf8proc_uint8_t *)s + run, (utf8proc_ssize_t)(n - run), &cp)) > 0)
            run += (size_t)k;
        if (run > i) {
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(run - i), &nfc,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m > 0)
                memcpy(out + o, nfc, (size_t)m), o += (size_t)m;
            free(nfc);
        }
        if (run < n)
            out[o++] = s[run];
        i = run < n ? run + 1 : n;
    }
    *out_len = o;
    return out;
}

static int round_trip(const hyla_tokenizer *t, const char *s, size_t n, const char *what)
{
    size_t n_ids, len = 0, want_len = 0;
    int32_t *ids = encode_ok(t, s, n, &n_ids);
    char *back = NULL, *want = nfc_runs(s, n, &want_len);
    int ok = ids && want && hyla_tokenizer_decode(t, ids, n_ids, &back, &len) == HYLA_OK && len == want_len &&
             memcmp(back, want, len) == 0;
    free(want);
    if (!ok) {
        printf("FAIL round trip of %s (%zu bytes -> %zu ids -> %zu bytes): ", what, n, n_ids, len);
        print_escaped(stdout, s, n, 120);
        putchar('\n');
        failures++;
    }
    free(ids);
    free(back);
    return ok;
}

/* ids == want[0..n_want); on mismatch print the first difference with context. */
static int same_ids(const hyla_tokenizer *t, const int32_t *ids, size_t n, const int32_t *want, size_t n_want,
                    const char *what)
{
    size_t i = 0;
    while (i < n && i < n_want && ids[i] == want[i])
        i++;
    if (i == n && i == n_want)
        return 1;
    printf("FAIL %s: %zu ids, expected %zu; first difference at index %zu\n", what, n, n_want, i);
    size_t lo = i > 4 ? i - 4 : 0;
    for (int side = 0; side < 2; side++) {
        const int32_t *v = side ? want : ids;
        size_t nv = side ? n_want : n;
        printf("  %-8s [%zu..]:", side ? "expected" : "got", lo);
        for (size_t k = lo; k < nv && k < i + 5; k++) {
            char *s = NULL;
            size_t len = 0;
            printf(" %d=", v[k]);
            if (hyla_tokenizer_decode(t, &v[k], 1, &s, &len) == HYLA_OK)
                print_escaped(stdout, s, len, 24);
            free(s);
        }
        putchar('\n');
    }
    failures++;
    return 0;
}

/* ---- the Qwen3 tokenizer against the oracle ------------------------------------------------------ */

static cJSON *read_json(const char *path)
{
    char *text;
    size_t len;
    if (hyla_read_text_file(path, &text, &len) != HYLA_OK) {
        printf("FAIL %s\n", hyla_error_message());
        failures++;
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    CHECK(j, "%s: not valid JSON", path);
    return j;
}

static void test_oracle(const hyla_tokenizer *t)
{
    cJSON *texts = read_json(QWEN_DIR "/texts.json"), *expected = read_json(QWEN_DIR "/expected.json");
    const cJSON *lists = cJSON_GetObjectItemCaseSensitive(expected, "ids");
    if (!cJSON_IsArray(texts) || !cJSON_IsArray(lists) || cJSON_GetArraySize(texts) != cJSON_GetArraySize(lists)) {
        CHECK(0, "texts.json and expected.json[\"ids\"] must be arrays of equal length");
        cJSON_Delete(texts);
        cJSON_Delete(expected);
        return;
    }
    size_t i = 0, bytes = 0, total_ids = 0, matched = 0;
    double ms = 0;
    const cJSON *want = lists->child;
    for (const cJSON *s = texts->child; s; s = s->next, want = want->next, i++) {
        size_t n = strlen(s->valuestring), n_want = (size_t)cJSON_GetArraySize(want), n_ids = 0, k = 0;
        int32_t *w = malloc((n_want + 1) * sizeof *w);
        for (const cJSON *e = want->child; e; e = e->next)
            w[k++] = (int32_t)e->valuedouble;
        double t0 = now_ms();
        int32_t *ids = encode_ok(t, s->valuestring, n, &n_ids);
        ms += now_ms() - t0;
        char what[64];
        snprintf(what, sizeof what, "texts.json[%zu]", i);
        if (ids && !same_ids(t, ids, n_ids, w, n_want, what)) {
            printf("  text: ");
            print_escaped(stdout, s->valuestring, n, 200);
            putchar('\n');
        } else if (ids)
            matched++;
        round_trip(t, s->valuestring, n, what);
        bytes += n;
        total_ids += n_ids;
        free(ids);
        free(w);
    }
    printf("oracle: %zu/%zu texts match expected.json (%zu bytes -> %zu ids, encode %.1f ms)\n", matched, i, bytes,
           total_ids, ms);
    cJSON_Delete(texts);
    cJSON_Delete(expected);
}

static int32_t id_of(const hyla_tokenizer *t, const char *tok)
{
    int32_t id = hyla_tokenizer_token_id(t, tok);
    CHECK(id >= 0, "token '%s' not found", tok);
    return id;
}

/* Ids of s, encoded alone. */
static size_t ids_of(const hyla_tokenizer *t, const char *s, size_t n, int32_t *out, size_t cap)
{
    size_t n_ids = 0;
    int32_t *ids = encode_ok(t, s, n, &n_ids);
    CHECK(n_ids <= cap, "too many ids");
    for (size_t i = 0; ids && i < n_ids && i < cap; i++)
        out[i] = ids[i];
    free(ids);
    return n_ids;
}

static void expect_ids(const hyla_tokenizer *t, const char *s, size_t n, const int32_t *want, size_t n_want,
                       const char *what)
{
    size_t n_ids = 0;
    int32_t *ids = encode_ok(t, s, n, &n_ids);
    if (ids)
        same_ids(t, ids, n_ids, want, n_want, what);
    free(ids);
}

/* The invalid-UTF-8 rule and the API around ids, on the Qwen3 tokenizer. */
static void test_qwen_rules(const hyla_tokenizer *t)
{
    CHECK(hyla_tokenizer_vocab_size(t) == 151669, "vocab_size %zu, expected 151669", hyla_tokenizer_vocab_size(t));
    CHECK(hyla_tokenizer_token_id(t, "<|endoftext|>") == 151643, "<|endoftext|> id");
    CHECK(hyla_tokenizer_token_id(t, "<|im_start|>") == 151644, "<|im_start|> id");
    CHECK(hyla_tokenizer_token_id(t, "<|im_end|>") == 151645, "<|im_end|> id");
    CHECK(hyla_tokenizer_token_id(t, "\xC4\xA0the") == 279, "'Ġthe' id"); /* " the" */
    CHECK(hyla_tokenizer_token_id(t, "no such token \x01") == -1, "absent token must give -1");

    /* Bytes that start no well-formed sequence are byte tokens (0xFF -> 'ÿ', 0xE4 -> 'ä',
     * 0xB8 -> '¸', 0xC0 -> 'À', 0xAF -> '¯', 0xED -> 'í', 0xA0 -> 'ł' (U+0142), 0x80 -> 'Ģ'). */
    int32_t a = id_of(t, "a"), b = id_of(t, "b"), ff = id_of(t, "\xC3\xBF");
    int32_t e4 = id_of(t, "\xC3\xA4"), b8 = id_of(t, "\xC2\xB8"), c0 = id_of(t, "\xC3\x80");
    int32_t af = id_of(t, "\xC2\xAF"), ed = id_of(t, "\xC3\xAD"), a0 = id_of(t, "\xC5\x82"), x80 = id_of(t, "\xC4\xA2");
    expect_ids(t, "a\xFF" "b", 3, (int32_t[]){a, ff, b}, 3, "a 0xFF b");
    expect_ids(t, "\xE4\xB8", 2, (int32_t[]){e4, b8}, 2, "truncated 3-byte sequence");
    expect_ids(t, "\xC0\xAF", 2, (int32_t[]){c0, af}, 2, "overlong '/'");
    expect_ids(t, "\xED\xA0\x80", 3, (int32_t[]){ed, a0, x80}, 3, "UTF-8 surrogate");
    expect_ids(t, "\xE4\xB8\xAD", 3, (int32_t[]){id_of(t, "\xC3\xA4\xC2\xB8\xC5\x83")}, 1, "valid U+4E2D");

    /* An invalid byte ends the regex run: the text on each side is pre-tokenized on its own. */
    int32_t w1[16], w2[16], want[40];
    size_t n1 = ids_of(t, "hello  ", 7, w1, 16), n2 = ids_of(t, "world", 5, w2, 16), n = 0;
    memcpy(want, w1, n1 * sizeof *w1), n = n1;
    want[n++] = ff;
    memcpy(want + n, w2, n2 * sizeof *w2), n += n2;
    expect_ids(t, "hello  \xFFworld", 13, want, n, "invalid byte splits the regex run");

    /* Added tokens are matched first and never split; pieces around them are encoded alone. */
    n1 = ids_of(t, "x<|im_end", 9, w1, 16);
    n = 0;
    want[n++] = 151644;
    memcpy(want + n, w1, n1 * sizeof *w1), n += n1;
    want[n++] = 151645;
    expect_ids(t, "<|im_start|>x<|im_end<|im_end|>", 31, want, n, "added tokens around a fragment");

    /* Decode: added tokens give their content; bad ids are errors naming the id. */
    char *s = NULL;
    size_t len = 0;
    static const char chat_text[] = "<|im_start|>user\nhi<|im_end|>";
    int32_t chat[] = {151644, 872, 198, 6023, 151645};
    CHECK(hyla_tokenizer_decode(t, chat, 5, &s, &len) == HYLA_OK && len == strlen(chat_text) &&
              memcmp(s, chat_text, len) == 0, "decode of a chat turn");
    free(s);
    int32_t bad[] = {9707, 151669};
    CHECK(hyla_tokenizer_decode(t, bad, 2, &s, &len) != HYLA_OK && !s && strstr(hyla_error_message(), "151669") &&
              strstr(hyla_error_message(), "index 1"), "decode of id 151669 must fail naming it: %s", hyla_error_message());
    int32_t neg[] = {-1};
    CHECK(hyla_tokenizer_decode(t, neg, 1, &s, &len) != HYLA_OK && strstr(hyla_error_message(), "-1"),
          "decode of id -1 must fail naming it: %s", hyla_error_message());
    CHECK(hyla_tokenizer_decode(t, NULL, 0, &s, &len) == HYLA_OK && len == 0 && s && s[0] == '\0', "empty decode");
    free(s);
    size_t n_ids = 1;
    int32_t *ids = encode_ok(t, NULL, 0, &n_ids);
    CHECK(n_ids == 0, "empty encode gave %zu ids", n_ids);
    free(ids);
}

/* ---- random and long inputs ----------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static size_t put_utf8(char *d, uint32_t cp)
{
    if (cp < 0x80)
        return d[0] = (char)cp, 1;
    if (cp < 0x800)
        return d[0] = (char)(0xC0 | cp >> 6), d[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return d[0] = (char)(0xE0 | cp >> 12), d[1] = (char)(0x80 | (cp >> 6 & 63)), d[2] = (char)(0x80 | (cp & 63)), 3;
    d[0] = (char)(0xF0 | cp >> 18), d[1] = (char)(0x80 | (cp >> 12 & 63));
    d[2] = (char)(0x80 | (cp >> 6 & 63)), d[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* One random string in buf (cap >= 4 * max_units + 16); returns its length. Modes: raw bytes;
 * valid code points from mixed scripts; ASCII words with stray bytes; added-token fragments. */
static size_t random_string(char *buf, int mode, size_t units)
{
    static const char *const frags[] = {"<|im_end|>", "<|im_start|>", "<|im_", "|>", "<", "\xE4\xB8", "\xF0\x9F",
                                        "\x80", " ", "\n", "\r\n", "'s", "'LL", "123", "\t"};
    static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0xA0, 0x17F}, {0x300, 0x36F}, {0x400, 0x4FF},
                                         {0x3040, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF},
                                         {0x0, 0x1F}, {0x2000, 0x206F}, {0xE000, 0xE0FF}, {0x10000, 0x10FFFF}};
    size_t n = 0;
    for (size_t u = 0; u < units; u++) {
        uint32_t r = rng_next();
        if (mode == 0)
            buf[n++] = (char)(r & 0xFF);
        else if (mode == 1) {
            const uint32_t *g = ranges[r % 12];
            uint32_t cp = g[0] + rng_next() % (g[1] - g[0] + 1);
            n += put_utf8(buf + n, (cp >= 0xD800 && cp < 0xE000) ? 0xFFFD : cp);
        } else if (mode == 2) {
            static const char alpha[] = "abcXYZ  \t\n019.,'!";
            buf[n++] = r % 29 == 0 ? (char)(0x80 + r % 128) : alpha[r % (sizeof alpha - 1)];
        } else {
            const char *f = frags[r % (sizeof frags / sizeof *frags)];
            memcpy(buf + n, f, strlen(f));
            n += strlen(f);
        }
    }
    return n;
}

static void test_random(const hyla_tokenizer *t)
{
    enum { N = 4000, MAX_UNITS = 120 };
    char *buf = malloc(16 * MAX_UNITS + 16), what[64];
    int ok = 0;
    for (int i = 0; i < N; i++) {
        int mode = i % 4;
        size_t n = random_string(buf, mode, rng_next() % MAX_UNITS);
        snprintf(what, sizeof what, "random string %d (mode %d)", i, mode);
        ok += round_trip(t, buf, n, what);
    }
    free(buf);
    printf("random: %d/%d byte strings round-trip\n", ok, N);
}

/* Long runs stress the regex (backtracking over \s runs) and BPE on one huge piece. */
static void test_long_runs(const hyla_tokenizer *t)
{
    enum { LEN = 1 << 18 };
    static const char *const units[] = {" ", "a", "7", "\n", " \t", "\xE4\xB8\xAD", "ab ", "\xFF", "!"};
    char *buf = malloc(LEN + 8), what[64];
    for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
        size_t n = 0, k = strlen(units[u]);
        while (n + k <= LEN)
            memcpy(buf + n, units[u], k), n += k;
        double t0 = now_ms();
        snprintf(what, sizeof what, "%zu bytes of repeated '%s'", n, units[u]);
        round_trip(t, buf, n, what);
        double ms = now_ms() - t0;
        if (ms > 200)
            printf("long run %zu: %.0f ms\n", u, ms);
    }
    free(buf);
}

/* ---- small tokenizers written to /tmp ------------------------------------------------------------- */

static void byte_level_char(int b, char out[3])
{
    int n = 0;
    for (int k = 0; k < b; k++)
        n += !((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174 && k <= 255));
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out[put_utf8(out, printable ? (uint32_t)b : 256u + (uint32_t)n)] = '\0';
}

/* A tokenizer.json with the 256 byte tokens (ids 0..255), "ab" 256, "bc" 257, "abc" 258,
 * "aa" 259, merges `merges` (pairs), added tokens "<|x|>" 300 and "<|x|>y" 301, and the
 * Qwen pre-tokenizer. Callers mutate it for each case. */
static cJSON *tiny_json(const char *const *merges, int n_merges)
{
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddFalseToObject(model, "ignore_merges");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) {
        char c[3];
        byte_level_char(b, c);
        cJSON_AddNumberToObject(vocab, c, b);
    }
    static const char *const extra[] = {"ab", "bc", "abc", "aa"};
    for (int i = 0; i < 4; i++)
        cJSON_AddNumberToObject(vocab, extra[i], 256 + i);
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < n_merges; i++) {
        cJSON *pair = cJSON_CreateArray();
        char left[8] = {0};
        memcpy(left, merges[i], strcspn(merges[i], " "));
        cJSON_AddItemToArray(pair, cJSON_CreateString(left));
        cJSON_AddItemToArray(pair, cJSON_CreateString(strchr(merges[i], ' ') + 1));
        cJSON_AddItemToArray(m, pair);
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    static const char *const contents[] = {"<|x|>", "<|x|>y"};
    for (int i = 0; i < 2; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", 300 + i);
        cJSON_AddStringToObject(a, "content", contents[i]);
        cJSON_AddFalseToObject(a, "lstrip");
        cJSON_AddTrueToObject(a, "special");
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "Sequence");
    cJSON *steps = cJSON_AddArrayToObject(pt, "pretokenizers");
    cJSON *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", QWEN_PATTERN);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddFalseToObject(split, "invert");
    cJSON_AddItemToArray(steps, split);
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddFalseToObject(bl, "add_prefix_space");
    cJSON_AddFalseToObject(bl, "use_regex");
    cJSON_AddItemToArray(steps, bl);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
    return root;
}

static void write_json(const char *path, const cJSON *j)
{
    char *s = cJSON_PrintUnformatted(j);
    FILE *f = fopen(path, "wb");
    if (!s || !f || fputs(s, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    free(s);
}

static hyla_tokenizer *load_tiny(cJSON *j, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s.json", tmpdir, name);
    write_json(path, j);
    cJSON_Delete(j);
    hyla_tokenizer *t = NULL;
    CHECK(hyla_tokenizer_load(&t, path) == HYLA_OK, "%s: %s", name, hyla_error_message());
    return t;
}

static const char *const merges_bc_first[] = {"b c", "a b", "a a", "ab c"};
static const char *const merges_ab_first[] = {"a b", "b c", "a a", "ab c"};

static void test_tiny(void)
{
    /* Rank order: "b c" before "a b" gives a|bc; the other order gives ab|c, then abc. */
    hyla_tokenizer *t1 = load_tiny(tiny_json(merges_bc_first, 3), "bc_first");
    hyla_tokenizer *t2 = load_tiny(tiny_json(merges_ab_first, 4), "ab_first");
    if (t1 && t2) {
        expect_ids(t1, "abc", 3, (int32_t[]){'a', 257}, 2, "merge ranks (b c first)");
        expect_ids(t2, "abc", 3, (int32_t[]){258}, 1, "merge ranks (a b first, then ab c)");
        expect_ids(t1, "aaa", 3, (int32_t[]){259, 'a'}, 2, "equal ranks merge leftmost first");
        expect_ids(t1, "<|x|>y<|x|><|x|", 15, (int32_t[]){301, 300, '<', '|', 'x', '|'}, 6,
                   "added tokens: leftmost-longest");
        expect_ids(t1, "a\xFF" "b", 3, (int32_t[]){'a', 0xFF, 'b'}, 3, "invalid byte between letters");
        int32_t gap[] = {280};
        char *s = NULL;
        size_t len;
        CHECK(hyla_tokenizer_decode(t1, gap, 1, &s, &len) != HYLA_OK && strstr(hyla_error_message(), "280") &&
                  strstr(hyla_error_message(), "no token"), "decode of an unused id: %s", hyla_error_message());
        CHECK(hyla_tokenizer_vocab_size(t1) == 302, "tiny vocab_size %zu", hyla_tokenizer_vocab_size(t1));
    }
    hyla_tokenizer_free(t1);
    hyla_tokenizer_free(t2);

    /* "a b" strings and ["a", "b"] pairs are the same merges. */
    cJSON *j = tiny_json(merges_ab_first, 0), *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"), "merges");
    for (int i = 0; i < 4; i++)
        cJSON_AddItemToArray(m, cJSON_CreateString(merges_ab_first[i]));
    hyla_tokenizer *t3 = load_tiny(j, "string_merges");
    if (t3)
        expect_ids(t3, "abc abcc", 8, (int32_t[]){258, ' ', 258, 'c'}, 4, "string merges");
    hyla_tokenizer_free(t3);

    /* ignore_merges: a piece found whole in the vocab is one token even without a merge path. */
    j = tiny_json(merges_ab_first, 0);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"), "ignore_merges", cJSON_CreateTrue());
    hyla_tokenizer *t4 = load_tiny(j, "ignore_merges");
    if (t4)
        expect_ids(t4, "abc abd", 7, (int32_t[]){258, ' ', 'a', 'b', 'd'}, 5, "ignore_merges");
    hyla_tokenizer_free(t4);

    /* A lone ByteLevel pre-tokenizer with use_regex (default true) splits with the GPT-2 regex. */
    j = tiny_json(merges_ab_first, 4);
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddFalseToObject(bl, "add_prefix_space");
    cJSON_ReplaceItemInObjectCaseSensitive(j, "pre_tokenizer", bl);
    hyla_tokenizer *t5 = load_tiny(j, "gpt2_regex");
    if (t5) /* GPT-2 splits "abc123" into "abc" "123"; digits are not merged here */
        expect_ids(t5, "abc123", 6, (int32_t[]){258, '1', '2', '3'}, 4, "GPT-2 ByteLevel regex");
    hyla_tokenizer_free(t5);
}

/* ---- malformed files ------------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *raw;    /* file contents, or NULL to mutate tiny_json() with `edit` */
    const char *field;  /* must appear in the message */
} bad_case;

static cJSON *model_of(cJSON *j)
{
    return cJSON_GetObjectItemCaseSensitive(j, "model");
}

static void edit_bad(cJSON *j, const char *name)
{
    cJSON *model = model_of(j), *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges"), *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    cJSON *split = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), "pretokenizers"), 0);
    if (!strcmp(name, "no_model"))
        cJSON_DeleteItemFromObjectCaseSensitive(j, "model");
    else if (!strcmp(name, "no_vocab"))
        cJSON_DeleteItemFromObjectCaseSensitive(model, "vocab");
    else if (!strcmp(name, "vocab_id_string"))
        cJSON_ReplaceItemInObjectCaseSensitive(vocab, "ab", cJSON_CreateString("256"));
    else if (!strcmp(name, "vocab_id_fraction"))
        cJSON_ReplaceItemInObjectCaseSensitive(vocab, "ab", cJSON_CreateNumber(256.5));
    else if (!strcmp(name, "vocab_dup_id"))
        cJSON_ReplaceItemInObjectCaseSensitive(vocab, "ab", cJSON_CreateNumber(257));
    else if (!strcmp(name, "vocab_no_byte"))
        cJSON_DeleteItemFromObjectCaseSensitive(vocab, "a");
    else if (!strcmp(name, "no_merges"))
        cJSON_DeleteItemFromObjectCaseSensitive(model, "merges");
    else if (!strcmp(name, "merge_unknown"))
        cJSON_AddItemToArray(merges, cJSON_CreateString("a zz"));
    else if (!strcmp(name, "merge_result_unknown"))
        cJSON_AddItemToArray(merges, cJSON_CreateString("b a"));
    else if (!strcmp(name, "merge_no_space"))
        cJSON_AddItemToArray(merges, cJSON_CreateString("ab"));
    else if (!strcmp(name, "merge_number"))
        cJSON_AddItemToArray(merges, cJSON_CreateNumber(3));
    else if (!strcmp(name, "bad_regex"))
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex", cJSON_CreateString("(\\p{L}+"));
    else if (!strcmp(name, "split_removed"))
        cJSON_ReplaceItemInObjectCaseSensitive(split, "behavior", cJSON_CreateString("Removed"));
    else if (!strcmp(name, "model_wordpiece"))
        cJSON_ReplaceItemInObjectCaseSensitive(model, "type", cJSON_CreateString("WordPiece"));
    else if (!strcmp(name, "byte_fallback"))
        cJSON_AddTrueToObject(model, "byte_fallback");
    else if (!strcmp(name, "added_lstrip"))
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(added, 0), "lstrip", cJSON_CreateTrue());
    else if (!strcmp(name, "added_no_content"))
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetArrayItem(added, 1), "content");
    else if (!strcmp(name, "added_id_taken"))
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetArrayItem(added, 0), "id", cJSON_CreateNumber(97));
    else if (!strcmp(name, "normalizer_lowercase")) {
        cJSON *nz = cJSON_CreateObject();
        cJSON_AddStringToObject(nz, "type", "Lowercase");
        cJSON_ReplaceItemInObjectCaseSensitive(j, "normalizer", nz);
    }
    else if (!strcmp(name, "no_pre_tokenizer"))
        cJSON_DeleteItemFromObjectCaseSensitive(j, "pre_tokenizer");
    else if (!strcmp(name, "no_decoder"))
        cJSON_DeleteItemFromObjectCaseSensitive(j, "decoder");
    else {
        fprintf(stderr, "unknown bad case %s\n", name);
        exit(1);
    }
}

static void test_bad_files(void)
{
    static const bad_case cases[] = {
        {"not_json", "{\"model\": {\"vocab\": ", "invalid JSON"},
        {"top_level_array", "[1, 2]", "not a JSON object"},
        {"no_model", NULL, "model: missing"},
        {"no_vocab", NULL, "model.vocab"},
        {"vocab_id_string", NULL, "model.vocab['ab']"},
        {"vocab_id_fraction", NULL, "model.vocab['ab']"},
        {"vocab_dup_id", NULL, "model.vocab: id 257"},
        {"vocab_no_byte", NULL, "byte-level token 'a'"},
        {"no_merges", NULL, "model.merges"},
        {"merge_unknown", NULL, "model.merges[4]: token 'zz'"},
        {"merge_result_unknown", NULL, "model.merges[4]: merged token 'ba'"},
        {"merge_no_space", NULL, "model.merges[4]"},
        {"merge_number", NULL, "model.merges[4]"},
        {"bad_regex", NULL, "pre_tokenizer.pretokenizers[0].pattern.Regex: invalid regex"},
        {"split_removed", NULL, "pre_tokenizer.pretokenizers[0]"},
        {"model_wordpiece", NULL, "model.type"},
        {"byte_fallback", NULL, "model.byte_fallback"},
        {"added_lstrip", NULL, "added_tokens[0]"},
        {"added_no_content", NULL, "added_tokens[1]"},
        {"added_id_taken", NULL, "added_tokens[0]"},
        {"normalizer_lowercase", NULL, "normalizer.type Lowercase"},
        {"no_pre_tokenizer", NULL, "pre_tokenizer"},
        {"no_decoder", NULL, "decoder.type"},
    };
    int ok = 0, n = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < n; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/bad_%s.json", tmpdir, cases[i].name);
        if (cases[i].raw) {
            FILE *f = fopen(path, "wb");
            if (!f || fputs(cases[i].raw, f) < 0 || fclose(f) != 0) {
                perror(path);
                exit(1);
            }
        } else {
            cJSON *j = tiny_json(merges_ab_first, 4);
            edit_bad(j, cases[i].name);
            write_json(path, j);
            cJSON_Delete(j);
        }
        static char sentinel;
        hyla_tokenizer *t = (hyla_tokenizer *)&sentinel; /* load must reset it to NULL */
        int st = hyla_tokenizer_load(&t, path);
        const char *msg = hyla_error_message();
        int good = st != HYLA_OK && t == NULL && strstr(msg, path) && strstr(msg, cases[i].field);
        CHECK(good, "bad file %s: status %d, message \"%s\" should name the file and \"%s\"", cases[i].name, st, msg,
              cases[i].field);
        ok += good;
        if (st == HYLA_OK)
            hyla_tokenizer_free(t);
    }
    char missing[128];
    snprintf(missing, sizeof missing, "%s/does_not_exist.json", tmpdir);
    hyla_tokenizer *t = NULL;
    CHECK(hyla_tokenizer_load(&t, missing) == HYLA_ERR_IO && !t && strstr(hyla_error_message(), missing),
          "missing file: %s", hyla_error_message());
    printf("bad files: %d/%d rejected with a message naming file and field\n", ok, n);
}

static void remove_tmpdir(void)
{
    if (hyla_remove_tree(tmpdir) != HYLA_OK)
        fprintf(stderr, "warning: %s\n", hyla_error_message());
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv; /* argv[1] (the oracle cases directory) is not used */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hyla_test_tok_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    double t0 = now_ms();
    hyla_tokenizer *qwen = NULL;
    if (hyla_tokenizer_load(&qwen, QWEN_JSON) != HYLA_OK) {
        printf("FAIL %s (run from the repository root)\n", hyla_error_message());
        return 1;
    }
    printf("load %s: %.0f ms, vocab_size %zu\n", QWEN_JSON, now_ms() - t0, hyla_tokenizer_vocab_size(qwen));
    test_oracle(qwen);
    test_qwen_rules(qwen);
    test_random(qwen);
    test_long_runs(qwen);
    hyla_tokenizer_free(qwen);
    test_tiny();
    test_bad_files();
    printf("total %.0f ms\n", now_ms() - t0);
    if (failures) {
        printf("test_tokenizer: %d FAILED (files kept in %s)\n", failures, tmpdir);
        return 1;
    }
    remove_tmpdir();
    printf("test_tokenizer: all passed\n");
    return 0;
}
