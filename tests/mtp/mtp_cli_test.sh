#!/usr/bin/env bash
# The MTP head through the CLI (docs/mtp.md): hyla init --mtp-layers, hyla train with the MTP loss
# (default weight 0.1 for a model with a head), exact resume, hyla plan --mtp-loss-weight ==
# measured, and speculative decoding (hyla generate --draft N == plain greedy, token for token,
# on a model whose head was trained); bad flags and models get one clear error line.
# usage: tests/mtp/mtp_cli_test.sh [HYLA [CASES]]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/cli_lib.sh "${1:-build/hyla}" "${2:-build/cases}"
"$HYLA" init --preset tiny-hybrid --seed 7 --mtp-layers 1 --out "$T/m" >/dev/null || { echo "  FAIL: init --mtp-layers"; exit 1; }
"$HYLA" init --preset tiny-hybrid --seed 7 --out "$T/plain" >/dev/null || { echo "  FAIL: init"; exit 1; }
$PY -c 'import json, sys; c = json.load(open(sys.argv[1])); assert c["num_nextn_predict_layers"] == 1' "$T/m/config.json" \
    && echo "  ok  init --mtp-layers 1 writes num_nextn_predict_layers" || fail "init --mtp-layers config"
TRAIN=(--text data/kjv.txt --batch 4 --seq 64 --lr 4e-3 --warmup 10 --seed 7 --threads 2)

# a short run that teaches the head something, and the same run in two halves: identical results
"$HYLA" train --model "$T/m" "${TRAIN[@]}" --steps 120 --save "$T/ck" --log-json "$T/log.jsonl" >/dev/null \
    || fail "train with the MTP loss"
"$HYLA" train --model "$T/m" "${TRAIN[@]}" --steps 6 --save "$T/a6" >/dev/null &&
    "$HYLA" train --model "$T/m" "${TRAIN[@]}" --steps 3 --save "$T/b" >/dev/null &&
    "$HYLA" train --resume "$T/b" --steps 6 --save "$T/b" >/dev/null &&
    cmp -s "$T/a6/model.safetensors" "$T/b/model.safetensors" &&
    cmp -s "$T/a6/optimizer/model.safetensors" "$T/b/optimizer/model.safetensors" &&
    echo "  ok  MTP loss: 6 steps == 3 + --resume 3, model and optimizer state bit for bit" || fail "MTP resume"
$PY - "$T/log.jsonl" <<'PYEOF' || fail "MTP loss in the step records"
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])]
assert all("mtp" in r and abs(r["loss"] - (r["ce"] + 0.001 * r["aux"] + 0.1 * r["mtp"])) < 1e-5 * r["loss"] for r in s)
first, last = sum(r["mtp"] for r in s[:10]) / 10, sum(r["mtp"] for r in s[-10:]) / 10
assert last < 0.6 * first, (first, last)
print(f"  ok  train: loss = ce + 0.001 aux + 0.1 mtp in every record; MTP loss {first:.3f} -> {last:.3f}")
PYEOF

# the plan of an MTP step == what the step measured
"$HYLA" plan "$T/m" --batch 4 --seq 64 --mtp-loss-weight 0.1 --json > "$T/plan.json" &&
    $PY - "$T/plan.json" "$T/log.jsonl" <<'PYEOF' || fail "plan --mtp-loss-weight"
import json, sys
p, r = json.load(open(sys.argv[1])), json.loads(open(sys.argv[2]).readline())
planned = p["checkpoint_bytes"] + p["work_bytes"] + p["offload_staging_bytes"] + p["carry_bytes"]
assert planned == r["activation_bytes"], (planned, r["activation_bytes"])
print(f"  ok  plan --mtp-loss-weight 0.1: activation arenas {planned} bytes == the training step's")
PYEOF

# speculative decoding on the trained model: the same tokens as plain greedy decoding
"$HYLA" generate "$T/ck" --prompt "And God said unto " --max-new 120 --json > "$T/g0.json" || fail "generate"
for n in 1 2 3; do
    "$HYLA" generate "$T/ck" --prompt "And God said unto " --max-new 120 --draft $n --json > "$T/g$n.json" &&
        $PY - "$T/g0.json" "$T/g$n.json" $n <<'PYEOF' || fail "generate --draft $n"
import json, sys
a, b, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
assert a["tokens"] == b["tokens"], "draft output differs from plain greedy"
d = b["draft"]
# a trained head: far above chance (a random head's drafts: ~1/vocab); chained drafts less than single ones
assert d["n"] == n and d["accepted"] <= d["drafted"] == n * d["rounds"] and d["acceptance"] > (0.3 if n == 1 else 0.1), d
print(f"  ok  generate --draft {n}: {len(b['tokens'])} tokens == plain greedy; {d['acceptance']:.0%} of drafts accepted, "
      f"{d['mean_accepted_length']:.2f} per round; decode {b['decode_tokens_per_s']:.0f} tok/s vs {a['decode_tokens_per_s']:.0f}")
PYEOF
done

expect_error "--draft on a model without an MTP head" "no MTP head" \
    "$HYLA" generate "$T/plain" --prompt-tokens 1,2,3 --max-new 4 --draft 2
expect_error "--draft out of range" "--draft expects an integer in \[0, 8\]" \
    "$HYLA" generate "$T/ck" --prompt-tokens 1,2,3 --max-new 4 --draft 9
"$HYLA" generate "$T/ck" --prompt "And " --max-new 60 --draft 2 --temperature 0.8 --top-p 0.95 --seed 3 --json \
    > "$T/gs.json" 2>/dev/null && $PY -c 'import json, sys; d = json.load(open(sys.argv[1]))["draft"]; assert d["rounds"] > 0' \
    "$T/gs.json" && echo "  ok  generate --draft 2 with sampling (speculative rejection sampling; tests/test_speculative.c checks its distribution)" \
    || fail "generate --draft with sampling"
expect_error "--mtp-loss-weight on a model without a head" "no MTP head" \
    "$HYLA" train --model "$T/plain" --synthetic --steps 1 --batch 1 --seq 8 --mtp-loss-weight 0.5
expect_error "--mtp-only with LoRA" "not built yet with LoRA" \
    "$HYLA" train --model "$T/m" --synthetic --steps 1 --batch 1 --seq 8 --mtp-only --lora-rank 2
expect_error "negative --mtp-loss-weight" "mtp-loss-weight" \
    "$HYLA" train --model "$T/m" --synthetic --steps 1 --batch 1 --seq 8 --mtp-loss-weight -1
expect_error "plan --mtp-loss-weight without a head" "needs an MTP head" \
    "$HYLA" plan "$T/plain" --batch 1 --seq 8 --mtp-loss-weight 0.1
# MTP tensors of the wrong shape
cp -r "$T/m" "$T/bad" && $PY - "$T/bad/model.safetensors" <<'PYEOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n])
h["mtp.fc.weight"]["shape"] = [h["mtp.fc.weight"]["shape"][1], h["mtp.fc.weight"]["shape"][0]]
hb = json.dumps(h, separators=(",", ":")).encode(); hb += b" " * (n - len(hb))
assert len(hb) == n
open(sys.argv[1], "wb").write(struct.pack("<Q", n) + hb + b[8 + n:])
PYEOF
expect_error "MTP tensor of the wrong shape" "mtp.fc.weight' has shape" \
    "$HYLA" generate "$T/bad" --prompt-tokens 1,2,3 --max-new 4 --draft 2
[ "$fails" -eq 0 ] || { echo "  $fails MTP CLI test(s) failed"; exit 1; }
