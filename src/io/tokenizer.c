/* Byte-level BPE tokenizer: loading a tokenizer.json (tokenizer.h documents the supported shape
 * and the encoding rules; io/tokenizer_impl.h the loaded layout; io/tokenizer_encode.c encodes
 * and decodes). Encoding allocates only per call (output, BPE workspace, a piece cache), so a
 * tokenizer can be shared by threads. */
#include "io/tokenizer_impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <utf8proc.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/gguf_read.h"

/* The GPT-2 pattern that a ByteLevel pre-tokenizer with use_regex=true applies. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- small helpers ---------------------------------------------------------------------------- */



static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
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

int hyla_tokenizer_from_json(hyla_tokenizer **out, const cJSON *root, const char *origin)
{
    *out = NULL;
    if (!cJSON_IsObject(root))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: not a JSON object", origin);
    hyla_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(origin))) {
        free(t);
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot allocate tokenizer", origin);
    }
    int st = load_from_json(t, root);
    if (st != HYLA_OK) {
        hyla_tokenizer_free(t);
        return st;
    }
    *out = t;
    return HYLA_OK;
}

int hyla_tokenizer_load(hyla_tokenizer **out, const char *path)
{
    *out = NULL;
    if (hyla_is_gguf_path(path)) /* a GGUF model's vocabulary (tokenizer.ggml.*) */
        return hyla_tokenizer_load_gguf(out, path);
    char *text;
    size_t len;
    HYLA_TRY(hyla_read_text_file(path, &text, &len));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t err_at = end ? (size_t)(end - text) : 0;
    free(text);
    if (!root)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: invalid JSON near byte %zu", path, err_at);
    int st = hyla_tokenizer_from_json(out, root, path);
    cJSON_Delete(root);
    return st;
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
