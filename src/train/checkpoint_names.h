/* Named activation checkpoints (DESIGN §3) and remat policies (MaxText names, spec/maxtext.md §1).
 *
 * Each name is kept on device, offloaded to the host tier, or rematerialised (recomputed in
 * backward). Tensors without a name (internal: norms' outputs, l2-normalised q/k, gates,
 * routing tables, SwiGLU products) are recomputed unless the policy is `none`, which keeps
 * everything and recomputes nothing. */
#ifndef HYLA_TRAIN_CHECKPOINT_NAMES_H
#define HYLA_TRAIN_CHECKPOINT_NAMES_H

typedef enum {
    HYLA_CK_DECODER_LAYER_INPUT, /* residual entering the layer [n,H] */
    HYLA_CK_FFN_INPUT,           /* residual after the mixer [n,H] */
    HYLA_CK_GDN_IN_PROJ,         /* in_proj outputs q|k|v, z, b, a */
    HYLA_CK_GDN_CONV,            /* conv + silu output [n, conv_dim] */
    HYLA_CK_GDN_CORE,            /* delta-rule output [n, Hv*dv] */
    HYLA_CK_GDN_NORM,            /* gated-norm output [n, Hv*dv] */
    HYLA_CK_OUT_PROJ,            /* mixer output projection [n,H] (GDN and attention) */
    HYLA_CK_QUERY_PROJ,          /* q_proj output: query and output gate [n,Hq,hd] x2 */
    HYLA_CK_KEY_PROJ,            /* k_proj output [n,Hkv,hd] */
    HYLA_CK_VALUE_PROJ,          /* v_proj output [n,Hkv,hd] */
    HYLA_CK_CONTEXT,             /* softmax-attention output [n,Hq,hd] + log-sum-exp [n,Hq] */
    HYLA_CK_ATTENTION_OUT,       /* gated context, input of o_proj [n,Hq*hd] */
    HYLA_CK_ROUTER_LOGITS,       /* [n,E] */
    HYLA_CK_MOE_MLPWI_0,         /* routed experts' gate projections [n*k, I_e] */
    HYLA_CK_MOE_MLPWI_1,         /* routed experts' up projections [n*k, I_e] */
    HYLA_CK_MOE_MLPWO,           /* routed experts' down projections [n*k, H] */
    HYLA_CK_MLPWI_0,             /* shared expert / dense MLP gate projection */
    HYLA_CK_MLPWI_1,             /* shared expert / dense MLP up projection */
    HYLA_CK_MLPWO,               /* shared expert / dense MLP down projection */
    HYLA_CK__COUNT,
    HYLA_CK_INTERNAL = HYLA_CK__COUNT /* unnamed tensors */
} hyla_ckpt_name;

typedef enum { HYLA_KEEP_REMAT = 0, HYLA_KEEP_DEVICE = 1, HYLA_KEEP_OFFLOAD = 2 } hyla_keep;

typedef struct {
    char name[32];                 /* "minimal", "custom", ... */
    hyla_keep where[HYLA_CK__COUNT];
    int keep_internal;             /* `none`: keep unnamed tensors too (no recompute at all) */
} hyla_policy;

const char *hyla_ckpt_name_str(hyla_ckpt_name c);
/* Parse a policy: a preset name, or `custom:name=device|remat|offload,...` / a bare
 * `name=...,...` list (unlisted names: decoder_layer_input device, rest remat). Unknown names and
 * values are HYLA_ERR_ARG errors naming them. */
int hyla_policy_parse(hyla_policy *p, const char *text);
/* `name=where,...` for every name (reusable as a custom policy). */
void hyla_policy_format(const hyla_policy *p, char *buf, unsigned long cap);
const char *hyla_policy_presets(void);

#endif
