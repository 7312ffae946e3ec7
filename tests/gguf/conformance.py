# GGUF conformance: hyla convert --to gguf, read back by the official `gguf` package and run by
# llama.cpp itself (llama-cpp-python), for the three architectures llama.cpp knows (qwen3next,
# qwen35, qwen35moe) and the tensor types F32, F16, BF16, Q8_0; and the same files (plus files
# llama.cpp's own quantizer made from hyla's F32 export: Q4_K_M, Q5_K_M, Q6_K, Q4_0, Q3_K_M, Q2_K, IQ4_XS, IQ4_NL,
# on a model
# whose rows are whole 256-value blocks) run by hyla as models, read in place; and hyla's Q8_0 /
# Q6_K / Q5_K_M / Q4_K_M / Q3_K_M / Q2_K export byte-identical to llama.cpp's quantizer (types and blocks), from the
# model directory and from the F32 / F16 GGUF file itself (hyla convert IN.gguf OUT.gguf --to gguf).
#
# usage: conformance.py HYLA WORKDIR [--json OUT]     (python with gguf, llama_cpp and numpy)
#
# Checks per architecture and type:
#   1. gguf.GGUFReader lists exactly the tensors llama.cpp's loader asks for (names computed here
#      from the config, independently of hyla's C code), with the ggml shapes it expects, F32 for
#      vectors / norms / routers / conv kernels, the requested type for the other matrices, and the
#      metadata keys llama.cpp reads for the architecture (with values from config.json).
#   2. llama.cpp loads the file and evaluates a 24-token sequence (F32 KV cache, flash attention off,
#      2 threads); its logits at every position are compared with `hyla forward` on the same tokens.
#      Tolerances (max |difference| over all positions and vocab entries, scale = max(1, max |ref|)):
#        F32: 2^-12 * scale. Both sides compute in fp32 and differ only in summation order and in
#             exp / softplus implementations: each dot product carries a relative error of order
#             sqrt(K) * 2^-24 (K <= 512: ~1.4e-6); the model amplifies perturbations by a factor
#             measured below (kappa), ~25x here, so ~1e-5 * scale is expected; the bound leaves 20x.
#        F16 / BF16: compared with hyla run on the SAME rounded weights (hyla convert --dtype), so
#             what remains is llama.cpp's rounding of the matmul inputs (activations) to that type:
#             the same relative size as the weight rounding. Bound: 4 * delta_w + 2^-12 * scale, where
#             delta_w is hyla's own logit change when only the weights are rounded to that type
#             (the model's measured sensitivity to a perturbation of this size).
#        Quantized types: reported only (max difference, argmax agreement). At initializer_range 0.1
#             these random models amplify a rounding difference to ~6% of the logit scale (their bf16
#             sensitivity), so no bound there could tell a reader bug from rounding; the quantized
#             same-file check runs on a calm model instead (5.).
#   3. hyla runs each GGUF file as a model (its tensors in their stored types, in place) and, as the
#      reference, the Hugging Face directory `hyla convert FILE.gguf DIR` makes of it (every tensor
#      dequantized to fp32: the values the file's blocks hold, checked bit for bit against the gguf
#      package's dequantizers in tests/test_gguf.c). Same weight values, fp32 activations on both
#      sides (HYLA_INT8_ACTIVATIONS=0), so only the products' summation order differs: bound
#      2^-14 * scale (measured <= 3.5e-6 * scale). A wrong scale, nibble order, row or column
#      mapping changes logits by O(scale). For an F32 file the reference must also equal the
#      original model (the export's transformations inverted): bound 2^-16 * scale (measured: equal).
#      (A 24-token forward multiplies 24 rows at once: the dequantize + sgemm path. The decode
#      kernels, and their int8 activations, are checked by tests/test_gguf.c.)
#   4. (F32 / F16 / BF16 files) llama.cpp on the same file against hyla on it: the bounds of 2.
#   5. Quantized files, same file, tight (check_same_file): a calm model (initializer_range 0.02),
#      hyla against llama.cpp token by token on Q8_0 / Q4_K_M / Q5_K_M / Q6_K / Q3_K_M / Q2_K / IQ4_XS /
#      Q4_0 / IQ4_NL files; both round the activations the same way, so the bound is the fp32 summation term plus the
#      model's response to the activation rounding itself (derivation there); three damaged copies (a
#      doubled block scale, swapped nibbles, Q3_K's third bits swapped between halves) must fail it.
#   6. The mean KL of each quantized file's next-token distribution from the F32 model's over 2048
#      positions, hyla against llama.cpp (check_quality); hyla's quantized export byte-identical to
#      llama.cpp's quantizer (check_quantizer); a file holding a tensor the architecture's map does
#      not name is refused by forward and convert, naming it (check_refusals).
#   7. The tokenizer files a directory saved from a GGUF model holds (check_tokenizer_files): read
#      by the tokenizers library, and back to GGUF with every tokenizer.* key-value unchanged.
import argparse, json, os, subprocess, sys, tempfile

import gguf
import llama_cpp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

COMMON = {"vocab_size": 512, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
          "partial_rotary_factor": 0.25, "linear_num_key_heads": 2, "linear_key_head_dim": 32,
          "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6, "initializer_range": 0.1,
          "max_position_embeddings": 4096, "hidden_act": "silu", "attention_bias": False}
MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 96,
       "router_aux_loss_coef": 0.001, "norm_topk_prob": True}
ROPE35 = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "mrope_section": [2, 1, 1],
                              "mrope_interleaved": True}}

