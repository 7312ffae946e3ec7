/* Byte-level BPE tokenizer; tokenizer.h documents the supported tokenizer.json shape and the
 * encoding rules (added tokens first, invalid UTF-8 bytes as their own pieces, regex split,
 * rank-ordered merges).
 *
 * A loaded tokenizer holds:
 *   tokens[vocab_size]   per id: its spelling (vocab string or added content) and the bytes it
 *                        decodes to, both as offsets into one arena of NUL-terminated strings.
 *   vocab, added         open-addressing hash tables: spelling -> id (model.vocab, added_tokens).
 *   merges               open-addressing hash table: (left id, right id) -> (rank, merged id).
 *   byte_ids[256]        the id of each byte's one-character byte-level token.
 *   added_order          added-token ids sorted by (first byte, length descending), bucketed by
 *                        first byte, for leftmost-longest literal matching.
 *   re                   the compiled pre-tokenizer regex (PCRE2, JIT when available).
 * Encoding allocates only per call (output, BPE workspace, a piece cache), so a tokenizer can
 * be shared by threads. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <utf8proc.h>
#include <string.h>

#include "core/error.h"
#include "core/profile.h"
#include "io/fileio.h"

#define TOK_MAX_ID (1 << 24)           /* ids beyond this are rejected as implausible */
#define CACHE_MAX_PIECE 256            /* longer pieces are not cached */
#define CACHE_MAX_ENTRIES ((size_t)1 << 20)
#define BYTE_LEVEL_CHARS 324           /* bytes_to_unicode maps into U+0000..U+0143 */

/* The GPT-2 pattern that a ByteLevel pre-tokenizer with use_regex=true applies. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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

/* ---- small helpers ---------------------------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* Length of the well-formed UTF-8 sequence at p (Unicode Table 3-7), or 0 if there is none. */
static size_t utf8_char_len(const unsigned char *p, size_t n)
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
static void byte_level_table(uint32_t b2u[256])
{
    uint32_t n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        b2u[b] = printable ? (uint32_t)b : 256 + n++;
    }
}

static size_t utf8_put(char *dst, uint32_t cp) /* cp < 0x800 */
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static const cJSON *obj_get(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* 1 if field `name` of `o` is absent, null or false; 0 if true; -1 if not a boolean. */
static int is_false(const cJSON *o, const char *name)
{
    const cJSON *v = obj_get(o, name);
    if (!v)
        return 1;
    return cJSON_IsBool(v) ? !cJSON_IsTrue(v) : -1;
}

static int json_id(const cJSON *v, int32_t *id)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble >= TOK_MAX_ID)
        return 0;
    *id = (int32_t)v->valuedouble;
    return 1;
}

static const char *tok_str(const hyla_tokenizer *t, int32_t id)
{
    return t->arena + t->tokens[id].str_off;
}

/* ---- hash tables ------------------------------------------------------------------------------ */

static int str_table_init(str_table *tb, size_t count)
{
    size_t cap = pow2_at_least(2 * count);
    tb->slots = malloc(cap * sizeof *tb->slots);
    if (!tb->slots)
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot allocate a %zu-slot table", cap);
    memset(tb->slots, 0xFF, cap * sizeof *tb->slots);
    tb->mask = cap - 1;
    return HYLA_OK;
}

/* Slot holding spelling s[0..n) or the empty slot where it would go. */
static size_t str_table_slot(const hyla_tokenizer *t, const str_table *tb, const char *s, size_t n)
{
    size_t i = (size_t)hash_bytes(s, n) & tb->mask;
    for (;; i = (i + 1) & tb->mask) {
        int32_t id = tb->slots[i];
        if (id < 0 || (t->tokens[id].str_len == n && memcmp(tok_str(t, id), s, n) == 0))
            return i;
    }
}

static int32_t str_table_find(const hyla_tokenizer *t, const str_table *tb, const char *s, size_t n)
{
    return tb->slots[str_table_slot(t, tb, s, n)];
}

static merge_slot *merge_find(const hyla_tokenizer *t, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = (size_t)hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        merge_slot *m = &t->merges[i];
        if (m->key == key || m->key == MERGE_EMPTY)
            return m;
    }
}

/* ---- load: sizes and token spellings ---------------------------------------------------------- */

/* Validate ids and spellings of model.vocab and added_tokens; size tokens[] and the arena. */
static int measure_tokens(hyla_tokenizer *t, const cJSON *vocab, const cJSON *added)
{
    size_t count = 0, bytes = 0, max_id = 0;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int32_t id;
        if (!json_id(it, &id))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.vocab['%.64s']: id must be an integer in [0, %d)",
                                  t->path, it->string, TOK_MAX_ID);
        count++;
        bytes += strlen(it->string) + 1;
        max_id = (size_t)id > max_id ? (size_t)id : max_id;
    }
    if (count == 0)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.vocab is empty", t->path);
    size_t i = 0;
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next, i++) {
        int32_t id;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsObject(it) || !json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: added_tokens[%zu]: missing integer 'id' in [0, %d)",
                                  t->path, i, TOK_MAX_ID);
        if (!cJSON_IsString(content) || content->valuestring[0] == '\0')
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: added_tokens[%zu]: 'content' must be a non-empty string",
                                  t->path, i);
        bytes += strlen(content->valuestring) + 1;
        max_id = (size_t)id > max_id ? (size_t)id : max_id;
    }
    t->n_added = i;
    t->vocab_size = max_id + 1;
    t->arena_cap = 2 * bytes; /* spellings, then decoded bytes (never longer than the spelling) */
    if (t->arena_cap >= UINT32_MAX)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: token strings too large (%zu bytes)", t->path, bytes);
    t->tokens = calloc(t->vocab_size, sizeof *t->tokens);
    t->arena = malloc(t->arena_cap);
    t->added_order = malloc((t->n_added + 1) * sizeof *t->added_order);
    if (!t->tokens || !t->arena || !t->added_order)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate %zu tokens", t->path, t->vocab_size);
    HYLA_TRY(str_table_init(&t->vocab, count));
    return str_table_init(&t->added, t->n_added);
}

