/* Model configuration: the Hugging Face config.json fields (spec §1), validated.
 *
 * Families: qwen3_next, qwen3_5 (dense; text_config wrapper), qwen3_5_moe. Layer kinds come
 * from `layer_types` or `full_attention_interval`; MoE vs dense from the family,
 * `decoder_sparse_step` and `mlp_only_layers`. */
#ifndef HYLA_MODEL_CONFIG_H
#define HYLA_MODEL_CONFIG_H

#include <stdint.h>

/* Upper bounds on config sizes, checked before anything is allocated. Each is at least twice
 * the largest released model of these families (Qwen3.5-397B-A17B: 60 layers, 512 experts, top-10,
 * hidden 4096, vocab 248320, head_dim 256) and small enough that every size product hyla forms
 * fits in int64 with room to spare: the largest tensor, experts x 2*intermediate x hidden, is at
 * most 2^10 * 2^21 * 2^16 = 2^47 elements, a layer's parameters below 2^49, the model's below 2^58.
 * Kernel limits: hidden and every normed width <= 65536 (norm.c's per-thread partial), head_dim
 * <= 1024 (attention.c's query tile), top-k <= 64 (generate.c's per-step routing record). The
 * parameter table holds 3 rows per expert and layer, so experts x layers bounds its memory
 * (1024 x 512 x 3 rows of ~200 bytes: 0.3 GB at the extreme). */
#define HYLA_MAX_LAYERS 512
#define HYLA_MAX_VOCAB (1 << 24)
#define HYLA_MAX_HIDDEN 65536
#define HYLA_MAX_HEADS 1024
#define HYLA_MAX_HEAD_DIM 1024
#define HYLA_MAX_CONV_KERNEL 64
#define HYLA_MAX_EXPERTS 1024
#define HYLA_MAX_TOP_K 64
#define HYLA_MAX_INTERMEDIATE (1 << 20)
#define HYLA_MAX_POSITIONS (1 << 30)
/* MTP decoder layers (released models have 1); they follow the trunk's layers in layer_kind /
 * layer_is_moe, so n_layers + n_mtp_layers <= HYLA_MAX_LAYERS. */
#define HYLA_MAX_MTP_LAYERS 4

typedef enum {
    HYLA_FAMILY_QWEN3_NEXT = 0,
    HYLA_FAMILY_QWEN3_5 = 1,     /* dense SwiGLU every layer */
    HYLA_FAMILY_QWEN3_5_MOE = 2, /* MoE every layer, top-k always renormalised */
} hyla_family;

typedef enum { HYLA_LAYER_LINEAR = 0, HYLA_LAYER_FULL = 1 } hyla_layer_kind;

typedef struct {
    hyla_family family;
    char model_type[32];      /* as written in config.json (outer model_type) */
    int text_config_wrapped;  /* fields came from config["text_config"] */

    int64_t vocab;            /* V */
    int64_t hidden;           /* H */
    int64_t n_layers;         /* N */
    /* full attention */
    int64_t n_heads;          /* Hq */
    int64_t n_kv_heads;       /* Hkv */
    int64_t head_dim;         /* hd */
    int64_t rotary_dim;       /* R = int(hd * partial_rotary_factor), even */
    double partial_rotary_factor;
    double rope_theta;
    /* linear attention (Gated DeltaNet) */
    int64_t lin_k_heads;      /* Hk */
    int64_t lin_v_heads;      /* Hv, multiple of Hk */
    int64_t lin_k_dim;        /* dk */
    int64_t lin_v_dim;        /* dv */
    int64_t conv_kernel;      /* K */
    /* feed-forward */
    int64_t n_experts;        /* E (0: no MoE layers) */
    int64_t top_k;            /* k */
    int64_t moe_inter;        /* I_e */
    int64_t shared_inter;     /* I_s (0: no shared expert) */
    int64_t inter;            /* I_d, dense SwiGLU width */
    int norm_topk_prob;
    double router_aux_loss_coef;
    /* misc */
    double rms_norm_eps;
    int tie_word_embeddings;
    double initializer_range;
    int64_t max_position_embeddings;
    /* multi-token prediction (docs/mtp.md): MTP decoder layers after the trunk, from
     * num_nextn_predict_layers (Qwen3-Next) or mtp_num_hidden_layers (Qwen3.5). A loaded model
     * whose checkpoint holds no mtp.* tensor has 0 (Hugging Face drops them on save). Layer
     * n_layers + j is MTP layer j: full attention, MoE where layer j of the trunk is. */
    int64_t n_mtp_layers;

    hyla_layer_kind layer_kind[HYLA_MAX_LAYERS];
    unsigned char layer_is_moe[HYLA_MAX_LAYERS];
} hyla_config;

/* Derived sizes. */
static inline int64_t hyla_cfg_key_dim(const hyla_config *c) { return c->lin_k_heads * c->lin_k_dim; }
static inline int64_t hyla_cfg_value_dim(const hyla_config *c) { return c->lin_v_heads * c->lin_v_dim; }
static inline int64_t hyla_cfg_conv_dim(const hyla_config *c) { return 2 * hyla_cfg_key_dim(c) + hyla_cfg_value_dim(c); }

/* Layers of the trunk and the MTP head together. */
static inline int64_t hyla_cfg_all_layers(const hyla_config *c) { return c->n_layers + c->n_mtp_layers; }
/* Set the MTP layer count (layer kinds of the MTP layers included); 0 removes the head. */
void hyla_config_set_mtp_layers(hyla_config *c, int64_t n);

/* Parse and validate a config.json file. On error, the message names the file and field. */
int hyla_config_load(hyla_config *cfg, const char *path);
/* Same, from a JSON text; `origin` names the source in error messages. */
int hyla_config_parse(hyla_config *cfg, const char *json_text, const char *origin);
/* Write a config.json for `cfg` (used when creating models from scratch). Atomic (tmp+rename). */
int hyla_config_write(const hyla_config *cfg, const char *path);
/* The JSON hyla_config_write writes (malloc'd; NULL when out of memory). */
char *hyla_config_to_json(const hyla_config *cfg);
/* json_text with its torch_dtype (and, where present, v5 `dtype` and text_config's copies) set
 * to torch_dtype ("float32", "bfloat16", "float16"): a malloc'd new text, or NULL when nothing
 * needed to change (or the text is not a JSON object), so a config already right keeps its bytes. */
char *hyla_config_with_torch_dtype(const char *json_text, const char *torch_dtype);

const char *hyla_family_name(hyla_family f);

#endif
