/* config.json parsing and validation (spec §1). Every error names the file and the field. */
#include "model/config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/fileio.h"

typedef struct {
    const cJSON *obj;   /* the object holding the text-model fields */
    const char *origin; /* file name for messages */
    const char *prefix; /* "text_config." or "" */
} field_reader;

static const cJSON *field_get(const field_reader *r, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->obj, name);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* Integer field. required: error if absent; else *out = dflt. */
static int field_int(const field_reader *r, const char *name, int required, int64_t dflt, int64_t lo, int64_t hi,
                     int64_t *out)
{
    const cJSON *v = field_get(r, name);
    if (!v) {
        if (required)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: missing field '%s%s'", r->origin, r->prefix, name);
        *out = dflt;
        return HYLA_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9e15)
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' must be an integer", r->origin, r->prefix, name);
    *out = (int64_t)v->valuedouble;
    if (*out < lo)
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' = %lld must be >= %lld", r->origin,
                              r->prefix, name, (long long)*out, (long long)lo);
    if (*out > hi)
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' = %lld exceeds hyla's limit of %lld (see model/config.h)",
                              r->origin, r->prefix, name, (long long)*out, (long long)hi);
    return HYLA_OK;
}

static int field_double(const field_reader *r, const char *name, double dflt, int positive, double *out)
{
    const cJSON *v = field_get(r, name);
    if (!v) {
        *out = dflt;
        return HYLA_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' must be a number", r->origin, r->prefix, name);
    *out = v->valuedouble;
    if (positive && !(*out > 0))
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' must be > 0", r->origin, r->prefix, name);
    if (!positive && *out < 0)
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' must be >= 0", r->origin, r->prefix, name);
    return HYLA_OK;
}

static int field_bool(const field_reader *r, const char *name, int dflt, int *out)
{
    const cJSON *v = field_get(r, name);
    if (!v) {
        *out = dflt;
        return HYLA_OK;
    }
    if (!cJSON_IsBool(v))
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' must be true or false", r->origin, r->prefix, name);
    *out = cJSON_IsTrue(v);
    return HYLA_OK;
}

static int parse_family(hyla_config *cfg, const cJSON *root, const char *origin, field_reader *r)
{
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!mt)
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: missing field 'model_type'", origin);
    if (!cJSON_IsString(mt))
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field 'model_type' must be a string", origin);
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);
    const char *t = mt->valuestring;
    r->obj = root;
    r->origin = origin;
    r->prefix = "";
    if (!strcmp(t, "qwen3_next")) {
        cfg->family = HYLA_FAMILY_QWEN3_NEXT;
    } else if (!strcmp(t, "qwen3_5") || !strcmp(t, "qwen3_5_text")) {
        cfg->family = HYLA_FAMILY_QWEN3_5;
    } else if (!strcmp(t, "qwen3_5_moe") || !strcmp(t, "qwen3_5_moe_text")) {
        cfg->family = HYLA_FAMILY_QWEN3_5_MOE;
    } else {
        return hyla_error_set(HYLA_ERR_CONFIG,
                              "%s: unknown model_type '%s' (expected qwen3_next, qwen3_5, qwen3_5_moe)",
                              origin, t);
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (tc && !cJSON_IsNull(tc)) {
        if (!cJSON_IsObject(tc))
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field 'text_config' must be an object", origin);
        if (cfg->family == HYLA_FAMILY_QWEN3_NEXT)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field 'text_config' is not expected for model_type qwen3_next", origin);
        r->obj = tc;
        r->prefix = "text_config.";
        cfg->text_config_wrapped = 1;
        const cJSON *inner = cJSON_GetObjectItemCaseSensitive(tc, "model_type");
        if (inner && cJSON_IsString(inner)) {
            int want_moe = cfg->family == HYLA_FAMILY_QWEN3_5_MOE;
            int is_moe = strstr(inner->valuestring, "moe") != NULL;
            if (strncmp(inner->valuestring, "qwen3_5", 7) || want_moe != is_moe)
                return hyla_error_set(HYLA_ERR_CONFIG, "%s: 'text_config.model_type' = '%s' contradicts model_type '%s'",
                                      origin, inner->valuestring, t);
        }
    }
    return HYLA_OK;
}

