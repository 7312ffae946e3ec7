#!/usr/bin/env bash
# CLI tests: inspect on the real configs, forward output, and the table of bad inputs — each
# must exit non-zero with ONE clear error line naming the file/field/tensor, and no sanitizer
# report. usage: tests/cli_test.sh HYLA_BINARY CASES_DIR
set -uo pipefail
. "$(dirname "$0")/cli_lib.sh" "$@"

# --- a valid model to break ------------------------------------------------------------------
"$HYLA" init --preset tiny-hybrid --seed 3 --out "$T/good" >/dev/null || { fail "init"; exit 1; }
"$HYLA" forward "$T/good" --tokens 1,2,3,4 >/dev/null || fail "forward on the good model"

copy_model() { rm -rf "$T/$1"; cp -r "$T/good" "$T/$1"; }
ST=model.safetensors
EMB=model.embed_tokens.weight
for kind in truncate header_past_eof bad_json bad_dtype overlap span_mismatch transpose_shape drop_tensor extra_tensor; do
    copy_model "$kind"
    $PY tests/corrupt_safetensors.py "$T/good/$ST" "$T/$kind/$ST" "$kind" "$EMB" || fail "corrupt $kind"
done
expect_error "truncated file" "$ST" "$HYLA" forward "$T/truncate" --tokens 1,2
expect_error "HYLA_BF16_PRODUCTS not a way" "HYLA_BF16_PRODUCTS=fast: must be native, widened or auto" \
    env HYLA_BF16_PRODUCTS=fast "$HYLA" forward "$T/truncate" --tokens 1,2
expect_error "header length past EOF" "$ST.*header" "$HYLA" forward "$T/header_past_eof" --tokens 1,2
expect_error "header not JSON" "$ST.*JSON" "$HYLA" forward "$T/bad_json" --tokens 1,2
expect_error "wrong dtype string" "$ST.*$EMB.*Q7" "$HYLA" forward "$T/bad_dtype" --tokens 1,2
expect_error "overlapping offsets" "$ST.*overlap" "$HYLA" forward "$T/overlap" --tokens 1,2
expect_error "shape vs byte span" "$ST.*$EMB" "$HYLA" forward "$T/span_mismatch" --tokens 1,2
expect_error "mis-shaped tensor" "$EMB.*shape \[128, 512\].*\[512, 128\]" "$HYLA" forward "$T/transpose_shape" --tokens 1,2
expect_error "missing tensor" "missing tensor '$EMB'" "$HYLA" forward "$T/drop_tensor" --tokens 1,2
expect_error "extra tensor" "unexpected tensor 'model.layers.0.unexpected.weight'" "$HYLA" forward "$T/extra_tensor" --tokens 1,2
rm -f "$T/missing_st"; mkdir -p "$T/missing_st"; cp "$T/good/config.json" "$T/missing_st/"
expect_error "no safetensors" "model.safetensors" "$HYLA" forward "$T/missing_st" --tokens 1,2

# --- configs -----------------------------------------------------------------------------------
cfg_case() { # NAME PATTERN PYTHON-EDIT (acts on dict c)
    copy_model "cfg_$1"
    $PY - "$T/cfg_$1/config.json" "$3" <<'PYEOF'
import json, sys
path, edit = sys.argv[1], sys.argv[2]
c = json.load(open(path))
exec(edit)
json.dump(c, open(path, "w"))
PYEOF
    expect_error "config: $1" "$2" "$HYLA" forward "$T/cfg_$1" --tokens 1,2
}
cfg_case "top-k > experts" "config.json.*num_experts_per_tok.*num_experts" "c['num_experts_per_tok'] = c['num_experts'] + 1"
cfg_case "heads not dividing" "config.json.*num_attention_heads.*num_key_value_heads" "c['num_key_value_heads'] = 3"
cfg_case "value heads not dividing" "config.json.*linear_num_value_heads" "c['linear_num_value_heads'] = 5"
cfg_case "unknown model_type" "config.json.*model_type 'llama'" "c['model_type'] = 'llama'"
cfg_case "missing field" "config.json.*missing field 'hidden_size'" "del c['hidden_size']"
cfg_case "mistyped field" "config.json.*'num_hidden_layers' must be an integer" "c['num_hidden_layers'] = 'six'"
cfg_case "layer_types length" "config.json.*layer_types" "c['layer_types'] = ['linear_attention'] * 5"
cfg_case "bad layer type" "config.json.*layer_types\[2\]" "c['layer_types'] = ['linear_attention']*2 + ['mamba'] + ['full_attention']*(c['num_hidden_layers'] - 3)"
copy_model cfg_json; echo '{"model_type": "qwen3_next", ' > "$T/cfg_json/config.json"
expect_error "config not JSON" "config.json.*not valid JSON" "$HYLA" forward "$T/cfg_json" --tokens 1,2

# --- flags and token ids -------------------------------------------------------------------------
expect_error "token id >= vocab" "token id 512 at position 1 is out of range \[0, 512\)" "$HYLA" forward "$T/good" --tokens 3,512
expect_error "negative token id" "token id -1" "$HYLA" forward "$T/good" --tokens -1,2
expect_error "bad token list" "bad integer list" "$HYLA" forward "$T/good" --tokens 1,x,3
expect_error "unknown flag" "unknown option '--bogus'" "$HYLA" forward "$T/good" --tokens 1 --bogus
expect_error "bad threads" "--threads expects an integer" "$HYLA" forward "$T/good" --tokens 1 --threads two
expect_error "missing value" "--tokens needs a value" "$HYLA" forward "$T/good" --tokens
expect_error "unknown command" "unknown command 'frobnicate'" "$HYLA" frobnicate
expect_error "unknown preset" "unknown preset 'huge'" "$HYLA" init --preset huge --out "$T/x"
"$HYLA" init --preset tiny-hybrid --seed 5 --out "$T/good_again" >/dev/null && "$HYLA" init --preset tiny-hybrid --seed 3 \
    --out "$T/good_again" >/dev/null && cmp -s "$T/good/model.safetensors" "$T/good_again/model.safetensors" \
    || fail "init over a model hyla wrote replaces it"
expect_error "bad layout value" "--gdn-layout must be grouped or separate" "$HYLA" convert "$T/good" "$T/conv" --gdn-layout diagonal
expect_error "bad dtype value" "--dtype must be f32, bf16 or f16, got 'f8'" "$HYLA" convert "$T/good" "$T/conv" --dtype f8
# convert --dtype: BF16 tensors (half the bytes), torch_dtype follows; bf16 -> f32 -> bf16 is the identity
"$HYLA" convert "$T/good" "$T/bf16" --dtype bf16 >/dev/null && "$HYLA" convert "$T/bf16" "$T/bf16_f32" --dtype f32 >/dev/null \
    && "$HYLA" convert "$T/bf16_f32" "$T/bf16_again" --dtype bf16 >/dev/null || fail "convert --dtype"
$PY - "$T/good" "$T/bf16" "$T/bf16_f32" <<'PYEOF' || fail "convert --dtype bf16: dtypes, sizes, torch_dtype"
import json, os, struct, sys
def header(d):
    b = open(os.path.join(d, "model.safetensors"), "rb").read()
    n = struct.unpack_from("<Q", b)[0]
    return {k: v for k, v in json.loads(b[8:8 + n]).items() if k != "__metadata__"}
