#!/usr/bin/env bash
# LoRA benchmark (issue: fine-tuning): LoRA vs full fine-tuning on bench-100m (step time, tokens/s,
# argument / temp bytes planned and measured), and a LoRA step of a Qwen3.5-0.8B-shaped model
# (configs/qwen3.5-0.8b.json, random weights: memory planned == measured, tokens/s).
# usage: bench/lora.sh [THREADS=2] [SEQ=512] [STEPS=3] [RANK=16]      (about 3 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; SEQ=${2:-512}; STEPS=${3:-3}; RANK=${4:-16}
. bench/common.sh
bench_setup bench-100m lora_bench
small=$(./build/bench/lora_bench "$MODEL" 1 "$SEQ" "$STEPS" "$RANK" full,lora)
Q=build/bench-models/qwen3.5-0.8b
[ -f "$Q/model.safetensors" ] || { rm -rf "$Q"; ./build/hyla init --config configs/qwen3.5-0.8b.json --seed 5 --out "$Q" >/dev/null; }
big=$(./build/bench/lora_bench "$Q" 1 "$SEQ" 2 "$RANK" lora)
/usr/bin/python3 - "$small" "$big" "$THREADS" <<'PY'
import json, sys
full, lora = [json.loads(l) for l in sys.argv[1].splitlines()]
big = json.loads(sys.argv[2])
arg = lambda r: r["planned"]["argument_bytes"]
print(json.dumps({"benchmark": "lora", "threads": int(sys.argv[3]),
                  "bench-100m": {"full": full, "lora": lora,
                                 "lora_step_speedup": full["best_step_seconds"] / lora["best_step_seconds"],
                                 "lora_argument_bytes_fraction": arg(lora) / arg(full),
                                 "lora_temp_bytes_fraction": lora["planned"]["temp_bytes"] / full["planned"]["temp_bytes"],
                                 "trained_fraction": lora["trained_params"] / lora["params"]},
                  "qwen3.5-0.8b-shaped": big}, indent=1))
PY
