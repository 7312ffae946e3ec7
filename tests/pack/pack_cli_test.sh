#!/usr/bin/env bash
# Packing through the CLI (--pack on train and eval):
#   - eval --pack == eval --no-pack: the same loss over the same targets in fewer rows (each
#     document is computed as if alone; the two differ only by fp32 rounding from the GEMM's
#     row count, ~1e-7 relative measured; bound 1e-5 relative);
#   - a document longer than --seq is split into rows as without packing (same loss again);
#   - train --pack: deterministic given --seed (two runs, identical losses), and exact across
#     --resume (adapter and moments bit-identical);
#   - bad input: --pack on a token stream or text, a resumed run changing --pack.
# usage: tests/pack/pack_cli_test.sh [HYLA]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/cli_lib.sh "${1:-build/hyla}" ""
"$HYLA" init --preset tiny-hybrid --seed 1 --out "$T/m" >/dev/null && $PY tests/data/make_qwen_tokenizer.py "$T/m" >/dev/null ||
    { echo "  FAIL: cannot make the model"; exit 1; }
same_loss() { # NAME FILE_A FILE_B: JSON eval results with the same targets and loss within 1e-5 relative
    $PY - "$2" "$3" <<'PYEOF' && echo "  ok  $1" || fail "$1"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ok = a["tokens"] == b["tokens"] and abs(a["loss"] - b["loss"]) <= 1e-5 * abs(b["loss"]) and a["rows"] < b["rows"]
print(f"      loss {a['loss']:.9f} in {a['rows']} packed rows vs {b['loss']:.9f} in {b['rows']} rows, {a['tokens']} targets")
sys.exit(0 if ok else 1)
PYEOF
}
E=("$HYLA" eval "$T/m" --data-jsonl data/chat_kjv_eval.jsonl --json)
"${E[@]}" --seq 512 --pack > "$T/p.json" && "${E[@]}" --seq 512 --no-pack > "$T/u.json" &&
    same_loss "eval --pack == --no-pack (seq 512)" "$T/p.json" "$T/u.json" || fail "eval --pack"
"${E[@]}" --seq 96 --pack > "$T/p96.json" && "${E[@]}" --seq 96 > "$T/u96.json" &&
    same_loss "documents longer than --seq 96 are split, packed or not" "$T/p96.json" "$T/u96.json" || fail "eval --seq 96"
A=(--model "$T/m" --data-jsonl data/chat_kjv.jsonl --batch 2 --seq 256 --pack --lora-rank 4 --warmup 2 --lr 5e-3 --seed 9)
"$HYLA" train "${A[@]}" --steps 4 --log-json "$T/a.json" --save "$T/ka" > /dev/null &&
    "$HYLA" train "${A[@]}" --steps 4 --log-json "$T/b.json" > /dev/null &&
    cmp -s <(grep -o '"loss": [^,]*' "$T/a.json") <(grep -o '"loss": [^,]*' "$T/b.json") &&
    echo "  ok  train --pack is deterministic given --seed" || fail "train --pack runs differ"
"$HYLA" train "${A[@]}" --steps 2 --save "$T/kb" > /dev/null && "$HYLA" train --resume "$T/kb" --steps 4 --save "$T/kb" > /dev/null &&
    cmp -s "$T/ka/adapter_model.safetensors" "$T/kb/adapter_model.safetensors" &&
    cmp -s "$T/ka/optimizer/model.safetensors" "$T/kb/optimizer/model.safetensors" &&
    echo "  ok  train --pack: 2 steps + --resume 2 == 4 steps, bit for bit" || fail "packed resume is not exact"
head -c 3000 data/kjv.txt > "$T/small.txt"
"$HYLA" tokenize --tokenizer "$T/m/tokenizer.json" --file "$T/small.txt" --out "$T/stream.tok" > /dev/null
expect_error "--pack on a token stream" "--pack: .*stream.tok is a token stream \(HYLATOK1\), not documents" "$HYLA" train \
    --model "$T/m" --data "$T/stream.tok" --pack --steps 1
expect_error "--pack on text" "--pack needs documents" "$HYLA" train --model "$T/m" --text "$T/small.txt" --pack --steps 1
"$HYLA" train --model "$T/m" --data-jsonl data/chat_kjv.jsonl --batch 2 --seq 128 --steps 1 --save "$T/kc" > /dev/null
expect_error "resume changing --pack" "--pack on differs from the checkpoint's false" "$HYLA" train --resume "$T/kc" --steps 2 --pack
[ "$fails" -eq 0 ] || { echo "  $fails packing CLI test(s) failed"; exit 1; }
