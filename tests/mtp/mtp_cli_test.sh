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

# per-layer updates (each layer updated as its gradients complete; the MTP head's with the
# embedding and lm_head after the step) == whole-step updates, model and optimizer state bit for bit:
# with the MTP loss, with --mtp-only, and with the head frozen (weight 0)
for mode in "--mtp-loss-weight 0.1" "--mtp-only" "--mtp-loss-weight 0"; do
    "$HYLA" train --model "$T/m" "${TRAIN[@]}" --steps 4 --clip 0 $mode --save "$T/pw" >/dev/null &&
        "$HYLA" train --model "$T/m" "${TRAIN[@]}" --steps 4 --clip 0 $mode --update-per-layer --save "$T/pl" >/dev/null &&
        cmp -s "$T/pw/model.safetensors" "$T/pl/model.safetensors" &&
        cmp -s "$T/pw/optimizer/model.safetensors" "$T/pl/optimizer/model.safetensors" &&
        echo "  ok  $mode: --update-per-layer == whole-step updates, model and optimizer state bit for bit" ||
        fail "$mode with --update-per-layer"
    rm -rf "$T/pw" "$T/pl"
done

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

# GGUF: the head exported as llama.cpp's nextn block (blk.N.nextn.eh_proj / enorm / hnorm /
# shared_head_norm after the trunk's N blocks, block_count N + 1, nextn_predict_layers 1), read back
# by hyla (the head runs from the file) and loaded by llama.cpp's own MTP loader
cp -r "$T/ck" "$T/ckt" && $PY tests/data/make_qwen_tokenizer.py "$T/ckt" >/dev/null || fail "tokenizer for the GGUF export"
P=65,110,100,32,71,111,100,32,115,97,105,100,32,117,110,116,111,32
for ty in f32 q8_0; do
    "$HYLA" convert "$T/ckt" "$T/ck-$ty.gguf" --to gguf --type $ty >/dev/null || fail "convert --to gguf --type $ty with a head"
    "$HYLA" generate "$T/ck-$ty.gguf" --prompt-tokens $P --max-new 80 --json > "$T/q0.json" 2>/dev/null &&
        "$HYLA" generate "$T/ck-$ty.gguf" --prompt-tokens $P --max-new 80 --draft 2 --json > "$T/q2.json" 2>/dev/null &&
        $PY - "$T/q0.json" "$T/q2.json" $ty <<'PYEOF' || fail "generate --draft 2 on the $ty GGUF"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["tokens"] == b["tokens"], "draft output differs from plain greedy"
assert b["draft"]["acceptance"] > 0.1, b["draft"]
print(f"  ok  GGUF {sys.argv[3]}: the head read from the file drafts ({b['draft']['acceptance']:.0%} accepted); "
      f"--draft 2 == plain greedy on the same file")
PYEOF
done
# the head's logits from the F32 file against the checkpoint's: the file stores 1 + w for the
# zero-centred norms (llama.cpp multiplies by the stored weight), and (1 + w) - 1 loses at most
# 2^-24 of w's magnitude; through the head that is far below 2^-12 of the logits' scale, while a
# wrong half of eh_proj or a missing + 1 moves logits by O(scale)
"$HYLA" forward "$T/ckt" --tokens $P --mtp-logits-out "$T/mh.bin" >/dev/null &&
    "$HYLA" forward "$T/ck-f32.gguf" --tokens $P --mtp-logits-out "$T/mg.bin" >/dev/null &&
    $PY - "$T/mh.bin" "$T/mg.bin" <<'PYEOF' || fail "MTP logits from the F32 GGUF"
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
x = struct.unpack(f"<{len(a) // 4}f", a); y = struct.unpack(f"<{len(b) // 4}f", b)
assert len(x) == len(y) == 17 * 512, (len(x), len(y))
scale = max(abs(v) for v in x); diff = max(abs(p - q) for p, q in zip(x, y))
assert diff <= scale * 2 ** -12, (diff, scale)
print(f"  ok  forward --mtp-logits-out: the F32 GGUF's head == the checkpoint's within 2^-12 x {scale:.3g} (max diff {diff:.2g})")
PYEOF
if .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    .venv/bin/python - "$T/ck-f32.gguf" "$T/ck-q8_0.gguf" <<'PYEOF' || fail "llama.cpp loads the nextn block"
import ctypes, sys, llama_cpp as L
logs = []
@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def log(level, text, user):
    logs.append(text.decode(errors="replace"))
L.llama_log_set(log, None)
L.llama_backend_init()
for path in sys.argv[1:]:
    logs.clear()
    mp = L.llama_model_default_params()
    mp.load_mtp = True  # llama.cpp's MTP loader: every nextn tensor must be found and used
    model = L.llama_model_load_from_file(path.encode(), mp)
    assert model, "".join(logs[-5:])
    unused = [l.strip() for l in logs if "unused tensor" in l]
    n = L.llama_model_n_layer_nextn(model)
    assert n == 1 and not unused, (n, unused[:3])
    L.llama_model_free(model)
print("  ok  llama.cpp (load_mtp) reads the exported nextn block of the F32 and Q8_0 files: 1 MTP layer, no tensor unused")
PYEOF
else
    echo "  SKIPPED: llama.cpp's MTP loader check needs llama_cpp in .venv (scripts/pydeps.sh)"
fi

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
expect_error "--mtp-only with an adapter of no head module" "name mtp" \
    "$HYLA" train --model "$T/m" --synthetic --steps 1 --batch 1 --seq 8 --mtp-only --lora-rank 2
# LoRA with the MTP loss: adapters on trunk and head modules (tests/test_mtp_train.c checks their
# gradients); the saved adapter names the head's modules in full, and merged at load it drafts
"$HYLA" train --model "$T/ck" "${TRAIN[@]}" --steps 20 --lora-rank 4 --lora-targets q_proj,mtp.fc,mtp.layers.0.self_attn.q_proj \
    --save "$T/lora" --log-json "$T/lora.jsonl" >/dev/null &&
    $PY - "$T/lora" "$T/lora.jsonl" <<'PYEOF' || fail "LoRA with the MTP loss"
import json, sys
c = json.load(open(sys.argv[1] + "/adapter_config.json"))
assert {"mtp.fc", "mtp.layers.0.self_attn.q_proj", "self_attn.q_proj"} <= set(c["target_modules"]), c["target_modules"]
s = [json.loads(l) for l in open(sys.argv[2])]
assert all("mtp" in r for r in s), "no MTP loss in the LoRA run's records (the default 0.1 with head modules adapted)"
print(f"  ok  LoRA + MTP loss (default weight 0.1 with head modules adapted): target_modules {c['target_modules']}")
PYEOF
"$HYLA" generate "$T/ck" --adapter "$T/lora" --prompt-tokens 65,110,100,32 --max-new 40 --json > "$T/la0.json" 2>/dev/null &&
    "$HYLA" generate "$T/ck" --adapter "$T/lora" --prompt-tokens 65,110,100,32 --max-new 40 --draft 2 --json > "$T/la2.json" 2>/dev/null &&
    $PY -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); assert a["tokens"] == b["tokens"]' \
        "$T/la0.json" "$T/la2.json" && echo "  ok  generate --adapter (head modules merged) --draft 2 == plain greedy" \
    || fail "generate --adapter --draft"
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