MODELS = {
    # Qwen3-Next: flat config, grouped in_proj_qkvz / in_proj_ba, 2 key heads for 4 value heads
    "qwen3next": {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", **COMMON, **MOE,
                  "num_hidden_layers": 6, "full_attention_interval": 3, "rope_theta": 10000.0,
                  "linear_num_value_heads": 4, "intermediate_size": 256, "decoder_sparse_step": 1,
                  "mlp_only_layers": [], "tie_word_embeddings": False},
    # Qwen3.5 dense: VL wrapper, tied embeddings, 3 value heads per key head (the v-head reorder)
    "qwen35": {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": True,
               "text_config": {"model_type": "qwen3_5_text", **COMMON, **ROPE35, "num_hidden_layers": 6,
                               "full_attention_interval": 3, "linear_num_value_heads": 6, "intermediate_size": 384,
                               "tie_word_embeddings": True, "attn_output_gate": True}},
    # Qwen3.5 MoE: VL wrapper, a remainder block (5 layers, interval 4)
    "qwen35moe": {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                  "tie_word_embeddings": False,
                  "text_config": {"model_type": "qwen3_5_moe_text", **COMMON, **MOE, **ROPE35, "num_hidden_layers": 5,
                                  "full_attention_interval": 4, "linear_num_value_heads": 4,
                                  "tie_word_embeddings": False, "attn_output_gate": True}},
}
# rows of 256 values everywhere, so llama.cpp's K-quants apply to every matrix (no fallbacks)
MODELS["qwen35k"] = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                     "tie_word_embeddings": True,
                     "text_config": {"model_type": "qwen3_5_text", **COMMON, **ROPE35, "hidden_size": 256,
                                     "head_dim": 64, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
                                     "num_hidden_layers": 4, "full_attention_interval": 2,
                                     "linear_num_value_heads": 4, "intermediate_size": 512,
                                     "tie_word_embeddings": True, "attn_output_gate": True}}
# the same with weights 5x smaller (initializer_range 0.02, as real checkpoints are initialised): a
# model that does not amplify rounding differences (its bf16 sensitivity is 0.5% of the logit
# scale, against 6% at 0.1), for the tight same-file check against llama.cpp (check_same_file)
CALM = json.loads(json.dumps(MODELS["qwen35k"]))
CALM["text_config"]["initializer_range"] = 0.02
LLAMA_QUANTS = {"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "q4_0": 2, "q3_k_m": 12, "q2_k": 10,  # llama_ftype
                "iq4_xs": 30, "iq4_nl": 25}
TYPES = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
         "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0}


def expected_tensors(arch, c):
    """name -> (ggml shape, 'f32' | 'matrix') as llama.cpp's loader for `arch` creates them."""
    H, V, hd = c["hidden_size"], c["vocab_size"], c["head_dim"]
    Hk, Hv, dk, dv = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"], c["linear_value_head_dim"]
    kd, vd = Hk * dk, Hv * dv
    cd = 2 * kd + vd
    t = {"token_embd.weight": ([H, V], "matrix"), "output_norm.weight": ([H], "f32")}
    if not c.get("tie_word_embeddings", False):
        t["output.weight"] = ([H, V], "matrix")
    n, interval = c["num_hidden_layers"], c["full_attention_interval"]
    for l in range(n):
        p = f"blk.{l}."
        t[p + "attn_norm.weight"] = ([H], "f32")
        t[p + "post_attention_norm.weight"] = ([H], "f32")
        if (l + 1) % interval:
            t[p + "attn_qkv.weight"] = ([H, cd], "matrix")
            t[p + "attn_gate.weight"] = ([H, vd], "matrix")
            if arch == "qwen3next":
                t[p + "ssm_ba.weight"] = ([H, 2 * Hv], "matrix")
            else:
                t[p + "ssm_beta.weight"] = ([H, Hv], "matrix")
                t[p + "ssm_alpha.weight"] = ([H, Hv], "matrix")
            t[p + "ssm_conv1d.weight"] = ([c["linear_conv_kernel_dim"], cd], "f32")
            t[p + "ssm_dt.bias"] = ([Hv], "f32")
            t[p + "ssm_a"] = ([Hv], "f32")
            t[p + "ssm_norm.weight"] = ([dv], "f32")
            t[p + "ssm_out.weight"] = ([vd, H], "matrix")
        else:
            Hq, Hkv = c["num_attention_heads"], c["num_key_value_heads"]
            t[p + "attn_q.weight"] = ([H, Hq * hd * 2], "matrix")
            t[p + "attn_k.weight"] = ([H, Hkv * hd], "matrix")
            t[p + "attn_v.weight"] = ([H, Hkv * hd], "matrix")
            t[p + "attn_output.weight"] = ([Hq * hd, H], "matrix")
            t[p + "attn_q_norm.weight"] = ([hd], "f32")
            t[p + "attn_k_norm.weight"] = ([hd], "f32")
        if arch == "qwen35":
            I = c["intermediate_size"]
            t[p + "ffn_gate.weight"] = ([H, I], "matrix")
            t[p + "ffn_up.weight"] = ([H, I], "matrix")
            t[p + "ffn_down.weight"] = ([I, H], "matrix")
        else:
            E, I, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            t[p + "ffn_gate_inp.weight"] = ([H, E], "f32")
            t[p + "ffn_gate_exps.weight"] = ([H, I, E], "matrix")
            t[p + "ffn_up_exps.weight"] = ([H, I, E], "matrix")
            t[p + "ffn_down_exps.weight"] = ([I, H, E], "matrix")
            t[p + "ffn_gate_inp_shexp.weight"] = ([H, 1], "f32")
            t[p + "ffn_gate_shexp.weight"] = ([H, Is], "matrix")
            t[p + "ffn_up_shexp.weight"] = ([H, Is], "matrix")
            t[p + "ffn_down_shexp.weight"] = ([Is, H], "matrix")
    return t


