/* GGUF export for llama.cpp / Ollama: a loaded model written as one .gguf file for the
 * architecture llama.cpp knows it by (Qwen3-Next: "qwen3next", Qwen3.5 dense: "qwen35",
 * Qwen3.5 MoE: "qwen35moe").
 *
 * Metadata, tensor names and layouts are those llama.cpp's own converter (convert_hf_to_gguf.py)
 * writes, with the same transformations of the Hugging Face tensors:
 *   - zero-centred RMSNorm weights (input, post-attention, final, attention q/k norms) get +1
 *     (llama.cpp multiplies by the weight itself); the gated GDN norm is plain and copied;
 *   - A_log becomes ssm_a = -exp(A_log); dt_bias is ssm_dt.bias; the conv1d kernel
 *     [conv_dim, 1, K] is squeezed to [conv_dim, K];
 *   - the GDN input projection is split into attn_qkv (q | k | v, each head-major, = the conv
 *     channel order) and attn_gate (z); Qwen3-Next keeps in_proj_ba grouped per key head as
 *     ssm_ba, Qwen3.5 has ssm_beta and ssm_alpha;
 *   - Qwen3.5 (both) with fewer key than value heads: value heads are reordered from grouped
 *     by key head [g0v0 .. g0v(r-1), g1v0 ..] to tiled [g0v0, g1v0, .., g0v1, g1v1, ..] in every
 *     tensor indexed by value head (qkv's v rows, z rows, beta/alpha rows, dt bias, ssm_a, the
 *     conv kernel's v channels, out_proj's columns), as llama.cpp's ggml broadcast expects;
 *   - routed experts as 3-D [E, I, H] gate / up and [E, H, I] down tensors; shared expert,
 *     its sigmoid gate and the router as their own tensors.
 * Tensor types: F32 / F16 / BF16 / Q8_0 for matrices; 1-D tensors, norms, the routers, the
 * shared-expert gate, the conv kernel, ssm_a and ssm_dt stay F32 (as the converter does);
 * a Q8_0 matrix whose rows are not a multiple of 32 is written F16 (as the converter does).
 * The tokenizer comes from the model directory: tokenizer.json (tokens in id order, types,
 * merges, the pre-tokenizer as "qwen2" or "qwen35" by its split regex) and tokenizer_config.json
 * (bos / eos / pad ids, add_bos_token, chat_template). MTP and vision tensors are not exported.
 *
 * What llama.cpp cannot represent is refused with the reason: value head dim != key head dim,
 * Qwen3-Next / Qwen3.5-MoE without a shared expert or with dense layers, top-k weights not
 * renormalised (llama.cpp always renormalises), a tokenizer larger than the embedding. */
#ifndef HYLA_MODEL_GGUF_EXPORT_H
#define HYLA_MODEL_GGUF_EXPORT_H

#include "io/gguf.h"
#include "model/gguf_map.h"
#include "model/model.h"

typedef struct {
    size_t n_tensors;
    size_t n_f16_fallback;  /* Q8_0 requested, rows not a multiple of 32: written F16 */
    size_t bytes;           /* tensor data bytes */
    const char *arch;
} hyla_gguf_export_info;

/* Write `m` to `path` (atomically) with matrices in `type`; k_m: llama.cpp's Q4_K_M / Q5_K_M
 * per-tensor mix over base `type` Q4_K / Q5_K (model/gguf_mix.h). vocab_gguf: the tokenizer.*
 * key-values copied from that GGUF file instead (a model trained from it); NULL: from the model
 * directory's tokenizer.json and tokenizer_config.json. */
int hyla_model_export_gguf(const hyla_model *m, const char *path, hyla_ggml_type type, int k_m,
                           const char *vocab_gguf, hyla_gguf_export_info *info);

/* A GGUF file of one of those architectures (llama.cpp's converter's or hyla's) written again with
 * its matrices in `type` (k_m as above), as llama.cpp's quantizer (llama_model_quantize) writes it
 * from the same file: the same per-tensor types and blocks (model/gguf_requant.c). The key-values
 * are copied (general.file_type and general.quantization_version set anew), and every tensor keeps
 * its name, shape and place; a tensor already of its new type is copied byte for byte, the others
 * are read as fp32 and quantized. A matrix stored quantized is not quantized again (a second
 * rounding, refused as llama.cpp refuses it); to F32 it is written exactly. */
int hyla_gguf_requantize(const char *in, const char *out, hyla_ggml_type type, int k_m, hyla_gguf_export_info *info);

/* The types an export gives the map's tensors: keep_f32 ones F32, the others `want` with llama.cpp's
 * _M mix (k_m) and its fallbacks for rows that are not whole blocks (Q6_K -> Q8_0, Q8_0 -> F16:
 * *n_fallback counts them). An error names a tensor llama.cpp would write in a type hyla does not. */
int hyla_gguf_export_types(const hyla_gguf_map *map, const hyla_config *cfg, hyla_ggml_type want, int k_m,
                           hyla_ggml_type *types, size_t *n_fallback);
/* general.file_type (llama_ftype) of an export with matrices in t (k_m: the _M preset). */
uint32_t hyla_gguf_file_type(hyla_ggml_type t, int k_m);

#endif