static uint32_t arena_put(hyla_tokenizer *t, const void *p, size_t n)
{
    HYLA_ASSERT(t->arena_len + n + 1 <= t->arena_cap);
    uint32_t off = (uint32_t)t->arena_len;
    memcpy(t->arena + off, p, n);
    t->arena[off + n] = '\0';
    t->arena_len += n + 1;
    return off;
}

static int parse_vocab(hyla_tokenizer *t, const cJSON *vocab)
{
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int32_t id = (int32_t)it->valuedouble; /* checked by measure_tokens */
        size_t n = strlen(it->string);
        tok_entry *e = &t->tokens[id];
        if (e->kind != TOK_NONE)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.vocab: id %d given to both '%.64s' and '%.64s'",
                                  t->path, id, tok_str(t, id), it->string);
        size_t slot = str_table_slot(t, &t->vocab, it->string, n);
        if (t->vocab.slots[slot] >= 0)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.vocab: token '%.64s' listed twice", t->path,
                                  it->string);
        e->str_off = arena_put(t, it->string, n);
        e->str_len = (uint32_t)n;
        e->kind = TOK_VOCAB;
        t->vocab.slots[slot] = id;
    }
    return HYLA_OK;
}

static int parse_added(hyla_tokenizer *t, const cJSON *added)
{
    static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
    size_t i = 0;
    for (const cJSON *it = added ? added->child : NULL; it; it = it->next, i++) {
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        size_t n = strlen(content);
        for (size_t k = 0; k < sizeof unsupported / sizeof *unsupported; k++)
            if (is_false(it, unsupported[k]) != 1)
                return hyla_error_set(HYLA_ERR_FORMAT, "%s: added_tokens[%zu] ('%.64s'): '%s' must be false "
                                      "(not supported)", t->path, i, content, unsupported[k]);
        if (is_false(it, "special") < 0) /* special or not, an added token is matched the same way */
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: added_tokens[%zu]: 'special' must be true or false",
                                  t->path, i);
        size_t slot = str_table_slot(t, &t->added, content, n);
        if (t->added.slots[slot] >= 0)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: added_tokens[%zu]: content '%.64s' already has id %d",
                                  t->path, i, content, t->added.slots[slot]);
        tok_entry *e = &t->tokens[id];
        if (e->kind == TOK_ADDED ||
            (e->kind == TOK_VOCAB && (e->str_len != n || memcmp(tok_str(t, id), content, n) != 0)))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: added_tokens[%zu] ('%.64s'): id %d already belongs to '%.64s'",
                                  t->path, i, content, id, tok_str(t, id));
        if (e->kind == TOK_NONE) {
            e->str_off = arena_put(t, content, n);
            e->str_len = (uint32_t)n;
        }
        e->kind = TOK_ADDED;
        e->special = is_false(it, "special") == 0;
        t->added.slots[slot] = id;
        t->added_order[i] = id;
    }
    return HYLA_OK;
}

static int find_byte_ids(hyla_tokenizer *t)
{
    uint32_t b2u[256];
    byte_level_table(b2u);
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = utf8_put(s, b2u[b]);
        s[n] = '\0';
        t->byte_ids[b] = str_table_find(t, &t->vocab, s, n);
        if (t->byte_ids[b] < 0)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.vocab: byte-level token '%s' (byte 0x%02x) is missing",
                                  t->path, s, b);
    }
    return HYLA_OK;
}

/* ---- load: merges ----------------------------------------------------------------------------- */

/* Split merges[i] into its two spellings (pointers into the JSON, with lengths). */
static int merge_parts(const hyla_tokenizer *t, const cJSON *m, size_t i, const char **a, size_t *na,
                       const char **b, size_t *nb)
{
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (sp && sp != s && sp[1] != '\0' && !strchr(sp + 1, ' ')) {
            *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
            return HYLA_OK;
        }
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring, *na = strlen(*a);
        *b = m->child->next->valuestring, *nb = strlen(*b);
        if (*na && *nb)
            return HYLA_OK;
    }
    return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.merges[%zu]: expected \"left right\" or [\"left\", \"right\"]",
                          t->path, i);
}

static int parse_merges(hyla_tokenizer *t, const cJSON *merges)
{
    size_t count = (size_t)cJSON_GetArraySize(merges), cap = pow2_at_least(2 * count), i = 0;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate %zu merges", t->path, count);
    for (size_t k = 0; k < cap; k++)
        t->merges[k].key = MERGE_EMPTY;
    t->merge_mask = cap - 1;
    char *joined = NULL;
    size_t joined_cap = 0;
    int st = HYLA_OK;
    for (const cJSON *m = merges->child; m && st == HYLA_OK; m = m->next, i++) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((st = merge_parts(t, m, i, &a, &na, &b, &nb)) != HYLA_OK)
            break;
        int32_t left = str_table_find(t, &t->vocab, a, na), right = str_table_find(t, &t->vocab, b, nb);
        if (left < 0 || right < 0) {
            const char *bad = left < 0 ? a : b;
            size_t nbad = left < 0 ? na : nb;
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: model.merges[%zu]: token '%.*s' is not in model.vocab",
                                t->path, i, (int)(nbad > 64 ? 64 : nbad), bad);
            break;
        }
        if (na + nb > joined_cap) {
            joined_cap = 2 * (na + nb);
            char *p = realloc(joined, joined_cap);
            if (!p) {
                st = hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory reading model.merges", t->path);
                break;
            }
            joined = p;
        }
        memcpy(joined, a, na);
        memcpy(joined + na, b, nb);
        int32_t merged = str_table_find(t, &t->vocab, joined, na + nb);
        if (merged < 0) {
            st = hyla_error_set(HYLA_ERR_FORMAT, "%s: model.merges[%zu]: merged token '%.*s' is not in model.vocab",
                                t->path, i, (int)(na + nb > 64 ? 64 : na + nb), joined);
            break;
        }
        /* A repeated pair keeps its last rank, as Hugging Face's map construction does. */
        merge_slot *s = merge_find(t, left, right);
        s->key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        s->rank = (int32_t)i;
        s->merged = merged;
    }
    free(joined);
    t->n_merges = i;
    return st;
}