def expected_metadata(arch, c, n_vocab):
    keys = {f"{arch}.block_count": c["num_hidden_layers"], f"{arch}.embedding_length": c["hidden_size"],
            f"{arch}.attention.head_count": c["num_attention_heads"],
            f"{arch}.attention.head_count_kv": c["num_key_value_heads"],
            f"{arch}.attention.key_length": c["head_dim"], f"{arch}.attention.value_length": c["head_dim"],
            f"{arch}.context_length": c["max_position_embeddings"],
            f"{arch}.ssm.conv_kernel": c["linear_conv_kernel_dim"], f"{arch}.ssm.state_size": c["linear_key_head_dim"],
            f"{arch}.ssm.group_count": c["linear_num_key_heads"], f"{arch}.ssm.time_step_rank": c["linear_num_value_heads"],
            f"{arch}.ssm.inner_size": c["linear_num_value_heads"] * c["linear_value_head_dim"],
            f"{arch}.full_attention_interval": c["full_attention_interval"],
            f"{arch}.rope.dimension_count": int(c["head_dim"] * c["partial_rotary_factor"]),
            "general.architecture": arch, "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": "qwen2" if arch == "qwen3next" else "qwen35"}
    if "num_experts" in c:
        keys.update({f"{arch}.expert_count": c["num_experts"], f"{arch}.expert_used_count": c["num_experts_per_tok"],
                     f"{arch}.expert_feed_forward_length": c["moe_intermediate_size"],
                     f"{arch}.expert_shared_feed_forward_length": c["shared_expert_intermediate_size"]})
    if arch == "qwen35":
        keys[f"{arch}.feed_forward_length"] = c["intermediate_size"]
    if arch != "qwen3next":
        keys[f"{arch}.rope.dimension_sections"] = c["rope_parameters"]["mrope_section"] + [0]
    return keys


def field_value(f):
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        return [f.parts[i].tolist()[0] if f.types[-1] != gguf.GGUFValueType.STRING else bytes(f.parts[i]).decode()
                for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[-1]).decode()
    return f.parts[-1].tolist()[0]


