/* hyla kernels: forward (and, as they arrive, backward) of every op, fp32, row-major.
 *
 * Conventions:
 *  - Shapes are given on every argument as [dims], last index fastest.
 *  - "n" is a number of rows (tokens, or tokens x heads). B sequences of T tokens are stored
 *    [B, T, ...] contiguous.
 *  - Kernels never allocate: scratch comes in through `work` arguments sized by the matching
 *    *_work_floats() function.
 *  - Kernels are deterministic for a given thread count; OpenMP parallelism is over rows /
 *    heads / experts whose results do not depend on the split.
 *  - Saved-for-backward outputs (rstd, pre-activations, lse) are optional: pass NULL to skip.
 */
#ifndef HYLA_OPS_H
#define HYLA_OPS_H

#include <stddef.h>
#include <stdint.h>

/* ---- norms (ops/norm.c) ------------------------------------------------------------------ */

/* Zero-centred RMSNorm: y = x * rsqrt(mean(x^2) + eps) * (1 + w).  y may alias x. */
void hyla_rmsnorm1p_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/, const float *x /*[n,d]*/,
                        const float *w /*[d]*/, int64_t n, int64_t d, float eps);

/* Gated RMSNorm (GDN output): y = w * (x * rsqrt(mean(x^2) + eps)) * silu(z). */
void hyla_gated_rmsnorm_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/,
                            const float *x /*[n,d]*/, const float *z /*[n,d]*/,
                            const float *w /*[d]*/, int64_t n, int64_t d, float eps);
/* One row of it on the calling thread (the code each row of hyla_gated_rmsnorm_fwd runs). */
void hyla_gated_rmsnorm_row(float *y /*[d]*/, float *rstd /*[1] or NULL*/, const float *x /*[d]*/,
                            const float *z /*[d]*/, const float *w /*[d]*/, int64_t d, float eps);

/* L2 norm: y = x * rsqrt(sum(x^2) + eps) * scale.  y may alias x. */
void hyla_l2norm_fwd(float *y /*[n,d]*/, float *rstd /*[n] or NULL*/, const float *x /*[n,d]*/,
                     int64_t n, int64_t d, float eps, float scale);
/* One row of it on the calling thread (the code each row of hyla_l2norm_fwd runs). */
void hyla_l2norm_row(float *y /*[d]*/, float *rstd /*[1] or NULL*/, const float *x /*[d]*/, int64_t d, float eps,
                     float scale);

/* ---- activations (ops/activation.c) ------------------------------------------------------ */

/* SwiGLU: h = silu(gate) * up (elementwise). */
void hyla_swiglu_fwd(float *h /*[n,I]*/, const float *gate /*[n,I]*/, const float *up /*[n,I]*/, int64_t n,
                     int64_t I);
void hyla_swiglu_bwd(float *dgate /*[n,I]*/, float *dup /*[n,I]*/, const float *dh /*[n,I]*/,
                     const float *gate /*[n,I]*/, const float *up /*[n,I]*/, int64_t n, int64_t I);
/* The same added into dgate, dup (gradient slots: one pass instead of a scratch and two adds). */
void hyla_swiglu_bwd_acc(float *dgate /*[n,I] +=*/, float *dup /*[n,I] +=*/, const float *dh /*[n,I]*/,
                         const float *gate /*[n,I]*/, const float *up /*[n,I]*/, int64_t n, int64_t I);

/* ---- rotary embedding (ops/rope.c) ------------------------------------------------------- */

/* cos/sin tables for positions pos[t]: cos[t, i] = cos(pos[t] * theta^(-2i/R)), i < R/2,
 * computed in fp32 as HF does (inv_freq in fp32, product in fp32). */
void hyla_rope_table(float *cos_t /*[n,R/2]*/, float *sin_t /*[n,R/2]*/, const int64_t *pos /*[n]*/,
                     int64_t n, int64_t R, double theta);

/* Partial rotate-half RoPE in place on the first R dims of every head:
 * out[i] = x[i] cos_i - x[i+R/2] sin_i ; out[i+R/2] = x[i+R/2] cos_i + x[i] sin_i. */
void hyla_rope_fwd(float *x /*[n,heads,hd]*/, const float *cos_t /*[n,R/2]*/,
                   const float *sin_t /*[n,R/2]*/, int64_t n, int64_t heads, int64_t hd, int64_t R);

/* ---- softmax attention (ops/attention.c) ------------------------------------------------- */

