#include "model/gguf_export.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"
#include "io/tokenizer.h"
#include "model/gguf_mix.h"

/* ---- tensors: the map's tensors (model/gguf_map.h), each given a type and its source data ------- */

typedef struct {
    const hyla_model *m;
    hyla_ggml_type want;
    int k_m;               /* llama.cpp's _M mix over want */
    hyla_gguf_map map;
    hyla_ggml_type *type;  /* [map.n] */
    const float **src, **src2; /* [map.n] the parameters' fp32 data */
    size_t n_fallback;
    float *scratch;
} exporter;

int hyla_gguf_export_types(const hyla_gguf_map *map, const hyla_config *cfg, hyla_ggml_type want, int k_m,
                           hyla_ggml_type *types, size_t *n_fallback)
{
    size_t n = map->n;
    *n_fallback = 0;
    for (size_t i = 0; i < n; i++)
        types[i] = map->t[i].keep_f32 ? HYLA_GGML_F32 : want;
    if ((k_m || want == HYLA_GGML_Q6_K) && hyla_gguf_k_m_types(map, cfg, want, k_m, types))
        return hyla_error_set(HYLA_ERR_NOMEM, "gguf export: out of memory");
    for (size_t i = 0; i < n; i++) {
        const hyla_gguf_map_tensor *t = &map->t[i];
        int k45 = types[i] == HYLA_GGML_Q4_K || types[i] == HYLA_GGML_Q5_K;
        if ((k45 || types[i] == HYLA_GGML_Q3_K || types[i] == HYLA_GGML_Q2_K) && t->ne[0] % HYLA_QK_K)
            return hyla_error_set(HYLA_ERR_ARG, "gguf export: %s has rows of %lld values, not whole 256-value blocks: "
                                  "llama.cpp falls back to %s there, which hyla does not write", t->name,
                                  (long long)t->ne[0], k45 ? "Q5_0 / Q5_1" : "IQ4_NL");
        if (types[i] == HYLA_GGML_Q6_K && t->ne[0] % HYLA_QK_K) { /* llama.cpp's fallback for Q6_K */
            types[i] = HYLA_GGML_Q8_0;
            (*n_fallback)++;
        }
        if (types[i] == HYLA_GGML_Q8_0 && t->ne[0] % HYLA_Q8_0_BLOCK) {
            types[i] = HYLA_GGML_F16;
            *n_fallback += want == HYLA_GGML_Q8_0;
        }
    }
    return HYLA_OK;
}

static int collect_tensors(exporter *e)
{
    HYLA_TRY(hyla_gguf_map_build(&e->map, &e->m->cfg));
    size_t n = e->map.n;
    e->type = malloc((n + 1) * sizeof *e->type);
    e->src = malloc((n + 1) * sizeof *e->src);
    e->src2 = malloc((n + 1) * sizeof *e->src2);
    if (!e->type || !e->src || !e->src2)
        return hyla_error_set(HYLA_ERR_NOMEM, "gguf export: out of memory");
    for (size_t i = 0; i < n; i++) {
        const hyla_gguf_map_tensor *t = &e->map.t[i];
        e->src[i] = hyla_model_param(e->m, t->role, t->layer);
        e->src2[i] = hyla_model_param(e->m, t->role2, t->layer);
        if (!e->src[i] || !e->src2[i])
            return hyla_error_set(HYLA_ERR_ARG, "gguf export: the model has no parameter for %s", t->name);
    }
    return hyla_gguf_export_types(&e->map, &e->m->cfg, e->want, e->k_m, e->type, &e->n_fallback);
}

static int fill_tensor(void *ctx, size_t index, void *dst, size_t nbytes)
{
    exporter *e = ctx;
    const hyla_gguf_map_tensor *t = &e->map.t[index];
    int64_t C = t->ne[0];
    float *out = e->scratch;
    for (int64_t r = 0; r < t->rows; r++) {
        int64_t row = t->row_map ? t->row_map[r] : t->row0 + r;
        const float *src = row >= 0 ? e->src[index] + row * C : e->src2[index] + (-1 - row) * C;
        float *o = out + r * C;
        for (int64_t j = 0; j < C; j++) {
            float x = src[t->col_map ? t->col_map[j] : j];
            o[j] = t->op == HYLA_GGUF_PLUS_ONE ? x + 1.0f : t->op == HYLA_GGUF_NEG_EXP ? -expf(x) : x;
        }
    }
    hyla_ggml_from_f32(e->type[index], dst, out, (size_t)(t->rows * C));
    (void)nbytes;
    return HYLA_OK;
}