def check_file(path, arch, c, qtype, errors):
    r = gguf.GGUFReader(path)
    want = expected_tensors(arch, c)
    got = {t.name: t for t in r.tensors}
    for name in sorted(set(want) ^ set(got)):
        errors.append(f"{path}: tensor {name} is {'missing' if name in want else 'unexpected'}")
    for name, (shape, kind) in want.items():
        t = got.get(name)
        if t is None:
            continue
        if [int(x) for x in t.shape] != shape:
            errors.append(f"{path}: {name} has ggml shape {list(t.shape)}, llama.cpp expects {shape}")
        wtype = gguf.GGMLQuantizationType.F32 if kind == "f32" else TYPES[qtype]
        if wtype == gguf.GGMLQuantizationType.Q8_0 and shape[0] % 32:
            wtype = gguf.GGMLQuantizationType.F16  # what llama.cpp's converter falls back to as well
        if t.tensor_type != wtype:
            errors.append(f"{path}: {name} is {t.tensor_type.name}, expected {wtype.name}")
    for key, value in expected_metadata(arch, c, c["vocab_size"]).items():
        f = r.fields.get(key)
        if f is None:
            errors.append(f"{path}: metadata key {key} is missing")
        elif field_value(f) != value:
            errors.append(f"{path}: metadata {key} = {field_value(f)!r}, expected {value!r}")
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                "tokenizer.ggml.eos_token_id", "tokenizer.chat_template", f"{arch}.attention.recurrent_layers",
                f"{arch}.rope.freq_base", f"{arch}.attention.layer_norm_rms_epsilon"):
        if key not in r.fields:
            errors.append(f"{path}: metadata key {key} is missing")
    n_tok = len(r.fields["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in r.fields else -1
    if n_tok != c["vocab_size"]:
        errors.append(f"{path}: {n_tok} tokens, the embedding has {c['vocab_size']} rows")


def hyla_logits(hyla, model, tokens, out, int8=True):
    env = dict(os.environ, HYLA_INT8_ACTIVATIONS="1" if int8 else "0")
    subprocess.run([hyla, "forward", model, "--tokens", ",".join(map(str, tokens)), "--logits-out", out], check=True,
                   stdout=subprocess.DEVNULL, env=env)
    return np.fromfile(out, dtype=np.float32).reshape(len(tokens), -1)


def llama_quantize(src, dst, ftype, pure=False):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    p.pure = pure  # every matrix the preset's base type (llama-quantize --pure)
    if llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p) != 0:
        raise RuntimeError(f"llama_model_quantize {src} -> {dst} failed")


def mean_kl(p_logits, q_logits):
    """mean over positions of KL(softmax(p) || softmax(q)), in float64"""
    p = p_logits.astype(np.float64) - p_logits.max(1, keepdims=True)
    q = q_logits.astype(np.float64) - q_logits.max(1, keepdims=True)
    lp = p - np.log(np.exp(p).sum(1, keepdims=True))
    lq = q - np.log(np.exp(q).sum(1, keepdims=True))
    return float((np.exp(lp) * (lp - lq)).sum(1).mean())


def compare_tensors(mine, theirs, whole):
    """(ok, compared, differing, retyped): tensors of two GGUF files by name, byte for byte; whole: a
    tensor typed differently is a difference too (else llama.cpp's _M mix may retype up to a fifth)"""
    a = {t.name: t for t in gguf.GGUFReader(mine).tensors}
    b = {t.name: t for t in gguf.GGUFReader(theirs).tensors}
    other = sorted(n for n in a if n in b and a[n].tensor_type != b[n].tensor_type)
    bad = sorted(n for n in set(a) | set(b) if n not in a or n not in b or
                 (a[n].tensor_type == b[n].tensor_type and
                  np.asarray(a[n].data).tobytes() != np.asarray(b[n].data).tobytes()))
    if whole:
        bad += other
    return not bad and len(other) <= len(a) // 5, len(a) - len(other), bad, other


def check_quantizer(hyla, work, arch, d, errors, report):
    """hyla's quantized export against llama.cpp's own quantizer on hyla's F32 export: the same
    tensor types and blocks, byte for byte, on every tensor (the reference quantizers and the
    _M presets' per-tensor mix are deterministic without an importance matrix). Twice: exported from
    the model directory, and re-typed from the F32 GGUF file itself (hyla convert F32.gguf --to gguf,
    the file's key-values copied: they must equal llama.cpp's too). From an F16 file, Q4_K_M and
    Q8_0 against llama.cpp's quantizer on that file (F16 -> fp32 is exact on both sides)."""
    f32 = os.path.join(work, f"{arch}-f32.gguf")
    for qtype, ftype, whole in (("q8_0", 7, True), ("q6_k", 18, True), ("q4_k_m", 15, True), ("q5_k_m", 17, True),
                                ("q3_k_m", 12, True), ("q2_k", 10, True)):
        mine, theirs = os.path.join(work, f"{arch}-hyla-{qtype}.gguf"), os.path.join(work, f"{arch}-llama-{ftype}.gguf")
        subprocess.run([hyla, "convert", d, mine, "--to", "gguf", "--type", qtype], check=True, stdout=subprocess.DEVNULL)
        if not os.path.exists(theirs):
            llama_quantize(f32, theirs, ftype)
        for source, path in (("directory", mine), ("F32 GGUF", mine + ".from-gguf")):
            if path != mine:
                subprocess.run([hyla, "convert", f32, path, "--to", "gguf", "--type", qtype], check=True,
                               stdout=subprocess.DEVNULL)
            ok, compared, bad, other = compare_tensors(path, theirs, whole)
            keys_differ = source != "directory" and gguf_keys(path) != gguf_keys(theirs)
            ok = ok and not keys_differ
            report.append({"arch": arch, "type": qtype, "source": source, "tensors": compared + len(other),
                           "check": "export == llama_model_quantize, byte for byte", "compared": compared,
                           "other_type_in_llama_mix": other, "differing": bad, "key_values_differ": keys_differ,
                           "ok": ok})
            print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} {qtype:6s}: hyla convert ({source}) --type {qtype} == "
                  f"llama.cpp's quantizer on {compared - len(bad)} of {compared} tensors, byte for byte"
                  + (f" ({len(other)} others typed differently by llama.cpp's _M mix)" if other else "")
                  + (", key-values identical" if source != "directory" and not keys_differ else ""))
            if not ok:
                errors.append(f"{arch} {qtype} ({source}): quantized file differs from llama.cpp's on {bad[:5]} "
                              f"({len(other)} retyped{', key-values differ' if keys_differ else ''})")
    f16 = os.path.join(work, f"{arch}-f16.gguf")
    subprocess.run([hyla, "convert", d, f16, "--to", "gguf", "--type", "f16"], check=True, stdout=subprocess.DEVNULL)
    for qtype, ftype in (("q4_k_m", 15), ("q8_0", 7)):
        mine, theirs = f16 + f".hyla-{qtype}.gguf", f16 + f".llama-{ftype}.gguf"
        llama_quantize(f16, theirs, ftype)
        subprocess.run([hyla, "convert", f16, mine, "--to", "gguf", "--type", qtype], check=True,
                       stdout=subprocess.DEVNULL)
        ok, compared, bad, other = compare_tensors(mine, theirs, True)
        report.append({"arch": arch, "type": qtype, "source": "F16 GGUF", "check": "re-typed == llama_model_quantize",
                       "compared": compared, "differing": bad, "ok": ok})
        print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} {qtype:6s}: hyla convert (F16 GGUF) == llama.cpp's quantizer on "
              f"{compared - len(bad)} of {compared} tensors, byte for byte")
        if not ok:
            errors.append(f"{arch} {qtype} (F16 GGUF): re-typed file differs from llama.cpp's on {bad[:5]}")


