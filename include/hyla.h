/* hyla — public C API (`pkg-config --cflags --libs hyla`, or libhyla.a + its libraries: see README).
 *
 * Conventions: functions return 0 on success or a negative status; hyla_last_error() then
 * holds a one-line message naming the file, field or tensor at fault (per thread). Handles are
 * opaque and owned by the caller until the matching close/free. Token ids are int32. */
#ifndef HYLA_H
#define HYLA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hyla_engine hyla_engine;

/* Load a Hugging Face model directory (config.json + safetensors, single or sharded), or a .gguf
 * file (architectures qwen3next / qwen35 / qwen35moe; its tensors used in place in their stored
 * types, its tokenizer from tokenizer.ggml.*; such an engine is for inference only). */
int hyla_open(const char *model_dir, hyla_engine **out);
/* The same for bf16 inference (hyla --param-dtype bf16): the weight matrices are read straight
 * into bf16 (BF16 tensors as stored; half the resident weight memory), activations are bf16
 * values, every matmul accumulates in fp32. Such an engine is not saved (hyla_save refuses). */
int hyla_open_bf16(const char *model_dir, hyla_engine **out);
void hyla_close(hyla_engine *e);
const char *hyla_last_error(void);

int64_t hyla_vocab_size(const hyla_engine *e);
int64_t hyla_num_layers(const hyla_engine *e);

/* Forward over B sequences of T tokens ([B, T] row-major). logits: [B*T, vocab] or NULL.
 * ce_loss / aux_loss: next-token cross-entropy (NaN if T == 1) and router aux loss (NaN
 * without MoE layers); either pointer may be NULL. */
int hyla_forward_tokens(hyla_engine *e, const int32_t *tokens, int64_t B, int64_t T, float *logits,
                        double *ce_loss, double *aux_loss);

/* ---- inference with caller-visible per-layer caches ------------------------------------------
 * The state is one flat per-layer list for B sequences (spec §5): for linear-attention layers the
 * conv window [B, K, conv_dim] (last K raw conv inputs) and the fp32 recurrent state
 * [B, Hv, dk, dv]; for full-attention layers keys and values [B, max_len, Hkv, hd]. A serving
 * engine that manages its own memory fills hyla_layer_cache pointers itself (sizes from
 * hyla_cache_floats) and passes them in; hyla reads and updates them in place. */
typedef struct {
    float *conv, *ssm;      /* linear-attention layers, else NULL */
    float *keys, *values;   /* full-attention layers, else NULL */
} hyla_layer_cache;

typedef enum { HYLA_CACHE_CONV, HYLA_CACHE_SSM, HYLA_CACHE_KEYS, HYLA_CACHE_VALUES } hyla_cache_part;
/* Floats of one part of layer `layer` for ONE sequence (keys/values: for max_len tokens); 0 if the
 * layer has no such part. */
size_t hyla_cache_floats(const hyla_engine *e, int layer, hyla_cache_part part, int64_t max_len);

/* Run tokens [B, T] (sequence b continues at position len[b]) on the caches `layers`
 * [num_layers], update them and len[b] += T. logits: [B, vocab], the logits of each sequence's
 * last new token (the final norm and lm_head run over those B rows only), or NULL. */
int hyla_step(hyla_engine *e, const int32_t *tokens, int64_t B, int64_t T, hyla_layer_cache *layers, int64_t *len,
              int64_t max_len, float *logits);

/* Save the model to a new directory in the layout it was loaded with (max_shard_bytes 0 = one file). */
int hyla_save(const hyla_engine *e, const char *out_dir, size_t max_shard_bytes);

/* ---- text and generation ---------------------------------------------------------------------
 * hyla_open also loads DIR/tokenizer.json when the directory has one (Qwen byte-level BPE). */
int hyla_has_tokenizer(const hyla_engine *e);
/* Encode text (len bytes) into *ids (malloc'd, *n ids; free with hyla_free). */
int hyla_tokenize(const hyla_engine *e, const char *text, size_t len, int32_t **ids, int64_t *n);
/* Decode ids into *text (malloc'd, NUL-terminated, *len bytes; free with hyla_free). */
int hyla_detokenize(const hyla_engine *e, const int32_t *ids, int64_t n, char **text, size_t *len);

typedef struct {
    double temperature; /* 0 = greedy */
    int64_t top_k;      /* 0 = off */
    double top_p;       /* 1 = off */
    uint64_t seed;
    int64_t max_new;    /* tokens to generate at most */
} hyla_sampling_settings;
/* Continue `prompt` [n_prompt] by up to s->max_new tokens into out [s->max_new] (*n_out of them):
 * prefill + cached decode, exactly as `hyla generate`. */
int hyla_generate_tokens(hyla_engine *e, const int32_t *prompt, int64_t n_prompt, const hyla_sampling_settings *s,
                         int32_t *out, int64_t *n_out);

void hyla_free(void *p);
/* "MAJOR.MINOR.PATCH" of the library. */
#define HYLA_VERSION_STRING "0.10.0"
const char *hyla_version(void);

#ifdef __cplusplus
}
#endif

#endif