f32, bf16, back = (header(d) for d in sys.argv[1:4])
assert all(v["dtype"] == "BF16" for v in bf16.values()) and all(v["dtype"] == "F32" for v in back.values())
assert sum(v["data_offsets"][1] - v["data_offsets"][0] for v in bf16.values()) * 2 == \
       sum(v["data_offsets"][1] - v["data_offsets"][0] for v in f32.values())
for d, want in ((sys.argv[2], "bfloat16"), (sys.argv[3], "float32")):
    assert json.load(open(os.path.join(d, "config.json")))["torch_dtype"] == want, d
print("  ok  convert --dtype bf16: BF16 tensors, half the bytes, torch_dtype bfloat16 (and back to float32)")
PYEOF
cmp -s "$T/bf16/model.safetensors" "$T/bf16_again/model.safetensors" || fail "bf16 -> f32 -> bf16 changed the tensor bytes"
# a save carries the source directory's other files byte for byte (tokenizer, chat template,
# generation config, vocabulary), not weights in other formats, hidden files or subdirectories
copy_model companions
$PY tests/data/make_byte_tokenizer.py "$T/companions/tokenizer.json"
echo '{"chat_template": "{{ messages }}"}' > "$T/companions/tokenizer_config.json"
echo '{"do_sample": false}' > "$T/companions/generation_config.json"
printf '{"a": 0}' > "$T/companions/vocab.json"; printf '#version: 0.2\n' > "$T/companions/merges.txt"
echo stale > "$T/companions/pytorch_model.bin"; echo x > "$T/companions/.gitattributes"; mkdir "$T/companions/sub"
COMPANIONS="tokenizer.json tokenizer_config.json generation_config.json vocab.json merges.txt"
"$HYLA" convert "$T/companions" "$T/companions_conv" >/dev/null || fail "convert with companion files"
"$HYLA" train --model "$T/companions" --synthetic --steps 1 --batch 1 --seq 8 --save "$T/companions_ck" >/dev/null \
    && "$HYLA" train --resume "$T/companions_ck" --synthetic --steps 2 --batch 1 --seq 8 --save "$T/companions_ck2" >/dev/null \
    || fail "train --save / --resume with companion files"
for out in companions_conv companions_ck companions_ck2; do
    for f in $COMPANIONS; do cmp -s "$T/companions/$f" "$T/$out/$f" || fail "$out: $f not carried byte for byte"; done
    for f in pytorch_model.bin .gitattributes sub; do [ ! -e "$T/$out/$f" ] || fail "$out: $f was carried"; done
done
echo "  ok  convert, train --save and --resume carry tokenizer, chat template, generation config and vocabulary files"
# tensors hyla does not use (model.visual.*; mtp.* when the config declares no MTP layers) are
# carried through every save byte for byte: a VL-wrapped Qwen3.5 checkpoint (the oracle's q35_dense,
# its config without mtp_num_hidden_layers) with such tensors added
rm -rf "$T/vl" && mkdir "$T/vl"
$PY - "$CASES/q35_dense/config.json" "$T/vl/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["text_config"].pop("mtp_num_hidden_layers"); json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
$PY - "$CASES/q35_dense/model.safetensors" "$T/vl/model.safetensors" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n]); data = bytearray(b[8 + n:])
extra = {"mtp.fc.weight": ("BF16", [4, 6]), "model.visual.patch_embed.proj.weight": ("F32", [3, 5]), "mtp.norm.weight": ("F16", [7])}
for name, (dt, shape) in extra.items():
    size = {"BF16": 2, "F16": 2, "F32": 4}[dt]
    for d in shape: size *= d
    h[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + size]}
    data += bytes((i * 37 + len(name)) % 251 for i in range(size))
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
PYEOF
# a model whose config declares its MTP head (q35_dense as generated): with --mtp-loss-weight 0
# training leaves the head as loaded and saves it under its own names (training saves fp32 master
# weights: the BF16 values widened); by default (weight 0.1) the head trains with the trunk;
# --mtp-only trains the head alone
"$HYLA" train --model "$CASES/q35_dense" --synthetic --steps 2 --batch 1 --seq 8 --mtp-loss-weight 0 --save "$T/mtp_off" \
    >/dev/null && "$HYLA" train --model "$CASES/q35_dense" --synthetic --steps 2 --batch 1 --seq 8 --save "$T/mtp_on" \
    --log-json "$T/mtp_on.jsonl" >/dev/null && "$HYLA" train --model "$CASES/q35_dense" --synthetic --steps 2 --batch 1 \
    --seq 8 --mtp-only --save "$T/mtp_only" >/dev/null &&
    $PY - "$CASES/q35_dense/model.safetensors" "$T/mtp_off" "$T/mtp_on" "$T/mtp_only" "$T/mtp_on.jsonl" <<'PYEOF' \
    || fail "MTP head through train --save (--mtp-loss-weight 0, default, --mtp-only)"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read(); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        raw = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        if v["dtype"] == "BF16": # widened exactly to F32
            raw = b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2))
        out[k] = raw
    return out
src = tensors(sys.argv[1])
off, on, only = (tensors(d + "/model.safetensors") for d in sys.argv[2:5])
head, trunk = [k for k in src if k.startswith("mtp.")], [k for k in src if k.startswith("model.")]
assert len(head) > 10 and all(off[k] == src[k] for k in head), "weight 0: the MTP head changed"
assert any(off[k] != src[k] for k in trunk), "weight 0: the trunk did not train"
assert any(on[k] != src[k] for k in head) and any(on[k] != src[k] for k in trunk), "default: head and trunk train"
assert any(only[k] != src[k] for k in head) and all(only[k] == src[k] for k in trunk), "--mtp-only: the head alone"
steps = [json.loads(l) for l in open(sys.argv[5])]
assert all(s["mtp"] > 0 and abs(s["loss"] - (s["ce"] + 0.1 * s["mtp"])) < 1e-6 * s["loss"] for s in steps), steps
print(f"  ok  a model with an MTP head: --mtp-loss-weight 0 saves its {len(head)} mtp.* tensors as loaded; the default "
      f"(0.1) trains head and trunk (loss = ce + 0.1 x mtp {steps[-1]['mtp']:.3f}); --mtp-only the head alone")
PYEOF
"$HYLA" convert "$T/vl" "$T/vl_conv" --shard-mb 1 >/dev/null && "$HYLA" train --model "$T/vl" --synthetic --steps 1 --batch 1 \
    --seq 8 --save "$T/vl_ck" >/dev/null && "$HYLA" convert "$T/vl_ck" "$T/vl_bf16" --dtype bf16 >/dev/null \
    || fail "saves of a model with mtp.* / model.visual.* tensors"
# ... and through hyla merge: a PEFT-format LoRA adapter (r 2) on the first MLP gate projection
$PY - "$T/vl/model.safetensors" "$T/vl_adapter" <<'PYEOF'
import json, os, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n])
name = sorted(k for k in h if k.endswith("mlp.gate_proj.weight"))[0]; out_f, in_f = h[name]["shape"]
module = name[: -len(".weight")]
tensors = {f"base_model.model.{module}.lora_A.weight": [2, in_f], f"base_model.model.{module}.lora_B.weight": [out_f, 2]}
hdr, blob = {}, b""
for k, shape in tensors.items():
    vals = [((i * 7919) % 200 - 100) / 1000.0 for i in range(shape[0] * shape[1])]
    data = struct.pack("<%df" % len(vals), *vals)
    hdr[k] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
