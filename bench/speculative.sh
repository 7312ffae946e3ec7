#!/usr/bin/env bash
# Speculative decoding with the MTP head (issue: MTP), one JSON object:
#   - end to end on two models trained by hyla with the default --mtp-loss-weight 0.1 on the King
#     James Bible (STEPS steps, batch 8 x 128): the run.sh model (tiny-hybrid: 10 MoE layers,
#     hidden 128; its 23 MB of weights sit in the L3 cache, so a decode step is op overhead) and a
#     "little larger" dense Qwen3.5-shaped model (bench/configs/mtp-dense-22m.json: 12 layers,
#     hidden 384, 22M parameters, 90 MB of fp32 weights streamed from memory per token, as real
#     decoding is); greedy decode of 256 tokens with --draft 0 (plain), 1, 2, 3 in ROUNDS
#     alternating rounds (a shared VM drifts 20-30%): per setting the best and the median
#     tokens/s, the speed-up over plain (best / best, and the median of the per-round ratios),
#     acceptance and mean accepted length; every drafted output is checked to equal plain greedy's;
#   - the verify's cost on the Qwen3.5-0.8B shape (bf16, bench/verify_bench.c): N + 1 rows against
#     one decode step, best of REPS, when build/bench-models/q35-08b exists (bench/gguf_infer.sh
#     makes it).
# usage: bench/speculative.sh [THREADS=2] [STEPS=400] [ROUNDS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2} STEPS=${2:-400} ROUNDS=${3:-5}
export OMP_NUM_THREADS=$THREADS
make -j"$(nproc)" build/hyla build/bench/verify_bench >/dev/null
train() { # NAME INIT-ARGS...: build/bench-models/mtp-NAME-STEPS/ck
    local M=build/bench-models/mtp-$1-$STEPS
    shift
    if [ ! -f "$M/ck/model.safetensors" ]; then
        rm -rf "$M"
        ./build/hyla init "$@" --seed 7 --mtp-layers 1 --out "$M/init" >/dev/null
        ./build/hyla train --model "$M/init" --text data/kjv.txt --steps "$STEPS" --batch 8 --seq 128 --lr 4e-3 --warmup 30 \
            --seed 7 --save "$M/ck" --log-json "$M/train.jsonl" >/dev/null
    fi
    echo "$M"
}
tiny=$(train tiny --preset tiny-hybrid)
dense=$(train dense22m --config bench/configs/mtp-dense-22m.json)
runs=()
for r in $(seq "$ROUNDS"); do
    for M in "$tiny" "$dense"; do
        for d in 0 1 2 3; do
            runs+=("$M" "$(./build/hyla generate "$M/ck" --prompt "And God said unto " --max-new 256 --draft $d --json 2>/dev/null)")
        done
    done
done
verify=null
[ -f build/bench-models/q35-08b/config.json ] && verify=$(./build/bench/verify_bench build/bench-models/q35-08b 64 5 bf16)
/usr/bin/python3 - "$THREADS" "$verify" "$tiny" "$dense" "${runs[@]}" <<'PY'
import json, statistics, sys
threads, verify, tiny, dense = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
pairs = [(sys.argv[i], json.loads(sys.argv[i + 1])) for i in range(5, len(sys.argv), 2)]
def model_report(path, what):
    log = [json.loads(l) for l in open(path + "/train.jsonl")]
    runs = [r for p, r in pairs if p == path]
    plain = [r for r in runs if "draft" not in r]
    rounds = [runs[i:i + 4] for i in range(0, len(runs), 4)]  # plain, 1, 2, 3 of one round
    out = {"model": what, "final_ce": log[-1]["ce"], "final_mtp_loss": log[-1]["mtp"],
           "decode_tokens_per_s_best": {}, "decode_tokens_per_s_median": {}, "speedup_best": {}, "speedup_median": {},
           "acceptance": {}, "mean_accepted_length": {}}
    for n in range(4):
        tps = [rd[n]["decode_tokens_per_s"] for rd in rounds]
        out["decode_tokens_per_s_best"][f"draft_{n}"] = max(tps)
        out["decode_tokens_per_s_median"][f"draft_{n}"] = statistics.median(tps)
        if n:
            for rd in rounds:
                assert rd[n]["tokens"] == plain[0]["tokens"], "--draft output differs from plain greedy"
            out["speedup_best"][f"draft_{n}"] = max(tps) / max(r["decode_tokens_per_s"] for r in plain)
            out["speedup_median"][f"draft_{n}"] = statistics.median(rd[n]["decode_tokens_per_s"] / rd[0]["decode_tokens_per_s"]
                                                                    for rd in rounds)
            out["acceptance"][f"draft_{n}"] = rounds[0][n]["draft"]["acceptance"]
            out["mean_accepted_length"][f"draft_{n}"] = rounds[0][n]["draft"]["mean_accepted_length"]
    return out
print(json.dumps({"benchmark": "speculative decoding (MTP head)", "threads": threads, "rounds": len(pairs) // 8,
                  "tiny": model_report(tiny, "tiny-hybrid + 1 MTP layer (run.sh), 5.7M params, trained on data/kjv.txt"),
                  "dense22m": model_report(dense, "bench/configs/mtp-dense-22m.json + 1 MTP layer, 22M params, trained on data/kjv.txt"),
                  "verify_q35_08b_bf16": verify}, indent=1))
PY
