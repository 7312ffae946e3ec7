/* A GGUF file's vocabulary as a tokenizer (tokenizer.h, hyla_tokenizer_from_gguf): the
 * tokenizer.json it stands for, built from tokenizer.ggml.* and loaded by the same checks.
 *
 *   tokenizer.ggml.model   must be "gpt2" (byte-level BPE, what llama.cpp's converter writes for
 *                          Qwen); anything else is refused naming it.
 *   tokenizer.ggml.tokens  id -> spelling. Types (tokenizer.ggml.token_type, llama_token_type):
 *                          NORMAL 1, UNKNOWN 2 and BYTE 6 are model.vocab entries; CONTROL 3 an
 *                          added special token; USER_DEFINED 4 an added token; UNUSED 5 (the
 *                          converter's [PADn] fillers) no token.
 *   tokenizer.ggml.merges  "left right" strings in rank order.
 *   tokenizer.ggml.pre     the pre-tokenizer by llama.cpp's name: "qwen2", "qwen35" and "gpt-2",
 *                          each the split regex of the Hugging Face tokenizer it was made from,
 *                          then ByteLevel; Qwen's tokenizers normalise NFC, so the two Qwen names
 *                          do too (as transformers does for the source model).
 * The same tree is what hyla_tokenizer_files_from_gguf writes as tokenizer.json, beside a
 * tokenizer_config.json of the file's special tokens and chat template: a model trained from a
 * GGUF file saves as a complete Hugging Face directory. */
#include "io/tokenizer_impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/gguf_read.h"

/* llama.cpp's name, the split regex, NFC or not, the Hugging Face tokenizer class */
static const struct { const char *pre, *pattern; int nfc; const char *hf_class; } known_pre[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 1, "Qwen2Tokenizer"},
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 1, "Qwen2Tokenizer"},
    {"gpt-2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", 0,
     "GPT2Tokenizer"},
};

const char *hyla_tokenizer_pre_name(const char *pattern)
{
    for (size_t i = 0; pattern && i < sizeof known_pre / sizeof *known_pre; i++)
        if (!strcmp(pattern, known_pre[i].pattern))
            return known_pre[i].pre;
    return NULL;
}

/* A NUL-terminated copy of a GGUF string (NULL when it holds a NUL byte or memory runs out). */
static char *cstr(const char *s, size_t n)
{
    if (memchr(s, 0, n))
        return NULL;
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = '\0';
    }
    return c;
}

static int add_tokens(cJSON *vocab, cJSON *added, const hyla_gguf_file *f, const hyla_gguf_kv *tokens,
                      const hyla_gguf_kv *types)
{
    const char *path = hyla_gguf_path(f);
    for (uint64_t id = 0; id < tokens->count; id++) {
        size_t n;
        const char *s = hyla_gguf_arr_str(tokens, id, &n);
        int64_t type = types ? hyla_gguf_arr_int(types, id) : 1;
        if (type == 5)
            continue;
        char *c = s ? cstr(s, n) : NULL;
        if (!c)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%llu] holds a NUL byte (or memory ran out)",
                                  path, (unsigned long long)id);
        int ok;
        if (type == 3 || type == 4) {
            cJSON *a = cJSON_CreateObject();
            ok = a && cJSON_AddItemToArray(added, a) && cJSON_AddNumberToObject(a, "id", (double)id) &&
                 cJSON_AddStringToObject(a, "content", c) && cJSON_AddBoolToObject(a, "single_word", 0) &&
                 cJSON_AddBoolToObject(a, "lstrip", 0) && cJSON_AddBoolToObject(a, "rstrip", 0) &&
                 cJSON_AddBoolToObject(a, "normalized", 0) && cJSON_AddBoolToObject(a, "special", type == 3);
        } else if (type == 1 || type == 2 || type == 6) {
            /* a spelling given twice is refused by the tokenizer's own hash table (hyla_tokenizer_from_json:
             * "model.vocab: token '...' listed twice"); cJSON's object lookup is a linear scan, and
             * asking it here for each of 248K tokens took 24 s of a model's load */
            ok = cJSON_AddNumberToObject(vocab, c, (double)id) != NULL;
        } else {
            free(c);
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%llu] is %lld (1..6)", path,
                                  (unsigned long long)id, (long long)type);
        }
        free(c);
        if (!ok)
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory for the vocabulary", path);
    }
    return HYLA_OK;
}

