#!/usr/bin/python3
"""make_cases.py OUTDIR [--only NAME,...]

Creates tiny random Hugging Face-format Qwen3-Next / Qwen3.5 model directories under OUTDIR and,
for each, expected outputs computed by the independent float64 oracle hyla_ref.py (which
re-reads the files just written).  Deterministic (fixed seeds).  See README.md.
"""
import argparse
import fnmatch
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hyla_ref as ref  # noqa: E402

SEQ_LENS = [1, 63, 64, 65, 200]
GAP_MIN = 1e-5
GRAD_T = 65                 # gradients are written for the run with this many tokens
FD_TOL = 1e-6               # finite-difference check of autograd entries: max relative error
TRAIN_XCHECK_STEPS = 3      # steps of the training run re-done with torch.optim.AdamW

# Parameter kinds whose largest-|gradient| entry is finite-difference checked in every model
# (name suffix patterns; the tensor of that kind with the largest max |g| is used).
FD_KINDS = ["embed_tokens.weight", "lm_head.weight", "input_layernorm.weight",
            "linear_attn.in_proj_qkvz.weight", "linear_attn.in_proj_ba.weight",
            "linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_a.weight",
            "linear_attn.conv1d.weight", "linear_attn.A_log", "linear_attn.dt_bias",
            "linear_attn.norm.weight", "self_attn.q_proj.weight", "self_attn.q_norm.weight",
            "mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.*.gate_proj.weight",
            "mlp.shared_expert_gate.weight", "mlp.down_proj.weight"]

BASE = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=12, linear_conv_kernel_dim=4, num_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
            intermediate_size=40, rms_norm_eps=1e-6, hidden_act="silu")

# name -> description.  "layout": per_expert | fused; "dtype": storage policy; "shards": files.
MODELS = {
    "next_moe_8l": dict(family="qwen3_next", seed=11, vocab=101, layers=8, prf=0.25,
                        interval=4, experts="per_expert", dtype="F32", shards=1, extra_mtp=True,
                        train=True),
    "next_moe_6l": dict(family="qwen3_next", seed=12, vocab=128, layers=6, prf=0.5, interval=4,
                        experts="fused", dtype="F32", shards=3, sparse_step=1, mlp_only=[1],
                        aux_coef=0.01),
    "q35_dense": dict(family="qwen3_5", seed=13, vocab=120, layers=4, prf=0.5, interval=4,
                      dtype="BF16", shards=1, tied=True, extra_mtp=True, extra_visual=True,
                      train=True),
    "q35_moe": dict(family="qwen3_5_moe", seed=14, vocab=113, layers=4, prf=0.25, interval=4, extra_mtp=True,
                    experts="fused", dtype="F16_MIX", shards=1, extra_visual=True),
    "irregular": dict(family="qwen3_next", seed=15, vocab=107, layers=7, prf=0.25, interval=4,
                      layer_types=["full_attention", "linear_attention", "linear_attention",
                                   "full_attention", "full_attention", "linear_attention",
                                   "linear_attention"],
                      experts="per_expert", dtype="F32", shards=1),
    "all_linear": dict(family="qwen3_next", seed=16, vocab=97, layers=3, prf=0.25, interval=4,
                       layer_types=["linear_attention"] * 3, experts="per_expert", dtype="F32",
                       shards=1, sparse_step=2),
    "all_attention": dict(family="qwen3_next", seed=17, vocab=130, layers=3, prf=0.5, interval=4,
                          layer_types=["full_attention"] * 3, experts="per_expert", dtype="F32",
                          shards=1),
}

# A_log ranges cycled over value heads: slow-decaying heads make the recurrent state carry
# information across chunk boundaries (64), fast ones test strong decay.
A_RANGES = [(0.01, 0.1), (0.1, 1.0), (1.0, 4.0), (4.0, 16.0)]


