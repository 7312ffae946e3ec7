#!/usr/bin/env bash
# Forward benchmark (issue: engine core): hyla vs the PyTorch reference on the same ~100M-parameter
# hybrid MoE model (preset bench-100m), sequence 512, fp32, same thread count, same run.
# Prints one JSON object. usage: bench/forward.sh [THREADS=2] [SEQ=512] [REPS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; SEQ=${2:-512}; REPS=${3:-5}
. bench/common.sh
bench_setup bench-100m forward_bench
hyla=$(./build/bench/forward_bench "$MODEL" "$SEQ" "$REPS")
torch=$(/usr/bin/python3 bench/torch_forward.py "$MODEL" "$SEQ" "$REPS" "$THREADS")
/usr/bin/python3 - "$hyla" "$torch" <<'PY'
import json, sys
h, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"benchmark": "forward", "model": "bench-100m", "threads": t["threads"], "seq": h["seq"],
                  "hyla": h, "pytorch": t, "speedup_vs_pytorch": h["tokens_per_s"] / t["tokens_per_s"],
                  "loss_agreement": abs(h["loss"] - t["loss"])}, indent=1))
PY