def rewritten(src, dst, extra_tensor=None, kv=None, drop_prefix=None):
    """a copy of the GGUF file through the gguf package's writer: key-values and tensors as stored, plus
    an F32 [4] tensor `extra_tensor`, with the integer key-values in `kv` set to new values, without
    the keys that start with `drop_prefix`"""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch=None)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or (drop_prefix and key.startswith(drop_prefix)):
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, (kv or {}).get(key, f.contents()), vtype, sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=list(reversed([int(n) for n in t.shape])), raw_dtype=t.tensor_type)
    if extra_tensor:
        w.add_tensor(extra_tensor, np.arange(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_refusals(hyla, work, arch, errors, report):
    """a file of the architecture holding one tensor more, which hyla's map for it does not name:
    forward, and convert to GGUF (re-typing) and to a directory, each refuse it in one line naming the
    tensor, exit non-zero and leave no output; and a file whose vocabulary lies, or has none (below)"""
    f32 = os.path.join(work, f"{arch}-f32.gguf")
    extra, name = os.path.join(work, f"{arch}-extra.gguf"), "blk.0.probe.weight"
    rewritten(f32, extra, extra_tensor=name)
    out = os.path.join(work, f"{arch}-extra-out")
    for what, args in (("forward", ["forward", extra, "--tokens", "1,2"]),
                       ("convert --to gguf --type q8_0",
                        ["convert", extra, out + ".gguf", "--to", "gguf", "--type", "q8_0"]),
                       ("convert to a directory", ["convert", extra, out])):
        run = subprocess.run([hyla] + args, capture_output=True, text=True)
        msg = run.stderr.strip().splitlines()
        left = os.path.exists(out + ".gguf") or os.path.exists(out)
        ok = run.returncode != 0 and len(msg) == 1 and f"tensor {name}" in msg[0] and not left
        report.append({"arch": arch, "check": f"{what} of a file with an unknown tensor is refused", "ok": ok,
                       "message": msg})
        print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} {what} of a file with a tensor the map does not name: "
              f"{msg[0] if msg else '(no message)'}")
        if not ok:
            errors.append(f"{arch}: {what} of a GGUF file with tensor {name}: rc {run.returncode}, message {msg}, "
                          f"output left: {left}")
    # the vocabulary a save from the file writes (tokenizer.json / tokenizer_config.json) is checked when
    # the model loads for training: a special token id outside the vocabulary stops the run at its start,
    # not at its save; a file without a vocabulary trains and saves without tokenizer files
    lying, bare = os.path.join(work, f"{arch}-eos.gguf"), os.path.join(work, f"{arch}-novocab.gguf")
    rewritten(f32, lying, kv={"tokenizer.ggml.eos_token_id": 10 ** 6})
    rewritten(f32, bare, drop_prefix="tokenizer.")
    train = ["train", "--synthetic", "--steps", "1", "--seq", "8", "--batch", "1", "--save"]
    run = subprocess.run([hyla, *train, out + "-eos", "--model", lying], capture_output=True, text=True)
    msg = run.stderr.strip().splitlines()
    ok_eos = (run.returncode != 0 and len(msg) == 1 and "tokenizer.ggml.eos_token_id is 1000000" in msg[0]
              and "step" not in run.stdout and not os.path.exists(out + "-eos"))  # (refused before a step)
    run = subprocess.run([hyla, *train, out + "-novocab", "--model", bare], capture_output=True, text=True)
    ok_bare = (run.returncode == 0 and os.path.exists(os.path.join(out + "-novocab", "model.safetensors"))
               and not os.path.exists(os.path.join(out + "-novocab", "tokenizer.json")))
    for what, ok, detail in (("train from a file whose eos_token_id lies", ok_eos, msg[0] if msg else "(no message)"),
                             ("train from a file without a vocabulary", ok_bare, "saved without tokenizer files")):
        report.append({"arch": arch, "check": what, "ok": ok})
        print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} {what}: {detail}")
        if not ok:
            errors.append(f"{arch}: {what}: {detail}")


def check_tokenizer_files(hyla, work, arch, d, errors, report):
    """hyla convert FILE.gguf DIR writes the file's vocabulary as DIR/tokenizer.json and its special
    tokens and chat template as DIR/tokenizer_config.json (a model trained from a GGUF file saves the
    same): the tokenizers library reads the tokenizer.json and gives the ids (and text back) of the
    original model's on texts with specials, Unicode and whitespace runs; DIR's export back to GGUF
    holds every tokenizer.* key-value of FILE byte for byte; the chat template is the original's."""
    import tokenizers
    f32, out = os.path.join(work, f"{arch}-f32.gguf"), os.path.join(work, f"{arch}-from-gguf")
    subprocess.run([hyla, "convert", f32, out], check=True, stdout=subprocess.DEVNULL)
    mine, orig = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json")), \
        tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    texts = ["hello world, héllo 123 <|im_start|>user\nhi<|im_end|>", "  spaces\t\ttabs\n\n\nnewlines  ",
             "ünïcödé ñ 日本語 😀 e\u0301", "don't I'll WE'VE 12345 x=y+1;"]
    ids_same = all(mine.encode(t).ids == orig.encode(t).ids for t in texts)
    text_same = all(mine.decode(orig.encode(t).ids) == orig.decode(orig.encode(t).ids) for t in texts)
    back = out + ".gguf"
    subprocess.run([hyla, "convert", out, back, "--to", "gguf", "--type", "q8_0"], check=True,
                   stdout=subprocess.DEVNULL)
    tok_keys = lambda p: {k: v for k, v in gguf_keys(p).items() if k.startswith("tokenizer.")}
    keys_same = tok_keys(back) == tok_keys(f32) and len(tok_keys(f32)) >= 5
    cfg, orig_cfg = (json.load(open(os.path.join(p, "tokenizer_config.json"))) for p in (out, d))
    tmpl_same = all(cfg.get(k) == orig_cfg.get(k) for k in ("chat_template", "eos_token", "pad_token"))
    ok = ids_same and text_same and keys_same and tmpl_same
    report.append({"arch": arch, "check": "tokenizer files of a directory from a GGUF file", "ids": ids_same,
                   "decode": text_same, "gguf_round_trip_keys": keys_same, "chat_template": tmpl_same, "ok": ok})
    print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} convert FILE.gguf DIR: tokenizer.json read by the tokenizers library "
          f"(ids {'==' if ids_same else '!='} the original's, text {'==' if text_same else '!='}), "
          f"DIR -> GGUF tokenizer.* key-values {'identical' if keys_same else 'DIFFER'}, chat template "
          f"{'kept' if tmpl_same else 'DIFFERS'}")
    if not ok:
        errors.append(f"{arch}: tokenizer files from a GGUF file: ids {ids_same}, decode {text_same}, "
                      f"key-values {keys_same}, chat template {tmpl_same}")


def gguf_keys(path):
    """the file's key-values as raw bytes per key (the gguf package's parts), GGUF header fields aside"""
    return {k: (tuple(v.types), b"".join(bytes(v.parts[i]) for i in v.data))
            for k, v in gguf.GGUFReader(path).fields.items() if not k.startswith("GGUF.")}


