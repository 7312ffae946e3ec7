#include "model/presets.h"

#include <string.h>

typedef struct {
    const char *name;
    const char *json;
} preset;

/* tiny-hybrid: ~5.7M parameters; two 3+1 blocks plus a 2-layer remainder, MoE everywhere.
 * bench-100m: ~104M parameters (2 blocks of 3+1, 8 experts top-2), the forward benchmark model.
 * bench-387m: the inference benchmark model of the decode/prefill issue (~387M, ~120M active). */
static const preset presets[] = {
    {"tiny-hybrid",
     "{\"model_type\":\"qwen3_next\",\"vocab_size\":512,\"hidden_size\":128,\"num_hidden_layers\":10,"
     "\"full_attention_interval\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32,"
     "\"partial_rotary_factor\":0.25,\"rope_theta\":10000.0,\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,"
     "\"linear_key_head_dim\":32,\"linear_value_head_dim\":32,\"linear_conv_kernel_dim\":4,\"num_experts\":8,"
     "\"num_experts_per_tok\":2,\"moe_intermediate_size\":128,\"shared_expert_intermediate_size\":256,"
     "\"intermediate_size\":512,\"decoder_sparse_step\":1,\"mlp_only_layers\":[],\"norm_topk_prob\":true,"
     "\"router_aux_loss_coef\":0.001,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":false,\"initializer_range\":0.02,"
     "\"max_position_embeddings\":4096,\"hidden_act\":\"silu\",\"attention_bias\":false}"},
    {"bench-100m",
     "{\"model_type\":\"qwen3_next\",\"vocab_size\":32000,\"hidden_size\":512,\"num_hidden_layers\":8,"
     "\"full_attention_interval\":4,\"num_attention_heads\":8,\"num_key_value_heads\":2,\"head_dim\":64,"
     "\"partial_rotary_factor\":0.25,\"rope_theta\":10000000.0,\"linear_num_key_heads\":4,\"linear_num_value_heads\":8,"
     "\"linear_key_head_dim\":64,\"linear_value_head_dim\":64,\"linear_conv_kernel_dim\":4,\"num_experts\":8,"
     "\"num_experts_per_tok\":2,\"moe_intermediate_size\":512,\"shared_expert_intermediate_size\":1024,"
     "\"intermediate_size\":2048,\"decoder_sparse_step\":1,\"mlp_only_layers\":[],\"norm_topk_prob\":true,"
     "\"router_aux_loss_coef\":0.001,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":false,\"initializer_range\":0.02,"
     "\"max_position_embeddings\":4096,\"hidden_act\":\"silu\",\"attention_bias\":false}"},
    {"bench-387m",
     "{\"model_type\":\"qwen3_next\",\"vocab_size\":8192,\"hidden_size\":1024,\"num_hidden_layers\":12,"
     "\"full_attention_interval\":4,\"num_attention_heads\":8,\"num_key_value_heads\":2,\"head_dim\":128,"
     "\"partial_rotary_factor\":0.25,\"rope_theta\":10000000.0,\"linear_num_key_heads\":4,\"linear_num_value_heads\":8,"
     "\"linear_key_head_dim\":128,\"linear_value_head_dim\":128,\"linear_conv_kernel_dim\":4,\"num_experts\":32,"
     "\"num_experts_per_tok\":4,\"moe_intermediate_size\":256,\"shared_expert_intermediate_size\":512,"
     "\"intermediate_size\":2048,\"decoder_sparse_step\":1,\"mlp_only_layers\":[],\"norm_topk_prob\":true,"
     "\"router_aux_loss_coef\":0.001,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":false,\"initializer_range\":0.02,"
     "\"max_position_embeddings\":8192,\"hidden_act\":\"silu\",\"attention_bias\":false}"},
};

const char *hyla_preset_json(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, name))
            return presets[i].json;
    return NULL;
}

const char *hyla_preset_names(void) { return "tiny-hybrid, bench-100m, bench-387m"; }
