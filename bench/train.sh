#!/usr/bin/env bash
# Training benchmark (issue: training): activation memory and step time per remat policy/unit,
# and training tokens/s against the PyTorch reference on the same model, batch and threads.
# usage: bench/train.sh [THREADS=2] [BATCH=1] [SEQ=512] [STEPS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; B=${2:-1}; SEQ=${3:-512}; STEPS=${4:-3}
. bench/common.sh
bench_setup bench-100m train_bench
hyla=$(./build/bench/train_bench "$MODEL" "$B" "$SEQ" "$STEPS" none:layer full:layer minimal:layer save_qkv_proj:layer full:block full:part)
# the same in bf16 compute (--act-dtype bf16: bf16 checkpoints and GEMM operands, fp32 masters)
hyla_bf16=$(HYLA_BENCH_ACT_DTYPE=bf16 ./build/bench/train_bench "$MODEL" "$B" "$SEQ" "$STEPS" none:layer full:layer minimal:layer)
torch=$(/usr/bin/python3 bench/torch_train.py "$MODEL" "$B" "$SEQ" "$STEPS" "$THREADS")
/usr/bin/python3 - "$hyla" "$torch" "$hyla_bf16" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
t = json.loads(sys.argv[2])
rows16 = [json.loads(l) for l in sys.argv[3].splitlines()]
for r in rows16:
    f = [x for x in rows if x["policy"] == r["policy"] and x["unit"] == r["unit"]][0]
    r["step_time_vs_f32"] = r["best_step_seconds"] / f["best_step_seconds"]
    r["activation_vs_f32"] = r["activation_bytes"] / f["activation_bytes"]
none = [r for r in rows if r["policy"] == "none"][0]
block = [r for r in rows if r["policy"] == "full" and r["unit"] == "block"][0]
layer = [r for r in rows if r["policy"] == "full" and r["unit"] == "layer"][0]
for r in rows:
    r["step_time_vs_none"] = r["best_step_seconds"] / none["best_step_seconds"]
    r["activation_vs_none"] = r["activation_bytes"] / none["activation_bytes"]
    r["speedup_vs_pytorch"] = r["tokens_per_s"] / t["tokens_per_s"]
print(json.dumps({"benchmark": "train", "model": "bench-100m", "threads": t["threads"], "batch": t["batch"],
                  "seq": t["seq"], "hyla": rows, "hyla_bf16": rows16, "pytorch": t,
                  "full_layer_vs_block_activation_reduction": 1 - layer["activation_bytes"] / block["activation_bytes"]},
                 indent=1))
PY