# --------------------------------------------------------------------------------------------
def make_config(name, m):
    fam = m["family"]
    t = dict(BASE)
    t.update(vocab_size=m["vocab"], num_hidden_layers=m["layers"],
             full_attention_interval=m["interval"], initializer_range=0.02,
             max_position_embeddings=4096, attention_bias=False, attention_dropout=0.0,
             tie_word_embeddings=bool(m.get("tied", False)),
             router_aux_loss_coef=m.get("aux_coef", 0.001))
    if "layer_types" in m:
        t["layer_types"] = list(m["layer_types"])
    if fam == "qwen3_next" and m.get("extra_mtp"):
        t["num_nextn_predict_layers"] = 1
    if fam == "qwen3_next":
        t.update(model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"],
                 rope_theta=10000.0, rope_scaling=None, partial_rotary_factor=m["prf"],
                 decoder_sparse_step=m.get("sparse_step", 1), mlp_only_layers=m.get("mlp_only", []),
                 norm_topk_prob=True, output_router_logits=False, torch_dtype="float32",
                 use_cache=True)
        return t
    # Qwen3.5: VL wrapper with text_config, v5-style rope_parameters, explicit layer_types.
    R2 = int(t["head_dim"] * m["prf"]) // 2
    sec = [R2 - 2 * (R2 // 3), R2 // 3, R2 // 3]
    t.update(model_type="qwen3_5_text" if fam == "qwen3_5" else "qwen3_5_moe_text",
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                              "partial_rotary_factor": m["prf"], "mrope_section": sec,
                              "mrope_interleaved": True},
             attn_output_gate=True, mtp_num_hidden_layers=1, mamba_ssm_dtype="float32",
             dtype={"BF16": "bfloat16", "F16_MIX": "float16"}.get(m["dtype"], "float32"))
    if "layer_types" not in t:
        t["layer_types"] = ["full_attention" if (i + 1) % m["interval"] == 0 else
                            "linear_attention" for i in range(m["layers"])]
    if fam == "qwen3_5":
        for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "shared_expert_intermediate_size", "router_aux_loss_coef"):
            t.pop(k)
    else:
        t.pop("intermediate_size")
    outer = {"model_type": fam,
             "architectures": ["Qwen3_5ForConditionalGeneration" if fam == "qwen3_5"
                               else "Qwen3_5MoeForConditionalGeneration"],
             "text_config": t, "tie_word_embeddings": t["tie_word_embeddings"],
             "vision_config": {"depth": 1, "hidden_size": 8}, "image_token_id": 248056}
    return outer


def gen_weights(cfg, m):
    """Canonical weights (float64, unrounded), names relative to the text-model prefix, GDN in
    the separate (Qwen3.5) layout, experts per expert.  Returns ordered dict."""
    rs = np.random.RandomState(m["seed"])
    n = lambda std, *shape, mean=0.0: rs.normal(mean, std, size=shape)  # noqa: E731
    c = ref.load_config_from_dict(cfg)
    H, V = c["hidden_size"], c["vocab_size"]
    Hq, Hkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    Hk, Hv, dk, dv, K = (c["linear_num_key_heads"], c["linear_num_value_heads"],
                         c["linear_key_head_dim"], c["linear_value_head_dim"],
                         c["linear_conv_kernel_dim"])
    W = {}
    W["embed_tokens.weight"] = n(0.2 if c["tie_word_embeddings"] else 0.5, V, H)
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        W[p + "input_layernorm.weight"] = n(0.1, H)
        W[p + "post_attention_layernorm.weight"] = n(0.1, H)
        if c["layer_types"][i] == "linear_attention":
            q = p + "linear_attn."
            W[q + "in_proj_qkv.weight"] = n(0.2, 2 * Hk * dk + Hv * dv, H)
            W[q + "in_proj_z.weight"] = n(0.2, Hv * dv, H)
            W[q + "in_proj_b.weight"] = n(0.2, Hv, H)
            W[q + "in_proj_a.weight"] = n(0.1, Hv, H)
            W[q + "conv1d.weight"] = n(0.35, 2 * Hk * dk + Hv * dv, 1, K)
            W[q + "dt_bias"] = n(0.5, Hv, mean=-0.3)
            W[q + "A_log"] = np.log(np.array([rs.uniform(*A_RANGES[(h + i) % 4]) for h in range(Hv)]))
            W[q + "norm.weight"] = n(0.1, dv, mean=1.0)
            W[q + "out_proj.weight"] = n(0.2, H, Hv * dv)
        else:
            q = p + "self_attn."
            W[q + "q_proj.weight"] = n(0.2, Hq * hd * 2, H)
            W[q + "k_proj.weight"] = n(0.2, Hkv * hd, H)
            W[q + "v_proj.weight"] = n(0.3, Hkv * hd, H)
            W[q + "o_proj.weight"] = n(0.3, H, Hq * hd)
            W[q + "q_norm.weight"] = n(0.1, hd)
            W[q + "k_norm.weight"] = n(0.1, hd)
        q = p + "mlp."
        if c["moe_layers"][i]:
            E, Ie, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            W[q + "gate.weight"] = n(0.3, E, H)
            for e in range(E):
                W[q + f"experts.{e}.gate_proj.weight"] = n(0.2, Ie, H)
                W[q + f"experts.{e}.up_proj.weight"] = n(0.2, Ie, H)
                W[q + f"experts.{e}.down_proj.weight"] = n(0.2, H, Ie)
            W[q + "shared_expert.gate_proj.weight"] = n(0.2, Is, H)
            W[q + "shared_expert.up_proj.weight"] = n(0.2, Is, H)
            W[q + "shared_expert.down_proj.weight"] = n(0.2, H, Is)
            W[q + "shared_expert_gate.weight"] = n(0.3, 1, H)
        else:
            I = c["intermediate_size"]
            W[q + "gate_proj.weight"] = n(0.2, I, H)
            W[q + "up_proj.weight"] = n(0.2, I, H)
            W[q + "down_proj.weight"] = n(0.2, H, I)
    W["norm.weight"] = n(0.1, H)
    if not c["tie_word_embeddings"]:
        W["lm_head.weight"] = n(0.2, V, H)
    return W, c