hb = json.dumps(hdr).encode()
os.makedirs(sys.argv[2], exist_ok=True)
open(sys.argv[2] + "/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + blob)
json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": [module.rsplit(".", 1)[1]]},
          open(sys.argv[2] + "/adapter_config.json", "w"))
PYEOF
"$HYLA" merge "$T/vl" --adapter "$T/vl_adapter" --out "$T/vl_merged" >/dev/null || fail "merge of the VL-wrapped model"
$PY - "$T/vl" "$T/vl_conv" "$T/vl_ck" "$T/vl_bf16" "$T/vl_merged" <<'PYEOF' || fail "carried tensors not byte-identical"
import json, os, struct, sys
def tensors(d):
    out = {}
    files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    for f in files:
        b = open(os.path.join(d, f), "rb").read(); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k != "__metadata__":
                out[k] = (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
    return out
src = tensors(sys.argv[1])
carried = {k: v for k, v in src.items() if k.startswith(("mtp.", "model.visual."))}
assert len(carried) >= 3 and "model.visual.patch_embed.proj.weight" in carried and "mtp.fc.weight" in carried
for d in sys.argv[2:]:
    t = tensors(d)
    for k, v in carried.items():
        assert t.get(k) == v, (d, k)
print("  ok  mtp.* / model.visual.* carried byte for byte through convert (sharded), train --save, convert --dtype and merge")
PYEOF
"$HYLA" generate "$T/good" --prompt "ab" --max-new 2 >/dev/null 2>"$T/gen_bytes.err" \
    && grep -q "no tokenizer.json in .*: prompt and output are raw bytes" "$T/gen_bytes.err" \
    || fail "generate without tokenizer.json does not say it falls back to bytes"
copy_model big_weight
$PY - "$T/big_weight/model.safetensors" <<'PYEOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n])
struct.pack_into("<f", b, 8 + n + h["model.embed_tokens.weight"]["data_offsets"][0] + 4 * 5, 1.0e6)
open(sys.argv[1], "wb").write(b)
PYEOF
expect_error "convert: a value f16 cannot hold" "tensor 'model.embed_tokens.weight': element 5 \(1e\+06\) overflows F16" \
    "$HYLA" convert "$T/big_weight" "$T/big_f16" --dtype f16
[ ! -e "$T/big_f16" ] || fail "a failed convert left its output directory"

# --- train: a short run, its JSON log, resume, and bad training inputs ------------------------------
"$HYLA" train --preset tiny-hybrid --synthetic --steps 4 --batch 2 --seq 16 --warmup 1 --remat minimal \
    --save "$T/ck" --save-every 2 --log-json "$T/log.jsonl" >"$T/train.out" 2>&1 || { fail "train run"; cat "$T/train.out"; }
grep -q "memory: parameters" "$T/train.out" || fail "train prints the policy's memory"
$PY - "$T/log.jsonl" <<'PYEOF' || fail "train --log-json"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2, 3, 4], rows
for r in rows:
    for k in ("loss", "ce", "aux", "lr", "grad_norm", "tokens_per_s", "activation_bytes"):
        assert k in r, k
print("  ok  train --log-json: 4 steps, loss %.3f -> %.3f" % (rows[0]["loss"], rows[-1]["loss"]))
PYEOF
"$HYLA" train --resume "$T/ck" --synthetic --steps 6 --batch 2 --seq 16 --warmup 1 --remat minimal >"$T/resume.out" 2>&1 \
    && grep -q "step     6/6" "$T/resume.out" || { fail "train --resume"; cat "$T/resume.out"; }
expect_error "unknown remat policy" "unknown remat policy 'fastest'" "$HYLA" train --preset tiny-hybrid --remat fastest --steps 1
expect_error "unknown checkpoint name" "unknown checkpoint name 'qkv'" "$HYLA" train --preset tiny-hybrid --remat custom:qkv=device --steps 1
expect_error "bad remat value" "must be device, remat or offload" "$HYLA" train --preset tiny-hybrid --remat custom:gdn_conv=disk --steps 1
expect_error "unknown remat unit" "unknown remat unit 'row'" "$HYLA" train --preset tiny-hybrid --remat-unit row --steps 1
# offload: the same run through the host store gives the same losses bit for bit; a store that
# cannot be created, exists, is too small, or fails mid-step is a clear error and no checkpoint
"$HYLA" train --preset tiny-hybrid --synthetic --steps 3 --batch 2 --seq 16 --warmup 1 --remat minimal \
    --log-json "$T/dev.jsonl" >/dev/null 2>&1 || fail "train minimal"
"$HYLA" train --preset tiny-hybrid --synthetic --steps 3 --batch 2 --seq 16 --warmup 1 --remat minimal_offloaded \
    --offload-store "$T/store.bin" --offload-limit 64MiB --log-json "$T/off.jsonl" >"$T/off.out" 2>&1 \
    || { fail "train minimal_offloaded"; cat "$T/off.out"; }
$PY - "$T/dev.jsonl" "$T/off.jsonl" <<'PYEOF' || fail "offloaded run differs from the device run"
import json, sys
dev = [json.loads(l) for l in open(sys.argv[1])]
off = [json.loads(l) for l in open(sys.argv[2])]
assert [(r["loss"], r["grad_norm"]) for r in dev] == [(r["loss"], r["grad_norm"]) for r in off], (dev, off)
assert all(r["offload_bytes"] > 0 and 0 <= r["copy_hidden_fraction"] <= 1 for r in off), off
assert all(r["activation_bytes"] < d["activation_bytes"] for r, d in zip(off, dev))
print("  ok  train minimal_offloaded == minimal (loss, grad norm) over 3 steps; %d bytes offloaded per step, "
      "copies %.0f%% hidden in the last" % (off[-1]["offload_bytes"], 100 * off[-1]["copy_hidden_fraction"]))
PYEOF
[ ! -e "$T/store.bin" ] || fail "the offload store file is left behind"
expect_error "store in a missing directory" "offload store '$T/no/dir/s': cannot create" \
    "$HYLA" train --preset tiny-hybrid --steps 1 --seq 16 --remat minimal_offloaded --offload-store "$T/no/dir/s"
echo keep >"$T/precious"
expect_error "store over an existing file" "already exists; refusing to overwrite" \
    "$HYLA" train --preset tiny-hybrid --steps 1 --seq 16 --remat minimal_offloaded --offload-store "$T/precious"
grep -q keep "$T/precious" || fail "an existing file was overwritten by the offload store"
expect_error "store too small" "is full: this step offloads" \
    "$HYLA" train --preset tiny-hybrid --steps 1 --seq 16 --remat qkv_proj_offloaded --offload-limit 1KB
if [ -w /dev/full ]; then
    expect_error "store fails mid-step" "offload store '/dev/full': write of" "$HYLA" train --preset tiny-hybrid \
        --steps 1 --seq 16 --remat minimal_offloaded --offload-store /dev/full --save "$T/ck_full"
    [ ! -e "$T/ck_full" ] || fail "a failed offloading step still wrote a checkpoint"
