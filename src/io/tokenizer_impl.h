/* Internal to the tokenizer (io/tokenizer.c loads, io/tokenizer_encode.c encodes and decodes):
 * the loaded tokenizer's layout and the lookups both halves use. Not for other files.
 *
 * A loaded tokenizer holds:
 *   tokens[vocab_size]   per id: its spelling (vocab string or added content) and the bytes it
 *                        decodes to, both as offsets into one arena of NUL-terminated strings.
 *   vocab, added         open-addressing hash tables: spelling -> id (model.vocab, added_tokens).
 *   merges               open-addressing hash table: (left id, right id) -> (rank, merged id).
 *   byte_ids[256]        the id of each byte's one-character byte-level token.
 *   added_order          added-token ids sorted by (first byte, length descending), bucketed by
 *                        first byte, for leftmost-longest literal matching.
 *   re                   the compiled pre-tokenizer regex (PCRE2, JIT when available). */
#ifndef HYLA_IO_TOKENIZER_IMPL_H
#define HYLA_IO_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <string.h>

#include "io/tokenizer.h"

#define TOK_MAX_ID (1 << 24)           /* ids beyond this are rejected as implausible */
#define CACHE_MAX_PIECE 256            /* longer pieces are not cached */
#define CACHE_MAX_ENTRIES ((size_t)1 << 20)
#define BYTE_LEVEL_CHARS 324           /* bytes_to_unicode maps into U+0000..U+0143 */


enum { TOK_NONE = 0, TOK_VOCAB = 1, TOK_ADDED = 2 };

typedef struct {
    uint32_t str_off, str_len; /* spelling in arena (NUL-terminated) */
    uint32_t dec_off, dec_len; /* decoded bytes in arena */
    uint8_t kind;              /* TOK_NONE (unused id), TOK_VOCAB or TOK_ADDED */
    uint8_t special;           /* an added token marked "special": true */
} tok_entry;

typedef struct {
    int32_t *slots; /* [mask + 1] id, or -1 for an empty slot */
    size_t mask;
} str_table;

typedef struct {
    uint64_t key; /* left id << 32 | right id; MERGE_EMPTY for an empty slot */
    int32_t rank; /* index in model.merges: lower merges first */
    int32_t merged;
} merge_slot;
#define MERGE_EMPTY UINT64_MAX

struct hyla_tokenizer {
    char *path;            /* for messages */
    size_t vocab_size;     /* max id + 1 */
    tok_entry *tokens;     /* [vocab_size] */
    char *arena;           /* spellings and decoded bytes */
    size_t arena_len, arena_cap;
    str_table vocab;       /* model.vocab spelling -> id */
    str_table added;       /* added-token content -> id */
    merge_slot *merges;    /* [merge_mask + 1] */
    size_t merge_mask;
    int32_t byte_ids[256]; /* byte -> id of its byte-level token */
    int32_t *added_order;  /* [n_added] */
    size_t n_added;
    uint32_t added_first[257]; /* added_order[added_first[b] .. added_first[b + 1]) start with b */
    pcre2_code *re;        /* NULL: no regex split, each run is one piece */
    char re_excerpt[64];   /* the pattern's start, for error messages */
    char *pattern;         /* the whole pattern (NULL: no regex split) */
    int nfc;               /* normalizer "NFC": text between added tokens is NFC-normalised first */
    size_t n_merges;       /* model.merges entries */
    int ignore_merges;     /* model.ignore_merges: a piece found whole in the vocab is one id */
};

/* A tokenizer from a parsed tokenizer.json (`origin` names it in messages); io/tokenizer_gguf.c
 * builds one for a GGUF file's vocabulary. */
struct cJSON;
int hyla_tokenizer_from_json(hyla_tokenizer **out, const struct cJSON *root, const char *origin);

/* ---- lookups shared by loading and encoding -------------------------------------------------- */

static inline uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static inline uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Length of the well-formed UTF-8 sequence at p (Unicode Table 3-7), or 0 if there is none. */
static inline size_t utf8_char_len(const unsigned char *p, size_t n)
{
    unsigned b = p[0];
    if (b < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF)
        len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0)
            lo = 0xA0;
        if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 upwards. */
static inline void byte_level_table(uint32_t b2u[256])
{
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        b2u[b] = printable ? (uint32_t)b : 256 + n++;
    }
}

static inline size_t utf8_put(char *dst, uint32_t cp) /* cp < 0x800 */
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static inline const char *tok_str(const hyla_tokenizer *t, int32_t id)
{
    return t->arena + t->tokens[id].str_off;
}

/* Slot holding spelling s[0..n) or the empty slot where it would go. */
static inline size_t str_table_slot(const hyla_tokenizer *t, const str_table *tb, const char *s, size_t n)
{
    size_t i = (size_t)hash_bytes(s, n) & tb->mask;
    for (;; i = (i + 1) & tb->mask) {
        int32_t id = tb->slots[i];
        if (id < 0 || (t->tokens[id].str_len == n && memcmp(tok_str(t, id), s, n) == 0))
            return i;
    }
}

static inline int32_t str_table_find(const hyla_tokenizer *t, const str_table *tb, const char *s, size_t n)
{
    return tb->slots[str_table_slot(t, tb, s, n)];
}

static inline merge_slot *merge_find(const hyla_tokenizer *t, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = (size_t)hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        merge_slot *m = &t->merges[i];
        if (m->key == key || m->key == MERGE_EMPTY)
            return m;
    }
}

#endif
