#!/usr/bin/env bash
# Inference benchmark (issue: inference): prefill (sequence 512) and decode (128 new tokens)
# tokens/s on the bench-387m hybrid MoE (hidden 1024, 12 layers, 32 experts top-4), fp32 and from
# BF16-stored weights used as stored (bf16 compute; resident memory after load beside), vs the
# PyTorch reference on the same weights in the same run, and llama.cpp itself on GGUF exports of
# them (F32: the same numbers; BF16: what llama.cpp users run) when .venv has llama-cpp-python
# (scripts/pydeps.sh). usage: bench/infer.sh [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
. bench/common.sh
bench_setup bench-387m infer_bench
hyla=$(./build/bench/infer_bench "$MODEL" 512 128)
# bf16: the same weights stored BF16, used as stored (no fp32 copy)
[ -f "$MODEL.bf16/config.json" ] || ./build/hyla convert "$MODEL" "$MODEL.bf16" --dtype bf16 >/dev/null
hyla_bf16=$(./build/bench/infer_bench "$MODEL.bf16" 512 128 bf16)
torch=$(/usr/bin/python3 bench/torch_infer.py "$MODEL" 512 4 "$THREADS")
llama_f32=null llama_bf16=null
if [ -x .venv/bin/python ] && .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    [ -f "$MODEL/tokenizer.json" ] || /usr/bin/python3 tests/data/make_qwen_tokenizer.py "$MODEL" >/dev/null
    for t in f32 bf16; do
        [ -f "$MODEL.$t.gguf" ] || ./build/hyla convert "$MODEL" "$MODEL.$t.gguf" --to gguf --type $t >/dev/null
    done
    llama_f32=$(.venv/bin/python bench/llama_infer.py "$MODEL.f32.gguf" 512 128 "$THREADS")
    llama_bf16=$(.venv/bin/python bench/llama_infer.py "$MODEL.bf16.gguf" 512 128 "$THREADS")
else
    echo "infer.sh: llama.cpp peer SKIPPED (no llama-cpp-python in .venv; scripts/pydeps.sh)" >&2
fi
/usr/bin/python3 - "$hyla" "$torch" "$llama_f32" "$llama_bf16" "$hyla_bf16" <<'PY'
import json, sys
h, t, lf, lb, hb = (json.loads(a) for a in sys.argv[1:6])
out = {"benchmark": "inference", "model": "bench-387m", "hyla": h, "hyla_bf16": hb, "pytorch": t,
       "bf16_over_f32": {"prefill": hb["prefill_tokens_per_s"] / h["prefill_tokens_per_s"],
                         "decode": hb["decode_tokens_per_s"] / h["decode_tokens_per_s"],
                         "resident_after_load": hb["resident_bytes_after_load"] / h["resident_bytes_after_load"]},
       "prefill_speedup": h["prefill_tokens_per_s"] / t["prefill_tokens_per_s"],
       "decode_speedup": h["decode_tokens_per_s"] / t["decode_tokens_per_s"]}
for name, l in (("llama_cpp_f32", lf), ("llama_cpp_bf16", lb)):
    if l:
        out[name] = l
        out[name + "_ratio"] = {"prefill": h["prefill_tokens_per_s"] / l["prefill_tokens_per_s"],
                                "decode": h["decode_tokens_per_s"] / l["decode_tokens_per_s"]}
if lb:
    out["hyla_bf16_over_llama_cpp_bf16"] = {"prefill": hb["prefill_tokens_per_s"] / lb["prefill_tokens_per_s"],
                                            "decode": hb["decode_tokens_per_s"] / lb["decode_tokens_per_s"]}
print(json.dumps(out, indent=1))
PY