def pack_qkvz_ba(c, wqkv, wz, wb, wa):
    """Qwen3-Next grouped layout written with the explicit row formulas of spec 2.3
    (deliberately not a reshape, so it is an independent check of the reference's unpacking)."""
    Hk, Hv, dk, dv = (c["linear_num_key_heads"], c["linear_num_value_heads"],
                      c["linear_key_head_dim"], c["linear_value_head_dim"])
    r = Hv // Hk
    kd = Hk * dk
    Gq = 2 * dk + 2 * r * dv
    H = wqkv.shape[1]
    qkvz = np.full((Hk * Gq, H), np.nan)
    ba = np.full((2 * Hv, H), np.nan)
    for g in range(Hk):
        for d in range(dk):
            qkvz[g * Gq + d] = wqkv[g * dk + d]                    # q
            qkvz[g * Gq + dk + d] = wqkv[kd + g * dk + d]          # k
        for i in range(r):
            h = g * r + i
            for d in range(dv):
                qkvz[g * Gq + 2 * dk + i * dv + d] = wqkv[2 * kd + h * dv + d]       # v
                qkvz[g * Gq + 2 * dk + r * dv + i * dv + d] = wz[h * dv + d]        # z
            ba[g * 2 * r + i] = wb[h]
            ba[g * 2 * r + r + i] = wa[h]
    assert not np.isnan(qkvz).any() and not np.isnan(ba).any()
    return qkvz, ba


def to_file_layout(W, c, m, gdn_layout, expert_layout):
    """Convert canonical weights to the stored tensor names/layouts (without prefix)."""
    out = {}
    for name, a in W.items():
        out[name] = a
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        q = p + "linear_attn."
        if gdn_layout == "grouped" and (q + "in_proj_qkv.weight") in out:
            qkvz, ba = pack_qkvz_ba(c, out.pop(q + "in_proj_qkv.weight"), out.pop(q + "in_proj_z.weight"),
                                    out.pop(q + "in_proj_b.weight"), out.pop(q + "in_proj_a.weight"))
            out[q + "in_proj_qkvz.weight"] = qkvz
            out[q + "in_proj_ba.weight"] = ba
        q = p + "mlp."
        if expert_layout == "fused" and (q + "experts.0.gate_proj.weight") in out:
            E = c["num_experts"]
            g = [out.pop(q + f"experts.{e}.gate_proj.weight") for e in range(E)]
            u = [out.pop(q + f"experts.{e}.up_proj.weight") for e in range(E)]
            d = [out.pop(q + f"experts.{e}.down_proj.weight") for e in range(E)]
            out[q + "experts.gate_up_proj"] = np.stack([np.concatenate([g[e], u[e]], 0) for e in range(E)])
            out[q + "experts.down_proj"] = np.stack(d)
    return out


def storage_dtype(policy, name):
    if policy in ("F32", "BF16"):
        return policy
    if policy == "F16_MIX":
        # 1-D tensors (norms, A_log, dt_bias) in F32 like real checkpoints keep A_log; rest F16
        if name.endswith("norm.weight") or name.endswith("A_log") or name.endswith("dt_bias"):
            return "F32"
        return "F16"
    raise ValueError(policy)


def write_model(d, cfg, tensors, shards):
    """tensors: list of (full_name, array, dtype).  Writes config + safetensors (+ index)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if shards == 1:
        ref.st_write(os.path.join(d, "model.safetensors"), tensors)
        return
    # split in order, roughly equal counts
    per = (len(tensors) + shards - 1) // shards
    weight_map, total = {}, 0
    for s in range(shards):
        part = tensors[s * per:(s + 1) * per]
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        ref.st_write(os.path.join(d, fn), part)
        for nme, a, dt in part:
            weight_map[nme] = fn
            total += len(ref.encode_tensor(a, dt))
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def build_tensor_list(W, c, m, cfg, gdn_layout, expert_layout):
    fam = m["family"]
    prefix = "model." if fam == "qwen3_next" else "model.language_model."
    fl = to_file_layout(W, c, m, gdn_layout, expert_layout)
    tensors = []
    for name, a in fl.items():
        full = name if name == "lm_head.weight" else prefix + name
        dt = storage_dtype(m["dtype"], name)
        tensors.append((full, ref.round_to_dtype(a, dt), dt))
    rs = np.random.RandomState(m["seed"] + 999)
    if m.get("extra_mtp"):   # a complete MTP head (docs/mtp.md), stored as released checkpoints store it
        for name, a in mtp_weights(cfg, m, expert_layout).items():
            dt = storage_dtype(m["dtype"], name)
            tensors.append((name, ref.round_to_dtype(a, dt), dt))
    if m.get("extra_visual"):
        tensors.append(("model.visual.patch_embed.proj.weight", ref.round_to_dtype(rs.normal(0, 1, (8, 3, 2, 2)), "F32"), "F32"))
    return tensors


def mtp_weights(cfg, m, expert_layout):
    """The MTP head: fc [H, 2H], its three norms and one full-attention decoder layer (with the
    MoE or dense MLP of the family), drawn like the trunk's weights from their own seed."""
    c = ref.load_config_from_dict(cfg)
    H = c["hidden_size"]
    one = json.loads(json.dumps(cfg))
    t = one.get("text_config", one)
    t["num_hidden_layers"] = 1
    t["layer_types"] = ["full_attention"]
    t.pop("mlp_only_layers", None)
    if not c["moe_layers"][0]:
        t["mlp_only_layers"] = [0]
    W1, _ = gen_weights(one, dict(m, seed=m["seed"] + 4242, layers=1, layer_types=["full_attention"]))
    W1 = to_file_layout(W1, dict(c, num_hidden_layers=1), m, "separate", expert_layout)
    rs = np.random.RandomState(m["seed"] + 4243)
    out = {"mtp.fc.weight": rs.normal(0, 0.2, (H, 2 * H)),
           "mtp.pre_fc_norm_embedding.weight": rs.normal(0, 0.1, H),
           "mtp.pre_fc_norm_hidden.weight": rs.normal(0, 0.1, H),
           "mtp.norm.weight": rs.normal(0, 0.1, H)}
    for name, a in W1.items():
        if name.startswith("layers.0."):
            out["mtp." + name] = a
    return out


