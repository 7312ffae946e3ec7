#!/usr/bin/env bash
# Fine-tuning on chat data, end to end (2-3 minutes on 2 cores; measured: held-out loss 6.27 -> 3.51):
#   a small hybrid model with a Qwen-style tokenizer -> held-out loss before -> full fine-tuning on
#   data/chat_kjv.jsonl (only the assistant tokens are trained) -> held-out loss after -> a chat reply.
# usage: examples/finetune_chat.sh [WORKDIR]      (run from anywhere; builds hyla if needed)
# LoRA adapters are not implemented yet: this fine-tunes every weight.
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" build/hyla >/dev/null
W=${1:-$(mktemp -d)}
H=build/hyla
rm -rf "$W/base" "$W/tuned"
$H init --preset tiny-hybrid --seed 1 --out "$W/base" >/dev/null
/usr/bin/python3 tests/data/make_qwen_tokenizer.py "$W/base" >/dev/null   # 459 tokens: 256 bytes, 200 merges, ChatML specials
echo "== before: held-out assistant tokens (data/chat_kjv_eval.jsonl)"
$H eval "$W/base" --data-jsonl data/chat_kjv_eval.jsonl --seq 128
echo "== fine-tuning on data/chat_kjv.jsonl (600 conversations; documents shuffled each epoch)"
$H train --model "$W/base" --data-jsonl data/chat_kjv.jsonl --steps 160 --batch 4 --seq 128 --lr 3e-3 --warmup 10 \
    --eval-data data/chat_kjv_eval.jsonl --eval-every 80 --save "$W/tuned" | grep -E "^(data|eval|epoch|done)|step +(1|40|80|120|160)/"
echo "== after"
$H eval "$W/tuned" --data-jsonl data/chat_kjv_eval.jsonl --seq 128
echo "== a chat reply from the tuned model"
$H generate "$W/tuned" --chat --prompt "Recite Genesis 1:3." --max-new 40