/* Causal GQA attention for one sequence. Query t (absolute position past + t) attends to keys
 * 0..past+t. Query head h uses kv head h / (Hq/Hkv).
 * lse[t,h] = log-sum-exp of the scaled scores (saved for backward).
 * work: hyla_attention_work_floats(S) floats. */
void hyla_attention_fwd(float *out /*[T,Hq,hd]*/, float *lse /*[T,Hq] or NULL*/,
                        const float *q /*[T,Hq,hd]*/, const float *k /*[S,Hkv,hd]*/,
                        const float *v /*[S,Hkv,hd]*/, int64_t T, int64_t past, int64_t Hq,
                        int64_t Hkv, int64_t hd, float scale, float *work);
size_t hyla_attention_work_floats(int64_t S /* = past + T */);

/* ---- Gated DeltaNet pieces (ops/gdn.c, ops/delta_rule.c) --------------------------------- */

/* Causal depthwise conv + SiLU over time for one sequence:
 * pre[t,c] = sum_j w[c,j] * x[t-(K-1)+j, c], x[t<0] = hist (the K-1 newest entries of the
 * K raw previous inputs, oldest first) or 0 when hist is NULL; y = silu(pre). y and pre overlap
 * none of x, w, hist. */
void hyla_conv_silu_fwd(float *y /*[T,C]*/, float *pre /*[T,C] or NULL*/, const float *x /*[T,C]*/,
                        const float *w /*[C,K]*/, const float *hist /*[K,C] or NULL*/, int64_t T,
                        int64_t C, int64_t K);

/* One decoded token with a window (hyla_conv_silu_fwd with T = 1 and hist, the same bits) that
 * also moves the window on: hist's rows 0..K-2 become its rows 1..K-1 and row K-1 becomes x, in
 * the same pass over each channel block (no serial copy of the window after the conv). */
void hyla_conv_silu_step(float *y /*[C]*/, const float *x /*[C]*/, const float *w /*[C,K]*/,
                         float *hist /*[K,C] in/out*/, int64_t C, int64_t K);
/* hyla_conv_silu_step on channels c0 .. c1 alone, on the calling thread (each channel's values are
 * those of the whole step: the channels are independent). */
void hyla_conv_silu_step_range(float *y /*[C]*/, const float *x /*[C]*/, const float *w /*[C,K]*/,
                               float *hist /*[K,C] in/out*/, int64_t C, int64_t K, int64_t c0, int64_t c1);

/* Gates: g = -exp(A_log) * softplus(a + dt_bias) (softplus(x) = x for x > 20), beta = sigmoid(b). */
void hyla_gdn_gates_fwd(float *g /*[n,Hv]*/, float *beta /*[n,Hv]*/, const float *a /*[n,Hv]*/,
                        const float *b /*[n,Hv]*/, const float *A_log /*[Hv]*/,
                        const float *dt_bias /*[Hv]*/, int64_t n, int64_t Hv);
/* One row of it on the calling thread (the code each row of hyla_gdn_gates_fwd runs). */
void hyla_gdn_gates_row(float *g /*[Hv]*/, float *beta /*[Hv]*/, const float *a /*[Hv]*/, const float *b /*[Hv]*/,
                        const float *A_log /*[Hv]*/, const float *dt_bias /*[Hv]*/, int64_t Hv);

/* Gated delta rule for one sequence, all value heads. q, k are already l2-normalised (q also
 * scaled by 1/sqrt(dk)); value head h reads q/k head h / (Hv/Hk).
 * state: [Hv,dk,dv] in/out: the initial state on entry (zeros for a fresh sequence), the state
 * after the last token on return.
 * Recurrent (spec §4.1): token by token. Chunked (spec §4.2): chunks of HYLA_DELTA_CHUNK,
 * last chunk padded; same result up to rounding. */
#define HYLA_DELTA_CHUNK 64
void hyla_delta_rule_recurrent_fwd(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/,
                                   const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                   const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                   const float *beta /*[T,Hv]*/, int64_t T, int64_t Hk,
                                   int64_t Hv, int64_t dk, int64_t dv);
/* The same, also copying the state after each row t < T - 1 to keep + t * keep_stride (a
 * speculative verify's rollback points: the state after any accepted prefix without re-running
 * it; after the last row it is `state` itself). */