/* ---- load: model options, normalizer, pre-tokenizer, decoder ---------------------------------- */

static int check_model(hyla_tokenizer *t, const cJSON *model)
{
    const cJSON *type = obj_get(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.type must be \"BPE\" (got %s)", t->path,
                              cJSON_IsString(type) ? type->valuestring : "none");
    const cJSON *dropout = obj_get(model, "dropout");
    if (dropout && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.dropout must be null or 0 (BPE dropout not supported)", t->path);
    if (is_false(model, "byte_fallback") != 1)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.byte_fallback must be false (not supported)", t->path);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t k = 0; k < 2; k++) {
        const cJSON *v = obj_get(model, affixes[k]);
        if (v && !(cJSON_IsString(v) && v->valuestring[0] == '\0'))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.%s must be null or \"\" (not supported)", t->path, affixes[k]);
    }
    int ignore = is_false(model, "ignore_merges");
    if (ignore < 0)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.ignore_merges must be true or false", t->path);
    t->ignore_merges = !ignore;
    return HYLA_OK;
}

/* null or NFC (applied with utf8proc at encode time). */
static int check_normalizer(hyla_tokenizer *t, const cJSON *root)
{
    const cJSON *n = obj_get(root, "normalizer");
    if (!n)
        return HYLA_OK;
    const cJSON *type = obj_get(n, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "NFC") == 0) {
        t->nfc = 1;
        return HYLA_OK;
    }
    return hyla_error_set(HYLA_ERR_FORMAT, "%s: normalizer.type %s is not supported (only null or NFC)", t->path,
                          cJSON_IsString(type) ? type->valuestring : "(missing)");
}

/* The pattern with \\s / \\S as the Unicode White_Space property. Hugging Face's regex engine
 * (Oniguruma) means exactly that; PCRE2's \\s with UCP also matches U+180E (MONGOLIAN VOWEL
 * SEPARATOR, not White_Space since Unicode 6.3), which would split "a \u180e" differently.
 * Both forms are valid inside and outside a character class. NULL when out of memory. */
static char *pattern_for_pcre2(const char *pattern)
{
    size_t n = strlen(pattern);
    char *out = malloc(8 * n + 1), *o = out; /* each 2-byte escape grows to at most 15 bytes */
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (pattern[i] == '\\' && i + 1 < n) {
            char c = pattern[++i];
            if (c == 's' || c == 'S')
                o += sprintf(o, "\\%c{White_Space}", c == 's' ? 'p' : 'P');
            else
                *o++ = '\\', *o++ = c;
        } else
            *o++ = pattern[i];
    }
    *o = '\0';
    return out;
}

static int compile_regex(hyla_tokenizer *t, const char *pattern, const char *field)
{
    int code;
    PCRE2_SIZE at;
    char *rewritten = pattern_for_pcre2(pattern);
    if (!rewritten)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", t->path);
    t->re = pcre2_compile((PCRE2_SPTR)rewritten, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    free(rewritten);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s: invalid regex at offset %zu: %s", t->path, field,
                              (size_t)at, (const char *)msg);
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    free(t->pattern);
    if (!(t->pattern = strdup(pattern)))
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", t->path);
    size_t n = strlen(pattern), keep = sizeof t->re_excerpt - 4;
    snprintf(t->re_excerpt, sizeof t->re_excerpt, "%.*s%s", (int)(n < keep ? n : keep), pattern, n < keep ? "" : "...");
    return HYLA_OK;
}

/* One pre-tokenizer step; *saw_regex is set once a regex split has been configured. */
static int pre_tokenizer_step(hyla_tokenizer *t, const cJSON *p, const char *field, int *saw_byte_level,
                              int *saw_regex)
{
    const cJSON *type = obj_get(p, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (strcmp(ty, "Split") == 0) {
        char f[128];
        snprintf(f, sizeof f, "%s.pattern.Regex", field);
        const cJSON *regex = obj_get(obj_get(p, "pattern"), "Regex");
        const cJSON *behavior = obj_get(p, "behavior");
        if (!cJSON_IsString(regex))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s: missing string (pattern.String not supported)", t->path, f);
        if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated") != 0 || is_false(p, "invert") != 1)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s: only behavior \"Isolated\" with invert false is supported",
                                  t->path, field);
        if (*saw_regex)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s: a second regex split is not supported", t->path, field);
        *saw_regex = 1;
        return compile_regex(t, regex->valuestring, f);
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        if (is_false(p, "add_prefix_space") != 1)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.add_prefix_space must be false (not supported)", t->path, field);
        const cJSON *ur = obj_get(p, "use_regex");
        if (ur && !cJSON_IsBool(ur))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.use_regex must be true or false", t->path, field);
        int use_regex = !ur || cJSON_IsTrue(ur); /* Hugging Face's default is true */
        *saw_byte_level = 1;
        if (!use_regex)
            return HYLA_OK;
        if (*saw_regex)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.use_regex must be false after a Split", t->path, field);
        *saw_regex = 1;
        return compile_regex(t, gpt2_pattern, "ByteLevel GPT-2 pattern");
    }
    return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s.type \"%s\" not supported (Split, ByteLevel, Sequence)", t->path,
                          field, ty);
}