def check_quality(hyla, work, arch, types, errors, report):
    """KL of each quantized file's next-token distribution from the F32 file's, over 2048 positions,
    hyla (in place) against llama.cpp (same files, same tokens)."""
    tokens = [(i * 7919 + 13) % 459 for i in range(2048)]
    f32 = os.path.join(work, f"{arch}-f32.gguf")
    h_ref = hyla_logits(hyla, f32, tokens, os.path.join(work, "kl_ref.bin"))
    l_ref = llama_logits(f32, tokens, batch=512, n_ctx=2048)
    for qtype in types:
        path = os.path.join(work, f"{arch}-{qtype}.gguf")
        h = mean_kl(h_ref, hyla_logits(hyla, path, tokens, os.path.join(work, "kl.bin")))
        l = mean_kl(l_ref, llama_logits(path, tokens, batch=512, n_ctx=2048))
        # both engines round a long prompt's activations to 8 bits per block the same way (Q8_K for
        # the K-quants, per 32 for Q8_0) and form the same integer products, so the KLs agree up to
        # summation order (measured within 0.5%); 25% slack for positions where a near-tie in a
        # random model's logits goes one way or the other
        ok = h <= 1.25 * l + 1e-6
        report.append({"arch": arch, "type": qtype, "check": "mean KL from F32 over 2048 positions",
                       "hyla": h, "llama_cpp": l, "ok": ok})
        print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} {qtype:6s}: mean KL from the F32 model over 2048 positions: "
              f"hyla {h:.3g}, llama.cpp {l:.3g}")
        if not ok:
            errors.append(f"{arch} {qtype}: hyla's KL from F32 {h:.3g} > 1.25 x llama.cpp's {l:.3g}")


def corrupt_copy(path, out, how):
    """a copy of the GGUF file with one matrix damaged the way a reader bug would read it: 'scale'
    doubles the f16 scale of every Q8_0 block of the first Q8_0 matrix; 'nibbles' swaps the low and
    high nibbles of the quants of every Q4_K block of the first Q4_K matrix; 'hmask' swaps the two
    128-value halves' third bits (hmask bits 0-3 and 4-7) of every Q3_K block of the first Q3_K matrix"""
    data = bytearray(open(path, "rb").read())
    r = gguf.GGUFReader(path)
    T = gguf.GGMLQuantizationType
    want, block = {"scale": (T.Q8_0, 34), "nibbles": (T.Q4_K, 144), "hmask": (T.Q3_K, 110)}[how]
    t = next(t for t in r.tensors if t.tensor_type == want)
    start, size = int(t.data_offset), int(t.n_bytes)
    for b in range(start, start + size, block):
        if how == "scale":  # f16 exponent + 1 (the values here are far from the f16 range's top)
            h = int.from_bytes(data[b:b + 2], "little")
            data[b:b + 2] = (h + 0x0400 if h & 0x7C00 else h).to_bytes(2, "little")
        elif how == "hmask":
            for i in range(b, b + 32):
                data[i] = ((data[i] & 0xF) << 4) | (data[i] >> 4)
        else:
            for i in range(b + 16, b + 144):
                data[i] = ((data[i] & 0xF) << 4) | (data[i] >> 4)
    open(out, "wb").write(bytes(data))
    return t.name


