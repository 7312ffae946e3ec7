/* A loaded model: validated config, block schedule, parameter table and the weight arenas.
 *
 * Weights are converted to fp32 on load (F32 / BF16 / F16 sources; the conversions are exact
 * so saving in the source dtype reproduces the original bytes), or, loaded for bf16 compute
 * with bf16 weights only (hyla_model_load_bf16), the matrix parameters go straight to the bf16
 * arena (model/precision.c). The model owns everything it points to. */
#ifndef HYLA_MODEL_MODEL_H
#define HYLA_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/params.h"
#include "model/schedule.h"

typedef struct {
    hyla_config cfg;
    hyla_schedule sched;
    hyla_param_table table;
    float *w;                  /* [table.total_floats] fp32 arena (anonymous mapping), owned */
    size_t w_bytes;
    /* Compute precision (model/precision.c). HYLA_DT_BF16: projections, the embedding and lm_head
     * read w16, the matrix parameters (hyla_role_is_matrix) rounded to bf16 at the same offsets
     * as w, and activations hold bf16 values; HYLA_DT_F32 (default): w alone, w16 NULL. */
    hyla_dtype compute_dtype;
    uint16_t *w16;             /* [table.total_floats] bf16 arena (anonymous mapping) or NULL, owned */
    size_t w16_bytes;
    int matrices_in_w;         /* w holds the matrix parameters' fp32 values (master weights); 0:
                                * bf16 weights only, w has the vectors (norms, biases, conv, router) */
    unsigned char *hf_dtype;   /* [table.n_hf] hyla_dtype each HF tensor was loaded from / saves as */
    unsigned char *param_dtype; /* [table.n_params] dtype of the HF tensor that filled each param */
    char *config_json;         /* original config.json text (saved verbatim), owned */
    char *source_dir;          /* directory it was loaded from, owned; NULL for a new model. Its other
                                * files (tokenizer, chat template, generation config, ...) are copied
                                * into every save */
    char *source_gguf;         /* the GGUF file it was loaded from, owned, or NULL: its vocabulary and
                                * chat template are written into every save as tokenizer.json and
                                * tokenizer_config.json (io/tokenizer.h) */
    struct hyla_st_set_s *carried_set; /* the source's safetensors, kept mapped when it holds tensors hyla
                                        * does not use (mtp.*, model.visual.*), owned; else NULL */
    size_t *carried;           /* [n_carried] their indices in carried_set: saved byte for byte */
    size_t n_carried;
    /* A trainable LoRA adapter run unmerged beside the projections (model/lora.h), not owned, or
     * NULL. While set, training trains only the adapter: the base weights are frozen (no
     * gradients, no moments) and the executor's gradient argument is the adapter's arena. */
    struct hyla_lora_s *lora;
    /* Saving while the weights live elsewhere (FSDP, train/fsdp.h): called before a saved tensor
     * of `layer` (-1: a non-layer parameter) is read from `vector` (HYLA_FETCH_*: the weights w,
     * or the optimizer's moments); NULL: everything is in place. */
    int (*fetch)(void *ctx, int vector, int layer);
    void *fetch_ctx;
    /* A model read from a GGUF file (model/gguf_load.c): the file stays mapped and the matrix
     * parameters are read from it in their stored types (qw[param], rows pointing into the
     * mapping); w holds the vectors only (matrices_in_w = 0). Owned; NULL otherwise. */
    struct hyla_gguf_file *gguf;
    struct hyla_qmat_s *qw;     /* [table.n_params]; type < 0 rows unused: not a matrix */
    /* A sharded checkpoint still open (model/pieces.h: hyla_model_load_pieces), owned, or NULL;
     * the layer its fetch last brought into w (INT32_MIN: none) */
    struct hyla_pieces_s *pieces;
    int pieces_layer;
    /* Opened deferred (hyla_model_load_deferred): the source's safetensors, still mapped, owned */
    struct hyla_st_set_s *source_set;
} hyla_model;

enum { HYLA_FETCH_W = 0, HYLA_FETCH_M = 1, HYLA_FETCH_V = 2 };

/* Load DIR (config.json + model.safetensors or a sharded index). Checks every tensor: missing,
 * unexpected (mtp.* and model.visual.* are ignored) and mis-shaped tensors are named. DIR may be
 * a .gguf file (training, merging): its tensors' values as fp32, the model `hyla convert F.gguf
 * DIR` saves (hyla_model_load_gguf + hyla_model_gguf_dequantize). */
int hyla_model_load(hyla_model *m, const char *dir);
/* FSDP's sharded load: open DIR (a model directory or a sharded checkpoint) and check every
 * tensor, but read none; w is an untouched mapping. hyla_model_load_param(m, i) then reads the
 * tensors that fill parameter i into w (a grouped tensor fills its layer's other parameters
 * too), converting layouts as the load does, so a caller can take its piece and give the pages
 * back one parameter at a time; hyla_model_loaded closes the source (keeping what a save
 * carries). */
int hyla_model_load_deferred(hyla_model *m, const char *dir);
int hyla_model_load_param(hyla_model *m, int i);
int hyla_model_loaded(hyla_model *m);
/* Load for bf16 compute with bf16 weights only: matrix parameters are read into w16 (BF16
 * tensors byte for byte, F32 / F16 ones rounded to nearest even; a value bf16 cannot hold is an
 * error naming the tensor), never into w, so resident weight memory is half of fp32's. For
 * inference: such a model cannot be trained or saved (hyla_model_save refuses it). */
int hyla_model_load_bf16(hyla_model *m, const char *dir);

/* Load a .gguf file of architecture qwen3next, qwen35 or qwen35moe (llama.cpp's converter's
 * layout, or hyla's export) for inference, its matrices read in place (model/gguf_load.c). Such
 * a model cannot be trained or saved as it is: hyla_model_gguf_dequantize first (hyla_model_load does). */