static int parse_pre_tokenizer(hyla_tokenizer *t, const cJSON *root)
{
    const cJSON *pt = obj_get(root, "pre_tokenizer");
    if (!cJSON_IsObject(pt))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: pre_tokenizer: missing (a ByteLevel pre-tokenizer is required)",
                              t->path);
    const cJSON *type = obj_get(pt, "type");
    int saw_byte_level = 0, saw_regex = 0;
    if (cJSON_IsString(type) && strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *list = obj_get(pt, "pretokenizers");
        if (!cJSON_IsArray(list))
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers: missing array", t->path);
        size_t i = 0;
        for (const cJSON *p = list->child; p; p = p->next, i++) {
            char field[64];
            snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%zu]", i);
            HYLA_TRY(pre_tokenizer_step(t, p, field, &saw_byte_level, &saw_regex));
        }
    } else
        HYLA_TRY(pre_tokenizer_step(t, pt, "pre_tokenizer", &saw_byte_level, &saw_regex));
    if (!saw_byte_level)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)",
                              t->path);
    return HYLA_OK;
}

static int check_decoder(const hyla_tokenizer *t, const cJSON *root)
{
    const cJSON *type = obj_get(obj_get(root, "decoder"), "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "ByteLevel") == 0)
        return HYLA_OK;
    return hyla_error_set(HYLA_ERR_FORMAT, "%s: decoder.type must be \"ByteLevel\" (got %s)", t->path,
                          cJSON_IsString(type) ? type->valuestring : "none");
}

/* ---- load: decode table and added-token index ------------------------------------------------- */

static void build_decoded_bytes(hyla_tokenizer *t)
{
    uint32_t b2u[256];
    int16_t u2b[BYTE_LEVEL_CHARS];
    byte_level_table(b2u);
    memset(u2b, 0xFF, sizeof u2b);
    for (int b = 0; b < 256; b++)
        u2b[b2u[b]] = (int16_t)b;
    for (size_t id = 0; id < t->vocab_size; id++) {
        tok_entry *e = &t->tokens[id];
        if (e->kind == TOK_NONE)
            continue;
        const unsigned char *s = (const unsigned char *)t->arena + e->str_off;
        char *dst = t->arena + t->arena_len;
        size_t n = 0, i = 0;
        while (e->kind == TOK_VOCAB && i < e->str_len) { /* one byte per byte-level character */
            uint32_t cp = s[i] < 0x80 ? s[i] : 0x110000;
            if (s[i] >= 0xC0 && s[i] < 0xE0 && i + 1 < e->str_len && (s[i + 1] & 0xC0) == 0x80)
                cp = (uint32_t)(s[i] & 0x1F) << 6 | (s[i + 1] & 0x3F);
            if (cp >= BYTE_LEVEL_CHARS || u2b[cp] < 0)
                break;
            dst[n++] = (char)u2b[cp];
            i += cp < 0x80 ? 1 : 2;
        }
        if (e->kind == TOK_ADDED || i < e->str_len) /* added content, or not byte-level: raw bytes */
            memcpy(dst, s, n = e->str_len);
        e->dec_off = (uint32_t)t->arena_len;
        e->dec_len = (uint32_t)n;
        t->arena_len += n;
    }
}

typedef struct {
    unsigned char first;
    uint32_t len;
    int32_t id;
} added_key;

static int added_key_cmp(const void *pa, const void *pb)
{
    const added_key *a = pa, *b = pb;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    return a->len > b->len ? -1 : a->len < b->len ? 1 : 0;
}

static int build_added_index(hyla_tokenizer *t)
{
    added_key *keys = malloc((t->n_added + 1) * sizeof *keys);
    if (!keys)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot index added tokens", t->path);
    for (size_t i = 0; i < t->n_added; i++) {
        int32_t id = t->added_order[i];
        keys[i] = (added_key){(unsigned char)tok_str(t, id)[0], t->tokens[id].str_len, id};
    }
    qsort(keys, t->n_added, sizeof *keys, added_key_cmp);
    memset(t->added_first, 0, sizeof t->added_first);
    for (size_t i = 0; i < t->n_added; i++) {
        t->added_order[i] = keys[i].id;
        t->added_first[keys[i].first + 1]++;
    }
    for (int b = 0; b < 256; b++)
        t->added_first[b + 1] += t->added_first[b];
    free(keys);
    return HYLA_OK;
}

/* ---- load ------------------------------------------------------------------------------------- */

static int load_from_json(hyla_tokenizer *t, const cJSON *root)
{
    const cJSON *model = obj_get(root, "model");
    if (!cJSON_IsObject(model))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model: missing object", t->path);
    HYLA_TRY(check_model(t, model));
    const cJSON *vocab = obj_get(model, "vocab"), *merges = obj_get(model, "merges");
    const cJSON *added = obj_get(root, "added_tokens");
    if (!cJSON_IsObject(vocab))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.vocab: missing object {token: id}", t->path);
    if (!cJSON_IsArray(merges))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: model.merges: missing array", t->path);
    if (added && !cJSON_IsArray(added))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: added_tokens: must be an array", t->path);
    HYLA_TRY(measure_tokens(t, vocab, added));
    HYLA_TRY(parse_vocab(t, vocab));
    HYLA_TRY(parse_added(t, added));
    HYLA_TRY(find_byte_ids(t));
    HYLA_TRY(parse_merges(t, merges));
    HYLA_TRY(check_normalizer(t, root));
    HYLA_TRY(parse_pre_tokenizer(t, root));
    HYLA_TRY(check_decoder(t, root));
    build_decoded_bytes(t);
    return build_added_index(t);
}

int hyla_tokenizer_load(hyla_tokenizer **out, const char *path)
{
    *out = NULL;
    char *text;
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &text, &len));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t err_at = end ? (size_t)(end - text) : 0;
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return root ? hyla_error_set(HYLA_ERR_FORMAT, "%s: not a JSON object", path)
                    : hyla_error_set(HYLA_ERR_FORMAT, "%s: invalid JSON near byte %zu", path, err_at);
    }
    hyla_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        cJSON_Delete(root);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate tokenizer", path);
    }
    int st = load_from_json(t, root);
    cJSON_Delete(root);
    if (st != HYLA_OK) {
        hyla_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HYLA_OK;
}