def check_same_file(hyla, work, errors, report):
    """hyla against llama.cpp on the SAME quantized file, on a calm model (CALM), with a bound derived
    from the type's activation rounding.

    Both sides multiply the file's blocks by activations rounded the same way (Q8_K per 256 for the
    K-quants, Q8_0 per 32 with an f16 scale for Q8_0; tests/test_gguf.c checks hyla's rounding against
    its bound) with integer products and the scales applied per block in fp32. What differs: (a) the
    fp32 summation order, a relative ~sqrt(K) 2^-24 per product amplified by the model (the F32
    same-file check measures ~25x), covered by 2^-12 * scale; (b) an activation whose input differed
    in its last bit lands on the other side of a rounding boundary (one level of d = max / 127, or a
    block whose largest magnitude is a near tie between two values), on one side only. (b) moves a
    few activations by one step each, to the neighbouring level: twice the half step by which rounding
    moves every activation, whose effect on the logits, delta_a = max |hyla(int8 activations) -
    hyla(fp32 activations)| on the same file, is the model's own response to the whole rounding; so (b)
    is bounded by 2 delta_a. Bound: 2 delta_a + 2^-12 * scale. Measured: 1e-7 .. 7e-7 at most
    positions, and one such step per few hundred token-layers (a 0.01-0.025 jump that then stays in
    the GDN state: a Q4_0 file agrees to 1e-7 for 18 tokens, then 0.017-0.025, against delta_a 0.024;
    with delta_a alone as the bound, as until stop 46, that file failed by 4%). A wrong block scale,
    nibble order or third bit moves every product: three damaged copies (corrupt_copy) must exceed the
    bound (they read 4.8, 0.63, 0.62 against ~0.05-0.09), so the check has the power the issue asks for.
    llama.cpp runs token by token (batch 1: its vec-dot path)."""
    d = os.path.join(work, "calm")
    cfg_path = d + ".json"
    json.dump(CALM, open(cfg_path, "w"))
    subprocess.run([hyla, "init", "--out", d, "--config", cfg_path, "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "data", "make_qwen_tokenizer.py"), d, "--pattern", "qwen35"],
                   check=True, stdout=subprocess.DEVNULL)
    tokens = [(i * 37 + 11) % 459 for i in range(24)]
    ref = hyla_logits(hyla, d, tokens, os.path.join(work, "calm_ref.bin"))
    scale = max(1.0, float(np.abs(ref).max()))
    f32 = os.path.join(work, "calm-f32.gguf")
    subprocess.run([hyla, "convert", d, f32, "--to", "gguf", "--type", "f32"], check=True, stdout=subprocess.DEVNULL)
    files = {}
    # Q4_0 and IQ4_NL --pure (their preset's tied embedding is Q6_K): on the preset's file llama.cpp's
    # logits move 0.013-0.033 from hyla's already at the first token -- boundary events (b) there,
    # not a reading error: the embedding's values, not its type, do it (the same values stored as F32
    # read the same), and the events come from last-bit differences outside the products, e.g. the
    # RMSNorm factor, which hyla rounds once from double and llama.cpp forms as 1.0f / sqrtf(mean + eps)
    # (7 of 10 rows here differ in the last bit; with llama.cpp's formula one file's event at token 5
    # goes away). The pure files meet no event in their first 18 tokens (stop 47's note).
    for qtype in ("q8_0", "q4_k_m", "q5_k_m", "q6_k", "q3_k_m", "q2_k", "iq4_xs", "q4_0", "iq4_nl"):
        path = files[qtype] = os.path.join(work, f"calm-{qtype}.gguf")
        if qtype == "q8_0":
            subprocess.run([hyla, "convert", d, path, "--to", "gguf", "--type", "q8_0"], check=True, stdout=subprocess.DEVNULL)
        else:
            llama_quantize(f32, path, LLAMA_QUANTS[qtype], pure=qtype in ("q4_0", "iq4_nl"))
    cases = [(q, files[q], files[q], False) for q in files]
    cases += [("q8_0 scale x2", files["q8_0"], os.path.join(work, "calm-q8_0-bad.gguf"), "scale"),
              ("q4_k_m nibbles", files["q4_k_m"], os.path.join(work, "calm-q4_k_m-bad.gguf"), "nibbles"),
              ("q3_k_m hmask", files["q3_k_m"], os.path.join(work, "calm-q3_k_m-bad.gguf"), "hmask")]
    delta_a = {}
    for what, path, hyla_path, damage in cases:
        if path not in delta_a:  # the model's response to rounding all activations, on this file
            fp32 = hyla_logits(hyla, path, tokens, os.path.join(work, "calm_a.bin"), int8=False)
            delta_a[path] = float(np.abs(hyla_logits(hyla, path, tokens, os.path.join(work, "calm.bin")) - fp32).max())
        bound = 2 * delta_a[path] + scale * 2 ** -12
        damaged = corrupt_copy(path, hyla_path, damage) if damage else None
        got = llama_logits(path, tokens, batch=1)
        mine = hyla_logits(hyla, hyla_path, tokens, os.path.join(work, "calm.bin"))
        diff = float(np.abs(got - mine).max()) if np.isfinite(got).all() else float("inf")
        ok = diff > bound if damage else diff <= bound
        report.append({"arch": "calm", "type": what, "check": "llama.cpp vs hyla, same file, tight"
                       + (" (damaged copy must fail)" if damage else ""), "max_abs_diff": diff, "bound": bound,
                       "activation_rounding_delta": delta_a[path], "logit_scale": scale, "ok": ok})
        print(f"  {'ok' if ok else 'FAIL'}  calm      {what:14s}: llama.cpp (token by token) vs hyla on the same file "
              f"max |diff| {diff:.3g} {'>' if damage else '<='} bound {bound:.3g} (logits up to {scale:.3g})"
              + (f"; hyla read a damaged {damaged}" if damage else ""))
        if not ok:
            errors.append(f"calm {what}: same-file difference {diff:.3g} " + ("did not exceed" if damage else "exceeds")
                          + f" the bound {bound:.3g}")


def check_as_model(hyla, work, arch, qtype, path, tokens, ref, scale, errors, report):
    """hyla on the file in place against hyla on its dequantized copy (and, F32, the original)."""
    deq = path + ".dequantized"
    subprocess.run(["rm", "-rf", deq], check=True)
    subprocess.run([hyla, "convert", path, deq], check=True, stdout=subprocess.DEVNULL)
    base = hyla_logits(hyla, deq, tokens, os.path.join(work, "d.bin"))
    inplace = hyla_logits(hyla, path, tokens, os.path.join(work, "p.bin"), int8=False)
    diff = float(np.abs(inplace - base).max())
    ok = diff <= scale * 2 ** -14
    row = {"arch": arch, "type": qtype, "check": "hyla in place vs dequantized", "max_abs_diff": diff,
           "bound": scale * 2 ** -14, "logit_scale": scale, "ok": ok}
    if qtype == "f32":
        row["dequantized_vs_original_max_abs_diff"] = float(np.abs(base - ref).max())
        ok = ok and row["dequantized_vs_original_max_abs_diff"] <= scale * 2 ** -16
        row["ok"] = ok
    report.append(row)
    print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} {qtype:6s}: hyla in place vs dequantized max |diff| {diff:.3g} "
          f"(bound {scale * 2 ** -14:.3g})"
          + (f"; dequantized vs original {row['dequantized_vs_original_max_abs_diff']:.3g}" if qtype == "f32" else ""))
    if not ok:
        errors.append(f"{arch} {qtype}: hyla's in-place GGUF model differs from its dequantized copy ({row})")
    return inplace