/* ---- metadata ---------------------------------------------------------------------------------- */

uint32_t hyla_gguf_file_type(hyla_ggml_type t, int k_m)
{
    if (k_m) /* llama_ftype MOSTLY_Q4_K_M 15, MOSTLY_Q5_K_M 17, MOSTLY_Q3_K_M 12, MOSTLY_Q2_K 10 */
        return t == HYLA_GGML_Q4_K ? 15 : t == HYLA_GGML_Q5_K ? 17 : t == HYLA_GGML_Q3_K ? 12 : 10;
    /* llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_Q4_K_S 14, MOSTLY_Q5_K_S 16, MOSTLY_Q6_K 18,
     * MOSTLY_BF16 32 (plain q4_k / q5_k: every matrix that type, the _S presets' nearest name) */
    return t == HYLA_GGML_F16 ? 1 : t == HYLA_GGML_Q8_0 ? 7 : t == HYLA_GGML_Q4_K ? 14 : t == HYLA_GGML_Q5_K ? 16
         : t == HYLA_GGML_Q6_K ? 18 : t == HYLA_GGML_BF16 ? 32 : 0;
}

/* rope_parameters / rope_scaling mrope_section of the (text_)config, else Qwen3.5's [11, 11, 10]. */
static void mrope_sections(const char *config_json, int32_t out[4])
{
    static const int32_t dflt[4] = {11, 11, 10, 0};
    memcpy(out, dflt, sizeof dflt);
    cJSON *root = cJSON_Parse(config_json);
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    obj = cJSON_IsObject(obj) ? obj : root;
    const char *keys[2] = {"rope_parameters", "rope_scaling"};
    for (int k = 0; k < 2; k++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, keys[k]), "mrope_section");
        if (cJSON_IsArray(s) && cJSON_GetArraySize(s) <= 4) {
            int i = 0;
            int32_t v[4] = {0, 0, 0, 0};
            const cJSON *it;
            cJSON_ArrayForEach(it, s) v[i++] = cJSON_IsNumber(it) ? (int32_t)it->valuedouble : 0;
            memcpy(out, v, sizeof v);
            break;
        }
    }
    cJSON_Delete(root);
}

static void write_hparams(hyla_gguf_writer *w, const hyla_model *m, const char *arch, hyla_ggml_type type, int k_m)
{
    const hyla_config *c = &m->cfg;
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)
    hyla_gguf_kv_str(w, "general.architecture", arch);
    hyla_gguf_kv_str(w, "general.type", "model");
    const char *name = m->source_dir ? strrchr(m->source_dir, '/') : NULL;
    hyla_gguf_kv_str(w, "general.name", name && name[1] ? name + 1 : m->source_dir ? m->source_dir : "hyla model");
    hyla_gguf_kv_u32(w, "general.file_type", hyla_gguf_file_type(type, k_m));
    hyla_gguf_kv_u32(w, "general.quantization_version", 2);
    hyla_gguf_kv_u32(w, KEY("block_count"), (uint32_t)hyla_cfg_all_layers(c)); /* llama.cpp: the MTP blocks too */
    if (c->n_mtp_layers > 0)
        hyla_gguf_kv_u32(w, KEY("nextn_predict_layers"), (uint32_t)c->n_mtp_layers);
    if (c->max_position_embeddings > 0)
        hyla_gguf_kv_u32(w, KEY("context_length"), (uint32_t)c->max_position_embeddings);
    hyla_gguf_kv_u32(w, KEY("embedding_length"), (uint32_t)c->hidden);
    if (c->inter > 0)
        hyla_gguf_kv_u32(w, KEY("feed_forward_length"), (uint32_t)c->inter);
    hyla_gguf_kv_u32(w, KEY("attention.head_count"), (uint32_t)c->n_heads);
    hyla_gguf_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
    hyla_gguf_kv_f32(w, KEY("rope.freq_base"), (float)c->rope_theta);
    hyla_gguf_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->rms_norm_eps);
    if (c->n_experts > 0) {
        hyla_gguf_kv_u32(w, KEY("expert_count"), (uint32_t)c->n_experts);
        hyla_gguf_kv_u32(w, KEY("expert_used_count"), (uint32_t)c->top_k);
        hyla_gguf_kv_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c->moe_inter);
        if (c->shared_inter > 0)
            hyla_gguf_kv_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c->shared_inter);
    }
    hyla_gguf_kv_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
    hyla_gguf_kv_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    hyla_gguf_kv_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c->conv_kernel);
    hyla_gguf_kv_u32(w, KEY("ssm.state_size"), (uint32_t)c->lin_k_dim);
    hyla_gguf_kv_u32(w, KEY("ssm.group_count"), (uint32_t)c->lin_k_heads);
    hyla_gguf_kv_u32(w, KEY("ssm.time_step_rank"), (uint32_t)c->lin_v_heads);
    hyla_gguf_kv_u32(w, KEY("ssm.inner_size"), (uint32_t)hyla_cfg_value_dim(c));
    unsigned char recurrent[HYLA_MAX_LAYERS];
    int interval = 0;
    for (int l = 0; l < hyla_cfg_all_layers(c); l++) { /* MTP layers: full attention */
        recurrent[l] = l < c->n_layers && c->layer_kind[l] == HYLA_LAYER_LINEAR;
        if (!recurrent[l] && !interval)
            interval = l + 1;
    }
    hyla_gguf_kv_bool_array(w, KEY("attention.recurrent_layers"), recurrent, (size_t)hyla_cfg_all_layers(c));
    hyla_gguf_kv_u32(w, KEY("full_attention_interval"), (uint32_t)(interval ? interval : 4));
    hyla_gguf_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)c->rotary_dim);
    if (c->family != HYLA_FAMILY_QWEN3_NEXT) {
        int32_t sections[4];
        mrope_sections(m->config_json, sections);
        hyla_gguf_kv_i32_array(w, KEY("rope.dimension_sections"), sections, 4);
    }
