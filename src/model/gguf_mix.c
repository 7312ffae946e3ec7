/* llama.cpp's per-tensor type mix for its Q4_K_M / Q5_K_M / Q3_K_M / Q2_K presets, and the part of it
 * every preset applies (Q6_K's), importance-matrix free, as its quantizer chooses for the qwen3next /
 * qwen35 / qwen35moe tensors (gguf_mix.h); "(_M)" marks what only the Q4_K_M / Q5_K_M presets do:
 *   - the output matrix, or the embedding when it is tied to the output: Q6_K;
 *   - attention-value-like matrices (attn_v, and attn_qkv: the linear layers' fused q|k|v), counted
 *     in the quantizer's tensor order: (_M) Q6_K for "more bits" positions i of n (i < n/8, i >= 7n/8,
 *     or (i - n/8) % 3 == 2); Q3_K_M: Q5_K for the first two, Q4_K after; Q2_K: Q4_K when the
 *     attention has >= 4 query heads per key-value head, else Q3_K; with exactly 8 experts, Q8_0;
 *   - attn_k: Q8_0 with exactly 8 experts;
 *   - every tensor whose name holds "ffn_down" (dense, routed, shared), the layer being its block number
 *     in an MoE model and its position among the ffn_down tensors in a dense one (of block_count):
 *     (_M) Q6_K at "more bits" layers; Q3_K_M: Q5_K for layers < block_count / 16, Q4_K after; Q2_K: Q3_K;
 *   - attn_output: with exactly 8 experts Q5_K (Q4_K_M, Q3_K_M, Q2_K); else Q4_K (Q3_K_M), Q3_K (Q2_K);
 *   - the rest: the preset's base type.
 * The quantizer visits tensors by block number, then by name (its loader's tensor order), which is
 * the order the position counters follow here too. */
#include "model/gguf_mix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int has(const char *name, const char *part) { return strstr(name, part) != NULL; }

static int attn_v_like(const char *name)
{
    return has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight") || has(name, "attn_v.weight");
}

static int block_of(const char *name)
{
    int l = -1;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

/* The quantizer's tensor order: by block number (tensors outside blocks first), then by name. */
static const hyla_gguf_map_tensor *const *sort_map;
static int by_block_then_name(const void *a, const void *b)
{
    const char *x = sort_map[*(const size_t *)a]->name, *y = sort_map[*(const size_t *)b]->name;
    int bx = block_of(x), by = block_of(y);
    return bx != by ? (bx < by ? -1 : 1) : strcmp(x, y);
}

int hyla_gguf_k_m_types(const hyla_gguf_map *map, const hyla_config *cfg, hyla_ggml_type base, int k_m,
                        hyla_ggml_type *types)
{
    size_t n = map->n;
    size_t *order = malloc((n + 1) * sizeof *order);
    const hyla_gguf_map_tensor **t = malloc((n + 1) * sizeof *t);
    if (!order || !t) {
        free(order);
        free(t);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = i, t[i] = &map->t[i];
    sort_map = t;
    qsort(order, n, sizeof *order, by_block_then_name);
    int n_wv = 0, i_wv = 0, i_down = 0, n_layers = (int)hyla_cfg_all_layers(cfg); /* block_count: with the MTP blocks */
    int n_expert = cfg->n_experts > 1 ? (int)cfg->n_experts : 1;
    int q2_k = k_m && base == HYLA_GGML_Q2_K, q3_k_m = k_m && base == HYLA_GGML_Q3_K;
    int64_t gqa = cfg->n_kv_heads > 0 ? cfg->n_heads / cfg->n_kv_heads : 0; /* llama.cpp's n_gqa() */
    for (size_t i = 0; i < n; i++)
        n_wv += attn_v_like(t[i]->name);
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        const char *name = t[i]->name;
        if (types[i] == HYLA_GGML_F32) /* not quantized (vectors, norms, routers, conv) */
            continue;
        hyla_ggml_type type = base;
        if (!strcmp(name, "output.weight") || (cfg->tie_word_embeddings && !strcmp(name, "token_embd.weight")))
            type = t[i]->ne[0] % HYLA_QK_K ? HYLA_GGML_Q8_0 : HYLA_GGML_Q6_K;
        else if (!strcmp(name, "token_embd.weight"))
            type = base;
        else if (attn_v_like(name)) {
            if (q2_k)
                type = gqa >= 4 ? HYLA_GGML_Q4_K : HYLA_GGML_Q3_K;
            else if (q3_k_m)
                type = i_wv < 2 ? HYLA_GGML_Q5_K : HYLA_GGML_Q4_K;
            else if (k_m && more_bits(i_wv, n_wv))
                type = HYLA_GGML_Q6_K;
            if (n_expert == 8)
                type = HYLA_GGML_Q8_0;
            i_wv++;
        } else if (has(name, "attn_k.weight")) {
            if (n_expert == 8)
                type = HYLA_GGML_Q8_0;
        } else if (has(name, "attn_output.weight")) {
            if (n_expert == 8 && k_m && base != HYLA_GGML_Q5_K)
                type = HYLA_GGML_Q5_K;
            else if (n_expert != 8 && (q2_k || q3_k_m))
                type = q2_k ? HYLA_GGML_Q3_K : HYLA_GGML_Q4_K;
        } else if (has(name, "ffn_down")) {
            int layer = n_expert > 1 ? block_of(name) : i_down;
            if (q2_k)
                type = HYLA_GGML_Q3_K;
            else if (q3_k_m)
                type = layer < n_layers / 16 ? HYLA_GGML_Q5_K : HYLA_GGML_Q4_K;
            else if (k_m && more_bits(layer, n_layers))
                type = HYLA_GGML_Q6_K;
            i_down++;
        }
        types[i] = type;
    }
    free(order);
    free(t);
    return 0;
}
