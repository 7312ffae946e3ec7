/* Inference state (spec §5): one flat per-layer list for a batch of B sequences.
 *
 *   linear-attention layer: conv  [B, K, conv_dim]   the last K RAW conv inputs, oldest first
 *                           ssm   [B, Hv, dk, dv]    fp32 recurrent state (k index first)
 *   full-attention layer:   keys  [B, max_len, Hkv, hd]  post-norm, post-RoPE keys
 *                           values[B, max_len, Hkv, hd]
 * len[b] is the number of tokens cached for sequence b. Blocks index into the flat list by
 * layer number. A caller that manages its own memory (a serving engine) may fill a
 * hyla_infer_state with its own buffers (owned = 0) and hand it to hyla_infer_step. */
#ifndef HYLA_MODEL_INFER_STATE_H
#define HYLA_MODEL_INFER_STATE_H

#include <stdint.h>

#include "model/model.h"

/* Same layout as hyla_layer_cache in include/hyla.h (the public API casts between them). */
typedef struct hyla_layer_state_s {
    float *conv;    /* linear layers: [B, K, conv_dim] */
    float *ssm;     /* linear layers: [B, Hv, dk, dv] */
    float *keys;    /* full layers: [B, max_len, Hkv, hd] */
    float *values;  /* full layers: [B, max_len, Hkv, hd] */
} hyla_layer_state;

typedef struct hyla_infer_state_s {
    int64_t B, max_len;
    int64_t *len;              /* [B] */
    int n_layers;
    hyla_layer_state *layers;  /* [n_layers] */
    int owned;                 /* buffers allocated by hyla_infer_state_init */
    /* Optional rollback points (a speculative verify), set by the caller around a multi-row call:
     * a call of T <= row_keep_cap rows copies, after each row t < T - 1, every linear layer's conv
     * window and delta-rule state of sequence b to row_keep + (b * row_keep_cap + t) * R, in
     * hyla_infer_state_save_recurrent's layout (R = hyla_infer_state_recurrent_floats); after the
     * last row the state itself is the point. NULL: none. */
    float *row_keep;
    int64_t row_keep_cap;
    void *map;                 /* owned: every layer's buffers, one mapping of map_bytes */
    size_t map_bytes;
} hyla_infer_state;

int hyla_infer_state_init(hyla_infer_state *s, const hyla_config *cfg, int64_t B, int64_t max_len);
/* The same; huge_kv: the KV caches in huge pages too (a caller that fills every sequence to
 * max_len, as generate does; a server's slots reach max_len rarely, and a 2 MB page per slot and
 * layer would be resident for a few tokens). The recurrent states always are. */
int hyla_infer_state_init_pages(hyla_infer_state *s, const hyla_config *cfg, int64_t B, int64_t max_len, int huge_kv);
void hyla_infer_state_free(hyla_infer_state *s);
/* Forget sequence b (its caches restart empty). */
void hyla_infer_state_reset(hyla_infer_state *s, const hyla_config *cfg, int64_t b);
/* The recurrent part of sequence b (every linear layer's conv window and delta-rule state):
 * floats per sequence, and a copy out to / back from buf [that many] (a speculative verify's
 * rollback point). */
int64_t hyla_infer_state_recurrent_floats(const hyla_config *cfg);
void hyla_infer_state_save_recurrent(const hyla_infer_state *s, const hyla_config *cfg, int64_t b, float *buf);
void hyla_infer_state_restore_recurrent(hyla_infer_state *s, const hyla_config *cfg, int64_t b, const float *buf);
/* Where layer l's conv window starts in that layout (its delta-rule state follows the window);
 * l must be a linear layer. */
int64_t hyla_infer_state_recurrent_offset(const hyla_config *cfg, int l);
/* Bytes a state for B sequences of max_len tokens takes. */
size_t hyla_infer_state_bytes(const hyla_config *cfg, int64_t B, int64_t max_len);

#endif