static int parse_rope(hyla_config *cfg, const field_reader *r)
{
    /* rope_theta top-level (v4) or rope_parameters.rope_theta (v5); rope_scaling / rope_parameters
     * may carry rope_type "default" (M-RoPE for text reduces to plain partial RoPE, spec §3.6). */
    HYLA_TRY(field_double(r, "rope_theta", 0.0, 0, &cfg->rope_theta));
    const char *keys[2] = {"rope_parameters", "rope_scaling"};
    for (int i = 0; i < 2; i++) {
        const cJSON *rp = field_get(r, keys[i]);
        if (!rp)
            continue;
        if (!cJSON_IsObject(rp))
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s' must be an object or null", r->origin, r->prefix, keys[i]);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (!type)
            type = cJSON_GetObjectItemCaseSensitive(rp, "type");
        if (type && (!cJSON_IsString(type) || (strcmp(type->valuestring, "default") && strcmp(type->valuestring, "mrope"))))
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s.rope_type' = '%s' is not supported (only default RoPE)",
                                  r->origin, r->prefix, keys[i], cJSON_IsString(type) ? type->valuestring : "?");
        const cJSON *th = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
        if (th) {
            if (!cJSON_IsNumber(th) || !(th->valuedouble > 0) || !isfinite(th->valuedouble))
                return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%s%s.rope_theta' must be a positive number", r->origin, r->prefix, keys[i]);
            cfg->rope_theta = th->valuedouble;
        }
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor");
        if (pr && cJSON_IsNumber(pr))
            cfg->partial_rotary_factor = pr->valuedouble;
    }
    if (cfg->rope_theta == 0.0)
        cfg->rope_theta = 10000.0;
    if (!(cfg->rope_theta > 0))
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%srope_theta' must be > 0", r->origin, r->prefix);
    return HYLA_OK;
}

static int parse_layer_kinds(hyla_config *cfg, const field_reader *r)
{
    const cJSON *lt = field_get(r, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt))
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%slayer_types' must be an array", r->origin, r->prefix);
        if (cJSON_GetArraySize(lt) != cfg->n_layers)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%slayer_types' has %d entries but num_hidden_layers = %lld",
                                  r->origin, r->prefix, cJSON_GetArraySize(lt), (long long)cfg->n_layers);
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lt) {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention"))
                cfg->layer_kind[i] = HYLA_LAYER_LINEAR;
            else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention"))
                cfg->layer_kind[i] = HYLA_LAYER_FULL;
            else
                return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%slayer_types[%d]' must be \"linear_attention\" or \"full_attention\"",
                                      r->origin, r->prefix, i);
            i++;
        }
        return HYLA_OK;
    }
    int64_t interval;
    HYLA_TRY(field_int(r, "full_attention_interval", 0, 4, 1, HYLA_MAX_LAYERS, &interval));
    for (int64_t i = 0; i < cfg->n_layers; i++)
        cfg->layer_kind[i] = ((i + 1) % interval == 0) ? HYLA_LAYER_FULL : HYLA_LAYER_LINEAR;
    return HYLA_OK;
}