void hyla_delta_rule_recurrent_fwd_keep(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/,
                                        float *keep /*[T - 1] x [Hv,dk,dv] at stride keep_stride, or NULL*/,
                                        int64_t keep_stride, const float *q /*[T,Hk,dk]*/,
                                        const float *k /*[T,Hk,dk]*/, const float *v /*[T,Hv,dv]*/,
                                        const float *g /*[T,Hv]*/, const float *beta /*[T,Hv]*/, int64_t T,
                                        int64_t Hk, int64_t Hv, int64_t dk, int64_t dv);
/* One token on one value head (the recurrent form's step, the same bits), on the calling thread;
 * the caller flushes subnormals as the recurrent form does (core/denormals.h). */
void hyla_delta_rule_head_step(float *o /*[dv]*/, float *S /*[dk,dv] in/out*/, const float *q /*[dk]*/,
                               const float *k /*[dk]*/, const float *v /*[dv]*/, float g, float beta, int64_t dk,
                               int64_t dv);
void hyla_delta_rule_chunked_fwd(float *out /*[T,Hv,dv]*/, float *state /*[Hv,dk,dv]*/,
                                 const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                 const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                 const float *beta /*[T,Hv]*/, int64_t T, int64_t Hk, int64_t Hv,
                                 int64_t dk, int64_t dv, float *work);
size_t hyla_delta_rule_chunked_work_floats(int64_t Hv, int64_t dk, int64_t dv);

/* ---- MoE routing (ops/moe_route.c) ------------------------------------------------------- */

/* probs = softmax(logits) over all E; (top_w, top_idx) = top-k of probs, descending, ties to
 * the lower expert index; if renorm, top_w /= sum(top_w). */
void hyla_moe_route_fwd(int32_t *top_idx /*[n,k]*/, float *top_w /*[n,k]*/,
                        float *probs /*[n,E]*/, const float *logits /*[n,E]*/, int64_t n,
                        int64_t E, int64_t k, int renorm);

/* Router replay: the top-k experts are given (top_idx, -1 = padding slot with zero weight); the
 * weights still come from the live softmax: top_w[s] = probs[idx_s] (renormalised over the
 * valid slots if renorm), so router gradients flow. */
void hyla_moe_route_forced_fwd(float *top_w /*[n,k]*/, float *probs /*[n,E]*/, const float *logits /*[n,E]*/,
                               const int32_t *top_idx /*[n,k]*/, int64_t n, int64_t E, int64_t k, int renorm);

/* ---- losses (ops/loss.c) ----------------------------------------------------------------- */

/* Cross-entropy: returns the SUM over rows with labels[i] >= 0 of -log softmax(logits[i])[label]
 * (accumulated in double), and their count in *count. Labels < 0 are ignored. */
double hyla_cross_entropy_fwd(const float *logits /*[n,V]*/, const int32_t *labels /*[n]*/,
                              int64_t n, int64_t V, int64_t *count);
/* The same sum in two steps, for a head that computes its logits a chunk of rows at a time:
 * row_ce[i] = the row's loss (0 if ignored), then their sum in the very grouping of
 * hyla_cross_entropy_fwd, so the result is bit-identical to it. */
void hyla_cross_entropy_rows(double *row_ce /*[n]*/, const float *logits /*[n,V]*/, const int32_t *labels /*[n]*/,
                             int64_t n, int64_t V);
double hyla_cross_entropy_sum(const double *row_ce /*[n]*/, const int32_t *labels /*[n]*/, int64_t n, int64_t *count);
/* hyla_cross_entropy_rows and hyla_cross_entropy_bwd in one pass over each row (one max, one exp
 * sum for both): the same row_ce and dlogits bit for bit. dlogits may alias logits. */
void hyla_cross_entropy_rows_bwd(double *row_ce /*[n]*/, float *dlogits /*[n,V]*/, const float *logits /*[n,V]*/,
                                 const int32_t *labels /*[n]*/, int64_t n, int64_t V, float scale);

/* Router load-balancing loss, streamed over MoE layers (spec §3.8):
 * accumulate per layer: counts[e] += #(row, slot) selecting e; psum[e] += sum_rows probs[row,e];
 * rows += n. Finish: aux = E * sum_e (counts[e]/rows) * (psum[e]/rows). */
void hyla_aux_loss_accumulate(double *counts /*[E]*/, double *psum /*[E]*/,
                              const int32_t *top_idx /*[n,k]*/, const float *probs /*[n,E]*/,
                              int64_t n, int64_t E, int64_t k);
