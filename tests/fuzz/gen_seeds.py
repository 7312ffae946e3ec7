#!/usr/bin/env python3
"""Write the hand-made seeds in tests/fuzz/seeds/<harness>/ (committed; rerun to regenerate).
The seeds produced by hyla itself come from make_corpus.sh instead."""
import json, os, struct, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def put(harness, name, data):
    d = os.path.join(ROOT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def byte_chars():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer(pre, merges_as_pairs, normalizer=None, added=True):
    bc = byte_chars()
    vocab = {bc[b]: b for b in range(256)}
    merges = [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "a"), ("\u0120", "t"), ("h", "e"), ("\u0120t", "he")]
    for i, (l, r) in enumerate(merges):
        vocab[l + r] = 256 + i
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 300, "content": "<|im_start|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True},
                         {"id": 301, "content": "<|im_end|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}] if added else [],
        "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [[l, r] for l, r in merges] if merges_as_pairs else [l + " " + r for l, r in merges]},
    }
    return json.dumps(tok, ensure_ascii=False, separators=(",", ":"))


def safetensors(tensors, meta=True):
    """tensors: [(name, dtype, shape, bytes)]"""
    hdr, data = {}, b""
    if meta:
        hdr["__metadata__"] = {"format": "pt"}
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    seq = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    put("fuzz_tokenizer", "qwen_tiny.json", tokenizer(seq, True, {"type": "NFC"}))
    put("fuzz_tokenizer", "gpt2_tiny.json",
        tokenizer({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}, False, None, False))

    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    st = [("a", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "BF16", [3], b"\x80\x3f\x00\x40\x40\x40"),
          ("c", "F16", [], b"\x00\x3c"), ("z", "F32", [0, 5], b"")]
    put("fuzz_safetensors", "mixed.safetensors", safetensors(st))
    put("fuzz_safetensors", "empty.safetensors", safetensors([], meta=False))

    def pack(index, shards):
        out = struct.pack("<I", len(index)) + index
        for s in shards:
            out += struct.pack("<I", len(s)) + s
        return out

    for n in (1, 2, 3):
        names = ["model-%05d-of-%05d.safetensors" % (k + 1, n) for k in range(n)]
        shards, wm = [], {}
        for k in range(n):
            ts = [(t[0] + str(k), t[1], t[2], t[3]) for t in st[k % len(st):][:2]]
            shards.append(safetensors(ts))
            for t in ts:
                wm[t[0]] = names[k]
        index = json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}).encode()
        put("fuzz_st_index", "shards%d.bin" % n, pack(index, shards))

    put("fuzz_config", "qwen3_5_dense.json", json.dumps({
        "model_type": "qwen3_5", "tie_word_embeddings": True, "text_config": {
            "model_type": "qwen3_5_text", "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 4,
            "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "partial_rotary_factor": 0.25,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0},
            "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
            "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4, "intermediate_size": 32,
            "rms_norm_eps": 1e-6, "hidden_act": "silu"}}))
    put("fuzz_config", "qwen3_5_moe.json", json.dumps({
        "model_type": "qwen3_5_moe", "text_config": {
            "model_type": "qwen3_5_moe_text", "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 3,
            "full_attention_interval": 3, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
            "rope_scaling": None, "rope_theta": 1e6, "linear_num_key_heads": 2, "linear_num_value_heads": 2,
            "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
            "shared_expert_intermediate_size": 8}}))
    put("fuzz_config", "next_mlp_only.json", json.dumps({
        "model_type": "qwen3_next", "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 3,
        "full_attention_interval": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
        "rope_theta": 1e4, "linear_num_key_heads": 1, "linear_num_value_heads": 1, "linear_key_head_dim": 8,
        "linear_value_head_dim": 8, "linear_conv_kernel_dim": 2, "num_experts": 2, "num_experts_per_tok": 1,
        "moe_intermediate_size": 8, "intermediate_size": 16, "decoder_sparse_step": 2, "mlp_only_layers": [2]}))

    put("fuzz_tokens", "vocab0.bin", b"HYLATOK1" + struct.pack("<IIQ", 0, 0, 3) + struct.pack("<3I", 0, 7, 151935))
    # tiny-hybrid: 10 MoE layers, top-2, 8 experts; one row per layer, with padding
    ids = []
    for l in range(10):
        ids += [l % 8, -1] if l % 2 else [-1, -1]
    put("fuzz_routing", "padding.bin", b"HYLAROU1" + struct.pack("<IIQ", 10, 2, 1) + struct.pack("<%di" % len(ids), *ids))
    put("fuzz_checkpoint_state", "state_extra.json",
        b"\x00" + json.dumps({"format": "hyla-train-state-1", "step": 0, "optimizer_step": 0, "data_pos": 0,
                              "seed": "18446744073709551615", "data_source": "x" * 40, "extra": [1]}).encode())
    put("fuzz_tokenizer_encode", "mixed.txt",
        "<|im_start|>user\nHello, world's 12345 \u4f60\u597d  \t\r\n<|im_end|>".encode() + b"\xff\xc3(")


if __name__ == "__main__":
    main()
