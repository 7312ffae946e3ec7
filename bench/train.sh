#!/usr/bin/env bash
# Training benchmark (issue: training): activation memory and step time per remat policy/unit,
# in fp32 and bf16 compute, and training tokens/s against the PyTorch reference and (HYLA_HF_PYTHON)
# Hugging Face transformers' own model on the same weights, batch and threads.
# usage: bench/train.sh [THREADS=2] [BATCH=1] [SEQ=512] [STEPS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; B=${2:-1}; SEQ=${3:-512}; STEPS=${4:-3}
. bench/common.sh
bench_setup bench-100m train_bench
make -j"$(nproc)" build/bench/gemm_bench >/dev/null
peaks=$(./build/bench/gemm_bench --peaks) # FMA and vdpbf16ps peaks, measured in this run
hyla=$(./build/bench/train_bench "$MODEL" "$B" "$SEQ" "$STEPS" none:layer full:layer minimal:layer save_qkv_proj:layer full:block full:part)
# the same in bf16 compute (--act-dtype bf16: bf16 checkpoints and GEMM operands, fp32 masters)
hyla_bf16=$(HYLA_BENCH_ACT_DTYPE=bf16 ./build/bench/train_bench "$MODEL" "$B" "$SEQ" "$STEPS" none:layer full:layer minimal:layer)
torch=$(/usr/bin/python3 bench/torch_train.py "$MODEL" "$B" "$SEQ" "$STEPS" "$THREADS")
# the fair peer: transformers' own Qwen3-Next on PyTorch 2 (a multi-GB install: a Python that has
# both, HYLA_HF_PYTHON=/path/to/python), fp32 and bf16 autocast, eager and torch.compile
hf="[]"
if [ -n "${HYLA_HF_PYTHON:-}" ] && "$HYLA_HF_PYTHON" -c "import torch, transformers" 2>/dev/null; then
    hf="["
    for mode in "f32" "bf16" "f32 compile" "bf16 compile"; do
        # shellcheck disable=SC2086
        hf="$hf$("$HYLA_HF_PYTHON" bench/hf_train.py "$MODEL" "$B" "$SEQ" "$STEPS" "$THREADS" $mode 2>/dev/null),"
    done
    hf="${hf%,}]"
else
    echo "train.sh: transformers peer SKIPPED (set HYLA_HF_PYTHON to a Python with torch and transformers)" >&2
fi
/usr/bin/python3 - "$hyla" "$torch" "$hyla_bf16" "$hf" "$peaks" <<'PY'
import json, sys
peaks = json.loads(sys.argv[5])
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
t = json.loads(sys.argv[2])
rows16 = [json.loads(l) for l in sys.argv[3].splitlines()]
hf = json.loads(sys.argv[4])
for h in hf:  # hyla's full:layer row of the same dtype against each transformers run
    mine = [r for r in (rows16 if h["dtype"] == "bf16" else rows) if r["policy"] == "full" and r["unit"] == "layer"][0]
    h["hyla_full_layer_speedup"] = mine["tokens_per_s"] / h["tokens_per_s"]
for r in rows + rows16:  # whole step: the step's GEMM flops over its time, as % of the fp32 FMA peak
    r["whole_step_gflops"] = r["gemm_flops_per_step"] / r["best_step_seconds"] / 1e9
    r["whole_step_pct_fp32_peak"] = 100 * r["whole_step_gflops"] / peaks["peak_gflops"]
for r in rows16:
    f = [x for x in rows if x["policy"] == r["policy"] and x["unit"] == r["unit"]][0]
    r["step_time_vs_f32"] = r["best_step_seconds"] / f["best_step_seconds"]
    # where the time goes: seconds per step of each op, bf16 beside fp32 (largest first)
    p16 = {o["op"]: o["seconds"] / r["steps"] for o in r.get("profile", [])}
    p32 = {o["op"]: o["seconds"] / f["steps"] for o in f.get("profile", [])}
    r["profile_vs_f32"] = [{"op": op, "bf16_seconds": p16[op], "f32_seconds": p32.get(op)}
                           for op in sorted(p16, key=p16.get, reverse=True)[:12]]
    r["activation_vs_f32"] = r["activation_bytes"] / f["activation_bytes"]
none = [r for r in rows if r["policy"] == "none"][0]
block = [r for r in rows if r["policy"] == "full" and r["unit"] == "block"][0]
layer = [r for r in rows if r["policy"] == "full" and r["unit"] == "layer"][0]
for r in rows:
    r["step_time_vs_none"] = r["best_step_seconds"] / none["best_step_seconds"]
    r["activation_vs_none"] = r["activation_bytes"] / none["activation_bytes"]
    r["speedup_vs_pytorch"] = r["tokens_per_s"] / t["tokens_per_s"]
print(json.dumps({"benchmark": "train", "model": "bench-100m", "threads": t["threads"], "batch": t["batch"],
                  "seq": t["seq"], "peaks": peaks, "hyla": rows, "hyla_bf16": rows16, "pytorch": t, "transformers": hf,
                  "full_layer_vs_block_activation_reduction": 1 - layer["activation_bytes"] / block["activation_bytes"]},
                 indent=1))
PY
