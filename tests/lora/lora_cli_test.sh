#!/usr/bin/env bash
# LoRA fine-tuning through the CLI (hyla train --lora-rank / --adapter / --resume):
#   - the base model's files are untouched (frozen, never saved);
#   - a run split by --resume equals the run in one go, bit for bit (adapter and moments), with
#     dropout on (masks keyed by the step);
#   - `hyla eval --adapter` on the saved adapter reproduces the in-training evaluation: within
#     1e-5 relative. Merging rounds the weights once (W + s B A) where the unmerged run adds the
#     adapter's product to the output, so the two agree to rounding, bit for bit at most
#     settings; but a token whose top-k routing sits within that rounding of a tie can pick
#     another expert (seen at one learning rate: 2.1e-6 relative). The adapter itself moves this
#     loss by 1.2% (6.272 -> 6.195), 1200x the tolerance, so a wrong merge cannot pass;
#   - train --adapter continues from the saved adapter (the first step's loss is the last loss);
#   - --param-dtype bf16 (the frozen base bf16 only) == --act-dtype bf16 over fp32 masters, bit for bit;
#   - bad input: each a one-line error naming the flag or file.
# usage: tests/lora/lora_cli_test.sh [HYLA]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/cli_lib.sh "${1:-build/hyla}" ""
"$HYLA" init --preset tiny-hybrid --seed 1 --out "$T/base" >/dev/null && $PY tests/data/make_qwen_tokenizer.py "$T/base" >/dev/null ||
    { echo "  FAIL: cannot make the base model"; exit 1; }