void hyla_tokenizer_free(hyla_tokenizer *t)
{
    if (!t)
        return;
    pcre2_code_free(t->re);
    free(t->pattern);
    free(t->merges);
    free(t->vocab.slots);
    free(t->added.slots);
    free(t->added_order);
    free(t->arena);
    free(t->tokens);
    free(t->path);
    free(t);
}

hyla_token_kind hyla_tokenizer_token(const hyla_tokenizer *t, int32_t id, const char **spelling, size_t *len)
{
    if (id < 0 || (size_t)id >= t->vocab_size || t->tokens[id].kind == TOK_NONE) {
        *spelling = "", *len = 0;
        return HYLA_TOKEN_UNUSED;
    }
    const tok_entry *e = &t->tokens[id];
    *spelling = tok_str(t, id), *len = e->str_len;
    return e->kind == TOK_VOCAB ? HYLA_TOKEN_NORMAL : e->special ? HYLA_TOKEN_SPECIAL : HYLA_TOKEN_ADDED;
}

size_t hyla_tokenizer_merge_count(const hyla_tokenizer *t) { return t->n_merges; }

size_t hyla_tokenizer_merges(const hyla_tokenizer *t, int32_t *pairs)
{
    int32_t *by_rank = pairs; /* [2 * n_merges]: left, right per rank; -1 where a repeated pair left a hole */
    for (size_t r = 0; r < 2 * t->n_merges; r++)
        by_rank[r] = -1;
    for (size_t i = 0; i <= t->merge_mask; i++) {
        const merge_slot *m = &t->merges[i];
        if (m->key != MERGE_EMPTY) {
            by_rank[2 * m->rank] = (int32_t)(m->key >> 32);
            by_rank[2 * m->rank + 1] = (int32_t)(uint32_t)m->key;
        }
    }
    size_t n = 0;
    for (size_t r = 0; r < t->n_merges; r++)
        if (by_rank[2 * r] >= 0) {
            pairs[2 * n] = by_rank[2 * r], pairs[2 * n + 1] = by_rank[2 * r + 1];
            n++;
        }
    return n;
}

const char *hyla_tokenizer_pattern(const hyla_tokenizer *t) { return t->pattern; }

size_t hyla_tokenizer_vocab_size(const hyla_tokenizer *t)
{
    return t->vocab_size;
}

int32_t hyla_tokenizer_token_id(const hyla_tokenizer *t, const char *token)
{
    size_t n = strlen(token);
    int32_t id = str_table_find(t, &t->added, token, n);
    return id >= 0 ? id : str_table_find(t, &t->vocab, token, n);
}

/* ---- encode ----------------------------------------------------------------------------------- */

typedef struct {
    uint32_t len;    /* piece length; 0 = empty slot */
    uint32_t n_ids;  /* its ids: out[ids_off .. ids_off + n_ids) */
    size_t text_off; /* its bytes: text[text_off .. text_off + len) */
    size_t ids_off;
    uint64_t hash;
} cache_slot;

/* A candidate merge: rank << 32 | position of its left symbol, so that the smallest key is the
 * lowest rank, leftmost on ties. 8 bytes: on long pieces the heap's memory traffic dominates. */
typedef uint64_t heap_entry;

typedef struct {
    const hyla_tokenizer *t;
    const unsigned char *text;
    int32_t *out;           /* [cap_out] ids so far */
    size_t n_out, cap_out;
    int32_t *sym;           /* [3 * ws_cap] BPE symbols of one piece: id, prev, next */
    heap_entry *heap;       /* [3 * ws_cap] candidate merges */
    size_t ws_cap;
    cache_slot *cache;      /* [cache_mask + 1] piece -> ids already emitted */
    size_t cache_mask, cache_used;
    char *spell;            /* [spell_cap] byte-level spelling of a piece (ignore_merges) */
    size_t spell_cap;
    pcre2_match_data *md;
    pcre2_match_context *mc; /* match, depth and heap limits */
} enc_ctx;

/* Regex limits (a hostile tokenizer.json may carry a pattern that backtracks catastrophically).
 * Every match first runs with a small step limit, enough for any piece of ordinary text. A
 * match that needs more, such as the Qwen pattern over a long whitespace run ("\s*[\r\n]+"
 * backtracks over the run once before "\s+(?!\S)" takes it), is retried with a limit linear in
 * the rest of the run, and those retries share one budget per run, linear in its length. So a
 * run of n bytes costs at most n * SMALL + (1e7 + 128 n) steps: linear, whatever the pattern;
 * a pattern that needs more is an error naming it. Depth and heap limits bound the
 * interpreter's memory (the JIT has its own fixed stack; hitting it falls back to the
 * interpreter under these limits). */
#define REGEX_SMALL_STEPS 100000u
#define REGEX_STEPS_PER_BYTE 64.0
#define REGEX_DEPTH_LIMIT 1000000u
#define REGEX_HEAP_LIMIT_KIB (64u * 1024u)

/* Step limits do not count a lookahead's scan over the subject (".(?=.*z)" costs the rest of
 * the run per match: quadratic in the run), so a clock backstops them: 2 s + 20 us per byte, 40x
 * what the Qwen pattern needs even on a whitespace run (0.5 us/byte here). Only a hostile
 * pattern can reach it, so the clock never decides ordinary tokenization. */
