/* Named activation checkpoints (DESIGN §3; MaxText names, spec/maxtext.md §1): the model's
 * tensors a remat policy (engine/policy.h) keeps on device, offloads to the host tier, or
 * rematerialises (recomputes in backward). Tensors without a name (internal: norms' outputs, l2-normalised q/k, gates,
 * routing tables, SwiGLU products) are recomputed unless the policy is `none`, which keeps
 * everything and recomputes nothing. */
#ifndef HYLA_MODEL_CHECKPOINT_NAMES_H
#define HYLA_MODEL_CHECKPOINT_NAMES_H

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

const char *hyla_ckpt_name_str(hyla_ckpt_name c);

#endif