before=$(cat "$T/base"/*.safetensors | sha256sum)
A=(--model "$T/base" --data-jsonl data/chat_kjv.jsonl --batch 2 --seq 64 --lora-rank 4 --lora-dropout 0.1 --warmup 2 --lr 5e-3)
"$HYLA" train "${A[@]}" --steps 6 --save "$T/one" --eval-data data/chat_kjv_eval.jsonl --log-json "$T/one.json" > "$T/one.out" ||
    fail "LoRA train"
"$HYLA" train "${A[@]}" --steps 3 --save "$T/two" > /dev/null && "$HYLA" train --resume "$T/two" --steps 6 --save "$T/two" > "$T/two.out" ||
    fail "LoRA train + resume"
[ "$(cat "$T/base"/*.safetensors | sha256sum)" = "$before" ] && echo "  ok  the base model is untouched" || fail "the base changed"
cmp -s "$T/one/adapter_model.safetensors" "$T/two/adapter_model.safetensors" &&
    cmp -s "$T/one/optimizer/model.safetensors" "$T/two/optimizer/model.safetensors" &&
    echo "  ok  3 steps + --resume 3 == 6 steps: adapter and moments bit-identical (dropout 0.1)" || fail "resume is not exact"
grep -q "resume: --steps 6" "$T/two.out" && grep -q "^LoRA: r 4" "$T/two.out" && echo "  ok  --resume restores the LoRA settings and the base" ||
    fail "resume did not restore LoRA"
want=$($PY -c "import json;print([json.loads(l) for l in open('$T/one.json') if 'eval_loss' in l][-1]['eval_loss'])")
"$HYLA" eval "$T/base" --data-jsonl data/chat_kjv_eval.jsonl --seq 64 --batch 2 --adapter "$T/one" --json > "$T/ev.json" &&
    $PY -c "import json,sys; e=json.load(open('$T/ev.json')); sys.exit(0 if abs(e['loss'] - $want) <= 1e-5 * $want else 1)" &&
    echo "  ok  eval --adapter (merged) == the in-training evaluation (unmerged) within 1e-5: $want vs $($PY -c "import json; print(json.load(open('$T/ev.json'))['loss'])")" ||
    fail "eval --adapter: $($PY -c "import json; print(json.load(open('$T/ev.json'))['loss'])") differs from $want by more than 1e-5 relative"
"$HYLA" train --model "$T/base" --adapter "$T/one" --data-jsonl data/chat_kjv.jsonl --batch 2 --seq 64 --steps 1 --no-shuffle \
    --warmup 0 > "$T/cont.out" && grep -q "^LoRA: r 4, alpha 8" "$T/cont.out" && echo "  ok  train --adapter continues the saved adapter" ||
    fail "train --adapter"
# a bf16 base read as bf16 only (--param-dtype bf16) == the same file read into fp32 masters with bf16
# compute (--act-dtype bf16): the GEMMs see the same bf16 weights (the fp32 masters' bf16 copy is the
# file's values) and the adapter, its gradients and moments are fp32 in both, so the adapters and
# moments must be bit-identical; only the base's memory differs (half, no fp32 copy)
"$HYLA" convert "$T/base" "$T/base16" --dtype bf16 >/dev/null || fail "convert the base to bf16"
B16=(--model "$T/base16" --data-jsonl data/chat_kjv.jsonl --batch 2 --seq 64 --lora-rank 4 --lora-dropout 0.1 --warmup 2 --lr 5e-3 --steps 4)
"$HYLA" train "${B16[@]}" --act-dtype bf16 --save "$T/b16_masters" > /dev/null &&
    "$HYLA" train "${B16[@]}" --param-dtype bf16 --save "$T/b16_only" > /dev/null || fail "LoRA on a bf16 base"
cmp -s "$T/b16_masters/adapter_model.safetensors" "$T/b16_only/adapter_model.safetensors" &&
    cmp -s "$T/b16_masters/optimizer/model.safetensors" "$T/b16_only/optimizer/model.safetensors" &&
    echo "  ok  LoRA --param-dtype bf16 (base bf16 only) == --act-dtype bf16 over fp32 masters: adapter and moments bit-identical" ||
    fail "LoRA over a bf16-only base differs from bf16 compute over fp32 masters"
expect_error "bf16 weights in full training" "--param-dtype bf16: training keeps fp32 master weights.*LoRA run's frozen base may be bf16" \
    "$HYLA" train --model "$T/base" --param-dtype bf16 --steps 1
expect_error "a bf16 LoRA base without --model" "give --model DIR" "$HYLA" train --preset tiny-hybrid --lora-rank 4 \
    --param-dtype bf16 --steps 1
# bad input
expect_error "LoRA without a model" "LoRA .* trains an adapter on a model: give --model" "$HYLA" train --preset tiny-hybrid --lora-rank 4
expect_error "an unknown target" "--lora-targets: 'q_porj' matches no linear module" "$HYLA" train --model "$T/base" --lora-rank 4 \
    --lora-targets q_proj,q_porj --steps 1
expect_error "a Qwen3.5 GDN name on Qwen3-Next" "stores the GDN input projections grouped; adapt them as in_proj_qkvz and in_proj_ba" \
    "$HYLA" train --model "$T/base" --lora-rank 4 --lora-targets in_proj_qkv --steps 1
expect_error "dropout out of range" "--lora-dropout must be in \[0, 1\)" "$HYLA" train --model "$T/base" --lora-rank 4 --lora-dropout 1.5
expect_error "rank out of range" "--lora-rank" "$HYLA" train --model "$T/base" --lora-rank 0
expect_error "--adapter with another rank" "--lora-rank 8: the adapter in .* has r = 4" "$HYLA" train --model "$T/base" \
    --adapter "$T/one" --lora-rank 8 --steps 1
expect_error "--adapter of another model" "is not in this model \(an adapter for another model" "$HYLA" train \
    --model "$T/base" --adapter tests/peft/golden/qwen3_5/adapter --steps 1
expect_error "resume with another rank" "--lora-rank 8 differs from the checkpoint's 4" "$HYLA" train --resume "$T/two" --steps 7 --lora-rank 8
expect_error "resume with other targets" "--lora-targets q_proj differs from the checkpoint's" "$HYLA" train --resume "$T/two" --steps 7 \
    --lora-targets q_proj
expect_error "LoRA with per-layer updates" "per-layer updates do not apply to LoRA" "$HYLA" train --model "$T/base" --lora-rank 2 \
    --update-per-layer --accum 1 --clip 0 --steps 1
cp -r "$T/two" "$T/bad"
$PY - "$T/bad/optimizer/model.safetensors" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
k = sorted(x for x in h if x.startswith("exp_avg."))[0]
h["exp_avg.adapter.999999"] = h.pop(k)
hj = json.dumps(h).encode()
hj += b" " * (-len(hj) % 8)
open(p, "wb").write(struct.pack("<Q", len(hj)) + hj + b[8 + n:])
PYEOF
expect_error "an adapter checkpoint missing a moment" "optimizer/model.safetensors: missing tensor 'exp_avg.adapter" "$HYLA" train \
    --resume "$T/bad" --steps 7
[ "$fails" -eq 0 ] || { echo "  $fails LoRA CLI test(s) failed"; exit 1; }