#define REGEX_SECONDS_BASE 2.0
#define REGEX_SECONDS_PER_BYTE 2e-5

static uint32_t regex_limit(double steps) { return steps < UINT32_MAX ? (uint32_t)steps : UINT32_MAX; }

static int out_reserve(enc_ctx *c, size_t extra)
{
    if (c->n_out + extra <= c->cap_out)
        return HYLA_OK;
    size_t cap = c->cap_out ? c->cap_out : 64;
    while (cap < c->n_out + extra)
        cap *= 2;
    int32_t *p = realloc(c->out, cap * sizeof *p);
    if (!p)
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot grow output to %zu ids", cap);
    c->out = p;
    c->cap_out = cap;
    return HYLA_OK;
}

static int out_push(enc_ctx *c, int32_t id)
{
    HYLA_TRY(out_reserve(c, 1));
    c->out[c->n_out++] = id;
    return HYLA_OK;
}

static void heap_push_pair(const hyla_tokenizer *t, heap_entry *h, size_t *n, int32_t pos, int32_t left,
                           int32_t right)
{
    const merge_slot *m = merge_find(t, left, right);
    if (m->key == MERGE_EMPTY)
        return;
    heap_entry e = (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)pos;
    size_t i = (*n)++;
    while (i > 0 && e < h[(i - 1) / 2]) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static heap_entry heap_pop(heap_entry *h, size_t *n)
{
    heap_entry top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n)
            break;
        if (k + 1 < *n && h[k + 1] < h[k])
            k++;
        if (h[k] >= last)
            break;
        h[i] = h[k];
        i = k;
    }
    h[i] = last;
    return top;
}

static int workspace_reserve(enc_ctx *c, size_t n)
{
    if (n <= c->ws_cap)
        return HYLA_OK;
    if (n > INT32_MAX / 4)
        return hyla_error_set(HYLA_ERR_ARG, "tokenizer: pre-token of %zu bytes is too long for BPE", n);
    size_t cap = n < 64 ? 64 : n;
    free(c->sym);
    free(c->heap);
    c->sym = malloc(3 * cap * sizeof *c->sym);
    c->heap = malloc(3 * cap * sizeof *c->heap);
    c->ws_cap = cap;
    if (!c->sym || !c->heap) {
        c->ws_cap = 0;
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot allocate BPE workspace for %zu bytes", n);
    }
    return HYLA_OK;
}

/* BPE-merge the n bytes at p and append the ids. Each merge takes the candidate pair with the
 * lowest rank, leftmost on ties (Hugging Face's order); an entry whose pair has changed since it
 * was pushed is skipped (a merge rank names exactly one pair, so comparing ranks suffices). */
