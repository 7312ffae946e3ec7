#!/usr/bin/env bash
# Seed corpora for the fuzz harnesses, produced by hyla itself: build/fuzz/corpus/<harness>/.
# Builds build/hyla if needed. Seeds are kept small (a 1.8k-parameter model, tests/fuzz/tiny-config.json).
# Usage: tests/fuzz/make_corpus.sh [OUTDIR]   (default build/fuzz/corpus)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-build/fuzz/corpus}
HYLA=build/hyla
TINY=tests/fuzz/tiny-config.json
TOK=tests/tokenizer/qwen3/tokenizer.json
PY=${PY:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

[ -x "$HYLA" ] || make -j"$(nproc)" "$HYLA" >/dev/null
[ -f "$TOK" ] || gunzip -c "$TOK.gz" > "$TOK"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/hyla-corpus-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
rm -rf "$OUT"
for h in safetensors model_load st_index config tokenizer tokenizer_encode tokens routing checkpoint_state jsonl gguf gguf_model; do
    mkdir -p "$OUT/fuzz_$h"
done
q() { "$@" >/dev/null 2>"$WORK/err" || { echo "make_corpus: failed: $*" >&2; cat "$WORK/err" >&2; exit 1; }; }

# ---- models: the tiny config in every dtype and tensor layout (a few KB each)
for dt in f32 bf16 f16; do
    q "$HYLA" init --config "$TINY" --out "$WORK/tiny-$dt" --dtype "$dt" --seed 3
    cp "$WORK/tiny-$dt/model.safetensors" "$OUT/fuzz_safetensors/tiny-$dt.safetensors"
done
q "$HYLA" convert "$WORK/tiny-bf16" "$WORK/tiny-sep" --gdn-layout separate --experts fused --prefix language_model
cp "$WORK/tiny-sep/model.safetensors" "$OUT/fuzz_safetensors/tiny-separate-fused.safetensors"
q "$HYLA" convert "$WORK/tiny-bf16" "$WORK/tiny-per" --gdn-layout grouped --experts per-expert
cp "$WORK/tiny-per/model.safetensors" "$OUT/fuzz_safetensors/tiny-per-expert.safetensors"
cp "$OUT"/fuzz_safetensors/tiny-*.safetensors "$OUT/fuzz_model_load/"

# ---- sharded: the smallest shard size is 1 MiB, so a model just over it (two ~0.55 MB bf16
# embedding matrices); packed as the harness reads it: [u32 len][index] then [u32 len][shard]...
sed -e 's/"vocab_size":32/"vocab_size":4352/' -e 's/"hidden_size":8/"hidden_size":64/' "$TINY" > "$WORK/sharded.json"
q "$HYLA" init --config "$WORK/sharded.json" --out "$WORK/sharded" --dtype bf16 --shard-mb 1
"$PY" - "$WORK/sharded" "$OUT/fuzz_st_index/sharded-2.bin" <<'PY'
import os, struct, sys
d, out = sys.argv[1], sys.argv[2]
shards = sorted(f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".safetensors"))
assert len(shards) >= 2, shards
parts = [open(os.path.join(d, "model.safetensors.index.json"), "rb").read()]
parts += [open(os.path.join(d, f), "rb").read() for f in shards]
open(out, "wb").write(b"".join(struct.pack("<I", len(p)) + p for p in parts))
PY

