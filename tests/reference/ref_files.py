"""ref_files.py - the model files the float64 oracle (hyla_ref.py) reads and writes: its own
safetensors reader/writer (no `safetensors` package; strict offset checks), bfloat16 rounding, and
config.json normalised to one dict (Qwen3-Next flat, or Qwen3.5's text_config wrapper).
Shares no code with the C engine in src/."""
import json
import os
import struct

import numpy as np

# --------------------------------------------------------------------------------------------
# safetensors (own implementation; no `safetensors` package)
# --------------------------------------------------------------------------------------------

_ST_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def bf16_bits_from_f32(a):
    """Round float32 values to bfloat16 (round to nearest even); returns uint16 bit patterns."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    if not np.all(np.isfinite(np.asarray(a, dtype=np.float32))):
        raise ValueError("bf16 rounding of non-finite values not supported")
    rnd = ((u >> 16) & 1) + 0x7FFF
    return ((u + rnd) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_dtype(a, dtype):
    """Values (float64 array) exactly representable in the storage dtype, as float64."""
    a = np.asarray(a, dtype=np.float64)
    if dtype == "F32":
        return a.astype(np.float32).astype(np.float64)
    if dtype == "F16":
        return a.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        return bf16_bits_to_f32(bf16_bits_from_f32(a.astype(np.float32))).astype(np.float64)
    if dtype == "F64":
        return a
    raise ValueError(dtype)


def encode_tensor(a, dtype):
    a = np.asarray(a)
    if dtype == "BF16":
        return bf16_bits_from_f32(a.astype(np.float32)).astype("<u2").tobytes()
    return np.ascontiguousarray(a.astype(np.dtype(_ST_NP[dtype]).newbyteorder("<"))).tobytes()


def st_write(path, tensors, metadata=None):
    """tensors: list of (name, ndarray, dtype_str).  Writes the safetensors format:
    u64 LE header length N, N bytes JSON header (space padded to a multiple of 8), raw data."""
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs, off = [], 0
    for name, a, dtype in tensors:
        b = encode_tensor(a, dtype)
        header[name] = {"dtype": dtype, "shape": [int(s) for s in np.shape(a)],
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((-len(hj)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    return 8 + len(hj) + off


def st_read(path):
    """Returns {name: (float64 ndarray, dtype_str)}.  Validates offsets/sizes strictly."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short")
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        numel = int(np.prod(shape)) if shape else 1
        esz = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[dtype]
        if e - b != numel * esz or e > len(data) or b < 0:
            raise ValueError(f"{path}: bad offsets for {name}")
        spans.append((b, e))
        buf = data[b:e]
        if dtype == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(buf, dtype="<u2"))
        else:
            arr = np.frombuffer(buf, dtype=np.dtype(_ST_NP[dtype]).newbyteorder("<"))
        out[name] = (arr.astype(np.float64).reshape(shape), dtype)
    spans.sort()
    for (b0, e0), (b1, e1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ValueError(f"{path}: overlapping tensors")
    return out


def read_model_tensors(model_dir):
    """All tensors of a model directory: sharded (model.safetensors.index.json) or single file."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        files = sorted(set(wm.values()))
        tensors = {}
        for fn in files:
            part = st_read(os.path.join(model_dir, fn))
            for name, v in part.items():
                if wm.get(name) != fn:
                    raise ValueError(f"{fn}: tensor {name} not mapped to this file in the index")
                tensors[name] = v
        missing = set(wm) - set(tensors)
        if missing:
            raise ValueError(f"index names tensors not found in shards: {sorted(missing)[:5]}")
        return tensors
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return st_read(single)
    raise FileNotFoundError(f"no model.safetensors(.index.json) in {model_dir}")


# --------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------

def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return load_config_from_dict(json.load(f))


def load_config_from_dict(raw):
    """Normalise a config.json dict (Qwen3-Next flat, or Qwen3.5 text_config wrapper)."""
    outer_type = raw.get("model_type", "")
    tc = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    inner_type = tc.get("model_type", outer_type)

    def get(key, default=None):
        if key in tc and tc[key] is not None:
            return tc[key]
        if key in raw and raw[key] is not None:
            return raw[key]
        return default

    types = {outer_type, inner_type}
    if types & {"qwen3_5_moe", "qwen3_5_moe_text"}:
        family = "qwen3_5_moe"
    elif types & {"qwen3_5", "qwen3_5_text"}:
        family = "qwen3_5"
    elif "qwen3_next" in types:
        family = "qwen3_next"
    else:
        raise ValueError(f"unsupported model_type {outer_type!r}/{inner_type!r}")

    c = {"family": family}
    c["vocab_size"] = int(get("vocab_size"))
    c["hidden_size"] = H = int(get("hidden_size"))
    c["num_hidden_layers"] = N = int(get("num_hidden_layers"))
    c["num_attention_heads"] = int(get("num_attention_heads"))
    c["num_key_value_heads"] = int(get("num_key_value_heads", c["num_attention_heads"]))
    c["head_dim"] = int(get("head_dim", H // c["num_attention_heads"]))
    c["linear_num_key_heads"] = int(get("linear_num_key_heads"))
    c["linear_num_value_heads"] = int(get("linear_num_value_heads"))
    c["linear_key_head_dim"] = int(get("linear_key_head_dim"))
    c["linear_value_head_dim"] = int(get("linear_value_head_dim"))
    c["linear_conv_kernel_dim"] = int(get("linear_conv_kernel_dim", 4))
    c["rms_norm_eps"] = float(get("rms_norm_eps", 1e-6))
    c["tie_word_embeddings"] = bool(get("tie_word_embeddings", False))
    c["intermediate_size"] = int(get("intermediate_size", 0) or 0)
    c["num_experts"] = int(get("num_experts", 0) or 0)
    c["num_experts_per_tok"] = int(get("num_experts_per_tok", 0) or 0)
    c["moe_intermediate_size"] = int(get("moe_intermediate_size", 0) or 0)
    c["shared_expert_intermediate_size"] = int(get("shared_expert_intermediate_size", 0) or 0)
    c["router_aux_loss_coef"] = float(get("router_aux_loss_coef", 0.001))
    if family == "qwen3_5_moe":
        c["norm_topk_prob"] = True            # always renormalised (field removed)
    else:
        c["norm_topk_prob"] = bool(get("norm_topk_prob", True))
    act = get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act {act} unsupported")
    if get("attention_bias", False):
        raise ValueError("attention_bias=true unsupported")

    # RoPE: top level (Qwen3-Next v4.57 style) or rope_parameters / rope_scaling (v5, Qwen3.5).
    rp = get("rope_parameters") or get("rope_scaling") or {}
    rtype = rp.get("rope_type", rp.get("type", "default")) if rp else "default"
    if rtype not in ("default", None):
        raise ValueError(f"rope_type {rtype} unsupported by the reference")
    c["rope_theta"] = float(get("rope_theta", rp.get("rope_theta", 10000.0)))
    c["partial_rotary_factor"] = float(get("partial_rotary_factor",
                                           rp.get("partial_rotary_factor", 0.25)))

    lt = get("layer_types")
    if lt is not None:
        lt = list(lt)
        if len(lt) < N:
            raise ValueError("layer_types shorter than num_hidden_layers")
        lt = lt[:N]
    else:
        iv = int(get("full_attention_interval", 4))
        lt = ["full_attention" if (i + 1) % iv == 0 else "linear_attention" for i in range(N)]
    for t in lt:
        if t not in ("full_attention", "linear_attention"):
            raise ValueError(f"layer type {t}")
    c["layer_types"] = lt
    # MTP layers (docs/mtp.md): Qwen3-Next num_nextn_predict_layers, Qwen3.5 mtp_num_hidden_layers
    c["mtp_layers"] = int(get("num_nextn_predict_layers", 0) or get("mtp_num_hidden_layers", 0) or 0)

    if family == "qwen3_next":
        step = int(get("decoder_sparse_step", 1) or 1)
        mlp_only = set(int(x) for x in (get("mlp_only_layers", []) or []))
        E = c["num_experts"]
        c["moe_layers"] = [E > 0 and i not in mlp_only and (i + 1) % step == 0 for i in range(N)]
    elif family == "qwen3_5":
        c["moe_layers"] = [False] * N
    else:
        c["moe_layers"] = [True] * N
    return c