fi
expect_error "two model sources" "exactly one of" "$HYLA" train --preset tiny-hybrid --model "$T/good" --steps 1
expect_error "resume from nowhere" "$T/nowhere/config.json" "$HYLA" train --resume "$T/nowhere" --steps 1
expect_error "batch 0" "--batch expects an integer in \[1," "$HYLA" train --preset tiny-hybrid --batch 0 --steps 1
expect_error "lr nan" "--lr expects a number, got 'nan'" "$HYLA" train --preset tiny-hybrid --lr nan --steps 1
expect_error "missing data file" "$T/no_such.tok: cannot open" "$HYLA" train --preset tiny-hybrid --data "$T/no_such.tok" --steps 1
# (the kill -9 test is in tests/hardening_test.sh)
expect_error "bad lr" "need lr > 0" "$HYLA" train --preset tiny-hybrid --lr -1 --steps 1
printf 'HYLATOK1\x00\x02\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00' > "$T/short.tok"
expect_error "lying token file" "short.tok: header says 5 tokens" "$HYLA" train --preset tiny-hybrid --data "$T/short.tok" --steps 1
cp -r "$T/ck" "$T/ck_bad"; echo '{"format": "hyla-train-state-1", "step": "x"}' > "$T/ck_bad/trainer_state.json"
expect_error "corrupt checkpoint" "trainer_state.json: field 'step'" "$HYLA" train --resume "$T/ck_bad" --synthetic --steps 8
cp -r "$T/ck" "$T/ck_bad2"; $PY tests/corrupt_safetensors.py "$T/ck/optimizer/model.safetensors" "$T/ck_bad2/optimizer/model.safetensors" truncate
expect_error "truncated optimizer state" "optimizer/model.safetensors" "$HYLA" train --resume "$T/ck_bad2" --synthetic --steps 8

# --- prefill memory on a 248,320-token vocabulary: no [T, vocab] logits, measured == planned ---------
# A Qwen3.5-0.8B-vocabulary model cut to hidden 128 / 4 layers (124 MiB of fp32 weights), a 4,096-token
# prompt. generate --json reports the inference plan (weights + caches + sampling + the larger of the
# prefill piece's and decode's executors) and VmHWM; the growth from just before the model loads must
# equal the plan within 5%, allowing 8 MiB above it for what the plan does not hold (oneDNN's packing
# scratch: 5.7 MiB measured, constant in the prompt length from 1,024 tokens). Before this change the
# same run peaked at weights + 4096 x 248320 x 4 B = 4 GB of logits (and twice the embedding at load).
$PY - "$T/bigvocab.json" <<'PYEOF' || fail "big-vocabulary config"
import json, sys
c = json.load(open("configs/qwen3.5-0.8b.json"))
c["text_config"].update(hidden_size=128, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                        linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=32, linear_value_head_dim=32,
                        intermediate_size=256, max_position_embeddings=65536)
json.dump(c, open(sys.argv[1], "w"))
PYEOF
"$HYLA" init --config "$T/bigvocab.json" --seed 2 --out "$T/bigvocab" >/dev/null || fail "init big-vocabulary model"
ids=$($PY -c "print(','.join(str((i * 7919 + 13) % 248320) for i in range(4096)))")
sanitized=0; case "$HYLA" in *asan*) sanitized=1 ;; esac  # ASan's shadow memory and quarantine are not the plan's
# the same as a Q8_0 GGUF model: the file's tensor bytes (mapped) + caches + working set
cp -r "$T/bigvocab" "$T/bigvocab_tok" && $PY tests/data/make_qwen_tokenizer.py "$T/bigvocab_tok" --pattern qwen35 >/dev/null \
    && "$HYLA" convert "$T/bigvocab_tok" "$T/bigvocab.gguf" --to gguf --type q8_0 >/dev/null || fail "GGUF export of the big-vocabulary model"
for dt in f32 bf16 gguf; do
    if [ $dt = gguf ]; then model=("$T/bigvocab.gguf"); else model=("$T/bigvocab" --param-dtype $dt); fi
    "$HYLA" generate "${model[@]}" --prompt-tokens "$ids" --max-new 4 --json >"$T/bigvocab_$dt.json" \
        || fail "generate 4096 tokens on the big-vocabulary model ($dt)"
    [ $sanitized -eq 1 ] && continue
    $PY - "$T/bigvocab_$dt.json" $dt <<'PYEOF' || fail "prefill memory ($dt) differs from the plan"
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
grew, plan, slack = m["peak_rss"] - m["rss_before_load"], m["planned_peak"], 8 << 20
ok = 0.95 * plan <= grew <= 1.05 * plan + slack
print(f"  {'ok' if ok else 'FAIL'}  generate {sys.argv[2]}, 4096-token prompt, vocab 248320: peak RSS grew {grew / 2**20:.1f} MiB, "
      f"planned {plan / 2**20:.1f} MiB (weights {m['planned_weights'] / 2**20:.1f}, caches {m['planned_caches'] / 2**20:.1f}, "
      f"prefill piece {m['planned_prefill'] / 2**20:.1f}; ratio {grew / plan:.3f})")
sys.exit(0 if ok else 1)
PYEOF
done

# a GGUF vocabulary that spells two tokens alike is refused, naming the file and the token (the check is
# the tokenizer's own hash table: the 248K-token file above loads in well under a second)
$PY - "$T/bigvocab.gguf" "$T/dup_token.gguf" <<'PYEOF' || fail "make a GGUF with a repeated token"
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
key = b"tokenizer.ggml.tokens"
p = b.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
assert struct.unpack_from("<II", b, p) == (9, 8), "tokens: an array of strings"
p += 16  # value type, element type, count
spans = []
for _ in range(400):  # the first tokens: (offset, length) of each spelling
    n = struct.unpack_from("<Q", b, p)[0]
    spans.append((p + 8, n))
    p += 8 + n
a, c = next((x, y) for i, x in enumerate(spans) for y in spans[i + 1:] if x[1] == y[1])
b[c[0]:c[0] + c[1]] = b[a[0]:a[0] + a[1]]  # a later token spelled as an earlier one of its length
open(sys.argv[2], "wb").write(b)
PYEOF
expect_error "GGUF vocabulary with a repeated token" \
    "dup_token.gguf \\(tokenizer.ggml.\\*\\): model.vocab: token .* listed twice" \
    "$HYLA" generate "$T/dup_token.gguf" --prompt hello --max-new 1

# --- generate: JSON ids, record routing -> replay in training, bad inputs ------------------------------
"$HYLA" generate "$T/good" --prompt-tokens 1,2,3 --max-new 4 --json --record-routing "$T/route.bin" >"$T/gen.json" \
    || fail "generate --json"
$PY - "$T/gen.json" <<'PYEOF' || fail "generate --json output"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["prompt_tokens"] == [1, 2, 3] and len(j["tokens"]) == 4, j
assert all(0 <= t < 512 for t in j["tokens"])
print("  ok  generate --json: tokens", j["tokens"])
PYEOF
# 3 prompt + 3 fed generated tokens = 6 routed rows: one training step of 1 x 6 tokens replays them
"$HYLA" train --model "$T/good" --synthetic --steps 1 --batch 1 --seq 6 --replay-routing "$T/route.bin" >/dev/null \
    || fail "train --replay-routing with a recorded file"