def check_readback(d, tensors):
    back = ref.read_model_tensors(d)
    assert set(back) == {t[0] for t in tensors}, "tensor name set mismatch on read-back"
    for name, a, dt in tensors:
        b, bdt = back[name]
        assert bdt == dt and b.shape == np.shape(a), (name, bdt, dt, b.shape)
        assert np.array_equal(b, a), f"read-back mismatch {name}"


# --------------------------------------------------------------------------------------------
def selftests(outdir, timings):
    """Cross-checks of the reference itself (independent code paths must agree)."""
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="hyla_ref_selftest_", dir=outdir)
    try:
        m = dict(MODELS["next_moe_8l"])
        cfg = make_config("x", m)
        W, c = gen_weights(cfg, m)
        toks = list(np.random.RandomState(5).randint(0, c["vocab_size"], 130))
        outs = {}
        for gl, el in (("grouped", "per_expert"), ("separate", "fused")):
            d = os.path.join(tmp, f"{gl}_{el}")
            tl = build_tensor_list(W, c, m, cfg, gl, el)
            write_model(d, cfg, tl, 2 if el == "fused" else 1)
            check_readback(d, tl)
            outs[gl] = ref.HylaRef(d).forward(toks)
        diff = float((outs["grouped"]["logits"] - outs["separate"]["logits"]).abs().max())
        assert diff < 1e-12, f"grouped/per-expert vs separate/fused layouts differ: {diff}"
        # causality: a prefix run equals the first rows of the full run
        mm = ref.HylaRef(os.path.join(tmp, "grouped_per_expert"))
        pre = mm.forward(toks[:70])["logits"]
        pdiff = float((pre - outs["grouped"]["logits"][:70]).abs().max())
        assert pdiff < 1e-11, f"prefix run differs from full run: {pdiff}"
        # delta rule with a non-zero initial state: chunked == recurrent
        g = torch.Generator().manual_seed(3)
        T, Hv, dk, dv = 150, 3, 5, 7
        q = ref.l2norm(torch.randn(T, Hv, dk, generator=g)) * dk ** -0.5
        k = ref.l2norm(torch.randn(T, Hv, dk, generator=g))
        v = torch.randn(T, Hv, dv, generator=g)
        beta = torch.rand(T, Hv, generator=g)
        gg = -torch.rand(T, Hv, generator=g) * 0.3
        S0 = torch.randn(Hv, dk, dv, generator=g)
        o1, s1 = ref.delta_rule_recurrent(q, k, v, beta, gg, S0)
        o2, s2 = ref.delta_rule_chunked(q, k, v, beta, gg, S0)
        ddiff = max(float((o1 - o2).abs().max()), float((s1 - s2).abs().max()))
        assert ddiff < 1e-10, ddiff
        # conv/recurrence split: running [0:a) then [a:T) from the carried state == whole
        oa, sa = ref.delta_rule_recurrent(q[:77], k[:77], v[:77], beta[:77], gg[:77], S0)
        ob, sb = ref.delta_rule_chunked(q[77:], k[77:], v[77:], beta[77:], gg[77:], sa)
        sdiff = float((torch.cat([oa, ob]) - o1).abs().max())
        assert sdiff < 1e-10, sdiff
    finally:
        shutil.rmtree(tmp)
    timings["selftest"] = time.time() - t0
    return {"layout_equivalence_max_diff": diff, "prefix_causality_max_diff": pdiff,
            "delta_rule_S0_max_diff": ddiff, "delta_rule_split_max_diff": sdiff}