# ---- configs: as hyla writes them (init) plus the real ones
cp "$TINY" "$OUT/fuzz_config/tiny.json"
cp "$WORK/tiny-f32/config.json" "$OUT/fuzz_config/tiny-written.json"
cp "$WORK/tiny-sep/config.json" "$OUT/fuzz_config/tiny-sep-written.json"
for f in configs/*.json; do cp "$f" "$OUT/fuzz_config/$(basename "$f")"; done

# ---- token files (hyla tokenize --out) and texts for the Qwen tokenizer
"$PY" - tests/tokenizer/texts.json "$OUT/fuzz_tokenizer_encode" <<'PY'
import json, sys
texts = json.load(open(sys.argv[1]))
for i, t in enumerate(texts):
    b = t.encode("utf-8", "surrogatepass")
    if 0 < len(b) <= 2048:
        open("%s/text-%02d.txt" % (sys.argv[2], i), "wb").write(b)
PY
head -c 1500 data/kjv.txt > "$WORK/kjv.txt"
cp "$WORK/kjv.txt" "$OUT/fuzz_tokenizer_encode/kjv.txt"
i=0
for t in "$WORK/kjv.txt" "$OUT/fuzz_tokenizer_encode/text-01.txt" "$OUT/fuzz_tokenizer_encode/text-09.txt"; do
    [ -f "$t" ] || continue
    q "$HYLA" tokenize --tokenizer "$TOK" --file "$t" --out "$OUT/fuzz_tokens/tok-$i.bin"
    # the same ids without the 24-byte header: token-id seeds for fuzz_tokenizer_encode
    tail -c +25 "$OUT/fuzz_tokens/tok-$i.bin" > "$OUT/fuzz_tokenizer_encode/ids-$i.bin"
    i=$((i + 1))
done
# HYLATOK2 document files (hyla tokenize --jsonl): chat and text documents with label masks
printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "In the beginning"}]}' \
    '{"text": "God created the heaven and the earth."}' > "$WORK/docs.jsonl"
q "$HYLA" tokenize --tokenizer "$TOK" --jsonl "$WORK/docs.jsonl" --out "$OUT/fuzz_tokens/docs.bin"
cp "$WORK/docs.jsonl" "$OUT/fuzz_jsonl/docs.jsonl"
head -c 4000 data/chat_kjv.jsonl > "$OUT/fuzz_jsonl/chat.jsonl"
# a small prefix of the Qwen tokenizer is not valid JSON; the tokenizer corpus is the
# hand-made tests/fuzz/seeds/fuzz_tokenizer (the real one is 11 MB)

# ---- routing: tiny-hybrid (10 MoE layers, top-2), a few tokens
q "$HYLA" init --preset tiny-hybrid --out "$WORK/hybrid" --dtype bf16
q "$HYLA" generate "$WORK/hybrid" --prompt-tokens 1,2,3 --max-new 2 --threads 1 --record-routing "$OUT/fuzz_routing/gen-5.bin"
q "$HYLA" generate "$WORK/hybrid" --prompt-tokens 7 --max-new 1 --threads 1 --record-routing "$OUT/fuzz_routing/gen-2.bin"

# ---- checkpoint state: byte 0 = trainer_state.json, byte 1 = optimizer/model.safetensors
q "$HYLA" train --config "$TINY" --steps 2 --batch 1 --seq 8 --threads 1 --save "$WORK/ckpt"
{ printf '\0'; cat "$WORK/ckpt/trainer_state.json"; } > "$OUT/fuzz_checkpoint_state/state.bin"
{ printf '\1'; cat "$WORK/ckpt/optimizer/model.safetensors"; } > "$OUT/fuzz_checkpoint_state/moments.bin"
cp "$WORK/ckpt/optimizer/model.safetensors" "$OUT/fuzz_safetensors/moments.safetensors"

# ---- GGUF: hyla's own export of small models (vocabulary = make_qwen_tokenizer.py's 459 tokens):
# the tiny Qwen3-Next config (rows of 8: Q8_0 falls back to F16), and a Qwen3.5 one with rows of 32
sed -e 's/"vocab_size":32/"vocab_size":459/' "$TINY" > "$WORK/tiny459.json"
q "$HYLA" init --config "$WORK/tiny459.json" --out "$WORK/g-next" --seed 5
"$PY" tests/data/make_qwen_tokenizer.py "$WORK/g-next" --pattern qwen2 >/dev/null
cat > "$WORK/q35.json" <<'JSON'
{"model_type":"qwen3_5","tie_word_embeddings":true,"text_config":{"model_type":"qwen3_5_text","vocab_size":459,
 "hidden_size":32,"num_hidden_layers":2,"full_attention_interval":2,"num_attention_heads":2,"num_key_value_heads":1,
 "head_dim":32,"partial_rotary_factor":0.25,"rope_theta":10000000.0,"linear_num_key_heads":1,"linear_num_value_heads":2,
 "linear_key_head_dim":32,"linear_value_head_dim":32,"linear_conv_kernel_dim":2,"intermediate_size":64,
 "rms_norm_eps":1e-6,"tie_word_embeddings":true,"max_position_embeddings":64,"hidden_act":"silu"}}
JSON
q "$HYLA" init --config "$WORK/q35.json" --out "$WORK/g-35" --seed 5
"$PY" tests/data/make_qwen_tokenizer.py "$WORK/g-35" --pattern qwen35 >/dev/null
for m in next 35; do
    for t in f32 q8_0; do
        q "$HYLA" convert "$WORK/g-$m" "$OUT/fuzz_gguf/$m-$t.gguf" --to gguf --type "$t"
        cp "$OUT/fuzz_gguf/$m-$t.gguf" "$OUT/fuzz_gguf_model/"
    done
done

n=$(find "$OUT" -type f | wc -l)
echo "make_corpus: $n seeds in $OUT"