double hyla_aux_loss_finish(const double *counts /*[E]*/, const double *psum /*[E]*/, int64_t rows,
                            int64_t E);

/* ==== backward ==============================================================================
 * Gradient conventions: activation gradients (dx, dq, ...) are OVERWRITTEN; parameter gradients
 * (dw, dA_log, ...) are ACCUMULATED (+=), so micro-batches and tokens sum into one buffer.
 * Parameter-gradient reductions over rows use a fixed row blocking, so results do not depend on
 * the number of threads. Forward-saved values (rstd, lse) may be passed, or NULL to recompute. */

void hyla_rmsnorm1p_bwd(float *dx /*[n,d]*/, float *dw /*[d] +=*/, const float *dy /*[n,d]*/,
                        const float *x /*[n,d]*/, const float *w /*[d]*/, const float *rstd /*[n] or NULL*/,
                        int64_t n, int64_t d, float eps);
void hyla_gated_rmsnorm_bwd(float *dx /*[n,d]*/, float *dz /*[n,d]*/, float *dw /*[d] +=*/,
                            const float *dy /*[n,d]*/, const float *x /*[n,d]*/, const float *z /*[n,d]*/,
                            const float *w /*[d]*/, const float *rstd /*[n] or NULL*/, int64_t n, int64_t d,
                            float eps);
/* dx may alias dy. */
void hyla_l2norm_bwd(float *dx /*[n,d]*/, const float *dy /*[n,d]*/, const float *x /*[n,d]*/,
                     const float *rstd /*[n] or NULL*/, int64_t n, int64_t d, float eps, float scale);
/* In place: the transpose of the rotation (rotation by -angle) on the first R dims. */
void hyla_rope_bwd(float *dx /*[n,heads,hd]*/, const float *cos_t /*[n,R/2]*/, const float *sin_t /*[n,R/2]*/,
                   int64_t n, int64_t heads, int64_t hd, int64_t R);
/* Causal GQA attention backward for one sequence (past = 0). dk, dv overwritten (summed over the
 * query heads of each kv head). out and lse are the forward's. work: hyla_attention_bwd_work_floats. */
void hyla_attention_bwd(float *d_q /*[T,Hq,hd]*/, float *d_k /*[T,Hkv,hd]*/, float *d_v /*[T,Hkv,hd]*/,
                        const float *dout /*[T,Hq,hd]*/, const float *out /*[T,Hq,hd]*/,
                        const float *lse /*[T,Hq]*/, const float *q /*[T,Hq,hd]*/,
                        const float *k /*[T,Hkv,hd]*/, const float *v /*[T,Hkv,hd]*/, int64_t T, int64_t Hq,
                        int64_t Hkv, int64_t hd, float scale, float *work);
size_t hyla_attention_bwd_work_floats(int64_t T, int64_t Hq, int64_t hd);
/* The same for queries at positions past .. past + T - 1 of a longer sequence over its keys
 * 0 .. past + T - 1 (context parallelism): dk, dv [past + T] are this slice's queries' part (the
 * earlier slices' keys take the other slices' parts too); dq is the whole sequence's, bit for
 * bit, when past x (Hq / Hkv) is a multiple of 64 (the query tiles then fall alike). */
void hyla_attention_bwd_past(float *d_q /*[T,Hq,hd]*/, float *d_k /*[S,Hkv,hd]*/, float *d_v /*[S,Hkv,hd]*/,
                             const float *dout /*[T,Hq,hd]*/, const float *out /*[T,Hq,hd]*/,
                             const float *lse /*[T,Hq]*/, const float *q /*[T,Hq,hd]*/,
                             const float *k /*[S,Hkv,hd]*/, const float *v /*[S,Hkv,hd]*/, int64_t T, int64_t past,
                             int64_t Hq, int64_t Hkv, int64_t hd, float scale, float *work);

/* Conv + SiLU backward for one sequence with zero history: pre is recomputed from x and w. */
void hyla_conv_silu_bwd(float *dx /*[T,C]*/, float *dw /*[C,K] +=*/, const float *dy /*[T,C]*/,
                        const float *x /*[T,C]*/, const float *w /*[C,K]*/, int64_t T, int64_t C, int64_t K);