def make_case(outdir, name, m):
    d = os.path.join(outdir, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    cfg = make_config(name, m)
    W, c = gen_weights(cfg, m)
    gdn_layout = "grouped" if m["family"] == "qwen3_next" else "separate"
    tl = build_tensor_list(W, c, m, cfg, gdn_layout, m.get("experts", "per_expert"))
    write_model(d, cfg, tl, m["shards"])
    check_readback(d, tl)
    model = ref.HylaRef(d)
    model32 = ref.HylaRef(d, dtype=torch.float32)      # fp32 emulation: tolerance guidance only
    V = c["vocab_size"]
    has_moe = any(c["moe_layers"])
    runs = []
    for li, T in enumerate(SEQ_LENS):
        attempt = 0
        while True:
            seed = m["seed"] * 1000 + li * 50 + attempt
            toks = [int(x) for x in np.random.RandomState(seed).randint(0, V, T)]
            out = model.forward(toks)
            gap = out["min_router_gap"]
            mtp_gap = None
            if model.mtp is not None and T >= 2:
                mtp_lg, mtp_gap = model.mtp_forward(toks)
            if (gap is None or gap >= GAP_MIN) and (mtp_gap is None or mtp_gap >= GAP_MIN):
                break
            attempt += 1
            assert attempt < 50, "could not find a sequence without router near-ties"
        lg = out["logits"].numpy()
        assert np.all(np.isfinite(lg))
        fn = f"logits_{T}.f32"
        lg.astype("<f4").tofile(os.path.join(d, fn))
        run = {"tokens": toks, "logits": fn, "ce_loss": out["ce_loss"],
               "aux_loss": out["aux_loss"], "total_loss": out["total_loss"], "seed": seed}
        if has_moe:
            run["min_router_gap"] = gap
        if model.mtp is not None and T >= 2:   # the MTP head, teacher-forced (docs/mtp.md)
            mfn = f"mtp_logits_{T}.f32"
            mtp_lg.numpy().astype("<f4").tofile(os.path.join(d, mfn))
            run["mtp_logits"] = mfn
            run["mtp_fp32_emulation_max_abs_diff"] = float(
                np.abs(model32.mtp_forward(toks)[0].double().numpy() - mtp_lg.numpy()).max())
        o32 = model32.forward(toks)
        run["fp32_emulation"] = {
            "max_abs_logits_diff": float(np.abs(o32["logits"].double().numpy() - lg).max()),
            "total_loss_diff": None if out["total_loss"] is None else abs(o32["total_loss"] - out["total_loss"]),
            "aux_loss_diff": None if out["aux_loss"] is None else abs(o32["aux_loss"] - out["aux_loss"])}
        runs.append(run)
    exp = {"model": name, "family": c["family"], "layer_types": c["layer_types"],
           "moe_layers": [i for i, x in enumerate(c["moe_layers"]) if x],
           "vocab_size": V, "router_aux_loss_coef": c["router_aux_loss_coef"] if has_moe else None,
           "logits_format": "raw little-endian float32, row-major [T, vocab_size]",
           "max_delta_rule_recurrent_vs_chunked_diff": model.max_delta_diff,
           "runs": runs}
    exp["grads"] = make_grads(d, c, runs)
    if model.mtp is not None:
        exp["mtp_grads"] = make_mtp_grads(d, runs)
    exp["lora"] = make_lora(d, c, runs, m["seed"] * 7 + 1)
    exp["packed"] = make_packed(d, model, V, m["seed"] * 13 + 5)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f, indent=1)
    if m.get("train"):
        exp["train"] = make_train(d, name, c)
    return exp


def largest_entry(G, names):
    """(name, index) of the largest-|g| entry over the tensors `names` of G (None if all zero)."""
    best = None
    for k in names:
        mx = float(G[k].abs().max())
        if mx > 0 and (best is None or mx > best[0]):
            best = (mx, k)
    if best is None:
        return None
    g = G[best[1]].abs()
    return best[1], tuple(int(i) for i in np.unravel_index(int(torch.argmax(g)), g.shape))


def fd_picks(G):
    """One entry per FD kind: the largest-|g| entry among the tensors of that kind."""
    picks = []
    for kind in FD_KINDS:
        pick = largest_entry(G, [k for k in G if fnmatch.fnmatchcase(k, "*." + kind) or k == kind])
        if pick is not None:
            picks.append(pick)
    return picks