/* *pre_out (when not NULL): the file's known_pre entry */
static int build_json(cJSON *root, const hyla_gguf_file *f, int *pre_out)
{
    const char *path = hyla_gguf_path(f), *s;
    size_t n;
    HYLA_TRY(hyla_gguf_get_str(f, "tokenizer.ggml.model", 1, &s, &n));
    if (n != 4 || memcmp(s, "gpt2", 4))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.model is \"%.*s\"; hyla reads \"gpt2\" (byte-level "
                              "BPE)", path, (int)(n < 64 ? n : 64), s);
    HYLA_TRY(hyla_gguf_get_str(f, "tokenizer.ggml.pre", 1, &s, &n));
    int pre = -1;
    for (int i = 0; i < (int)(sizeof known_pre / sizeof *known_pre); i++)
        if (n == strlen(known_pre[i].pre) && !memcmp(s, known_pre[i].pre, n))
            pre = i;
    if (pre < 0)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.pre \"%.*s\" is not one hyla knows (qwen2, qwen35, "
                              "gpt-2)", path, (int)(n < 64 ? n : 64), s);
    const hyla_gguf_kv *tokens = hyla_gguf_find_kv(f, "tokenizer.ggml.tokens");
    const hyla_gguf_kv *types = hyla_gguf_find_kv(f, "tokenizer.ggml.token_type");
    const hyla_gguf_kv *merges = hyla_gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!tokens || tokens->type != HYLA_GGUF_ARRAY || tokens->elem_type != HYLA_GGUF_STRING)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.tokens: missing, or not an array of strings", path);
    if (!merges || merges->type != HYLA_GGUF_ARRAY || merges->elem_type != HYLA_GGUF_STRING)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.merges: missing, or not an array of strings", path);
    if (types && (types->type != HYLA_GGUF_ARRAY || types->elem_type == HYLA_GGUF_STRING || types->count != tokens->count))
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.token_type must be %llu integers", path,
                              (unsigned long long)tokens->count);
    /* the Hugging Face tokenizer.json a Qwen model ships, key for key and in its order (the
     * tokenizers library reads it back: tests/gguf/conformance.py); every object is attached to
     * root as soon as it exists, so deleting root frees all of them */
    cJSON *added = NULL, *norm = NULL, *seq = NULL, *post = NULL, *dec = NULL, *model = NULL, *vocab = NULL;
    cJSON *mlist = NULL;
    int ok = cJSON_AddStringToObject(root, "version", "1.0") && cJSON_AddNullToObject(root, "truncation") &&
             cJSON_AddNullToObject(root, "padding") && (added = cJSON_AddArrayToObject(root, "added_tokens"));
    if (ok && known_pre[pre].nfc)
        ok = (norm = cJSON_AddObjectToObject(root, "normalizer")) && cJSON_AddStringToObject(norm, "type", "NFC");
    else if (ok)
        ok = cJSON_AddNullToObject(root, "normalizer") != NULL;
    ok = ok && (seq = cJSON_AddObjectToObject(root, "pre_tokenizer")) &&
         (post = cJSON_AddObjectToObject(root, "post_processor")) && (dec = cJSON_AddObjectToObject(root, "decoder")) &&
         (model = cJSON_AddObjectToObject(root, "model")) && cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *steps = ok ? cJSON_AddArrayToObject(seq, "pretokenizers") : NULL;
    cJSON *split = steps && cJSON_AddItemToArray(steps, cJSON_CreateObject()) ? cJSON_GetArrayItem(steps, 0) : NULL;
    cJSON *bl = split && cJSON_AddItemToArray(steps, cJSON_CreateObject()) ? cJSON_GetArrayItem(steps, 1) : NULL;
    cJSON *pat = split && cJSON_AddStringToObject(split, "type", "Split") ? cJSON_AddObjectToObject(split, "pattern")
                                                                          : NULL;
    ok = bl && pat && cJSON_AddStringToObject(pat, "Regex", known_pre[pre].pattern) &&
         cJSON_AddStringToObject(split, "behavior", "Isolated") && cJSON_AddBoolToObject(split, "invert", 0);
    cJSON *byte_level[3] = {bl, post, dec}; /* the pre-tokenizer's step, the post-processor, the decoder */
    for (int i = 0; ok && i < 3; i++)
        ok = cJSON_AddStringToObject(byte_level[i], "type", "ByteLevel") &&
             cJSON_AddBoolToObject(byte_level[i], "add_prefix_space", 0) &&
             cJSON_AddBoolToObject(byte_level[i], "trim_offsets", 0) &&
             cJSON_AddBoolToObject(byte_level[i], "use_regex", 0);
    ok = ok && cJSON_AddStringToObject(model, "type", "BPE") && cJSON_AddNullToObject(model, "dropout") &&
         cJSON_AddNullToObject(model, "unk_token") && cJSON_AddStringToObject(model, "continuing_subword_prefix", "") &&
         cJSON_AddStringToObject(model, "end_of_word_suffix", "") && cJSON_AddBoolToObject(model, "fuse_unk", 0) &&
         cJSON_AddBoolToObject(model, "byte_fallback", 0) && cJSON_AddBoolToObject(model, "ignore_merges", 0) &&
         (vocab = cJSON_AddObjectToObject(model, "vocab")) && (mlist = cJSON_AddArrayToObject(model, "merges"));
    if (!ok)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    if (pre_out)
        *pre_out = pre;
    HYLA_TRY(add_tokens(vocab, added, f, tokens, types));
    for (uint64_t i = 0; i < merges->count; i++) {
        const char *m = hyla_gguf_arr_str(merges, i, &n);
        char *c = cstr(m, n);
        ok = c && cJSON_AddItemToArray(mlist, cJSON_CreateString(c));
        free(c);
        if (!ok)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] holds a NUL byte (or memory ran out)",
                                  path, (unsigned long long)i);
    }
    return HYLA_OK;
}

