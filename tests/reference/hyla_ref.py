#!/usr/bin/python3
"""hyla_ref.py - independent float64 PyTorch oracle for Qwen3-Next / Qwen3.5 hybrid models.

Written from the model specification (/work/shared/spec/qwen3next.md, sections 1-4, 3.8, 7)
in Hugging Face transformers semantics for a float32 model (every bf16 cast in the spec is a
no-op).  It shares no code with the C engine in src/: it reads the same model directory
(config.json + safetensors, single file or sharded) with its own safetensors reader and
recomputes everything in float64.

Run with Debian's python (torch 1.13 + numpy):

    /usr/bin/python3 tests/reference/hyla_ref.py MODEL_DIR --tokens 1,2,3 [--logits-out F]
    /usr/bin/python3 tests/reference/hyla_ref.py MODEL_DIR --verify      # re-check expected.json
                                          # (+ grads_65.safetensors, train_expected.json if present)

Library use:  m = HylaRef(model_dir); out = m.forward(tokens)
  out["logits"]  float64 [T, V];  out["ce_loss"], out["aux_loss"], out["total_loss"]
  (None where undefined); out["router_logits"] list of [T, E] per MoE layer;
  out["min_router_gap"] smallest p_(k) - p_(k+1) over MoE layers and tokens (None: no MoE).
Training:  m.batch_loss(seqs) (differentiable ce/aux/total of a batch), loss_and_grads(m, seqs)
  (autograd float64 gradients by stored tensor name), train_adamw(m, batches) (the reference
  10-step AdamW run; TRAIN_HP), see README.md.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
DT = torch.float64

# model files (safetensors, config.json): ref_files.py, re-exported for the scripts that use them as
# hyla_ref.<name>
from ref_files import (  # noqa: E402,F401
    bf16_bits_from_f32, bf16_bits_to_f32, round_to_dtype, encode_tensor, st_write,
    st_read, read_model_tensors, load_config, load_config_from_dict)

# --------------------------------------------------------------------------------------------
# ops
# --------------------------------------------------------------------------------------------

def rmsnorm1p(x, w, eps):
    """Zero-centred RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w) over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def gated_rmsnorm(x, w, z, eps):
    """Plain-weight gated RMSNorm (norm before gate): w * norm(x) * silu(z)."""
    n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * n * F.silu(z)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def swiglu(x, wg, wu, wd):
    return (F.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()


def delta_rule_recurrent(q, k, v, beta, g, S0=None):
    """Recurrent gated delta rule (spec 4.1).  q,k [T,Hv,dk] (q already scaled), v [T,Hv,dv],
    beta, g [T,Hv].  State S [Hv,dk,dv] (k-index first).  Returns (o [T,Hv,dv], S_final)."""
    T, Hv, dk = k.shape
    dv = v.shape[-1]
    dt = v.dtype
    S = torch.zeros(Hv, dk, dv, dtype=dt) if S0 is None else S0.clone()
    o = torch.empty(T, Hv, dv, dtype=dt)
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]                    # decay first
        m = torch.einsum("hij,hi->hj", S, k[t])                   # read with decayed state
        delta = beta[t][:, None] * (v[t] - m)
        S = S + k[t][:, :, None] * delta[:, None, :]              # write
        o[t] = torch.einsum("hij,hi->hj", S, q[t])                # read out with updated state
    return o, S