/* The same for a slice of a longer sequence (context parallelism): rows before the first come
 * from hist (the forward's); d_hist receives, for the K-1 rows before the slice, the first taps'
 * part of their dx (NULL: not wanted), and dx_tail (NULL: none) is that part for the K-1 rows
 * ending this slice from the slice after (T < K - 1: its last T rows are this slice's), which
 * the sums here continue: dx is then
 * the whole sequence's, bit for bit. */
void hyla_conv_silu_bwd_hist(float *dx /*[T,C]*/, float *dw /*[C,K] +=*/, float *d_hist /*[K-1,C] or NULL*/,
                             const float *dx_tail /*[K-1,C] or NULL*/, const float *dy /*[T,C]*/,
                             const float *x /*[T,C]*/, const float *w /*[C,K]*/, const float *hist /*[K,C] or NULL*/,
                             int64_t T, int64_t C, int64_t K);
void hyla_gdn_gates_bwd(float *da /*[n,Hv]*/, float *db /*[n,Hv]*/, float *dA_log /*[Hv] +=*/,
                        float *ddt_bias /*[Hv] +=*/, const float *dg /*[n,Hv]*/, const float *dbeta /*[n,Hv]*/,
                        const float *a /*[n,Hv]*/, const float *b /*[n,Hv]*/, const float *A_log /*[Hv]*/,
                        const float *dt_bias /*[Hv]*/, int64_t n, int64_t Hv);
/* Chunked delta-rule backward for one sequence from a zero initial state, final-state gradient 0
 * (spec §8.6-8.7). dq, dk are per q/k head (summed over the Hv/Hk value heads sharing it). */
void hyla_delta_rule_chunked_bwd(float *d_q /*[T,Hk,dk]*/, float *d_k /*[T,Hk,dk]*/, float *d_v /*[T,Hv,dv]*/,
                                 float *d_g /*[T,Hv]*/, float *d_beta /*[T,Hv]*/, const float *dout /*[T,Hv,dv]*/,
                                 const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                 const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                 const float *beta /*[T,Hv]*/, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                                 int64_t dv, float *work);
/* The same from initial state state0 (NULL: zero) with d_state the gradient of the final state
 * (NULL: zero), also writing the gradient of the initial state to d_state0 (NULL: not wanted):
 * a sequence split at a chunk boundary (context parallelism) gives the whole sequence's
 * gradients when the later part runs first and hands its d_state0 to the earlier part. */
void hyla_delta_rule_chunked_bwd_state(float *d_q /*[T,Hk,dk]*/, float *d_k /*[T,Hk,dk]*/, float *d_v /*[T,Hv,dv]*/,
                                       float *d_g /*[T,Hv]*/, float *d_beta /*[T,Hv]*/,
                                       float *d_state0 /*[Hv,dk,dv] or NULL*/, const float *dout /*[T,Hv,dv]*/,
                                       const float *q /*[T,Hk,dk]*/, const float *k /*[T,Hk,dk]*/,
                                       const float *v /*[T,Hv,dv]*/, const float *g /*[T,Hv]*/,
                                       const float *beta /*[T,Hv]*/, const float *state0 /*[Hv,dk,dv] or NULL*/,
                                       const float *d_state /*[Hv,dk,dv] or NULL*/, int64_t T, int64_t Hk, int64_t Hv,
                                       int64_t dk, int64_t dv, float *work);
size_t hyla_delta_rule_chunked_bwd_work_floats(int64_t T, int64_t Hv, int64_t dk, int64_t dv);

/* Router backward (spec §8.8): top-k indices are constants. dtop_w = dLoss/d(top_w) (after
 * renormalisation if renorm). aux_dprob[e], if not NULL, is added to dLoss/dprobs[row, e] for every
 * row (the load-balancing term coef * E * count_e / N_tot^2). dlogits overwritten. */
void hyla_moe_route_bwd(float *dlogits /*[n,E]*/, const float *dtop_w /*[n,k]*/, const int32_t *top_idx /*[n,k]*/,
                        const float *probs /*[n,E]*/, const double *aux_dprob /*[E] or NULL*/, int64_t n,
                        int64_t E, int64_t k, int renorm);
/* dlogits = scale * (softmax(logits) - onehot(label)) on rows with label >= 0, 0 on ignored rows.
 * dlogits may alias logits. */
void hyla_cross_entropy_bwd(float *dlogits /*[n,V]*/, const float *logits /*[n,V]*/, const int32_t *labels /*[n]*/,
                            int64_t n, int64_t V, float scale);

#endif