int hyla_tokenizer_from_gguf(hyla_tokenizer **out, const struct hyla_gguf_file *f)
{
    *out = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", hyla_gguf_path(f));
    int st = build_json(root, f, NULL);
    if (st == HYLA_OK) {
        char origin[4200];
        snprintf(origin, sizeof origin, "%s (tokenizer.ggml.*)", hyla_gguf_path(f));
        st = hyla_tokenizer_from_json(out, root, origin);
    }
    cJSON_Delete(root);
    return st;
}

int hyla_tokenizer_load_gguf(hyla_tokenizer **out, const char *path)
{
    *out = NULL;
    hyla_gguf_file *f;
    HYLA_TRY(hyla_gguf_open(&f, path));
    int st = hyla_tokenizer_from_gguf(out, f);
    hyla_gguf_close(f);
    return st;
}

/* tokenizer_config.json: the special tokens by spelling (tokenizer.ggml.*_token_id), add_bos /
 * add_eos, the chat template (tokenizer.chat_template), the tokenizer class. The inverse of what
 * the GGUF export reads from a directory (model/gguf_export.c). tokens: checked by build_json. */
static int build_config(cJSON *cfg, const hyla_gguf_file *f, int pre)
{
    const char *path = hyla_gguf_path(f), *s;
    const hyla_gguf_kv *tokens = hyla_gguf_find_kv(f, "tokenizer.ggml.tokens");
    static const struct { const char *key, *field; } ids[] = {
        {"tokenizer.ggml.bos_token_id", "bos_token"}, {"tokenizer.ggml.eos_token_id", "eos_token"},
        {"tokenizer.ggml.unknown_token_id", "unk_token"}, {"tokenizer.ggml.seperator_token_id", "sep_token"},
        {"tokenizer.ggml.padding_token_id", "pad_token"}};
    static const struct { const char *key, *field; } adds[] = {{"tokenizer.ggml.add_bos_token", "add_bos_token"},
                                                               {"tokenizer.ggml.add_eos_token", "add_eos_token"}};
    for (size_t i = 0; i < sizeof adds / sizeof *adds; i++) {
        int b = -1;
        HYLA_TRY(hyla_gguf_get_bool(f, adds[i].key, 0, &b));
        if (b >= 0 && !cJSON_AddBoolToObject(cfg, adds[i].field, b))
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        int64_t id;
        size_t n;
        if (!hyla_gguf_find_kv(f, ids[i].key))
            continue;
        HYLA_TRY(hyla_gguf_get_int(f, ids[i].key, 1, &id));
        if (id < 0 || (uint64_t)id >= tokens->count)
            return hyla_error_set(HYLA_ERR_FORMAT, "%s: %s is %lld, not one of the %llu tokens", path, ids[i].key,
                                  (long long)id, (unsigned long long)tokens->count);
        const char *spelling = hyla_gguf_arr_str(tokens, (uint64_t)id, &n);
        char *c = cstr(spelling, n);
        int ok = c && cJSON_AddStringToObject(cfg, ids[i].field, c);
        free(c);
        if (!ok)
            return hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = 0;
    s = NULL;
    HYLA_TRY(hyla_gguf_get_str(f, "tokenizer.chat_template", 0, &s, &n));
    char *tmpl = s ? cstr(s, n) : NULL;
    if (s && !tmpl)
        return hyla_error_set(HYLA_ERR_FORMAT, "%s: tokenizer.chat_template holds a NUL byte", path);
    int ok = (!tmpl || cJSON_AddStringToObject(cfg, "chat_template", tmpl)) &&
             cJSON_AddStringToObject(cfg, "tokenizer_class", known_pre[pre].hf_class);
    free(tmpl);
    return ok ? HYLA_OK : hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", path);
}

/* root printed into dir/name on one line (a 248K-token vocabulary is megabytes), atomically */
static int write_json(const cJSON *root, const char *dir, const char *name)
{
    char path[4200];
    HYLA_TRY(hyla_path_join(path, sizeof path, dir, name));
    return hyla_write_json_atomic(path, root, 0);
}

/* The two files' trees (tokenizer.json, tokenizer_config.json) of f's vocabulary. */
static int build_files(cJSON **root, cJSON **cfg, const hyla_gguf_file *f)
{
    int pre;
    *root = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
    int st = *root && *cfg ? build_json(*root, f, &pre)
                           : hyla_error_set(HYLA_ERR_NOMEM, "%s: out of memory", hyla_gguf_path(f));
    if (st == HYLA_OK)
        st = build_config(*cfg, f, pre);
    if (st != HYLA_OK) {
        cJSON_Delete(*root);
        cJSON_Delete(*cfg);
        *root = *cfg = NULL;
    }
    return st;
}

/* A file without a vocabulary (no tokenizer.ggml.tokens) has none to carry. */
static int has_vocabulary(const hyla_gguf_file *f) { return hyla_gguf_find_kv(f, "tokenizer.ggml.tokens") != NULL; }

int hyla_tokenizer_gguf_check(const struct hyla_gguf_file *f)
{
    cJSON *root, *cfg;
    if (!has_vocabulary(f))
        return HYLA_OK;
    HYLA_TRY(build_files(&root, &cfg, f));
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return HYLA_OK;
}

int hyla_tokenizer_gguf_write_files(const struct hyla_gguf_file *f, const char *dir)
{
    cJSON *root, *cfg;
    if (!has_vocabulary(f))
        return HYLA_OK;
    HYLA_TRY(build_files(&root, &cfg, f));
    int st = write_json(root, dir, "tokenizer.json");
    if (st == HYLA_OK)
        st = write_json(cfg, dir, "tokenizer_config.json");
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}

int hyla_tokenizer_files_from_gguf(const char *dir, const char *gguf_path)
{
    hyla_gguf_file *f;
    HYLA_TRY(hyla_gguf_open(&f, gguf_path));
    int st = hyla_tokenizer_gguf_write_files(f, dir);
    hyla_gguf_close(f);
    return st;
}