def llama_logits(path, tokens, batch=64, n_ctx=64):
    # llama.cpp's CPU repack buffers off: its 0.3.36 build here segfaults in them on quantized
    # prompts of more than one token (bench/llama_infer.py); with them off, batches work for every type
    default = llama_cpp.llama_model_default_params

    def without_repack():
        p = default()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama.llama_cpp.llama_model_default_params = without_repack
    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=batch, n_ubatch=batch, logits_all=True, flash_attn=False,
                          n_threads=2, n_threads_batch=2, type_k=0, type_v=0, verbose=False)  # type 0 = GGML_TYPE_F32 KV cache
    llm.eval(tokens)
    got = np.array(llm.scores[:len(tokens)], dtype=np.float32)
    del llm
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hyla")
    ap.add_argument("work")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    errors, report = [], []
    global QUIET  # the ctypes callback must outlive every llama.cpp call
    QUIET = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(QUIET, None)  # quiet loader
    for arch, config in MODELS.items():
        c = config.get("text_config", config)
        d = os.path.join(a.work, arch)
        cfg_path = os.path.join(a.work, arch + ".json")
        json.dump(config, open(cfg_path, "w"))
        subprocess.run([a.hyla, "init", "--out", d, "--config", cfg_path, "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "data", "make_qwen_tokenizer.py"), d, "--pattern",
                        "qwen2" if arch == "qwen3next" else "qwen35"], check=True, stdout=subprocess.DEVNULL)
        tokens = [(i * 37 + 11) % 459 for i in range(24)]  # ids of the 459-token tokenizer, specials included
        ref = hyla_logits(a.hyla, d, tokens, os.path.join(a.work, "ref.bin"))
        scale = max(1.0, float(np.abs(ref).max()))
        delta_w = {}
        for dt in ("f16", "bf16"):  # the model's sensitivity: hyla on weights rounded to dt
            rd = d + "." + dt
            subprocess.run([a.hyla, "convert", d, rd, "--dtype", dt], check=True, stdout=subprocess.DEVNULL)
            delta_w[dt] = float(np.abs(hyla_logits(a.hyla, rd, tokens, os.path.join(a.work, "r.bin")) - ref).max())
        types = list(TYPES) if arch != "qwen35k" else ["f32", "q8_0"] + list(LLAMA_QUANTS)
        for qtype in types:
            path = os.path.join(a.work, f"{arch}-{qtype}.gguf")
            if qtype in LLAMA_QUANTS:  # llama.cpp's quantizer on hyla's F32 export
                llama_quantize(os.path.join(a.work, f"{arch}-f32.gguf"), path, LLAMA_QUANTS[qtype])
            else:
                subprocess.run([a.hyla, "convert", d, path, "--to", "gguf", "--type", qtype], check=True,
                               stdout=subprocess.DEVNULL)
                if arch != "qwen35k":
                    check_file(path, arch, c, qtype, errors)
            inplace = check_as_model(a.hyla, a.work, arch, qtype, path, tokens, ref, scale, errors, report)
            got = llama_logits(path, tokens)
            bound = 4 * delta_w[qtype] + scale / 4096 if qtype in ("f16", "bf16") else scale / 4096
            diff = float(np.abs(got - inplace).max()) if np.isfinite(got).all() else float("inf")
            agree = float((got.argmax(1) == inplace.argmax(1)).mean())
            if qtype not in ("f32", "f16", "bf16"):  # quantized: check_same_file's calm model checks it
                report.append({"arch": arch, "type": qtype, "check": "llama.cpp vs hyla, same file (reported)",
                               "max_abs_diff": diff, "argmax_agreement": agree, "logit_scale": scale})
                print(f"  info  {arch:9s} {qtype:6s}: llama.cpp vs hyla on the same file max |diff| {diff:.3g} "
                      f"(logits up to {scale:.3g}; a random model at initializer_range 0.1 amplifies rounding, so "
                      f"the bound is check_same_file's), argmax agreement {agree:.0%}")
                continue
            ok = diff <= bound
            report.append({"arch": arch, "type": qtype, "check": "llama.cpp vs hyla, same file", "max_abs_diff": diff,
                           "bound": bound, "logit_scale": scale, "argmax_agreement": agree,
                           "weights_only_delta": delta_w.get(qtype, delta_w["bf16"]), "ok": ok})
            print(f"  {'ok' if ok else 'FAIL'}  {arch:9s} {qtype:6s}: llama.cpp vs hyla on the same file max |diff| "
                  f"{diff:.3g} (bound {bound:.3g}, logits up to {scale:.3g}), argmax agreement {agree:.0%}")
            if not ok:
                errors.append(f"{arch} {qtype}: llama.cpp logits differ from hyla's by {diff:.3g} > {bound:.3g}")
    check_same_file(a.hyla, a.work, errors, report)
    check_quality(a.hyla, a.work, "qwen35k", ["q8_0"] + list(LLAMA_QUANTS), errors, report)
    check_quantizer(a.hyla, a.work, "qwen35k", os.path.join(a.work, "qwen35k"), errors, report)
    check_refusals(a.hyla, a.work, "qwen35k", errors, report)
    check_tokenizer_files(a.hyla, a.work, "qwen35k", os.path.join(a.work, "qwen35k"), errors, report)
    # the _M mix's MoE rules (exactly 8 experts: attn_v / attn_qkv / attn_k Q8_0, attn_output Q5_K;
    # ffn_down by block number) and its tensor order past 10 blocks, on a 12-layer Qwen3-Next
    moe = dict(MODELS["qwen3next"], hidden_size=256, head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64,
               moe_intermediate_size=256, shared_expert_intermediate_size=256, num_hidden_layers=12)
    d = os.path.join(a.work, "qwen3nextk")
    json.dump(moe, open(d + ".json", "w"))
    subprocess.run([a.hyla, "init", "--out", d, "--config", d + ".json", "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "data", "make_qwen_tokenizer.py"), d, "--pattern", "qwen2"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([a.hyla, "convert", d, d + "-f32.gguf", "--to", "gguf", "--type", "f32"], check=True, stdout=subprocess.DEVNULL)
    check_quantizer(a.hyla, a.work, "qwen3nextk", d, errors, report)
    if a.json:
        json.dump({"llama_cpp_python": llama_cpp.__version__, "gguf": getattr(gguf, "__version__", "?"),
                   "results": report}, open(a.json, "w"), indent=1)
    for e in errors:
        print("FAIL", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
