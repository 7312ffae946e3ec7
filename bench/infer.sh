#!/usr/bin/env bash
# Inference benchmark (issue: inference): prefill (sequence 512) and decode (128 new tokens)
# tokens/s on the bench-387m hybrid MoE (hidden 1024, 12 layers, 32 experts top-4), fp32, vs the
# PyTorch reference on the same weights in the same run. usage: bench/infer.sh [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
. bench/common.sh
bench_setup bench-387m infer_bench
hyla=$(./build/bench/infer_bench "$MODEL" 512 128)
torch=$(/usr/bin/python3 bench/torch_infer.py "$MODEL" 512 4 "$THREADS")
/usr/bin/python3 - "$hyla" "$torch" <<'PY'
import json, sys
h, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"benchmark": "inference", "model": "bench-387m", "hyla": h, "pytorch": t,
                  "prefill_speedup": h["prefill_tokens_per_s"] / t["prefill_tokens_per_s"],
                  "decode_speedup": h["decode_tokens_per_s"] / t["decode_tokens_per_s"]}, indent=1))
PY
