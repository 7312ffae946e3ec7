#!/usr/bin/env bash
# Speculative decoding with the MTP head (issue: MTP), one JSON object:
#   - end to end: the run.sh model (tiny-hybrid, King James Bible) with an MTP head, trained by
#     hyla with the default --mtp-loss-weight 0.1 (STEPS steps), then greedy decode of 256 tokens
#     with --draft 0 (plain), 1, 2, 3 in ROUNDS alternating rounds (a shared VM drifts): the best
#     tokens/s of each, the speed-up over plain, acceptance and mean accepted length (the output
#     is checked to be plain greedy's, token for token);
#   - the verify's cost on the Qwen3.5-0.8B shape (bf16, bench/verify_bench.c): N + 1 rows against
#     one decode step, best of REPS, when build/bench-models/q35-08b exists (bench/gguf_infer.sh
#     makes it).
# usage: bench/speculative.sh [THREADS=2] [STEPS=400] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2} STEPS=${2:-400} ROUNDS=${3:-3}
export OMP_NUM_THREADS=$THREADS
make -j"$(nproc)" build/hyla build/bench/verify_bench >/dev/null
M=build/bench-models/mtp-tiny-$STEPS
if [ ! -f "$M/ck/model.safetensors" ]; then
    rm -rf "$M"
    ./build/hyla init --preset tiny-hybrid --seed 7 --mtp-layers 1 --out "$M/init" >/dev/null
    ./build/hyla train --model "$M/init" --text data/kjv.txt --steps "$STEPS" --batch 8 --seq 128 --lr 4e-3 --warmup 30 \
        --seed 7 --save "$M/ck" --log-json "$M/train.jsonl" >/dev/null
fi
runs=()
for r in $(seq "$ROUNDS"); do
    for d in 0 1 2 3; do
        runs+=("$(./build/hyla generate "$M/ck" --prompt "And God said unto " --max-new 256 --draft $d --json 2>/dev/null)")
    done
done
verify=null
[ -f build/bench-models/q35-08b/config.json ] && verify=$(./build/bench/verify_bench build/bench-models/q35-08b 64 5 bf16)
/usr/bin/python3 - "$M/train.jsonl" "$verify" "${runs[@]}" <<'PY'
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
verify = json.loads(sys.argv[2])
runs = [json.loads(a) for a in sys.argv[3:]]
plain = [r for r in runs if "draft" not in r]
best = {0: max(r["decode_tokens_per_s"] for r in plain)}
draft = {}
for r in runs:
    if "draft" in r:
        assert r["tokens"] == plain[0]["tokens"], "--draft output differs from plain greedy"
        n = r["draft"]["n"]
        best[n] = max(best.get(n, 0), r["decode_tokens_per_s"])
        draft[n] = r["draft"]
out = {"benchmark": "speculative decoding (MTP head)", "threads": int(sys.argv[0] and 0) or None,
       "model": "tiny-hybrid + 1 MTP layer, trained on data/kjv.txt",
       "final_mtp_loss": log[-1]["mtp"], "final_ce": log[-1]["ce"],
       "decode_tokens_per_s": {f"draft_{n}": v for n, v in sorted(best.items())},
       "speedup_over_plain": {f"draft_{n}": best[n] / best[0] for n in sorted(best) if n},
       "acceptance": {f"draft_{n}": d["acceptance"] for n, d in sorted(draft.items())},
       "mean_accepted_length": {f"draft_{n}": d["mean_accepted_length"] for n, d in sorted(draft.items())},
       "verify_q35_08b_bf16": verify}
del out["threads"]
print(json.dumps(out, indent=1))
PY