def make_grads(d, c, runs):
    """grads_<GRAD_T>.safetensors: autograd (float64) gradient of the total loss of the
    GRAD_T-token run w.r.t. every parameter, stored names/shapes, F32; FD-checked."""
    run = next(r for r in runs if len(r["tokens"]) == GRAD_T)
    seqs = [run["tokens"]]
    gm = ref.HylaRef(d, check_delta=False)
    res, G = ref.loss_and_grads(gm, seqs)
    assert abs(res["total"] - run["total_loss"]) <= 1e-12 * abs(run["total_loss"]), res
    fn = f"grads_{GRAD_T}.safetensors"
    ref.st_write(os.path.join(d, fn), [(k, g.numpy(), "F32") for k, g in G.items()])
    back = ref.st_read(os.path.join(d, fn))
    assert list(back) == list(G)
    fd = ref.fd_check_grads(gm, seqs, G, fd_picks(G), tol=FD_TOL)
    if res["aux"] is not None:
        # the aux loss alone (its gradient is ~coef times smaller inside the total): router entry
        _, Ga = ref.loss_and_grads(gm, seqs, key="aux")
        pick = largest_entry(Ga, [k for k in Ga if k.endswith("mlp.gate.weight")])
        fd_aux = ref.fd_check_grads(gm, seqs, Ga, [pick], tol=FD_TOL, key="aux")
        fd += fd_aux
    # fp32 emulation of the same gradient (tolerance guidance only)
    _, G32 = ref.loss_and_grads(ref.HylaRef(d, dtype=torch.float32), seqs)
    dmax, rel = 0.0, 0.0
    for k, g in G.items():
        dd = float((G32[k].double() - g).abs().max())
        dmax = max(dmax, dd)
        gm_ = float(g.abs().max())
        if gm_ > 0:
            rel = max(rel, dd / gm_)
    gnorm = float(torch.stack([g.norm(2) for g in G.values()]).norm(2))
    return {"tokens_run": GRAD_T, "file": fn, "loss": res["total"], "ce_loss": res["ce"],
            "aux_loss": res["aux"], "grad_norm": gnorm, "n_tensors": len(G),
            "fd_check": {"tol": FD_TOL, "method": "4-point central difference, h=1e-6, float64",
                         "max_rel_err": max(e["rel_err"] for e in fd), "entries": fd},
            "fp32_emulation": {"max_abs_grad_diff": dmax, "max_rel_grad_diff_per_tensor": rel}}


MTP_WEIGHT = 0.3   # the MTP loss weight of the gradient case (any non-zero weight tests the same path)


def make_mtp_grads(d, runs):
    """grads_mtp_<GRAD_T>.safetensors: autograd (float64) gradient of total + MTP_WEIGHT x MTP
    loss (docs/mtp.md) of the GRAD_T-token run w.r.t. every trunk and mtp.* tensor, F32; two mtp.*
    entries FD-checked."""
    run = next(r for r in runs if len(r["tokens"]) == GRAD_T)
    seqs = [run["tokens"]]
    gm = ref.HylaRef(d, check_delta=False)
    res, G = ref.mtp_loss_and_grads(gm, seqs, MTP_WEIGHT)
    fn = f"grads_mtp_{GRAD_T}.safetensors"
    ref.st_write(os.path.join(d, fn), [(k, g.numpy(), "F32") for k, g in G.items()])
    fd = []
    for name in ("mtp.fc.weight", "mtp.layers.0.self_attn.q_proj.weight"):
        t = gm.mtp_tensors[name]
        idx = tuple(int(i) for i in np.unravel_index(int(G[name].abs().argmax()), tuple(t.shape)))
        h, vals = 1e-6, []
        for k in (-2, -1, 1, 2):
            M = dict(gm.mtp_tensors)
            M[name] = t.clone()
            M[name][idx] += k * h
            gm.mtp = gm._build_mtp(M)
            vals.append(ref.mtp_total_loss(gm, seqs, MTP_WEIGHT)[0].item())
        gm.mtp = gm._build_mtp(gm.mtp_tensors)
        num = (vals[0] - 8 * vals[1] + 8 * vals[2] - vals[3]) / (12 * h)
        got = float(G[name][idx])
        rel = abs(num - got) / max(abs(num), 1e-12)
        assert rel < FD_TOL, (name, idx, num, got)
        fd.append({"name": name, "index": list(idx), "autograd": got, "fd": num, "rel_err": rel})
    _, G32 = ref.mtp_loss_and_grads(ref.HylaRef(d, dtype=torch.float32), seqs, MTP_WEIGHT)
    rel = max(float((G32[k].double() - g).abs().max()) / max(float(g.abs().max()), 1e-30) for k, g in G.items())
    return {"tokens_run": GRAD_T, "file": fn, "weight": MTP_WEIGHT, "loss": res["total"], "mtp_loss": res["mtp"],
            "main_loss": res["main"], "fd_check": fd, "fp32_emulation_max_rel_grad_diff_per_tensor": rel}


LORA_R, LORA_ALPHA = 2, 4.0   # scaling alpha / r = 2


def lora_modules(W):
    """PEFT's all-linear on the stored layout: every 2-D weight of a decoder layer except the
    router (mlp.gate); fused 3-D experts are parameters, not Linear modules."""
    return [k[:-len(".weight")] for k, v in W.items()
            if ".layers." in k and k.endswith(".weight") and v.dim() == 2 and not k.endswith(".mlp.gate.weight")]