#undef KEY
}

/* ---- tokenizer ----------------------------------------------------------------------------------- */

/* The converter's "looks special" rule for added tokens not marked special. */
static int looks_special(const char *s, size_t n)
{
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (n == strlen(exact[i]) && !memcmp(s, exact[i], n))
            return 1;
    if (n >= 4 && !memcmp(s, "<|", 2) && !memcmp(s + n - 2, "|>", 2))
        return 1;
    if (n >= 8 && !memcmp(s, "<\xef\xbd\x9c", 4) && !memcmp(s + n - 4, "\xef\xbd\x9c>", 4)) /* <｜ ... ｜> */
        return 1;
    return n >= 8 && !memcmp(s, "<unused", 7) && s[n - 1] == '>';
}

static int read_json(const char *dir, const char *name, cJSON **out)
{
    char path[4096];
    *out = NULL;
    HYLA_TRY(hyla_path_join(path, sizeof path, dir, name));
    if (!hyla_file_exists(path))
        return HYLA_OK;
    char *text;
    HYLA_TRY(hyla_read_file_max(path, (size_t)256 << 20, &text, NULL));
    *out = cJSON_Parse(text);
    free(text);
    return *out ? HYLA_OK : hyla_error_set(HYLA_ERR_FORMAT, "%s: not valid JSON", path);
}

/* tokenizer_config.json's bos/eos/unk/pad tokens (a string or {"content": ...}), add_bos/eos, chat template. */
static int write_special_tokens(hyla_gguf_writer *w, const hyla_tokenizer *tok, const char *dir)
{
    cJSON *cfg;
    HYLA_TRY(read_json(dir, "tokenizer_config.json", &cfg));
    if (!cfg)
        return HYLA_OK;
    static const struct { const char *field, *key; } ids[] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"}, {"sep_token", "tokenizer.ggml.seperator_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"}};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, ids[i].field);
        if (cJSON_IsObject(v))
            v = cJSON_GetObjectItemCaseSensitive(v, "content");
        int32_t id = cJSON_IsString(v) ? hyla_tokenizer_token_id(tok, v->valuestring) : -1;
        if (id >= 0)
            hyla_gguf_kv_u32(w, ids[i].key, (uint32_t)id);
    }
    static const struct { const char *field, *key; } adds[] = {{"add_bos_token", "tokenizer.ggml.add_bos_token"},
                                                               {"add_eos_token", "tokenizer.ggml.add_eos_token"}};
    for (size_t i = 0; i < sizeof adds / sizeof *adds; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, adds[i].field);
        if (cJSON_IsBool(v))
            hyla_gguf_kv_bool(w, adds[i].key, cJSON_IsTrue(v));
    }
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(tmpl))
        hyla_gguf_kv_str(w, "tokenizer.chat_template", tmpl->valuestring);
    cJSON_Delete(cfg);
    return HYLA_OK;
}