def delta_rule_chunked(q, k, v, beta, g, S0=None, C=64):
    """Chunked gated delta rule (spec 4.2, HF torch fallback), chunk size C."""
    T, Hv, dk = k.shape
    dv = v.shape[-1]
    dt = v.dtype
    pad = (-T) % C
    if pad:
        # padded tokens: q = k = v = 0, beta = 0, g = 0 (no decay, no write)
        q = torch.cat([q, torch.zeros(pad, Hv, dk, dtype=dt)])
        k = torch.cat([k, torch.zeros(pad, Hv, dk, dtype=dt)])
        v = torch.cat([v, torch.zeros(pad, Hv, dv, dtype=dt)])
        beta = torch.cat([beta, torch.zeros(pad, Hv, dtype=dt)])
        g = torch.cat([g, torch.zeros(pad, Hv, dtype=dt)])
    Tp = T + pad
    n = Tp // C
    # -> [Hv, n, C, ...]
    Q = q.permute(1, 0, 2).reshape(Hv, n, C, dk)
    K = k.permute(1, 0, 2).reshape(Hv, n, C, dk)
    V = v.permute(1, 0, 2).reshape(Hv, n, C, dv)
    B = beta.permute(1, 0).reshape(Hv, n, C)
    G = g.permute(1, 0).reshape(Hv, n, C)

    gam = G.cumsum(-1)                                            # inclusive, within chunk
    diff = gam[..., :, None] - gam[..., None, :]                  # gamma_r - gamma_s
    lower_incl = torch.tril(torch.ones(C, C, dtype=torch.bool))
    Gam = torch.exp(diff.masked_fill(~lower_incl, float("-inf")))  # never exp positive uppers
    strict = torch.tril(torch.ones(C, C, dtype=torch.bool), -1)
    M = (B[..., :, None] * (K @ K.transpose(-1, -2)) * Gam).masked_fill(~strict, 0.0)
    # T = (I + M)^-1 by HF's forward substitution on A = -M
    A = -M
    for i in range(1, C):
        row = A[..., i, :i].clone()
        sub = A[..., :i, :i].clone()
        A[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
    eye = torch.eye(C, dtype=dt)
    Tm = A + eye
    resid = (Tm @ (eye + M) - eye).abs().max().item()
    assert resid < (1e-8 if Tm.dtype == torch.float64 else 1e-3), f"chunk T inverse residual {resid}"
    U = Tm @ (B[..., None] * V)
    W = Tm @ ((B * torch.exp(gam))[..., None] * K)

    S = torch.zeros(Hv, dk, dv, dtype=dt) if S0 is None else S0.clone()
    O = torch.empty(Hv, n, C, dv, dtype=dt)
    for c in range(n):
        Qc, Kc, gc = Q[:, c], K[:, c], gam[:, c]
        Vnew = U[:, c] - W[:, c] @ S
        O[:, c] = torch.exp(gc)[..., None] * (Qc @ S) + ((Qc @ Kc.transpose(-1, -2)) * Gam[:, c]) @ Vnew
        glast = gc[:, -1]
        S = torch.exp(glast)[:, None, None] * S + \
            Kc.transpose(-1, -2) @ (torch.exp(glast[:, None] - gc)[..., None] * Vnew)
    o = O.reshape(Hv, Tp, dv).permute(1, 0, 2)[:T]
    return o.contiguous(), S


def rope_cos_sin(T, R, theta, dt=DT):
    inv_freq = theta ** (-torch.arange(0, R, 2, dtype=dt) / R)    # theta^(-2i/R), i < R/2
    f = torch.arange(T, dtype=dt)[:, None] * inv_freq[None, :]
    emb = torch.cat([f, f], dim=-1)                                # [T, R]
    return emb.cos(), emb.sin()


def apply_partial_rope(x, cos, sin, R):
    """x [T, heads, hd]; rotate-half on the first R dims, pairs (i, i + R/2)."""
    if R == 0:
        return x
    xr, xp = x[..., :R], x[..., R:]
    x1, x2 = xr[..., :R // 2], xr[..., R // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    xr = xr * cos[:, None, :] + rot * sin[:, None, :]
    return torch.cat([xr, xp], dim=-1)


# --------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------

class HylaRef:
    def __init__(self, model_dir, check_delta=True, delta_tol=1e-10, dtype=DT):
        """dtype: compute dtype.  float64 is the oracle; float32 only estimates how far a
        plain fp32 implementation of the same math lands from it (delta check disabled)."""
        self.dir = model_dir
        self.dt = dtype
        if dtype != torch.float64:
            check_delta = False
        self.cfg = c = load_config(model_dir)
        self.check_delta = check_delta
        self.delta_tol = delta_tol
        self.max_delta_diff = 0.0
        raw = read_model_tensors(model_dir)
        self.dtypes = {k: v[1] for k, v in raw.items()}
        # prefix detection: VL wrapper (model.language_model.) or plain (model.)
        if "model.language_model.embed_tokens.weight" in raw:
            self.prefix = "model.language_model."
        elif "model.embed_tokens.weight" in raw:
            self.prefix = "model."
        else:
            raise ValueError("no embed_tokens.weight found")
        self.W = {}
        mtp = {}
        for name, (a, _) in raw.items():
            if name.startswith("mtp."):                            # HF ignores it; mtp_forward uses it
                mtp[name] = torch.from_numpy(a.copy()).to(dtype)
                continue
            if name.startswith("model.visual.") or name.startswith("visual."):
                continue                                           # ignored by HF on load
            self.W[name] = torch.from_numpy(a.copy()).to(dtype)
        self.used = set()
        self._build()
        unused = set(self.W) - self.used
        if unused:
            raise ValueError(f"unused tensors in checkpoint: {sorted(unused)[:8]}")
        self.mtp_tensors = mtp
        self.mtp = self._build_mtp(mtp) if mtp and c["mtp_layers"] > 0 else None

    def w(self, name, shape=None, full=False):
        key = name if full else self.prefix + name
        if key not in self.W:
            raise KeyError(f"missing tensor {key}")
        t = self.W[key]
        if shape is not None and list(t.shape) != list(shape):
            raise ValueError(f"{key}: shape {list(t.shape)} != expected {list(shape)}")
        self.used.add(key)
        return t

    def has(self, name):
        return (self.prefix + name) in self.W

    def _build(self):
        c = self.cfg
        H, V = c["hidden_size"], c["vocab_size"]
        self.embed = self.w("embed_tokens.weight", [V, H])
        self.final_norm = self.w("norm.weight", [H])
        if c["tie_word_embeddings"]:
            self.lm_head = self.embed
            if "lm_head.weight" in self.W:
                raise ValueError("tie_word_embeddings=true but lm_head.weight present")
        else:
            self.lm_head = self.w("lm_head.weight", [V, H], full=True)
        self.layers = []
        for i in range(c["num_hidden_layers"]):
            p = f"layers.{i}."
            L = {"type": c["layer_types"][i], "moe": c["moe_layers"][i]}
            L["in_norm"] = self.w(p + "input_layernorm.weight", [H])
            L["post_norm"] = self.w(p + "post_attention_layernorm.weight", [H])
            if L["type"] == "linear_attention":
                L.update(self._build_gdn(p + "linear_attn."))
            else:
                L.update(self._build_attn(p + "self_attn."))
            if L["moe"]:
                L.update(self._build_moe(p + "mlp."))
            else:
                I = c["intermediate_size"]
                L["mlp"] = (self.w(p + "mlp.gate_proj.weight", [I, H]),
                            self.w(p + "mlp.up_proj.weight", [I, H]),
                            self.w(p + "mlp.down_proj.weight", [H, I]))
            self.layers.append(L)

    def _build_mtp(self, tensors):
        """The MTP head (docs/mtp.md; vLLM qwen3_next_mtp.py / qwen3_5_mtp.py): fc [H, 2H], the
        pre-fc norms of the embedding and of the trunk's hidden state, MTP layer 0 (a
        full-attention decoder layer with the family's MLP, MoE as layer 0's rule says) and
        mtp.norm; the embedding and lm_head are the trunk's."""
        c = self.cfg
        H = c["hidden_size"]
        W, prefix, used = self.W, self.prefix, self.used
        self.W, self.prefix, self.used = tensors, "mtp.", set()
        try:
            M = {"fc": self.w("fc.weight", [H, 2 * H]), "norm_e": self.w("pre_fc_norm_embedding.weight", [H]),
                 "norm_h": self.w("pre_fc_norm_hidden.weight", [H]), "norm": self.w("norm.weight", [H])}
            p = "layers.0."
            L = {"type": "full_attention", "moe": c["moe_layers"][0]}
            L["in_norm"] = self.w(p + "input_layernorm.weight", [H])
            L["post_norm"] = self.w(p + "post_attention_layernorm.weight", [H])
            L.update(self._build_attn(p + "self_attn."))
            if L["moe"]:
                L.update(self._build_moe(p + "mlp."))
            else:
                I = c["intermediate_size"]
                L["mlp"] = (self.w(p + "mlp.gate_proj.weight", [I, H]), self.w(p + "mlp.up_proj.weight", [I, H]),
                            self.w(p + "mlp.down_proj.weight", [H, I]))
            M["layer"] = L
            unused = set(self.W) - self.used
            if unused:
                raise ValueError(f"unused MTP tensors: {sorted(unused)[:8]}")
        finally:
            self.W, self.prefix, self.used = W, prefix, used
        return M

    def mtp_forward(self, tokens):
        """Teacher-forced MTP logits [T - 1, V] and the MTP layer's router gap (None without
        MoE): row t from (tokens[t + 1], h_t), h_t the trunk's
        final-normed hidden state at t, at RoPE position t; it predicts tokens[t + 2]."""
        c = self.cfg
        eps = c["rms_norm_eps"]
        M = self.mtp
        self.forward_core(tokens)
        hn = rmsnorm1p(self.last_hidden, self.final_norm, eps)
        e = self.embed[torch.tensor([int(t) for t in tokens[1:]])]
        x = torch.cat([rmsnorm1p(e, M["norm_e"], eps), rmsnorm1p(hn[:-1], M["norm_h"], eps)], -1) @ M["fc"].t()
        L = M["layer"]
        x = x + self.attn(L, rmsnorm1p(x, L["in_norm"], eps))
        xn = rmsnorm1p(x, L["post_norm"], eps)
        gap = None
        if L["moe"]:
            y, _, gap = self.moe(L, xn)
        else:
            y = swiglu(xn, *L["mlp"])
        x = x + y
        return rmsnorm1p(x, M["norm"], eps) @ self.lm_head.t(), gap

    def _build_gdn(self, p):
        c = self.cfg
        H = c["hidden_size"]
        Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv, Kc = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
        assert Hv % Hk == 0
        r = Hv // Hk
        key_dim, value_dim = Hk * dk, Hv * dv
        conv_dim = 2 * key_dim + value_dim
        L = {}
        if self.has(p + "in_proj_qkvz.weight"):
            # Qwen3-Next grouped layout (spec 2.3): convert to [q|k|v], z, b, a row order.
            wqkvz = self.w(p + "in_proj_qkvz.weight", [2 * key_dim + 2 * value_dim, H])
            wba = self.w(p + "in_proj_ba.weight", [2 * Hv, H])
            Gq = 2 * dk + 2 * r * dv
            grp = wqkvz.reshape(Hk, Gq, H)
            wq = grp[:, :dk].reshape(key_dim, H)
            wk = grp[:, dk:2 * dk].reshape(key_dim, H)
            wv = grp[:, 2 * dk:2 * dk + r * dv].reshape(value_dim, H)   # head g*r+i, dim d
            wz = grp[:, 2 * dk + r * dv:].reshape(value_dim, H)
            gb = wba.reshape(Hk, 2 * r, H)
            L["w_b"] = gb[:, :r].reshape(Hv, H)                         # b's first in a group
            L["w_a"] = gb[:, r:].reshape(Hv, H)
            L["w_qkv"] = torch.cat([wq, wk, wv], 0)
            L["w_z"] = wz
        else:
            L["w_qkv"] = self.w(p + "in_proj_qkv.weight", [conv_dim, H])
            L["w_z"] = self.w(p + "in_proj_z.weight", [value_dim, H])
            L["w_b"] = self.w(p + "in_proj_b.weight", [Hv, H])
            L["w_a"] = self.w(p + "in_proj_a.weight", [Hv, H])
        L["conv"] = self.w(p + "conv1d.weight", [conv_dim, 1, Kc])[:, 0, :]
        L["dt_bias"] = self.w(p + "dt_bias", [Hv])
        L["A_log"] = self.w(p + "A_log", [Hv])
        L["gnorm"] = self.w(p + "norm.weight", [dv])
        L["out_proj"] = self.w(p + "out_proj.weight", [H, value_dim])
        return L

    def _build_attn(self, p):
        c = self.cfg
        H, Hq, Hkv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        return {"wq": self.w(p + "q_proj.weight", [Hq * hd * 2, H]),
                "wk": self.w(p + "k_proj.weight", [Hkv * hd, H]),
                "wv": self.w(p + "v_proj.weight", [Hkv * hd, H]),
                "wo": self.w(p + "o_proj.weight", [H, Hq * hd]),
                "q_norm": self.w(p + "q_norm.weight", [hd]),
                "k_norm": self.w(p + "k_norm.weight", [hd])}

    def _build_moe(self, p):
        c = self.cfg
        H, E, Ie, Is = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
        L = {"router": self.w(p + "gate.weight", [E, H])}
        if self.has(p + "experts.gate_up_proj"):
            gu = self.w(p + "experts.gate_up_proj", [E, 2 * Ie, H])
            dn = self.w(p + "experts.down_proj", [E, H, Ie])
            L["experts"] = [(gu[e, :Ie], gu[e, Ie:], dn[e]) for e in range(E)]
        else:
            L["experts"] = [(self.w(p + f"experts.{e}.gate_proj.weight", [Ie, H]),
                             self.w(p + f"experts.{e}.up_proj.weight", [Ie, H]),
                             self.w(p + f"experts.{e}.down_proj.weight", [H, Ie])) for e in range(E)]
        L["shared"] = (self.w(p + "shared_expert.gate_proj.weight", [Is, H]),
                       self.w(p + "shared_expert.up_proj.weight", [Is, H]),
                       self.w(p + "shared_expert.down_proj.weight", [H, Is]))
        L["shared_gate"] = self.w(p + "shared_expert_gate.weight", [1, H])
        return L

    # ---------------------------------------------------------------------------- mixers
    def gdn(self, L, x):
        c = self.cfg
        T = x.shape[0]
        Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv, Kc = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
        r = Hv // Hk
        key_dim = Hk * dk
        cin = x @ L["w_qkv"].t()                                   # [T, conv_dim] = q | k | v
        z = (x @ L["w_z"].t()).reshape(T, Hv, dv)
        b = x @ L["w_b"].t()                                       # [T, Hv]
        a = x @ L["w_a"].t()
        # causal depthwise conv, zero left padding; w[:, K-1] multiplies the current token
        cp = torch.cat([torch.zeros(Kc - 1, cin.shape[1], dtype=cin.dtype), cin], 0)
        pre = torch.zeros_like(cin)
        for j in range(Kc):
            pre = pre + L["conv"][:, j][None, :] * cp[j:j + T]
        cc = F.silu(pre)
        q = cc[:, :key_dim].reshape(T, Hk, dk)
        k = cc[:, key_dim:2 * key_dim].reshape(T, Hk, dk)
        v = cc[:, 2 * key_dim:].reshape(T, Hv, dv)
        beta = torch.sigmoid(b)
        g = -torch.exp(L["A_log"])[None, :] * F.softplus(a + L["dt_bias"][None, :])
        q = l2norm(q) * dk ** -0.5
        k = l2norm(k)
        q = q.repeat_interleave(r, dim=1)                          # value head h -> key head h//r
        k = k.repeat_interleave(r, dim=1)
        o, S = delta_rule_chunked(q, k, v, beta, g, C=64)
        if self.check_delta:
            o2, S2 = delta_rule_recurrent(q, k, v, beta, g)
            d = max((o - o2).abs().max().item(), (S - S2).abs().max().item())
            self.max_delta_diff = max(self.max_delta_diff, d)
            assert d < self.delta_tol, f"recurrent vs chunked delta rule differ by {d}"
        y = gated_rmsnorm(o, L["gnorm"], z, c["rms_norm_eps"])     # per value head over dv
        return y.reshape(T, Hv * dv) @ L["out_proj"].t()

    def attn(self, L, x):
        c = self.cfg
        T = x.shape[0]
        Hq, Hkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        eps = c["rms_norm_eps"]
        qg = (x @ L["wq"].t()).reshape(T, Hq, 2 * hd)              # per head: query | gate
        Q, G = qg[..., :hd], qg[..., hd:]
        K = (x @ L["wk"].t()).reshape(T, Hkv, hd)
        Vv = (x @ L["wv"].t()).reshape(T, Hkv, hd)
        Q = rmsnorm1p(Q, L["q_norm"], eps)
        K = rmsnorm1p(K, L["k_norm"], eps)
        R = int(hd * c["partial_rotary_factor"])
        cos, sin = rope_cos_sin(T, R, c["rope_theta"], x.dtype)
        Q = apply_partial_rope(Q, cos, sin, R)
        K = apply_partial_rope(K, cos, sin, R)
        grp = Hq // Hkv
        Kx = K.repeat_interleave(grp, dim=1)                       # head h -> kv head h//grp
        Vx = Vv.repeat_interleave(grp, dim=1)
        s = torch.einsum("thd,shd->hts", Q, Kx) * hd ** -0.5
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        s = s.masked_fill(mask[None], float("-inf"))
        P = torch.softmax(s, -1)
        A = torch.einsum("hts,shd->thd", P, Vx).reshape(T, Hq * hd)
        A = A * torch.sigmoid(G.reshape(T, Hq * hd))
        return A @ L["wo"].t()

    def moe(self, L, x):
        c = self.cfg
        E, k = c["num_experts"], c["num_experts_per_tok"]
        logits = x @ L["router"].t()                               # [T, E]
        p = torch.softmax(logits, -1)
        vals, idx = torch.topk(p, k, dim=-1)
        if c["norm_topk_prob"]:
            vals = vals / vals.sum(-1, keepdim=True)
        ps = torch.sort(p, -1, descending=True).values
        gap = (ps[:, k - 1] - ps[:, k]).min().item() if k < E else float("inf")
        y = torch.zeros_like(x)
        for e in range(E):
            sel = (idx == e)                                       # [T, k]
            rows = sel.any(-1).nonzero().flatten()
            if rows.numel() == 0:
                continue
            wts = (vals * sel).sum(-1)[rows]
            y[rows] += wts[:, None] * swiglu(x[rows], *L["experts"][e])
        y = y + torch.sigmoid(x @ L["shared_gate"].t()) * swiglu(x, *L["shared"])
        return y, logits, gap

    # ---------------------------------------------------------------------------- forward
    def forward_core(self, tokens):
        """One sequence (positions 0..T-1, zero initial state).  Returns (logits [T, V],
        router_logits: list of [T, E] per MoE layer, min_router_gap or None).  Differentiable
        with respect to the parameters (see set_params)."""
        c = self.cfg
        tokens = [int(t) for t in tokens]
        T = len(tokens)
        if T == 0:
            raise ValueError("empty token sequence")
        if min(tokens) < 0 or max(tokens) >= c["vocab_size"]:
            raise ValueError("token id out of range")
        eps = c["rms_norm_eps"]
        h = self.embed[torch.tensor(tokens)]
        router_logits, min_gap = [], None
        for L in self.layers:
            xn = rmsnorm1p(h, L["in_norm"], eps)
            h = h + (self.gdn(L, xn) if L["type"] == "linear_attention" else self.attn(L, xn))
            xn = rmsnorm1p(h, L["post_norm"], eps)
            if L["moe"]:
                y, rl, gap = self.moe(L, xn)
                router_logits.append(rl)
                min_gap = gap if min_gap is None else min(min_gap, gap)
            else:
                y = swiglu(xn, *L["mlp"])
            h = h + y
        self.last_hidden = h                                       # before the final norm (mtp_forward)
        logits = rmsnorm1p(h, self.final_norm, eps) @ self.lm_head.t()
        return logits, router_logits, min_gap

    def forward(self, tokens):
        c = self.cfg
        tokens = [int(t) for t in tokens]
        T = len(tokens)
        logits, router_logits, min_gap = self.forward_core(tokens)
        ce = None
        if T >= 2:
            ce = next_token_nll(logits, tokens).mean().item()
        aux = None
        if router_logits:
            aux = router_aux_loss(router_logits, c["num_experts"], c["num_experts_per_tok"])
        total = None
        if ce is not None:
            total = ce + (c["router_aux_loss_coef"] * aux if aux is not None else 0.0)
        return {"logits": logits, "ce_loss": ce, "aux_loss": aux, "total_loss": total,
                "router_logits": router_logits, "min_router_gap": min_gap}

    # ---------------------------------------------------------------------------- training
    def params(self):
        """The trainable parameters: every stored tensor the model uses (mtp.* / model.visual.*
        excluded), keyed by its full stored name, in its stored layout (grouped in_proj_qkvz,
        fused experts, ... exactly as in the checkpoint), in checkpoint order."""
        return dict(self.W)

    def set_params(self, P):
        """Replace the parameters (same names and shapes as params()) and rebuild the derived
        per-layer views, so a forward is differentiable with respect to the tensors in P
        (e.g. leaf tensors with requires_grad).  Tied embeddings share the one tensor."""
        if list(P) != list(self.W):
            raise ValueError("set_params: parameter names differ from the model's")
        for k, v in P.items():
            if tuple(v.shape) != tuple(self.W[k].shape):
                raise ValueError(f"set_params: {k} shape {tuple(v.shape)}")
        self.W = dict(P)
        self.used = set()
        self._build()

    def batch_loss(self, seqs):
        """Losses of a batch of sequences, as (differentiable) tensors.  Each sequence is run on
        its own (positions from 0, zero state) and predicts only its own next tokens.
        ce: mean over ALL labelled positions of all sequences (sum_b (T_b - 1) of them).
        aux (None without MoE layers): spec 3.8 over all MoE layers and all rows of the batch,
        N_tot = n_moe_layers * sum_b T_b (rows concatenated layer-major, then sequence, then
        position, as HF's cat over layers of [B*T, E]).  total = ce + coef * aux."""
        c = self.cfg
        nll, rls, gap = [], [], None
        for toks in seqs:
            toks = [int(t) for t in toks]
            logits, rl, g = self.forward_core(toks)
            if len(toks) >= 2:
                nll.append(next_token_nll(logits, toks))
            rls.append(rl)
            if g is not None:
                gap = g if gap is None else min(gap, g)
        ce = torch.cat(nll).mean() if nll else None
        aux = None
        if rls[0]:
            rows = [torch.cat([rl[l] for rl in rls], 0) for l in range(len(rls[0]))]
            aux = router_aux_loss_t(rows, c["num_experts"], c["num_experts_per_tok"])
        total = None
        if ce is not None:
            total = ce + c["router_aux_loss_coef"] * aux if aux is not None else ce
        return {"ce": ce, "aux": aux, "total": total, "min_router_gap": gap}


def next_token_nll(logits, tokens):
    """-log softmax(logits[t])[tokens[t+1]] for t = 0..T-2 (tensor [T-1])."""
    T = len(tokens)
    lp = torch.log_softmax(logits[:-1], -1)
    tgt = torch.tensor(tokens[1:])
    return -lp[torch.arange(T - 1), tgt]


def router_aux_loss_t(router_logits, E, k):
    """Switch-style load balancing over ALL MoE layers' raw logits (spec 3.8), as a tensor:
    aux = E * sum_e (count_e / N_tot) * mean_prob_e, counts over all k slots.  The top-k
    one-hot counts are constants; the gradient flows through the softmax probabilities."""
    lam = torch.cat(router_logits, 0)                              # [N_tot, E]
    P = torch.softmax(lam, -1)
    sel = torch.topk(P, k, dim=-1).indices
    counts = F.one_hot(sel, E).to(lam.dtype).sum((0, 1))                  # [E], sums to k*N_tot
    frac = counts / lam.shape[0]
    return E * (frac * P.mean(0)).sum()


def router_aux_loss(router_logits, E, k):
    return router_aux_loss_t(router_logits, E, k).item()


# --------------------------------------------------------------------------------------------
# gradients and a reference AdamW training run (plain torch ops; see README.md)
# --------------------------------------------------------------------------------------------

def loss_and_grads(model, seqs, params=None, key="total"):
    """Autograd gradient of batch_loss(seqs)["total"] with respect to EVERY parameter tensor
    (stored names and layouts; tied embeddings get the sum of both uses, since embed and lm_head
    are the same leaf).  Top-k indices are constants.  Parameters that the loss does not reach
    (e.g. experts no token was routed to) get zeros.  key: "total" (default), "ce" or "aux".
    Returns (losses as floats, {name: grad}).
    The model is left holding detached copies of the parameters."""
    base = model.params() if params is None else params
    P = {k: v.detach().clone().requires_grad_(True) for k, v in base.items()}
    model.set_params(P)
    out = model.batch_loss(seqs)
    gs = torch.autograd.grad(out[key], list(P.values()), allow_unused=True)
    G = {k: (torch.zeros_like(P[k]) if g is None else g.detach()) for k, g in zip(P, gs)}
    model.set_params({k: v.detach() for k, v in P.items()})
    res = {k: (None if out[k] is None else out[k].item()) for k in ("ce", "aux", "total")}
    res["min_router_gap"] = out["min_router_gap"]
    return res, G


def mtp_total_loss(model, seqs, weight):
    """batch_loss(seqs)["total"] + weight x the MTP loss: the mean over every sequence's rows
    t = 0 .. T - 3 of -log p_mtp(tokens[t + 2]) (row t from (tokens[t + 1], h_t), docs/mtp.md).
    Returns (total, mtp mean, main total) as tensors."""
    out = model.batch_loss(seqs)
    nll = []
    for toks in seqs:
        toks = [int(t) for t in toks]
        if len(toks) >= 3:
            lg, _ = model.mtp_forward(toks)
            lp = torch.log_softmax(lg[:len(toks) - 2], -1)
            nll.append(-lp[torch.arange(len(toks) - 2), torch.tensor(toks[2:])])
    mtp = torch.cat(nll).mean()
    return out["total"] + weight * mtp, mtp, out["total"]


def mtp_loss_and_grads(model, seqs, weight):
    """Autograd gradient of mtp_total_loss with respect to every trunk parameter and every mtp.*
    tensor (stored names). Returns ({"total", "mtp", "main"}, {name: grad})."""
    P = {k: v.detach().clone().requires_grad_(True) for k, v in model.params().items()}
    M = {k: v.detach().clone().requires_grad_(True) for k, v in model.mtp_tensors.items()}
    model.set_params(P)
    model.mtp = model._build_mtp(M)
    total, mtp, main = mtp_total_loss(model, seqs, weight)
    leaves = list(P.values()) + list(M.values())
    gs = torch.autograd.grad(total, leaves, allow_unused=True)
    names = list(P) + list(M)
    G = {k: (torch.zeros_like(v) if g is None else g.detach()) for k, v, g in zip(names, leaves, gs)}
    model.set_params({k: v.detach() for k, v in P.items()})
    model.mtp_tensors = {k: v.detach() for k, v in M.items()}
    model.mtp = model._build_mtp(model.mtp_tensors)
    return {"total": total.item(), "mtp": mtp.item(), "main": main.item()}, G


def fd_check_grads(model, seqs, G, picks, h=1e-6, tol=1e-6, key="total"):
    """Checks autograd entries G[name][idx] against a 4-point central difference of the total
    loss (batch_loss()[key]) in the parameter's dtype (float64):
    (8(f(+h)-f(-h)) - (f(+2h)-f(-2h))) / 12h.
    Asserts relative error < tol.  Returns a list of {name, index, autograd, fd, rel_err}."""
    P0 = {k: v.detach().clone() for k, v in model.params().items()}
    res = []
    with torch.no_grad():
        for name, idx in picks:
            f = {}
            for m in (-2, -1, 1, 2):
                P = dict(P0)
                t = P0[name].clone()
                t[idx] += m * h
                P[name] = t
                model.set_params(P)
                f[m] = model.batch_loss(seqs)[key].item()
            fd = (8.0 * (f[1] - f[-1]) - (f[2] - f[-2])) / (12.0 * h)
            ad = float(G[name][idx])
            rel = abs(fd - ad) / max(abs(ad), 1e-300)
            res.append({"loss": key, "name": name, "index": [int(i) for i in idx], "autograd": ad,
                        "fd": fd, "rel_err": rel})
            assert rel < tol, f"FD check {name}{list(idx)}: autograd {ad!r} vs fd {fd!r} (rel {rel:.2e})"
    model.set_params(P0)
    return res


TRAIN_HP = {"steps": 10, "batch_size": 2, "seq_len": 33, "data_seed_base": 1000,
            "peak_lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 3, "total_steps": 10,
            "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
            "max_grad_norm": 1.0, "clip_eps": 1e-6}


def train_lr(s, hp=TRAIN_HP):
    """Linear warmup to peak over warmup_steps (step s uses peak*(s+1)/warmup), then cosine
    from peak to min_lr: p = (s - warmup)/(total - warmup)."""
    peak, lo, wu, tot = hp["peak_lr"], hp["min_lr"], hp["warmup_steps"], hp["total_steps"]
    if s < wu:
        return peak * (s + 1) / wu
    p = (s - wu) / (tot - wu)
    return lo + 0.5 * (peak - lo) * (1.0 + math.cos(math.pi * p))


def train_batches(vocab, hp=TRAIN_HP):
    """Step s: np.random.default_rng(data_seed_base + s).integers(0, vocab, size=(B, T))."""
    return [np.random.default_rng(hp["data_seed_base"] + s)
            .integers(0, vocab, size=(hp["batch_size"], hp["seq_len"])).tolist()
            for s in range(hp["steps"])]


def train_adamw(model, batches, hp=TRAIN_HP, snapshots=None):
    """Reference training run, plain torch ops, in the model's dtype.  Per step s (t = s+1):
    loss = batch_loss (ce + coef*aux) before the update; g = autograd grads;
    grad_norm = sqrt(sum over unique parameters of sum g^2); if grad_norm > max_norm every g
    is scaled by max_norm / (grad_norm + clip_eps); then for every parameter p:
      if p.dim() >= 2:  p = p - lr*wd*p            (decoupled decay, >= 2-D tensors only)
      m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
      m_hat = m/(1-b1^t);  v_hat = v/(1-b2^t);  p = p - lr*m_hat/(sqrt(v_hat)+eps)
    Returns (per-step records, final parameters).  snapshots: optional dict whose keys are step
    counts n; snapshots[n] is set to a copy of the parameters after n steps.
    Leaves the model holding the final params."""
    b1, b2, eps, wd = hp["beta1"], hp["beta2"], hp["eps"], hp["weight_decay"]
    P = {k: v.detach().clone() for k, v in model.params().items()}
    M = {k: torch.zeros_like(v) for k, v in P.items()}
    Vv = {k: torch.zeros_like(v) for k, v in P.items()}
    steps = []
    for s, batch in enumerate(batches):
        t = s + 1
        lr = train_lr(s, hp)
        res, G = loss_and_grads(model, batch, P)
        gn = float(torch.stack([g.norm(2) for g in G.values()]).norm(2))
        scale = 1.0
        if gn > hp["max_grad_norm"]:
            scale = hp["max_grad_norm"] / (gn + hp["clip_eps"])
            G = {k: g * scale for k, g in G.items()}
        for k in P:
            p, g = P[k], G[k]
            if p.dim() >= 2:
                p = p - lr * wd * p
            M[k] = b1 * M[k] + (1 - b1) * g
            Vv[k] = b2 * Vv[k] + (1 - b2) * g * g
            m_hat = M[k] / (1 - b1 ** t)
            v_hat = Vv[k] / (1 - b2 ** t)
            P[k] = p - lr * m_hat / (torch.sqrt(v_hat) + eps)
        if snapshots is not None and t in snapshots:
            snapshots[t] = {k: v.clone() for k, v in P.items()}
        steps.append({"step": s, "ce": res["ce"], "aux": res["aux"], "loss": res["total"],
                      "lr": lr, "grad_norm": gn, "clip_scale": scale,
                      "min_router_gap": res["min_router_gap"]})
    model.set_params(P)
    return steps, P


def train_adamw_torch_optim(model, batches, hp=TRAIN_HP):
    """Cross-check of train_adamw with torch.optim.AdamW (two parameter groups: weight decay for
    >= 2-D tensors, none for 1-D) and torch.nn.utils.clip_grad_norm_.  Returns final params."""
    P = {k: v.detach().clone().requires_grad_(True) for k, v in model.params().items()}
    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["peak_lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])
    for s, batch in enumerate(batches):
        for gr in opt.param_groups:
            gr["lr"] = train_lr(s, hp)
        opt.zero_grad()
        model.set_params(P)
        model.batch_loss(batch)["total"].backward()
        for p in P.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        torch.nn.utils.clip_grad_norm_(list(P.values()), hp["max_grad_norm"])
        opt.step()
    P = {k: v.detach().clone() for k, v in P.items()}
    model.set_params(P)
    return P


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

def verify_case(model_dir, atol_logits=1e-9):
    with open(os.path.join(model_dir, "expected.json")) as f:
        exp = json.load(f)
    m = HylaRef(model_dir)
    worst = 0.0
    for run in exp["runs"]:
        out = m.forward(run["tokens"])
        T = len(run["tokens"])
        ref = np.fromfile(os.path.join(model_dir, run["logits"]), dtype="<f4").reshape(T, -1)
        d = float(np.abs(ref.astype(np.float64) - out["logits"].numpy()).max())
        # stored as float32: allow its rounding
        lim = atol_logits + 1e-7 * max(1.0, float(np.abs(ref).max()))
        worst = max(worst, d)
        assert d <= lim, f"{model_dir} T={T}: logits diff {d}"
        for key in ("ce_loss", "aux_loss", "total_loss"):
            a, b = run[key], out[key]
            assert (a is None) == (b is None), key
            if a is not None:
                assert abs(a - b) <= 1e-9 * max(1.0, abs(a)), (key, a, b)
    if "grads" in exp:
        verify_grads(model_dir, exp)
    if os.path.exists(os.path.join(model_dir, "train_expected.json")):
        verify_train(model_dir)
    return worst


def verify_grads(model_dir, exp):
    """Recompute grads_<T>.safetensors (stored as F32) and compare."""
    gi = exp["grads"]
    run = next(r for r in exp["runs"] if len(r["tokens"]) == gi["tokens_run"])
    res, G = loss_and_grads(HylaRef(model_dir, check_delta=False), [run["tokens"]])
    assert abs(res["total"] - gi["loss"]) <= 1e-9 * max(1.0, abs(gi["loss"])), (res, gi["loss"])
    stored = st_read(os.path.join(model_dir, gi["file"]))
    assert list(stored) == list(G), "gradient tensor names/order differ"
    worst = 0.0
    for k, g in G.items():
        a, dt = stored[k]
        b = g.numpy()
        assert dt == "F32" and a.shape == b.shape, k
        d = np.abs(a - b)
        lim = 1.2e-7 * np.abs(b) + 1e-12 * max(1.0, float(np.abs(b).max()))
        assert np.all(d <= lim), f"{k}: gradient differs by {float(d.max())}"
        worst = max(worst, float(d.max()))
    return worst


def verify_train(model_dir):
    """Re-run the reference AdamW training of train_expected.json and compare."""
    with open(os.path.join(model_dir, "train_expected.json")) as f:
        tr = json.load(f)
    hp = tr["hyperparameters"]
    assert tr["batches"] == train_batches(tr["vocab_size"], hp), "batches differ from the generator"
    steps, P = train_adamw(HylaRef(model_dir, check_delta=False), tr["batches"], hp)
    for a, b in zip(tr["steps"], steps):
        for key in ("ce", "aux", "loss"):
            assert (a[key] is None) == (b[key] is None), key
            if a[key] is not None:
                assert abs(a[key] - b[key]) <= 1e-6, (a["step"], key, a[key], b[key])
        assert a["lr"] == b["lr"], (a["step"], a["lr"], b["lr"])
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-6 * b["grad_norm"], (a["step"], "grad_norm")
    stored = st_read(os.path.join(model_dir, tr["final_params"]))
    assert list(stored) == list(P), "final parameter names/order differ"
    for k, p in P.items():
        d = np.abs(stored[k][0] - p.numpy())
        assert np.all(d <= 1.2e-7 * np.abs(p.numpy()) + 1e-6), f"{k}: final params differ by {float(d.max())}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--logits-out", help="write logits as raw little-endian float32 [T, V]")
    ap.add_argument("--no-delta-check", action="store_true",
                    help="skip the recurrent-vs-chunked delta-rule cross-check")
    ap.add_argument("--fp32", action="store_true",
                    help="compute in float32 instead (estimate of plain-fp32 deviation; not the oracle)")
    ap.add_argument("--verify", action="store_true",
                    help="recompute MODEL_DIR/expected.json and compare")
    a = ap.parse_args()
    if a.verify:
        d = verify_case(a.model_dir)
        extra = ""
        with open(os.path.join(a.model_dir, "expected.json")) as f:
            if "grads" in json.load(f):
                extra += ", gradients"
        if os.path.exists(os.path.join(a.model_dir, "train_expected.json")):
            extra += ", training run"
        print(f"OK {a.model_dir} (max logits diff vs stored f32 {d:.3g}{extra})")
        return
    if not a.tokens:
        ap.error("--tokens required (or --verify)")
    m = HylaRef(a.model_dir, check_delta=not a.no_delta_check,
                dtype=torch.float32 if a.fp32 else torch.float64)
    out = m.forward([int(t) for t in a.tokens.split(",") if t.strip()])
    if a.logits_out:
        out["logits"].numpy().astype("<f4").tofile(a.logits_out)
    print(json.dumps({"T": out["logits"].shape[0], "ce_loss": out["ce_loss"],
                      "aux_loss": out["aux_loss"], "total_loss": out["total_loss"],
                      "min_router_gap": out["min_router_gap"],
                      "max_delta_rule_diff": m.max_delta_diff,
                      "last_logits_head": out["logits"][-1, :8].tolist()}, indent=1))


if __name__ == "__main__":
    main()