def make_lora(d, c, runs, seed):
    """lora/ (a PEFT adapter: adapter_config.json + adapter_model.safetensors, random A and B) and
    lora_grads_<GRAD_T>.safetensors: the float64 autograd gradient of the total loss of the
    GRAD_T-token run w.r.t. every lora_A / lora_B, with each adapted weight W + (alpha/r) B A."""
    run = next(r for r in runs if len(r["tokens"]) == GRAD_T)
    gm = ref.HylaRef(d, check_delta=False)
    P0 = {k: v.detach() for k, v in gm.params().items()}
    mods = lora_modules(P0)
    s = LORA_ALPHA / LORA_R
    for attempt in range(50):  # the adapted model must route without near-ties too (as the base runs)
        rng = np.random.RandomState(seed + 1000 * attempt)
        A, B = {}, {}
        for m in mods:
            out_f, in_f = P0[m + ".weight"].shape
            # drawn, then rounded to float32: exactly the values stored (and read by hyla)
            a = rng.normal(0, 1.0 / np.sqrt(in_f), (LORA_R, in_f)).astype(np.float32).astype(np.float64)
            b = rng.normal(0, 0.05, (out_f, LORA_R)).astype(np.float32).astype(np.float64)
            A[m] = torch.from_numpy(a).requires_grad_(True)
            B[m] = torch.from_numpy(b).requires_grad_(True)
        P = dict(P0)
        for m in mods:
            P[m + ".weight"] = P0[m + ".weight"] + s * (B[m] @ A[m])
        gm.set_params(P)
        with torch.no_grad():
            gap = gm.forward_core([int(t) for t in run["tokens"]])[2]
        if gap is None or gap >= GAP_MIN:
            break
    else:
        raise AssertionError("could not draw an adapter without router near-ties")
    out = gm.batch_loss([run["tokens"]])
    leaves = [A[m] for m in mods] + [B[m] for m in mods]
    gs = torch.autograd.grad(out["total"], leaves, allow_unused=True)  # experts no token reached: zeros
    gs = [torch.zeros_like(v) if g is None else g for v, g in zip(leaves, gs)]
    ld = os.path.join(d, "lora")
    os.makedirs(ld, exist_ok=True)
    key = lambda m, ab: f"base_model.model.{m}.lora_{ab}.weight"
    tensors = []
    for m in mods:
        tensors += [(key(m, "A"), A[m].detach().numpy(), "F32"), (key(m, "B"), B[m].detach().numpy(), "F32")]
    ref.st_write(os.path.join(ld, "adapter_model.safetensors"), tensors)
    with open(os.path.join(ld, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": LORA_R, "lora_alpha": LORA_ALPHA,
                   "lora_dropout": 0.0, "target_modules": sorted({m.split(".layers.")[1].split(".", 1)[1] for m in mods}),
                   "use_rslora": False, "use_dora": False, "bias": "none"}, f, indent=1)
    fn = f"lora_grads_{GRAD_T}.safetensors"
    G = [(key(m, "A"), g.numpy(), "F32") for m, g in zip(mods, gs[:len(mods)])]
    G += [(key(m, "B"), g.numpy(), "F32") for m, g in zip(mods, gs[len(mods):])]
    ref.st_write(os.path.join(d, fn), G)
    return {"file": fn, "adapter": "lora", "r": LORA_R, "lora_alpha": LORA_ALPHA, "modules": len(mods),
            "min_router_gap": gap, "draws": attempt + 1,
            "loss": out["total"].item(), "what": "d total / d lora_A, lora_B (float64 autograd) at the stored A, B"}


PACK_DOCS = [17, 64, 2, 45]   # one packed row of 128: documents start inside and on the 64-token chunks


def make_packed(d, model, V, seed):
    """A packed row (documents PACK_DOCS back to back) and what packing must compute: every
    document alone (positions from 0, zero conv window and delta-rule state, attention within it).
    logits_packed.f32 = the documents' own logits, concatenated; ce_sums = sum of -log p of each
    document's next tokens (none across a boundary)."""
    for attempt in range(50):
        rng = np.random.RandomState(seed + attempt)
        docs = [[int(x) for x in rng.randint(0, V, n)] for n in PACK_DOCS]
        outs = [model.forward(doc) for doc in docs]
        gaps = [o["min_router_gap"] for o in outs if o["min_router_gap"] is not None]
        if not gaps or min(gaps) >= GAP_MIN:
            break
    else:
        raise AssertionError("could not draw packed documents without router near-ties")
    lg = np.concatenate([o["logits"].numpy() for o in outs], axis=0)
    lg.astype("<f4").tofile(os.path.join(d, "logits_packed.f32"))
    ce_sums = [o["ce_loss"] * (len(doc) - 1) if o["ce_loss"] is not None else 0.0 for o, doc in zip(outs, docs)]
    return {"doc_lengths": PACK_DOCS, "tokens": [t for doc in docs for t in doc], "logits": "logits_packed.f32",
            "ce_sums": ce_sums, "min_router_gap": min(gaps) if gaps else None,
            "what": "each document run alone by the reference; logits concatenated [sum(doc_lengths), vocab]"}