expect_error "replay file too short" "route.bin.*rows|has 6 rows" "$HYLA" train --model "$T/good" --synthetic --steps 2 --batch 1 --seq 6 --replay-routing "$T/route.bin"
expect_error "replay file for another model" "MoE layers" "$HYLA" train --preset bench-100m --synthetic --steps 1 --batch 1 --seq 6 --replay-routing "$T/route.bin"
expect_error "generate token id >= vocab" "token id 512 at position 1" "$HYLA" generate "$T/good" --prompt-tokens 1,512 --max-new 2
expect_error "bad top-p" "top-p must be in \(0, 1\]" "$HYLA" generate "$T/good" --prompt-tokens 1 --top-p 0
expect_error "bad temperature" "temperature must be >= 0" "$HYLA" generate "$T/good" --prompt-tokens 1 --temperature -1
expect_error "prompt longer than the cache allows" "exceeds the model's 4096 positions" "$HYLA" generate "$T/good" \
    --prompt-tokens "$(seq -s, 1 4000 | sed 's/[0-9]*/7/g')" --max-new 200
echo '{"model": {"type": "BPE", "vocab": 5}}' > "$T/bad_tokenizer.json"
expect_error "malformed tokenizer.json" "bad_tokenizer.json" "$HYLA" generate "$T/good" --tokenizer "$T/bad_tokenizer.json" --prompt hi
expect_error "generate needs a prompt" "exactly one of --prompt" "$HYLA" generate "$T/good"