static int write_tokenizer(hyla_gguf_writer *w, const hyla_model *m)
{
    char path[4096];
    if (!m->source_dir)
        return hyla_error_set(HYLA_ERR_ARG, "gguf export: the model has no directory to take tokenizer.json from");
    HYLA_TRY(hyla_path_join(path, sizeof path, m->source_dir, "tokenizer.json"));
    if (!hyla_file_exists(path))
        return hyla_error_set(HYLA_ERR_ARG, "gguf export: %s is missing; llama.cpp needs the vocabulary in the file "
                              "(a model trained from a GGUF file: --tokenizer FILE.gguf)", path);
    hyla_tokenizer *tok;
    HYLA_TRY(hyla_tokenizer_load(&tok, path));
    int64_t V = m->cfg.vocab;
    const char *pre = hyla_tokenizer_pre_name(hyla_tokenizer_pattern(tok));
    int st = HYLA_OK;
    if ((int64_t)hyla_tokenizer_vocab_size(tok) > V)
        st = hyla_error_set(HYLA_ERR_ARG, "gguf export: %s has %zu tokens, more than the model's vocab_size %lld", path,
                            hyla_tokenizer_vocab_size(tok), (long long)V);
    else if (!pre)
        st = hyla_error_set(HYLA_ERR_ARG, "gguf export: %s: the pre-tokenizer regex is not one llama.cpp knows "
                            "(Qwen2 / Qwen3.5 / GPT-2 patterns)", path);
    size_t n_merges = hyla_tokenizer_merge_count(tok);
    const char **strs = st ? NULL : malloc((size_t)V * sizeof *strs);
    size_t *lens = st ? NULL : malloc((size_t)V * sizeof *lens);
    int32_t *types = st ? NULL : malloc((size_t)V * sizeof *types);
    int32_t *pairs = st ? NULL : malloc((2 * n_merges + 1) * sizeof *pairs);
    char *pads = st ? NULL : malloc((size_t)V * 20);
    if (!st && (!strs || !lens || !types || !pairs || !pads))
        st = hyla_error_set(HYLA_ERR_NOMEM, "gguf export: out of memory for the vocabulary");
    if (!st) {
        hyla_gguf_kv_str(w, "tokenizer.ggml.model", "gpt2");
        hyla_gguf_kv_str(w, "tokenizer.ggml.pre", pre);
        /* llama_token_type: NORMAL 1, CONTROL 3, USER_DEFINED 4, UNUSED 5 */
        for (int64_t id = 0; id < V; id++) {
            hyla_token_kind k = hyla_tokenizer_token(tok, (int32_t)id, &strs[id], &lens[id]);
            if (k == HYLA_TOKEN_UNUSED) { /* the converter's filler for ids without a token */
                char *p = pads + id * 20;
                lens[id] = (size_t)snprintf(p, 20, "[PAD%lld]", (long long)id);
                strs[id] = p;
            }
            types[id] = k == HYLA_TOKEN_NORMAL ? 1 : k == HYLA_TOKEN_UNUSED ? 5
                      : (k == HYLA_TOKEN_SPECIAL || looks_special(strs[id], lens[id])) ? 3 : 4;
        }
        hyla_gguf_kv_str_array(w, "tokenizer.ggml.tokens", strs, lens, (size_t)V);
        hyla_gguf_kv_i32_array(w, "tokenizer.ggml.token_type", types, (size_t)V);
        size_t n = hyla_tokenizer_merges(tok, pairs);
        char **merged = calloc(n + 1, sizeof *merged);
        for (size_t i = 0; merged && i < n; i++) {
            const char *a, *b;
            size_t na, nb;
            hyla_tokenizer_token(tok, pairs[2 * i], &a, &na);
            hyla_tokenizer_token(tok, pairs[2 * i + 1], &b, &nb);
            if (!(merged[i] = malloc(na + nb + 2)))
                break;
            memcpy(merged[i], a, na);
            merged[i][na] = ' ';
            memcpy(merged[i] + na + 1, b, nb);
            merged[i][na + nb + 1] = '\0';
        }
        int ok = merged && (n == 0 || merged[n - 1]);
        if (ok)
            hyla_gguf_kv_str_array(w, "tokenizer.ggml.merges", (const char *const *)merged, NULL, n);
        for (size_t i = 0; merged && i < n; i++)
            free(merged[i]);
        free(merged);
        st = ok ? write_special_tokens(w, tok, m->source_dir)
                : hyla_error_set(HYLA_ERR_NOMEM, "gguf export: out of memory for the merges");
    }
    free(strs);
    free(lens);
    free(types);
    free(pairs);
    free(pads);
    hyla_tokenizer_free(tok);
    return st;
}