static int parse_ffn_kinds(hyla_config *cfg, const field_reader *r)
{
    if (cfg->family == HYLA_FAMILY_QWEN3_5) {
        memset(cfg->layer_is_moe, 0, sizeof cfg->layer_is_moe);
        return HYLA_OK;
    }
    if (cfg->family == HYLA_FAMILY_QWEN3_5_MOE) {
        memset(cfg->layer_is_moe, 1, (size_t)cfg->n_layers);
        return HYLA_OK;
    }
    int64_t step;
    HYLA_TRY(field_int(r, "decoder_sparse_step", 0, 1, 1, HYLA_MAX_LAYERS, &step));
    unsigned char mlp_only[HYLA_MAX_LAYERS] = {0};
    const cJSON *mo = field_get(r, "mlp_only_layers");
    if (mo) {
        if (!cJSON_IsArray(mo))
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field 'mlp_only_layers' must be an array", r->origin);
        const cJSON *e;
        cJSON_ArrayForEach(e, mo) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble >= (double)cfg->n_layers)
                return hyla_error_set(HYLA_ERR_CONFIG, "%s: field 'mlp_only_layers' entries must be layer indices in [0, %lld)",
                                      r->origin, (long long)cfg->n_layers);
            mlp_only[(int)e->valuedouble] = 1;
        }
    }
    for (int64_t i = 0; i < cfg->n_layers; i++)
        cfg->layer_is_moe[i] = !mlp_only[i] && cfg->n_experts > 0 && (i + 1) % step == 0;
    return HYLA_OK;
}

static int validate(hyla_config *c, const field_reader *r)
{
    int any_linear = 0, any_full = 0, any_moe = 0, any_dense = 0;
    for (int64_t i = 0; i < c->n_layers; i++) {
        any_linear |= c->layer_kind[i] == HYLA_LAYER_LINEAR;
        any_full |= c->layer_kind[i] == HYLA_LAYER_FULL;
        any_moe |= c->layer_is_moe[i];
        any_dense |= !c->layer_is_moe[i];
    }
    const char *o = r->origin, *p = r->prefix;
    if (any_full) {
        if (c->n_heads < 1 || c->n_kv_heads < 1 || c->head_dim < 1)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: full-attention layers need num_attention_heads, num_key_value_heads, head_dim >= 1", o);
        if (c->n_heads % c->n_kv_heads)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%snum_attention_heads' (%lld) is not a multiple of num_key_value_heads (%lld)",
                                  o, p, (long long)c->n_heads, (long long)c->n_kv_heads);
        if (!(c->partial_rotary_factor > 0 && c->partial_rotary_factor <= 1))
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%spartial_rotary_factor' must be in (0, 1]", o, p);
        c->rotary_dim = (int64_t)(c->head_dim * c->partial_rotary_factor);
        if (c->rotary_dim < 2 || c->rotary_dim % 2)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: rotary dim int(head_dim * partial_rotary_factor) = %lld must be even and >= 2",
                                  o, (long long)c->rotary_dim);
    }
    if (any_linear) {
        if (c->lin_k_heads < 1 || c->lin_v_heads < 1 || c->lin_k_dim < 1 || c->lin_v_dim < 1 || c->conv_kernel < 1)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: linear-attention layers need linear_num_key_heads, linear_num_value_heads, "
                                  "linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim >= 1", o);
        if (c->lin_v_heads % c->lin_k_heads)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%slinear_num_value_heads' (%lld) is not a multiple of linear_num_key_heads (%lld)",
                                  o, p, (long long)c->lin_v_heads, (long long)c->lin_k_heads);
    }
    if (any_moe) {
        if (c->n_experts < 1 || c->top_k < 1 || c->moe_inter < 1)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: MoE layers need num_experts, num_experts_per_tok, moe_intermediate_size >= 1", o);
        if (c->top_k > c->n_experts)
            return hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%snum_experts_per_tok' (%lld) > num_experts (%lld)",
                                  o, p, (long long)c->top_k, (long long)c->n_experts);
    }
    if (any_dense && c->inter < 1)
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: dense MLP layers need field '%sintermediate_size' >= 1", o, p);
    return HYLA_OK;
}

int hyla_config_parse(hyla_config *cfg, const char *json_text, const char *origin)
{
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = cJSON_Parse(json_text);
    if (!root)
        return hyla_error_set(HYLA_ERR_CONFIG, "%s: not valid JSON (near byte %ld)", origin,
                              cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - json_text) : -1L);
    int st = HYLA_OK;
    field_reader r;
    if (!cJSON_IsObject(root)) {
        st = hyla_error_set(HYLA_ERR_CONFIG, "%s: top level must be a JSON object", origin);
        goto done;
    }