int hyla_model_load_gguf(hyla_model *m, const char *path);
/* The config of a .gguf file, its metadata checked as hyla_model_load_gguf checks it; no tensor's data is
 * read or checked: what hyla plan needs of it. */
int hyla_model_gguf_config(const char *path, hyla_config *out);
/* A GGUF model's matrices dequantized into w (fp32, the values its stored blocks hold), the file
 * closed: an ordinary fp32 model from then on (it can be saved as a Hugging Face directory). */
int hyla_model_gguf_dequantize(hyla_model *m);
/* The stored-type view of a matrix parameter of a GGUF model; NULL otherwise. LM_HEAD of a tied
 * model returns EMBED's. */
const struct hyla_qmat_s *hyla_model_param_q(const hyla_model *m, hyla_role role, int layer);
/* The embedding rows of tokens[n] into out [n, H], whatever the model holds them as (fp32, the
 * bf16 copy of bf16 compute, a GGUF model's stored blocks dequantized). */
void hyla_model_embed_rows(const hyla_model *m, const int32_t *tokens, int64_t n, float *out);

/* A model of cfg whose weight arena is mapped but untouched (zeros, no memory until written;
 * huge_pages: every page will be written). Tensors save as `dtype`. */
int hyla_model_init_empty(hyla_model *m, const hyla_config *cfg, const hyla_layout *layout, hyla_dtype dtype,
                          int huge_pages);
/* Create a model with spec §6 initialisation (seeded). Tensors save as `dtype`. */
int hyla_model_init(hyla_model *m, const hyla_config *cfg, const hyla_layout *layout, uint64_t seed,
                    hyla_dtype dtype);

/* Save as a Hugging Face directory: config.json and safetensors (sharded when larger than
 * max_shard_bytes; 0 = one file) in `layout` (NULL: the layout it was loaded with). The
 * directory is published whole (io/outdir.h): `dir` may be absent, empty or a model hyla
 * wrote; anything else is refused. */
int hyla_model_save(const hyla_model *m, const char *dir, const hyla_layout *layout, size_t max_shard_bytes);
/* Save every tensor as `dtype` from now on (round to nearest even from the fp32 values). */
void hyla_model_set_save_dtype(hyla_model *m, hyla_dtype dtype);
/* The same files written into the existing directory `dir` (a checkpoint's temporary one). */
int hyla_model_write_files(const hyla_model *m, const char *dir, const hyla_layout *layout, size_t max_shard_bytes);
/* ... all but the tensors: config.json (its torch_dtype the save's) and the companion files. */
int hyla_model_write_meta(const hyla_model *m, const char *dir);

void hyla_model_free(hyla_model *m);

/* The HF layout of the tensors in `set` (grouped/separate GDN projections, fused/per-expert
 * experts, name prefix); defaults by family where the model has no such tensors. */
int hyla_model_detect_layout(const hyla_st_set *set, const hyla_config *cfg, hyla_layout *lay, const char *dir);
/* Layout a family's Hugging Face checkpoints use by default. */
void hyla_default_layout(const hyla_config *cfg, hyla_layout *lay);
/* mtp.*, model.visual.* and (tied models) lm_head.weight are skipped on load, as in HF. */
int hyla_model_is_ignored_tensor(const char *name, const hyla_config *cfg);

/* View of a parameter's fp32 data; NULL if the model has no such parameter, or holds it in bf16
 * only (a matrix parameter after hyla_model_load_bf16 / hyla_model_set_compute_bf16(m, 1)).
 * LM_HEAD of a tied model returns EMBED. */
float *hyla_model_param(const hyla_model *m, hyla_role role, int layer);

/* ---- compute precision (model/precision.c) ---- */
/* The parameters bf16 compute multiplies in bf16: embedding, lm_head and every projection
 * weight (not the router, norms, biases, conv kernel, A_log, dt_bias). */
int hyla_role_is_matrix(hyla_role r);
/* Switch to bf16 compute: make the bf16 copy of the matrix parameters from w. weights_bf16_only:
 * then release their fp32 values (inference from a model loaded in fp32, e.g. after merging an
 * adapter); else w stays the master copy (training: refresh after every update). */
int hyla_model_set_compute_bf16(hyla_model *m, int weights_bf16_only);
/* Re-round the matrix parameters (or parameter i, if a matrix) from w into w16; nothing in fp32
 * compute. */
void hyla_model_refresh_bf16(hyla_model *m);
void hyla_model_refresh_bf16_param(hyla_model *m, int i);
/* ... of its elements [a, b) only (FSDP's expert groups). */
void hyla_model_refresh_bf16_range(hyla_model *m, int i, int64_t a, int64_t b);
/* bf16 view of a matrix parameter in bf16 compute; NULL otherwise (fp32 compute, a vector
 * parameter, or none). LM_HEAD of a tied model returns EMBED. */
const uint16_t *hyla_model_param_bf16(const hyla_model *m, hyla_role role, int layer);
/* Internal: the w16 arena (compute_dtype = BF16), and zero-filled anonymous mappings. */
int hyla_model_alloc_bf16(hyla_model *m);
void *hyla_model_map(size_t bytes);
void hyla_model_unmap(void *p, size_t bytes);
/* Give back the pages of an arena mapping that lie wholly inside [start, start + bytes): they read
 * as zeros and take no memory until written again (a page shared with neighbours is kept). */
void hyla_model_release_pages(void *start, size_t bytes);
/* [start, start + bytes) zero again: the whole pages inside given back (an anonymous mapping's read
 * back as zeros), the partial pages at its edges written. */
void hyla_model_zero_pages(void *start, size_t bytes);

#endif