# --- inspect on the shipped real configs (no weights) --------------------------------------------
out=$("$HYLA" inspect configs/qwen3-next-80b-a3b.json) || fail "inspect 80B config"
grep -q "schedule: 48 layers (36 linear, 12 full; 48 MoE, 0 dense) in 12 blocks" <<<"$out" || fail "80B schedule line"
[ "$(grep -c 'linear + 1 full' <<<"$out")" -eq 12 ] || fail "80B: 12 blocks of 3+1"
json=$("$HYLA" inspect configs/qwen3-next-80b-a3b.json --json) || fail "inspect --json"
$PY - "$json" configs/qwen3-next-80b-a3b.json <<'PYEOF' || fail "80B parameter counts"
import json, sys
j = json.loads(sys.argv[1])
c = json.load(open(sys.argv[2]))
# Independent count from the config (spec section 2.1 shapes).
H, V, N = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
kd, vd = c["linear_num_key_heads"] * c["linear_key_head_dim"], c["linear_num_value_heads"] * c["linear_value_head_dim"]
Hv, hd, Hq, Hkv = c["linear_num_value_heads"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
E, k, Ie, Is = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
gdn = (2 * kd + 2 * vd) * H + 2 * Hv * H + (2 * kd + vd) * c["linear_conv_kernel_dim"] + 2 * Hv + c["linear_value_head_dim"] + H * vd
attn = Hq * 2 * hd * H + 2 * Hkv * hd * H + H * Hq * hd + 2 * hd
moe_fixed = E * H + 3 * Is * H + H
expert = 3 * Ie * H
n_full = N // c["full_attention_interval"]
common = N * 2 * H + (N - n_full) * gdn + n_full * attn + N * moe_fixed + H + 2 * V * H
total, active = common + N * E * expert, common + N * k * expert
assert j["params_total"] == total, (j["params_total"], total)
assert j["params_active"] == active, (j["params_active"], active)
assert abs(total / 80e9 - 1) < 0.01, total          # "80B total", within 1%
emb = j["params_embedding"]
print(f"  ok  80B: total {total/1e9:.3f}B ({100*(total/80e9-1):+.2f}% of 80B), active per token {active/1e9:.3f}B, "
      f"active without embedding/lm_head {(active-emb)/1e9:.3f}B (the name's 'A3B' is rounded)")
PYEOF
for c in configs/*.json; do "$HYLA" inspect "$c" >/dev/null || fail "inspect $c"; done

# --- plan: the seeds' argument sizes (fp32 params + fp32 Adam moments sharded over the devices) ----
for spec in "qwen3-next-80b-a3b 128 7.49" "qwen3.5-35b-a3b 16 26.01" "qwen3.5-397b-a17b 256 18.61"; do
    set -- $spec
    start=$(date +%s%N)
    "$HYLA" plan "configs/$1.json" --devices "$2" --seq 4096 --json >"$T/plan.json" || { fail "plan $1"; continue; }
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    $PY - "$T/plan.json" "$3" "$1" "$ms" <<'PYEOF' || fail "plan $1 argument bytes"
import json, sys
p, want, name, ms = json.load(open(sys.argv[1])), float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
# the seeds' models (MaxText) have no MTP head; the Qwen3.5 configs declare one, which hyla holds:
# its fc, three norms and one full-attention MoE layer, 12 bytes per parameter over the devices
c = json.load(open(f"configs/{name}.json")); c = c.get("text_config", c)
if c.get("mtp_num_hidden_layers", c.get("num_nextn_predict_layers", 0)):
    H, hd, Hq, Hkv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    E, Ie, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    attn = Hq * 2 * hd * H + 2 * Hkv * hd * H + H * Hq * hd + 2 * hd
    mtp = 2 * H * H + 3 * H + 2 * H + attn + E * H + 3 * E * Ie * H + 3 * Is * H + H
    want += 12 * mtp / p["devices"] / 1e9
got = p["argument_bytes"] / 1e9
assert abs(got / want - 1) < 0.01, (name, got, want)
assert p["temp_bytes"] > 0 and len(p["activation_timeline_bytes"]) > 0
print(f"  ok  plan {name} on {p['devices']} devices: argument {got:.3f} GB (seed + MTP head {want:.2f} GB, {100*(got/want-1):+.2f}%), "
      f"temp {p['temp_bytes']/1e9:.3f} GB, {ms} ms")
PYEOF
done
"$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 128 --remat minimal --svg "$T/plan.svg" >/dev/null \
    && head -c 4 "$T/plan.svg" | grep -q "<svg" && tail -c 7 "$T/plan.svg" | grep -q "</svg>" || fail "plan --svg"
"$HYLA" train --preset tiny-hybrid --steps 2 --batch 1 --seq 16 --remat minimal_offloaded --svg "$T/train.svg" >/dev/null \
    && $PY -c "import sys, xml.dom.minidom as x; x.parse(sys.argv[1])" "$T/train.svg" || fail "train --svg"
# offload in the plan's JSON: host bytes by name add up, and against the device twin the
# checkpoints drop by exactly the host bytes and temp by host - staging
"$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 128 --seq 8192 --remat minimal --json >"$T/p_dev.json" &&
"$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 128 --seq 8192 --remat minimal_offloaded --json >"$T/p_off.json" &&
$PY - "$T/p_dev.json" "$T/p_off.json" <<'PYEOF' || fail "plan --json with offload"
import json, sys
d, o = (json.load(open(f)) for f in sys.argv[1:3])
assert d["host_bytes"] == 0 and o["host_bytes"] > 0
assert abs(sum(o["host_checkpoints_by_name"].values()) - o["host_bytes"]) < 1, o["host_checkpoints_by_name"]
assert max(o["host_timeline_bytes"]) == o["host_bytes"]
assert d["checkpoint_bytes"] - o["checkpoint_bytes"] == o["host_bytes"]
assert d["temp_bytes"] - o["temp_bytes"] == o["host_bytes"] - o["offload_staging_bytes"]
print("  ok  plan --json minimal_offloaded (80B, 8k): %.3f GB to host, checkpoints -%.3f GB exactly, staging %.3f GB"
      % (o["host_bytes"] / 1e9, (d["checkpoint_bytes"] - o["checkpoint_bytes"]) / 1e9, o["offload_staging_bytes"] / 1e9))
PYEOF
out=$("$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 128 --remat auto --memory-budget 40GB) || fail "plan --remat auto"
grep -q "^auto policy for 40GB: custom:decoder_layer_input=" <<<"$out" || fail "plan --remat auto prints its policy"
out=$("$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 128 --remat auto --memory-budget 40GB --host-budget 0) \
    && ! grep -q "=offload" <<<"$out" || fail "plan --remat auto --host-budget 0 must not offload"
# the minimum: with offload (decoder_layer_input can go to the host) below device/remat only. The
# figures are FSDP as hyla train --shard fsdp runs it (train/fsdp.h): gradient pieces plus the
# compact head's and one unit's whole gradients, two parts' gathered weights (the prefetch),
# reduce-scatter staging
expect_error "plan: impossible budget" "memory budget 20 GB is impossible: the least this step needs is 36.42 GB" \
    "$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 128 --remat auto --memory-budget 20GB
expect_error "plan: impossible budget without host" "the least this step needs is 37.76 GB" \
    "$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 128 --remat auto --memory-budget 20GB --host-budget 0
expect_error "plan: bad budget" "memory budget 'lots' is not a positive size" "$HYLA" plan configs/qwen3-next-80b-a3b.json --remat auto --memory-budget lots
"$HYLA" train --preset tiny-hybrid --synthetic --steps 1 --batch 2 --seq 16 --remat auto --memory-budget 150MB >"$T/auto.out" 2>&1 \
    && grep -q "auto policy for 150MB" "$T/auto.out" || { fail "train --remat auto"; cat "$T/auto.out"; }
expect_error "plan: bad dtype" "--param-dtype must be f32, bf16 or f16" "$HYLA" plan configs/qwen3-next-80b-a3b.json --param-dtype f8

# --- forward CLI output format against a reference case ------------------------------------------
if [ -d "$CASES/next_moe_8l" ]; then
    toks=$($PY -c "import json;r=json.load(open('$CASES/next_moe_8l/expected.json'))['runs'];print(','.join(map(str,[x for x in r if len(x['tokens'])==65][0]['tokens'])))")
    "$HYLA" forward "$CASES/next_moe_8l" --tokens "$toks" --json --logits-out "$T/logits.f32" >"$T/fwd.json" || fail "forward --json"
    $PY - "$T/fwd.json" "$T/logits.f32" "$CASES/next_moe_8l" <<'PYEOF' || fail "forward CLI output"
import json, os, sys
out = json.load(open(sys.argv[1]))
exp = [r for r in json.load(open(sys.argv[3] + "/expected.json"))["runs"] if len(r["tokens"]) == 65][0]
vocab = out["vocab"]
assert os.path.getsize(sys.argv[2]) == 65 * vocab * 4
# loss tolerance: see tests/test_reference.c (2 x 1e-3 relative bound); here only the wiring is checked
assert abs(out["loss"] - exp["ce_loss"]) < 2e-3 * max(1, exp["ce_loss"]), (out, exp)
print(f"  ok  forward --json loss {out['loss']:.6f} (reference {exp['ce_loss']:.6f})")
PYEOF
fi

# GGUF export: flags that do not apply, a missing tokenizer, what llama.cpp cannot represent
# (the conformance against llama.cpp itself is tests/gguf/conformance.sh)
expect_error "convert --to gguf with --dtype" "--dtype does not apply to --to gguf" "$HYLA" convert "$T/good" "$T/x.gguf" --to gguf --dtype bf16
expect_error "convert --type without --to gguf" "--type does not apply to --to safetensors" "$HYLA" convert "$T/good" "$T/x2" --type q8_0
expect_error "convert --to gguf --type q4" "--type must be f32, f16, bf16, q8_0, q6_k, q5_k_m, q4_k_m, q5_k, q4_k, q3_k_m or q2_k" "$HYLA" convert "$T/good" "$T/x.gguf" --to gguf --type q4
# K-quant rows must be whole 256-value blocks (the tiny model's are not): llama.cpp would fall back to types
# hyla does not write
expect_error "convert --to gguf --type q4_k_m, rows not whole blocks" "llama.cpp falls back to Q5_0 / Q5_1 there" "$HYLA" convert "$T/good" "$T/x.gguf" --to gguf --type q4_k_m
expect_error "convert --to gguf --type q3_k_m, rows not whole blocks" "llama.cpp falls back to IQ4_NL there" "$HYLA" convert "$T/good" "$T/x.gguf" --to gguf --type q3_k_m
expect_error "convert --to gguf --type q2_k, rows not whole blocks" "llama.cpp falls back to IQ4_NL there" "$HYLA" convert "$T/good" "$T/x.gguf" --to gguf --type q2_k
expect_error "convert --to xml" "--to must be safetensors or gguf" "$HYLA" convert "$T/good" "$T/x.gguf" --to xml
expect_error "gguf export without tokenizer.json" "tokenizer.json is missing; llama.cpp needs the vocabulary" "$HYLA" convert "$T/good" "$T/x.gguf" --to gguf
[ ! -e "$T/x.gguf" ] || fail "a refused GGUF export left a file behind"
$PY - "$T/good/config.json" "$T/kv_mismatch.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["linear_value_head_dim"] = 2 * c["linear_key_head_dim"]; json.dump(c, open(sys.argv[2], "w"))
PYEOF
"$HYLA" init --config "$T/kv_mismatch.json" --out "$T/kv_mismatch" >/dev/null && $PY tests/data/make_qwen_tokenizer.py "$T/kv_mismatch" >/dev/null
expect_error "gguf export of dk != dv" "linear_key_head_dim 32 != linear_value_head_dim 64" "$HYLA" convert "$T/kv_mismatch" "$T/x.gguf" --to gguf

# GGUF models: hyla's own export read back (forward, generate with the file's vocabulary, convert
# to a Hugging Face directory), and files that lie get one clear line and no crash
copy_model gg && $PY tests/data/make_qwen_tokenizer.py "$T/gg" >/dev/null
"$HYLA" convert "$T/gg" "$T/m.gguf" --to gguf --type q8_0 >/dev/null || fail "export for the GGUF-model tests"
"$HYLA" forward "$T/m.gguf" --tokens 1,2,3,4 --json >"$T/gguf_fwd.json" || fail "forward on a .gguf file"
"$HYLA" generate "$T/m.gguf" --prompt "hello" --max-new 3 >"$T/gguf_gen.out" 2>&1 || fail "generate on a .gguf file (its tokenizer.ggml.*)"
"$HYLA" convert "$T/m.gguf" "$T/m_dequant" >/dev/null && [ -f "$T/m_dequant/model.safetensors" ] \
    && "$HYLA" forward "$T/m_dequant" --tokens 1,2,3,4 >/dev/null && echo "  ok  GGUF model: forward, generate, convert to safetensors" \
    || fail "convert a .gguf file to a Hugging Face directory"
out=$("$HYLA" inspect "$T/m.gguf") && grep -q "tensors in the file" <<<"$out" && grep -q "Q8_0" <<<"$out" \
    && grep -q "read in place" <<<"$out" || fail "inspect of a .gguf file: tensor table with stored types"
"$HYLA" inspect "$T/m.gguf" --json | $PY -c 'import json,sys; d=json.load(sys.stdin); g=d["gguf"]; assert g["tensors"] == sum(g["tensor_types"].values()) and g["tensor_types"].get("Q8_0", 0) > 0 and g["tensor_bytes"] > 0 and d["params_total"] > 0' \
    || fail "inspect --json of a .gguf file: gguf.tensor_types / tensor_bytes"
expect_error "gguf: --adapter" "--adapter needs a Hugging Face model directory" "$HYLA" forward "$T/m.gguf" --tokens 1 --adapter "$T/none"
expect_error "gguf: --act-dtype bf16" "a GGUF model computes with its tensors' stored types" "$HYLA" forward "$T/m.gguf" --tokens 1 --act-dtype bf16
# training, merging and planning from a GGUF file: its values as fp32, so every result equals the same
# command on its dequantized directory (m_dequant), bit for bit
TR=(--synthetic --steps 2 --seq 16 --batch 2 --seed 5)
gg_same() { # NAME FILE ARGS... (each ARGS with @M@ for the model; FILE compared in the two outputs)
    local name=$1 file=$2; shift 2
    local a=("${@//@M@/$T/m.gguf}") b=("${@//@M@/$T/m_dequant}")
    "$HYLA" "${a[@]//@O@/$T/gg_a}" >/dev/null 2>&1 && "$HYLA" "${b[@]//@O@/$T/gg_b}" >/dev/null 2>&1 \
        && cmp -s "$T/gg_a/$file" "$T/gg_b/$file" \
        && echo "  ok  $name from a GGUF file == from its dequantized directory" || fail "$name from a GGUF file"
    rm -rf "$T/gg_a" "$T/gg_b"
}
gg_same "train (full)" model.safetensors train --model @M@ "${TR[@]}" --save @O@
gg_same "train --lora-rank 4" adapter_model.safetensors train --model @M@ "${TR[@]}" --lora-rank 4 --save @O@
gg_same "train --lora-rank 4 --param-dtype bf16" adapter_model.safetensors train --model @M@ "${TR[@]}" --lora-rank 4 \
    --param-dtype bf16 --save @O@
"$HYLA" train --model "$T/m_dequant" "${TR[@]}" --lora-rank 4 --save "$T/gg_adapter" >/dev/null 2>&1 \
    || fail "adapter for merge"
gg_same "merge" model.safetensors merge @M@ --adapter "$T/gg_adapter" --out @O@
cmp -s <("$HYLA" plan "$T/m.gguf" --batch 2 --seq 32 --json) <("$HYLA" plan "$T/m_dequant" --batch 2 --seq 32 --json) \
    && echo "  ok  plan of a GGUF file == of its dequantized directory" || fail "plan of a GGUF file"
expect_error "gguf: plan --infer-prompt" "a GGUF model's are its file's tensors" \
    "$HYLA" plan "$T/m.gguf" --infer-prompt 8
# --tokenizer takes a GGUF file's vocabulary: the ids of its tokenizer.json, and a checkpoint trained
# from the file generates text with it
cmp -s <("$HYLA" tokenize --tokenizer "$T/m.gguf" --text "hello world, hello") \
       <("$HYLA" tokenize --tokenizer "$T/gg/tokenizer.json" --text "hello world, hello") \
    && "$HYLA" train --model "$T/m.gguf" "${TR[@]}" --save "$T/gg_ckpt" >/dev/null 2>&1 \
    && "$HYLA" generate "$T/gg_ckpt" --tokenizer "$T/m.gguf" --prompt "hello" --max-new 2 >/dev/null 2>&1 \
    && echo "  ok  --tokenizer FILE.gguf: the ids of its tokenizer.json; generate on a checkpoint trained from it" \
    || fail "--tokenizer FILE.gguf"
# a directory saved from a GGUF model (train, convert) holds the file's vocabulary as tokenizer.json and its
# special tokens and chat template as tokenizer_config.json: generate and chat need no --tokenizer (the
# tokenizers library reading it back, and GGUF -> directory -> GGUF keeping every tokenizer.* key-value:
# tests/gguf/conformance.py)
cmp -s <("$HYLA" tokenize --tokenizer "$T/gg_ckpt/tokenizer.json" --text "hello world, <|im_start|>hello") \
       <("$HYLA" tokenize --tokenizer "$T/gg/tokenizer.json" --text "hello world, <|im_start|>hello") \
    && cmp -s <("$HYLA" tokenize --tokenizer "$T/m_dequant/tokenizer.json" --text "hello world, hello") \
              <("$HYLA" tokenize --tokenizer "$T/gg/tokenizer.json" --text "hello world, hello") \
    && grep -q '"chat_template"' "$T/gg_ckpt/tokenizer_config.json" \
    && "$HYLA" generate "$T/gg_ckpt" --chat --prompt "hello" --max-new 2 >/dev/null 2>&1 \
    && echo "  ok  a directory saved from a GGUF model: tokenizer.json / tokenizer_config.json from its vocabulary" \
    || fail "tokenizer files of a directory saved from a GGUF model"
# back to GGUF: convert --tokenizer copies the vocabulary (tokenizer.*) of the file it was trained from
"$HYLA" convert "$T/gg_ckpt" "$T/gg_rt.gguf" --to gguf --type q8_0 --tokenizer "$T/m.gguf" >/dev/null \
    && cmp -s <("$HYLA" tokenize --tokenizer "$T/m.gguf" --text "hello world, hello") \
              <("$HYLA" tokenize --tokenizer "$T/gg_rt.gguf" --text "hello world, hello") \
    && "$HYLA" generate "$T/gg_rt.gguf" --prompt "hello" --max-new 2 >/dev/null 2>&1 \
    && echo "  ok  GGUF -> train -> GGUF: convert --to gguf --tokenizer FILE.gguf carries the file's vocabulary" \
    || fail "convert --tokenizer FILE.gguf"
rm -rf "$T/gg_notok" && cp -r "$T/gg_ckpt" "$T/gg_notok" && rm "$T/gg_notok/tokenizer.json"
expect_error "convert: a checkpoint without tokenizer.json" "tokenizer.json is missing; .*--tokenizer FILE.gguf" \
    "$HYLA" convert "$T/gg_notok" "$T/gg_x.gguf" --to gguf
expect_error "convert --tokenizer with a larger vocabulary" \
    "bigvocab.gguf has 248320 tokens, more than the model's vocab_size 512" \
    "$HYLA" convert "$T/gg_ckpt" "$T/gg_x.gguf" --to gguf --tokenizer "$T/bigvocab.gguf"
[ ! -e "$T/gg_x.gguf" ] || fail "a refused GGUF export left a file behind"
expect_error "convert --tokenizer not a GGUF file" \
    "--tokenizer takes a .gguf file, for --to gguf from a model directory" \
    "$HYLA" convert "$T/gg_ckpt" "$T/gg_x.gguf" --to gguf --tokenizer "$T/gg/tokenizer.json"
# GGUF to GGUF re-types the matrices (byte-identical to llama.cpp's quantizer: tests/gguf/conformance.py); a file
# whose matrices are already quantized is not rounded a second time, and no file is left
expect_error "gguf to gguf from quantized matrices" \
    "m.gguf: tensor .* is stored Q8_0: writing it as F16 would round its values" "$HYLA" convert "$T/m.gguf" "$T/m2.gguf" --to gguf --type f16
[ ! -e "$T/m2.gguf" ] || fail "a refused GGUF re-typing left a file behind"
"$HYLA" convert "$T/m.gguf" "$T/m3.gguf" --to gguf --type q8_0 >/dev/null \
    && cmp -s <("$HYLA" forward "$T/m.gguf" --tokens 1,2,3 --json) \
              <("$HYLA" forward "$T/m3.gguf" --tokens 1,2,3 --json) \
    && echo "  ok  GGUF Q8_0 to Q8_0: the same tensors, the same logits" || fail "GGUF to GGUF of the same type"
"$HYLA" convert "$T/m.gguf" "$T/m4.gguf" --to gguf --type f32 >/dev/null \
    && "$HYLA" convert "$T/m4.gguf" "$T/m4_dequant" >/dev/null \
    && cmp -s "$T/m_dequant/model.safetensors" "$T/m4_dequant/model.safetensors" \
    && echo "  ok  GGUF Q8_0 to F32: the values exactly (its dequantized directory == the Q8_0 file's)" \
    || fail "GGUF Q8_0 to F32"
head -c 4000 "$T/m.gguf" > "$T/trunc.gguf"
expect_error "gguf: truncated in the header" "trunc.gguf: .*cannot fit in 3976 bytes" "$HYLA" forward "$T/trunc.gguf" --tokens 1
head -c $(( $(stat -c %s "$T/m.gguf") / 2 )) "$T/m.gguf" > "$T/half.gguf"
expect_error "gguf: truncated in the data" "half.gguf: tensor .* lie past the end of the file" "$HYLA" forward "$T/half.gguf" --tokens 1
expect_error "gguf: inspect of a truncated file" "half.gguf: tensor .* lie past the end of the file" "$HYLA" inspect "$T/half.gguf"
$PY - "$T/m.gguf" "$T" <<'PYEOF'
import sys
d = open(sys.argv[1], "rb").read()
def put(name, b): open(f"{sys.argv[2]}/{name}.gguf", "wb").write(b)
put("badmagic", b"GGUX" + d[4:])
put("v1", d[:4] + (1).to_bytes(4, "little") + d[8:])
put("hugecount", d[:8] + (1 << 60).to_bytes(8, "little") + d[16:])
i = d.index(b"qwen3next")         # the architecture's value: another name of the same length
put("arch", d[:i] + b"llama3xyz" + d[i + 9:])
j = d.index(b"blk.0.attn_norm.weight") + len(b"blk.0.attn_norm.weight")
put("dims", d[:j + 4] + (77).to_bytes(8, "little") + d[j + 12:])   # attn_norm's first dimension
PYEOF
expect_error "gguf: bad magic" "badmagic.gguf: not a GGUF file" "$HYLA" forward "$T/badmagic.gguf" --tokens 1
expect_error "gguf: version 1" "v1.gguf: GGUF version 1" "$HYLA" forward "$T/v1.gguf" --tokens 1
expect_error "gguf: lying tensor count" "cannot fit" "$HYLA" forward "$T/hugecount.gguf" --tokens 1
expect_error "gguf: another architecture" "general.architecture is \"llama3xyz\"" "$HYLA" forward "$T/arch.gguf" --tokens 1
expect_error "gguf: a mis-shaped tensor" "tensor blk.0.attn_norm.weight is \[77, 1, 1, 1\]" "$HYLA" forward "$T/dims.gguf" --tokens 1
expect_error "gguf: a token id out of range" "out of range" "$HYLA" forward "$T/m.gguf" --tokens 1,99999

# resume remembers the run's settings; a changed setting is applied with a notice or refused
head -c 4000 data/kjv.txt > "$T/kjv_small.txt"
"$HYLA" train --model "$T/good" --text "$T/kjv_small.txt" --steps 2 --batch 2 --seq 16 --lr 2e-3 --schedule constant \
    --warmup 0 --seed 7 --save "$T/ck_rem" > "$T/rem1.out" || fail "train for the resume-settings test"
"$HYLA" train --resume "$T/ck_rem" --steps 3 > "$T/rem2.out" 2>&1 || fail "resume without repeating the flags"
grep -q "resume: --steps 3 (the checkpoint ran with 2)" "$T/rem2.out" && grep -q "step     3/3 .* lr 2.00e-03" "$T/rem2.out" \
    && echo "  ok  --resume restores lr, schedule and data, and says when --steps changes" \
    || { fail "--resume did not restore the settings"; cat "$T/rem2.out"; }
grep -q "^done: 2 steps (2 this run), 64 tokens" "$T/rem1.out" && echo "  ok  end-of-run summary" || fail "no end-of-run summary"
expect_error "resume with another batch" "--batch 8 differs from the checkpoint's 2" "$HYLA" train --resume "$T/ck_rem" --steps 3 --batch 8
cp "$T/kjv_small.txt" "$T/same_content.txt"
"$HYLA" train --resume "$T/ck_rem" --steps 3 --text "$T/same_content.txt" >/dev/null 2>&1 \
    && echo "  ok  resume accepts the same data under another path (content hash)" || fail "resume refused the same content"
echo "more" >> "$T/same_content.txt"
expect_error "resume on other data" "has other content .* than the data the checkpoint was trained on" "$HYLA" train \
    --resume "$T/ck_rem" --steps 3 --text "$T/same_content.txt"
# eval
"$HYLA" eval "$T/good" --text "$T/kjv_small.txt" --seq 64 --json > "$T/eval.json" && $PY -c "
import json, math; e = json.load(open('$T/eval.json')); assert e['tokens'] == 3999 and abs(e['perplexity'] - math.exp(e['loss'])) < 1e-6 * e['perplexity'], e
print('  ok  eval --json: loss %.4f over %d tokens' % (e['loss'], e['tokens']))" || fail "eval --json"
expect_error "eval --pack with --no-pack" "--pack and --no-pack contradict each other" "$HYLA" eval "$T/good" --text "$T/kjv_small.txt" \
    --pack --no-pack
expect_error "eval with two sources" "give exactly one of --data, --text, --data-jsonl" "$HYLA" eval "$T/good" --text a --data b
expect_error "train --eval-every without data" "--eval-every needs --eval-data" "$HYLA" train --preset tiny-hybrid --eval-every 5
expect_error "train --data-jsonl without tokenizer" "--data-jsonl needs a tokenizer" "$HYLA" train --preset tiny-hybrid --data-jsonl x.jsonl

[ $fails -eq 0 ] || { echo "  $fails CLI test(s) failed"; exit 1; }