#define TRY(x) do { if ((st = (x)) != HYLA_OK) goto done; } while (0)
    TRY(parse_family(cfg, root, origin, &r));
    int is_moe_family = cfg->family != HYLA_FAMILY_QWEN3_5;
    TRY(field_int(&r, "vocab_size", 1, 0, 1, HYLA_MAX_VOCAB, &cfg->vocab));
    TRY(field_int(&r, "hidden_size", 1, 0, 1, HYLA_MAX_HIDDEN, &cfg->hidden));
    TRY(field_int(&r, "num_hidden_layers", 1, 0, 1, HYLA_MAX_LAYERS, &cfg->n_layers));
    TRY(parse_layer_kinds(cfg, &r));
    TRY(field_int(&r, "num_attention_heads", 1, 0, 1, HYLA_MAX_HEADS, &cfg->n_heads));
    TRY(field_int(&r, "num_key_value_heads", 1, 0, 1, HYLA_MAX_HEADS, &cfg->n_kv_heads));
    TRY(field_int(&r, "head_dim", 1, 0, 1, HYLA_MAX_HEAD_DIM, &cfg->head_dim));
    TRY(field_double(&r, "partial_rotary_factor", 0.25, 1, &cfg->partial_rotary_factor));
    TRY(parse_rope(cfg, &r));
    TRY(field_int(&r, "linear_num_key_heads", 1, 0, 1, HYLA_MAX_HEADS, &cfg->lin_k_heads));
    TRY(field_int(&r, "linear_num_value_heads", 1, 0, 1, HYLA_MAX_HEADS, &cfg->lin_v_heads));
    TRY(field_int(&r, "linear_key_head_dim", 1, 0, 1, HYLA_MAX_HEAD_DIM, &cfg->lin_k_dim));
    TRY(field_int(&r, "linear_value_head_dim", 1, 0, 1, HYLA_MAX_HEAD_DIM, &cfg->lin_v_dim));
    TRY(field_int(&r, "linear_conv_kernel_dim", 1, 0, 1, HYLA_MAX_CONV_KERNEL, &cfg->conv_kernel));
    TRY(field_int(&r, "num_experts", is_moe_family, 0, 0, HYLA_MAX_EXPERTS, &cfg->n_experts));
    TRY(field_int(&r, "num_experts_per_tok", is_moe_family && cfg->n_experts > 0, 0, 0, HYLA_MAX_TOP_K, &cfg->top_k));
    TRY(field_int(&r, "moe_intermediate_size", is_moe_family && cfg->n_experts > 0, 0, 0, HYLA_MAX_INTERMEDIATE, &cfg->moe_inter));
    TRY(field_int(&r, "shared_expert_intermediate_size", 0, 0, 0, HYLA_MAX_INTERMEDIATE, &cfg->shared_inter));
    TRY(field_int(&r, "intermediate_size", cfg->family == HYLA_FAMILY_QWEN3_5, 0, 0, HYLA_MAX_INTERMEDIATE, &cfg->inter));
    TRY(field_bool(&r, "norm_topk_prob", 1, &cfg->norm_topk_prob));
    if (cfg->family == HYLA_FAMILY_QWEN3_5_MOE)
        cfg->norm_topk_prob = 1; /* always renormalised in Qwen3.5-MoE (spec §1.1) */
    TRY(field_double(&r, "router_aux_loss_coef", 0.001, 0, &cfg->router_aux_loss_coef));
    TRY(field_double(&r, "rms_norm_eps", 1e-6, 1, &cfg->rms_norm_eps));
    /* tie_word_embeddings may sit on the outer wrapper (Qwen3.5 VL) or in the text config. */
    {
        field_reader outer = {root, origin, ""};
        int tie_outer = 0;
        TRY(field_bool(&outer, "tie_word_embeddings", 0, &tie_outer));
        TRY(field_bool(&r, "tie_word_embeddings", tie_outer, &cfg->tie_word_embeddings));
    }
    TRY(field_double(&r, "initializer_range", 0.02, 1, &cfg->initializer_range));
    TRY(field_int(&r, "max_position_embeddings", 0, 0, 0, HYLA_MAX_POSITIONS, &cfg->max_position_embeddings));
    {
        const cJSON *act = field_get(&r, "hidden_act");
        if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu"))) {
            st = hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%shidden_act' must be \"silu\"", origin, r.prefix);
            goto done;
        }
        int bias = 0;
        TRY(field_bool(&r, "attention_bias", 0, &bias));
        if (bias) {
            st = hyla_error_set(HYLA_ERR_CONFIG, "%s: field '%sattention_bias' = true is not supported", origin, r.prefix);
            goto done;
        }
    }
    TRY(parse_ffn_kinds(cfg, &r));
    TRY(validate(cfg, &r));
    {
        int64_t nextn, mtp;
        TRY(field_int(&r, "num_nextn_predict_layers", 0, 0, 0, HYLA_MAX_MTP_LAYERS, &nextn));
        TRY(field_int(&r, "mtp_num_hidden_layers", 0, nextn, 0, HYLA_MAX_MTP_LAYERS, &mtp));
        if (nextn && mtp != nextn) {
            st = hyla_error_set(HYLA_ERR_CONFIG, "%s: fields '%snum_nextn_predict_layers' (%lld) and 'mtp_num_hidden_layers' "
                                "(%lld) disagree", origin, r.prefix, (long long)nextn, (long long)mtp);
            goto done;
        }
        if (cfg->n_layers + mtp > HYLA_MAX_LAYERS) {
            st = hyla_error_set(HYLA_ERR_CONFIG, "%s: %lld layers + %lld MTP layers exceed hyla's limit of %d layers",
                                origin, (long long)cfg->n_layers, (long long)mtp, HYLA_MAX_LAYERS);
            goto done;
        }
        hyla_config_set_mtp_layers(cfg, mtp);
    }
