#!/usr/bin/env bash
# The main job: build hyla, then train a small hybrid MoE model (2 blocks of 3 linear + 1 full
# attention layers... see `hyla inspect` below) with a multi-token-prediction head on the King
# James Bible shipped in data/, about two minutes on 2 cores, printing the memory of the remat
# policy, and end by sampling text from the trained model and by greedy speculative decoding with
# its MTP head (the same tokens as plain greedy decoding; acceptance printed). Installs missing
# Debian packages first. No downloads.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/deps.sh
make -j"$(nproc)" build/hyla
out=build/demo
rm -rf "$out"
mkdir -p "$out"
./build/hyla init --preset tiny-hybrid --seed 7 --mtp-layers 1 --out "$out/init" >/dev/null
./build/hyla inspect "$out/init" | sed -n '1,16p'
./build/hyla train --model "$out/init" --text data/kjv.txt --steps "${HYLA_DEMO_STEPS:-400}" --batch 8 --seq 128 \
    --lr 4e-3 --warmup 30 --remat full --remat-unit layer --seed 7 \
    --save "$out/checkpoint" --log-json "$out/train.jsonl" --sample 240 --prompt "And God said unto "
# inference on the trained checkpoint: prefill + cached decode, nucleus sampling
./build/hyla generate "$out/checkpoint" --prompt "And God said unto " --max-new 200 --temperature 0.8 --top-p 0.9 --seed 7
# speculative decoding: the MTP head drafts 2 tokens per round, the trunk verifies them
./build/hyla generate "$out/checkpoint" --prompt "And God said unto " --max-new 120 --draft 2