static int bpe(enc_ctx *c, const unsigned char *p, size_t n)
{
    const hyla_tokenizer *t = c->t;
    HYLA_TRY(workspace_reserve(c, n));
    int32_t *id = c->sym, *prev = c->sym + c->ws_cap, *next = c->sym + 2 * c->ws_cap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_ids[p[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        heap_push_pair(t, c->heap, &nh, (int32_t)i, id[i], id[i + 1]);
    while (nh > 0) {
        heap_entry e = heap_pop(c->heap, &nh);
        int32_t pos = (int32_t)(uint32_t)e, r = next[pos];
        if (id[pos] < 0 || r < 0)
            continue; /* stale: the left symbol was merged away (dead symbols hold id -1) or is last */
        const merge_slot *m = merge_find(t, id[pos], id[r]);
        if (m->key == MERGE_EMPTY || (uint32_t)m->rank != (uint32_t)(e >> 32))
            continue; /* stale: the pair at pos changed since this entry was pushed */
        id[pos] = m->merged;
        id[r] = -1;
        next[pos] = next[r];
        if (next[r] >= 0)
            prev[next[r]] = pos;
        if (prev[pos] >= 0)
            heap_push_pair(t, c->heap, &nh, prev[pos], id[prev[pos]], id[pos]);
        if (next[pos] >= 0)
            heap_push_pair(t, c->heap, &nh, pos, id[pos], id[next[pos]]);
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        HYLA_TRY(out_push(c, id[i]));
    return HYLA_OK;
}

static cache_slot *cache_find(enc_ctx *c, uint64_t h, size_t off, size_t n)
{
    for (size_t i = (size_t)h & c->cache_mask;; i = (i + 1) & c->cache_mask) {
        cache_slot *s = &c->cache[i];
        if (s->len == 0 || (s->hash == h && s->len == n && memcmp(c->text + s->text_off, c->text + off, n) == 0))
            return s;
    }
}

static int cache_grow(enc_ctx *c)
{
    size_t cap = c->cache ? 2 * (c->cache_mask + 1) : 1024;
    cache_slot *old = c->cache;
    size_t old_cap = old ? c->cache_mask + 1 : 0;
    c->cache = calloc(cap, sizeof *c->cache);
    if (!c->cache) {
        c->cache = old;
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot grow piece cache to %zu entries", cap);
    }
    c->cache_mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].len)
            *cache_find(c, old[i].hash, old[i].text_off, old[i].len) = old[i];
    free(old);
    return HYLA_OK;
}

static int spelling_lookup(enc_ctx *c, const unsigned char *p, size_t n, int32_t *id)
{
    if (2 * n > c->spell_cap) {
        char *s = realloc(c->spell, 2 * n);
        if (!s)
            return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: cannot allocate %zu bytes", 2 * n);
        c->spell = s;
        c->spell_cap = 2 * n;
    }
    uint32_t b2u[256];
    byte_level_table(b2u);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += utf8_put(c->spell + k, b2u[p[i]]);
    *id = str_table_find(c->t, &c->t->vocab, c->spell, k);
    return HYLA_OK;
}

/* Encode one pre-token piece text[off .. off + n), through the per-call cache. */
static int encode_piece(enc_ctx *c, size_t off, size_t n)
{
    if (n == 1)
        return out_push(c, c->t->byte_ids[c->text[off]]);
    cache_slot *slot = NULL;
    uint64_t h = 0;
    if (n <= CACHE_MAX_PIECE) {
        h = hash_bytes(c->text + off, n);
        if (!c->cache)
            HYLA_TRY(cache_grow(c));
        slot = cache_find(c, h, off, n);
        if (slot->len) {
            HYLA_TRY(out_reserve(c, slot->n_ids));
            memcpy(c->out + c->n_out, c->out + slot->ids_off, slot->n_ids * sizeof *c->out);
            c->n_out += slot->n_ids;
            return HYLA_OK;
        }
    }
    size_t before = c->n_out;
    int32_t whole = -1;
    if (c->t->ignore_merges)
        HYLA_TRY(spelling_lookup(c, c->text + off, n, &whole));
    HYLA_TRY(whole >= 0 ? out_push(c, whole) : bpe(c, c->text + off, n));
    if (slot && c->cache_used < CACHE_MAX_ENTRIES) {
        *slot = (cache_slot){(uint32_t)n, (uint32_t)(c->n_out - before), off, before, h};
        if (++c->cache_used * 2 > c->cache_mask + 1)
            HYLA_TRY(cache_grow(c));
    }
    return HYLA_OK;
}

/* Pre-tokenize the valid UTF-8 run text[s .. e) with the regex ("Isolated": matches and the
 * gaps between them are pieces; empty matches yield nothing) and encode each piece. */
static int encode_run(enc_ctx *c, size_t s, size_t e)
{
    const hyla_tokenizer *t = c->t;
    if (!t->re)
        return encode_piece(c, s, e - s);
    const unsigned char *subj = c->text + s;
    size_t n = e - s, start = 0, last = 0;
    double retry_budget = 1e7 + 2 * REGEX_STEPS_PER_BYTE * (double)n;
    double t0 = hyla_now(), deadline = REGEX_SECONDS_BASE + REGEX_SECONDS_PER_BYTE * (double)n;
    for (size_t calls = 1; start < n; calls++) {
        if (calls % 256 == 0 && hyla_now() - t0 > deadline)
            return hyla_error_set(HYLA_ERR_ARG, "%s: pre-tokenizer regex '%s' takes over %.0f s for a %zu-byte run (input "
                                  "byte %zu); a pattern this slow is refused", t->path, t->re_excerpt, deadline, n, s + start);
        pcre2_set_match_limit(c->mc, REGEX_SMALL_STEPS);
        int rc = pcre2_match(t->re, subj, n, start, PCRE2_NO_UTF_CHECK, c->md, c->mc);
        if (rc == PCRE2_ERROR_MATCHLIMIT) {
            double big = REGEX_SMALL_STEPS + REGEX_STEPS_PER_BYTE * (double)(n - start);
            if (big > retry_budget)
                return hyla_error_set(HYLA_ERR_ARG, "%s: pre-tokenizer regex '%s' exceeds its backtracking budget at input "
                                      "byte %zu (a pattern this slow is refused)", t->path, t->re_excerpt, s + start);
            retry_budget -= big;
            pcre2_set_match_limit(c->mc, regex_limit(big));
            rc = pcre2_match(t->re, subj, n, start, PCRE2_NO_UTF_CHECK, c->md, c->mc);
        }
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(t->re, subj, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->md, c->mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        if (rc < 0 || ov[0] < last || ov[1] < ov[0]) {
            PCRE2_UCHAR msg[256] = "match outside the subject";
            if (rc < 0)
                pcre2_get_error_message(rc, msg, sizeof msg);
            return hyla_error_set(HYLA_ERR_ARG, "%s: pre-tokenizer regex '%s' failed at input byte %zu: %s", t->path,
                                  t->re_excerpt, s + start, (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (ms > last)
            HYLA_TRY(encode_piece(c, s + last, ms - last));
        if (me > ms) {
            HYLA_TRY(encode_piece(c, s + ms, me - ms));
            last = start = me;
        } else {
            last = ms;
            start = ms < n ? ms + utf8_char_len(subj + ms, n - ms) : n;
        }
    }
    return last < n ? encode_piece(c, s + last, n - last) : HYLA_OK;
}

/* Encode text[s .. e), which holds no added token: valid UTF-8 runs go through the regex, each
 * byte that starts no well-formed sequence is a piece of its own. */
static int encode_span(enc_ctx *c, size_t s, size_t e)
{
    size_t i = s;
    while (i < e) {
        size_t run = i, k;
        while (run < e && (k = utf8_char_len(c->text + run, e - run)) > 0)
            run += k;
        if (run > i)
            HYLA_TRY(encode_run(c, i, run));
        if (run < e)
            HYLA_TRY(encode_piece(c, run, 1));
        i = run < e ? run + 1 : e;
    }
    return HYLA_OK;
}

/* Leftmost, then longest, added token in text[pos .. len); *at = len if none. */
static void find_added(const hyla_tokenizer *t, const unsigned char *text, size_t pos, size_t len, size_t *at,
                       int32_t *id)
{
    for (size_t i = pos; i < len; i++) {
        for (uint32_t k = t->added_first[text[i]]; k < t->added_first[text[i] + 1]; k++) {
            const tok_entry *e = &t->tokens[t->added_order[k]];
            if (e->str_len <= len - i && memcmp(text + i, t->arena + e->str_off, e->str_len) == 0) {
                *at = i;
                *id = t->added_order[k];
                return;
            }
        }
    }
    *at = len;
    *id = -1;
}

/* The input cut at added tokens: span k is [start, end) of the (normalised) text, then token id
 * (-1 after the last span). */
typedef struct {
    size_t end;
    int32_t id;
} span;

typedef struct {
    unsigned char *text; /* normalised copy (NULL: the input itself) */
    size_t len, cap;
    span *spans;
    size_t n_spans, cap_spans;
} split_text;

static int put_bytes(split_text *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        size_t cap = 2 * (o->len + n) + 16;
        unsigned char *q = realloc(o->text, cap);
        if (!q)
            return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: out of memory normalising the input");
        o->text = q, o->cap = cap;
    }
    memcpy(o->text + o->len, p, n);
    o->len += n;
    return HYLA_OK;
}

/* NFC-normalise text[s, e) (no added token inside) into o: each valid UTF-8 run through utf8proc,
 * bytes that start no well-formed sequence unchanged (they stay pieces of their own). */
static int put_nfc(split_text *o, const unsigned char *text, size_t s, size_t e)
{
    size_t i = s;
    while (i < e) {
        size_t run = i, k;
        while (run < e && (k = utf8_char_len(text + run, e - run)) > 0)
            run += k;
        if (run > i) {
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t n = utf8proc_map(text + i, (utf8proc_ssize_t)(run - i), &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            int st = n < 0 ? hyla_error_set(HYLA_ERR_ARG, "tokenizer: NFC normalisation failed: %s", utf8proc_errmsg(n))
                           : put_bytes(o, nfc, (size_t)n);
            free(nfc);
            HYLA_TRY(st);
        }
        if (run < e)
            HYLA_TRY(put_bytes(o, text + run, 1));
        i = run < e ? run + 1 : e;
    }
    return HYLA_OK;
}

static int push_span(split_text *o, size_t end, int32_t id)
{
    if (o->n_spans == o->cap_spans) {
        size_t cap = 2 * o->cap_spans + 8;
        span *p = realloc(o->spans, cap * sizeof *p);
        if (!p)
            return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer: out of memory");
        o->spans = p, o->cap_spans = cap;
    }
    o->spans[o->n_spans++] = (span){end, id};
    return HYLA_OK;
}

/* Added tokens are matched in the raw input (as Hugging Face does for normalized: false tokens);
 * with an NFC normalizer the text between them is normalised. */
static int split_input(const hyla_tokenizer *t, const unsigned char *text, size_t len, split_text *o)
{
    for (size_t pos = 0; pos < len;) {
        size_t at;
        int32_t id;
        find_added(t, text, pos, len, &at, &id);
        if (t->nfc) {
            HYLA_TRY(put_nfc(o, text, pos, at));
            HYLA_TRY(push_span(o, o->len, id));
            if (id >= 0)
                HYLA_TRY(put_bytes(o, text + at, t->tokens[id].str_len));
        } else
            HYLA_TRY(push_span(o, at, id));
        pos = id >= 0 ? at + t->tokens[id].str_len : len;
    }
    return HYLA_OK;
}

int hyla_tokenizer_encode(const hyla_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!text && len > 0)
        return hyla_error_set(HYLA_ERR_ARG, "tokenizer encode: NULL text with length %zu", len);
    split_text parts = {0};
    int st = split_input(t, (const unsigned char *)text, len, &parts);
    enc_ctx c = {.t = t, .text = t->nfc ? parts.text : (const unsigned char *)text};
    if (st == HYLA_OK)
        st = out_reserve(&c, len / 4 + 16);
    if (st == HYLA_OK && t->re &&
        (!(c.md = pcre2_match_data_create_from_pattern(t->re, NULL)) || !(c.mc = pcre2_match_context_create(NULL))))
        st = hyla_error_set(HYLA_ERR_NOMEM, "tokenizer encode: cannot allocate match data");
    if (st == HYLA_OK && c.mc) {
        pcre2_set_depth_limit(c.mc, REGEX_DEPTH_LIMIT);
        pcre2_set_heap_limit(c.mc, REGEX_HEAP_LIMIT_KIB);
    }
    size_t pos = 0;
    for (size_t k = 0; st == HYLA_OK && k < parts.n_spans; k++) {
        const span *sp = &parts.spans[k];
        st = encode_span(&c, pos, sp->end);
        if (st == HYLA_OK && sp->id >= 0)
            st = out_push(&c, sp->id);
        pos = sp->end + (sp->id >= 0 ? t->tokens[sp->id].str_len : 0);
    }
    pcre2_match_data_free(c.md);
    pcre2_match_context_free(c.mc);
    free(c.sym);
    free(c.heap);
    free(c.cache);
    free(c.spell);
    free(parts.text);
    free(parts.spans);
    if (st != HYLA_OK) {
        free(c.out);
        return st;
    }
    *ids = c.out;
    *n_ids = c.n_out;
    return HYLA_OK;
}

/* ---- decode ----------------------------------------------------------------------------------- */

int hyla_tokenizer_decode(const hyla_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    if (!ids && n > 0)
        return hyla_error_set(HYLA_ERR_ARG, "tokenizer decode: NULL ids with count %zu", n);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->vocab_size)
            return hyla_error_set(HYLA_ERR_ARG, "%s: decode: id %d (index %zu) out of range [0, %zu)", t->path, id,
                                  i, t->vocab_size);
        if (t->tokens[id].kind == TOK_NONE)
            return hyla_error_set(HYLA_ERR_ARG, "%s: decode: id %d (index %zu) has no token", t->path, id, i);
        total += t->tokens[id].dec_len;
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return hyla_error_set(HYLA_ERR_NOMEM, "tokenizer decode: cannot allocate %zu bytes", total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const tok_entry *e = &t->tokens[ids[i]];
        memcpy(buf + k, t->arena + e->dec_off, e->dec_len);
        k += e->dec_len;
    }
    buf[k] = '\0';
    *text = buf;
    *len = k;
    return HYLA_OK;
}