def make_train(d, name, c):
    """train_expected.json + train_final.safetensors: the reference AdamW run (float64)."""
    hp = ref.TRAIN_HP
    batches = ref.train_batches(c["vocab_size"], hp)
    tm = ref.HylaRef(d, check_delta=False)
    names = list(tm.params())
    no_decay = [k for k, v in tm.params().items() if v.dim() < 2]
    snaps = {TRAIN_XCHECK_STEPS: None}
    steps, P = ref.train_adamw(tm, batches, hp, snapshots=snaps)
    P_x = snaps[TRAIN_XCHECK_STEPS]
    ref.st_write(os.path.join(d, "train_final.safetensors"), [(k, P[k].numpy(), "F32") for k in names])
    losses = [st["loss"] for st in steps]
    assert all(np.isfinite(losses)), losses
    # independent cross-check of the update rule: torch.optim.AdamW + clip_grad_norm_ over the
    # first TRAIN_XCHECK_STEPS steps (later steps amplify float64 rounding differences, see README)
    Pt = ref.train_adamw_torch_optim(ref.HylaRef(d, check_delta=False), batches[:TRAIN_XCHECK_STEPS], hp)
    xdiff = max(float((Pt[k] - P_x[k]).abs().max()) for k in names)
    assert xdiff < 1e-10, f"plain-op AdamW vs torch.optim.AdamW differ by {xdiff}"
    # did it learn?  mean total loss over the 10 training batches, initial vs final params
    with torch.no_grad():
        em = ref.HylaRef(d, check_delta=False)
        init_eval = float(np.mean([em.batch_loss(b)["total"].item() for b in batches]))
        em.set_params(P)
        final_eval = float(np.mean([em.batch_loss(b)["total"].item() for b in batches]))
    assert final_eval < init_eval, (init_eval, final_eval)
    # fp32 emulation of the same run (tolerance guidance only)
    steps32, P32 = ref.train_adamw(ref.HylaRef(d, dtype=torch.float32), batches, hp)
    pdiff = max(float((P32[k].double() - P[k]).abs().max()) for k in names)
    ldiff = max(abs(a["loss"] - b["loss"]) for a, b in zip(steps, steps32))
    gdiff = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(steps32, steps))
    out = {"model": name, "hyperparameters": hp,
           "data": "step s: numpy.random.default_rng(data_seed_base + s).integers(0, vocab_size, "
                   "size=(batch_size, seq_len)); stored below as batches[s][b][t]",
           "vocab_size": c["vocab_size"],
           "router_aux_loss_coef": c["router_aux_loss_coef"] if any(c["moe_layers"]) else None,
           "batches": batches, "no_weight_decay": no_decay, "final_params": "train_final.safetensors",
           "steps": steps,
           "eval": {"what": "mean over the 10 training batches of the batch total loss (float64)",
                    "initial_params": init_eval, "final_params": final_eval},
           "torch_optim_crosscheck": {"steps": TRAIN_XCHECK_STEPS, "max_abs_param_diff": xdiff},
           "fp32_emulation": {"max_abs_final_param_diff": pdiff, "max_abs_loss_diff": ldiff,
                              "max_rel_grad_norm_diff": gdiff}}
    with open(os.path.join(d, "train_expected.json"), "w") as f:
        json.dump(out, f, indent=1)
    return out


def main():
    ap = argparse.ArgumentParser(description="make tiny Qwen3-Next/Qwen3.5 reference cases")
    ap.add_argument("outdir")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--no-selftest", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    names = a.only.split(",") if a.only else list(MODELS)
    timings = {}
    if not a.no_selftest:
        st = selftests(a.outdir, timings)
        print("selftest:", json.dumps(st))
    for name in names:
        t0 = time.time()
        exp = make_case(a.outdir, name, MODELS[name])
        timings[name] = time.time() - t0
        V = exp["vocab_size"]
        desc = ", ".join(
            f"T={len(r['tokens'])}: ce={r['ce_loss'] if r['ce_loss'] is None else round(r['ce_loss'], 4)}"
            + ("" if r["aux_loss"] is None else f" aux={r['aux_loss']:.4f}")
            + ("" if r.get("min_router_gap") is None else f" gap={r['min_router_gap']:.1e}")
            for r in exp["runs"])
        f32 = max(r["fp32_emulation"]["max_abs_logits_diff"] for r in exp["runs"])
        gr = exp["grads"]
        print(f"{name}: log(V)={np.log(V):.3f} delta_diff={exp['max_delta_rule_recurrent_vs_chunked_diff']:.1e} "
              f"fp32_emul_logits_diff={f32:.1e} "
              f"({timings[name]:.1f}s)\n   {desc}\n"
              f"   grads T={gr['tokens_run']}: loss={gr['loss']:.6f} |g|={gr['grad_norm']:.4f} "
              f"FD max rel err={gr['fd_check']['max_rel_err']:.1e} over {len(gr['fd_check']['entries'])} entries, "
              f"fp32 emul rel grad diff={gr['fp32_emulation']['max_rel_grad_diff_per_tensor']:.1e}")
        if "train" in exp:
            tr = exp["train"]
            print("   train losses: " + " ".join(f"{st['loss']:.4f}" for st in tr["steps"])
                  + f"  | mean over batches {tr['eval']['initial_params']:.4f} -> {tr['eval']['final_params']:.4f}"
                  + f" | torch.optim diff {tr['torch_optim_crosscheck']['max_abs_param_diff']:.1e}"
                  + f"  (fp32 emul: param diff {tr['fp32_emulation']['max_abs_final_param_diff']:.1e},"
                  f" loss diff {tr['fp32_emulation']['max_abs_loss_diff']:.1e})")
    print("timings:", {k: round(v, 2) for k, v in timings.items()})


if __name__ == "__main__":
    main()