#undef TRY
done:
    cJSON_Delete(root);
    return st;
}

void hyla_config_set_mtp_layers(hyla_config *c, int64_t n)
{
    c->n_mtp_layers = n;
    for (int64_t j = 0; j < n; j++) { /* as vLLM builds it: a full-attention layer numbered j */
        c->layer_kind[c->n_layers + j] = HYLA_LAYER_FULL;
        c->layer_is_moe[c->n_layers + j] = c->layer_is_moe[j < c->n_layers ? j : 0];
    }
}

int hyla_config_load(hyla_config *cfg, const char *path)
{
    char *text = NULL;
    HYLA_TRY(hyla_read_text_file(path, &text, NULL));
    int st = hyla_config_parse(cfg, text, path);
    free(text);
    return st;
}

const char *hyla_family_name(hyla_family f)
{
    switch (f) {
    case HYLA_FAMILY_QWEN3_NEXT: return "qwen3_next";
    case HYLA_FAMILY_QWEN3_5: return "qwen3_5";
    case HYLA_FAMILY_QWEN3_5_MOE: return "qwen3_5_moe";
    }
    return "?";
}

static void add_int(cJSON *o, const char *k, int64_t v) { cJSON_AddNumberToObject(o, k, (double)v); }

char *hyla_config_to_json(const hyla_config *c)
{
    cJSON *text = cJSON_CreateObject();
    const char *inner_type = c->family == HYLA_FAMILY_QWEN3_NEXT ? "qwen3_next"
                           : c->family == HYLA_FAMILY_QWEN3_5 ? "qwen3_5_text" : "qwen3_5_moe_text";
    cJSON_AddStringToObject(text, "model_type", inner_type);
    add_int(text, "vocab_size", c->vocab);
    add_int(text, "hidden_size", c->hidden);
    add_int(text, "num_hidden_layers", c->n_layers);
    cJSON *lt = cJSON_AddArrayToObject(text, "layer_types");
    for (int64_t i = 0; i < c->n_layers; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(c->layer_kind[i] == HYLA_LAYER_FULL ? "full_attention" : "linear_attention"));
    add_int(text, "num_attention_heads", c->n_heads);
    add_int(text, "num_key_value_heads", c->n_kv_heads);
    add_int(text, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(text, "partial_rotary_factor", c->partial_rotary_factor);
    cJSON_AddNumberToObject(text, "rope_theta", c->rope_theta);
    add_int(text, "linear_num_key_heads", c->lin_k_heads);
    add_int(text, "linear_num_value_heads", c->lin_v_heads);
    add_int(text, "linear_key_head_dim", c->lin_k_dim);
    add_int(text, "linear_value_head_dim", c->lin_v_dim);
    add_int(text, "linear_conv_kernel_dim", c->conv_kernel);
    if (c->family != HYLA_FAMILY_QWEN3_5) {
        add_int(text, "num_experts", c->n_experts);
        add_int(text, "num_experts_per_tok", c->top_k);
        add_int(text, "moe_intermediate_size", c->moe_inter);
        add_int(text, "shared_expert_intermediate_size", c->shared_inter);
        cJSON_AddBoolToObject(text, "norm_topk_prob", c->norm_topk_prob);
        cJSON_AddNumberToObject(text, "router_aux_loss_coef", c->router_aux_loss_coef);
    }
    if (c->family == HYLA_FAMILY_QWEN3_NEXT) {
        cJSON *mo = cJSON_AddArrayToObject(text, "mlp_only_layers");
        for (int64_t i = 0; i < c->n_layers; i++)
            if (!c->layer_is_moe[i])
                cJSON_AddItemToArray(mo, cJSON_CreateNumber((double)i));
        add_int(text, "decoder_sparse_step", 1);
    }
    add_int(text, "intermediate_size", c->inter);
    cJSON_AddNumberToObject(text, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddBoolToObject(text, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddNumberToObject(text, "initializer_range", c->initializer_range);
    add_int(text, "max_position_embeddings", c->max_position_embeddings);
    if (c->n_mtp_layers > 0)
        add_int(text, c->family == HYLA_FAMILY_QWEN3_NEXT ? "num_nextn_predict_layers" : "mtp_num_hidden_layers",
                c->n_mtp_layers);
    cJSON_AddStringToObject(text, "hidden_act", "silu");
    cJSON_AddBoolToObject(text, "attention_bias", 0);

    cJSON *root = text;
    if (c->family != HYLA_FAMILY_QWEN3_NEXT && c->text_config_wrapped) {
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model_type", c->family == HYLA_FAMILY_QWEN3_5 ? "qwen3_5" : "qwen3_5_moe");
        cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
        cJSON_AddItemToObject(root, "text_config", text);
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}

int hyla_config_write(const hyla_config *c, const char *path)
{
    char *out = hyla_config_to_json(c);
    if (!out)
        return hyla_error_set(HYLA_ERR_NOMEM, "%s: cannot serialise config", path);
    int st = hyla_write_file_atomic(path, out, strlen(out));
    free(out);
    return st;
}

/* Set `key` to `value` where it is present in `o`, or (add_missing) add it. 1 if anything changed. */
static int set_string_field(cJSON *o, const char *key, const char *value, int add_missing)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v && cJSON_IsString(v) && !strcmp(v->valuestring, value))
        return 0;
    if (!v && !add_missing)
        return 0;
    cJSON *nv = cJSON_CreateString(value);
    if (v)
        cJSON_ReplaceItemInObjectCaseSensitive(o, key, nv);
    else
        cJSON_AddItemToObject(o, key, nv);
    return 1;
}

char *hyla_config_with_torch_dtype(const char *json_text, const char *torch_dtype)
{
    cJSON *root = cJSON_Parse(json_text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    /* torch_dtype (transformers v4) always at the top; dtype (v5) and text_config's copies where present */
    int changed = set_string_field(root, "torch_dtype", torch_dtype, 1);
    changed |= set_string_field(root, "dtype", torch_dtype, 0);
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (cJSON_IsObject(tc)) {
        changed |= set_string_field(tc, "torch_dtype", torch_dtype, 0);
        changed |= set_string_field(tc, "dtype", torch_dtype, 0);
    }
    char *out = changed ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return out;
}