/* The tokenizer.* key-values of the GGUF file at `path` as it stores them: the vocabulary a model
 * trained from that file kept using (its checkpoint holds no tokenizer files). */
static int copy_tokenizer(hyla_gguf_writer *w, const hyla_model *m, const char *path)
{
    hyla_gguf_file *f;
    HYLA_TRY(hyla_gguf_open(&f, path));
    const hyla_gguf_kv *tokens = hyla_gguf_find_kv(f, "tokenizer.ggml.tokens");
    int st = HYLA_OK;
    if (!tokens || tokens->type != HYLA_GGUF_ARRAY || tokens->elem_type != HYLA_GGUF_STRING)
        st = hyla_error_set(HYLA_ERR_FORMAT, "%s: no tokenizer.ggml.tokens string array to take the vocabulary from",
                            path);
    else if (tokens->count > (uint64_t)m->cfg.vocab)
        st = hyla_error_set(HYLA_ERR_ARG, "gguf export: %s has %llu tokens, more than the model's vocab_size %lld",
                            path, (unsigned long long)tokens->count, (long long)m->cfg.vocab);
    for (size_t i = 0; st == HYLA_OK && i < hyla_gguf_n_kv(f); i++)
        if (!strncmp(hyla_gguf_kv_at(f, i)->key, "tokenizer.", 10))
            hyla_gguf_kv_copy(w, hyla_gguf_kv_at(f, i));
    hyla_gguf_close(f);
    return st;
}

/* ---- the export ---------------------------------------------------------------------------------- */

int hyla_model_export_gguf(const hyla_model *m, const char *path, hyla_ggml_type type, int k_m,
                           const char *vocab_gguf, hyla_gguf_export_info *info)
{
    const char *arch = hyla_gguf_arch_name(&m->cfg);
    HYLA_TRY(hyla_gguf_map_check(&m->cfg, arch));
    exporter e = {.m = m, .want = type, .k_m = k_m};
    hyla_gguf_writer *w = hyla_gguf_new();
    int st = w ? collect_tensors(&e) : hyla_error_set(HYLA_ERR_NOMEM, "gguf export: out of memory");
    size_t max_floats = 0, bytes = 0;
    for (size_t i = 0; st == HYLA_OK && i < e.map.n; i++) {
        const hyla_gguf_map_tensor *t = &e.map.t[i];
        size_t n = (size_t)(t->rows * t->ne[0]);
        max_floats = n > max_floats ? n : max_floats;
        bytes += hyla_ggml_bytes(e.type[i], n);
        if (hyla_gguf_add_tensor(w, t->name, t->n_dims, t->ne, e.type[i]) < 0)
            st = HYLA_ERR_ARG;
    }
    if (st == HYLA_OK) {
        write_hparams(w, m, arch, type, k_m);
        st = vocab_gguf ? copy_tokenizer(w, m, vocab_gguf) : write_tokenizer(w, m);
    }
    if (st == HYLA_OK && !(e.scratch = malloc((max_floats ? max_floats : 1) * sizeof(float))))
        st = hyla_error_set(HYLA_ERR_NOMEM, "gguf export: cannot allocate %zu floats", max_floats);
    if (st == HYLA_OK)
        st = hyla_gguf_write(w, path, fill_tensor, &e);
    if (st == HYLA_OK && info) {
        info->n_tensors = e.map.n;
        info->n_f16_fallback = e.n_fallback;
        info->bytes = bytes;
        info->arch = arch;
    }
    hyla_gguf_map_free(&e.map);
    free(e.type);
    free(e.src);
    free(e.src2);
    free(e.scratch);
    hyla_gguf_free(w);
    return st;
}
