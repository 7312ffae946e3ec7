#!/usr/bin/env bash
# LoRA adapters (PEFT format) against the real libraries, through committed golden files
# (tests/peft/make_golden.py: transformers' own Qwen3-Next / Qwen3.5 classes + the PEFT library).
#   - hyla forward --adapter == the PEFT model's logits (adapter unmerged: W x + s B (A x));
#   - hyla forward without it == the base model's logits (the golden base is read correctly);
#   - hyla merge, then forward == forward --adapter, and the merged directory carries the base's
#     other files (generation_config.json) byte for byte;
#   - bad adapters: another model's, another rank, rank patterns, a lone lora_A, a bad config.
# Tolerance 2^-14 of the logit scale: both sides compute in fp32 with different summation orders
# (a dot product of K <= 128 terms carries ~sqrt(K) 2^-24 ~ 7e-7 relative, 4 layers, a few
# matmuls each); measured 2e-6 to 6e-6 of logits up to 0.7, so the bound leaves ~10x.
# usage: tests/peft/peft_test.sh [HYLA]
set -uo pipefail
cd "$(dirname "$0")/../.."
G=tests/peft/golden
. tests/cli_lib.sh "${1:-build/hyla}" ""   # HYLA, PY, T (scratch), fail, expect_error
for a in qwen3_next qwen3_5; do
    toks=$($PY -c "import json;print(','.join(map(str,json.load(open('$G/$a/golden.json'))['tokens'])))")
    "$HYLA" forward "$G/$a/base" --tokens "$toks" --adapter "$G/$a/adapter" --logits-out "$T/adapter.f32" >/dev/null &&
    "$HYLA" forward "$G/$a/base" --tokens "$toks" --logits-out "$T/base.f32" >/dev/null &&
    "$HYLA" merge "$G/$a/base" --adapter "$G/$a/adapter" --out "$T/merged_$a" >/dev/null &&
    "$HYLA" forward "$T/merged_$a" --tokens "$toks" --logits-out "$T/merged.f32" >/dev/null || { fail "$a: hyla failed"; continue; }
    $PY - "$G/$a" "$T" "$a" <<'PYEOF' || fail "$a: logits"
import json, sys
import numpy as np
g, t, name = sys.argv[1:4]
load = lambda p: np.fromfile(p, np.float32)
peft, base = load(g + "/logits_adapter.f32"), load(g + "/logits_base.f32")
ad, hb, mg = load(t + "/adapter.f32"), load(t + "/base.f32"), load(t + "/merged.f32")
scale = max(1.0, float(np.abs(peft).max()))
bound = scale * 2.0 ** -14
d_ad, d_base, d_merge, effect = (float(np.abs(x - y).max()) for x, y in ((ad, peft), (hb, base), (mg, ad), (peft, base)))
ok = d_ad <= bound and d_base <= bound and d_merge <= bound and effect > 100 * bound
print(f"  {'ok' if ok else 'FAIL'}  {name}: --adapter vs PEFT {d_ad:.2g}, base vs transformers {d_base:.2g}, merged vs "
      f"--adapter {d_merge:.2g} (bound {bound:.2g}; the adapter moves logits by {effect:.2g})")
sys.exit(0 if ok else 1)
PYEOF
    cmp -s "$G/$a/base/generation_config.json" "$T/merged_$a/generation_config.json" \
        && echo "  ok  $a: merge carries generation_config.json byte for byte" || fail "$a: merge dropped a file"
done
# adapters WRITTEN by hyla (tests/peft/make_trained_golden.py: PEFT loaded them into transformers' classes with
# no missing or unexpected key and every tensor equal; trained/logits_trained.f32 is that PEFT model's output)
for a in qwen3_next qwen3_5; do
    toks=$($PY -c "import json;print(','.join(map(str,json.load(open('$G/$a/golden.json'))['tokens'])))")
    "$HYLA" forward "$G/$a/base" --tokens "$toks" --adapter "$G/$a/trained/adapter" --logits-out "$T/trained.f32" >/dev/null ||
        { fail "$a: forward with hyla's adapter"; continue; }
    cmd=$($PY -c "import json;c=json.load(open('$G/$a/trained/golden.json'))['command'];print(' '.join(c[4:-2]))")
    rm -rf "$T/fresh_$a"
    "$HYLA" train --model "$G/$a/base" $cmd --save "$T/fresh_$a" >/dev/null || { fail "$a: hyla train --lora-rank"; continue; }
    $PY - "$G/$a" "$T" "$a" <<'PYEOF' || fail "$a: hyla-written adapter"
import json, struct, sys
import numpy as np
g, t, name = sys.argv[1:4]
peft = np.fromfile(g + "/trained/logits_trained.f32", np.float32)
mine = np.fromfile(t + "/trained.f32", np.float32)
bound = max(1.0, float(np.abs(peft).max())) * 2.0 ** -14   # as above: fp32 on both sides, other summation orders
d = float(np.abs(mine - peft).max())
effect = float(np.abs(peft - np.fromfile(g + "/logits_base.f32", np.float32)).max())  # the trained adapter matters
def header(p):
    b = open(p, "rb").read()
    h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
    return {k: (v["dtype"], v["shape"]) for k, v in h.items() if k != "__metadata__"}
keys = lambda c: {k: c[k] for k in ("peft_type", "r", "lora_alpha", "target_modules", "use_rslora", "bias")}
same_tensors = header(g + "/trained/adapter/adapter_model.safetensors") == header(t + f"/fresh_{name}/adapter_model.safetensors")
same_config = keys(json.load(open(g + "/trained/adapter/adapter_config.json"))) == keys(json.load(open(t + f"/fresh_{name}/adapter_config.json")))
ok = d <= bound and effect > 100 * bound and same_tensors and same_config
print(f"  {'ok' if ok else 'FAIL'}  {name}: hyla-written adapter (PEFT loads it: golden) forward vs PEFT {d:.2g} (bound {bound:.2g}; "
      f"it moves logits by {effect:.2g}); "
      f"a fresh run writes the same tensor names/shapes: {same_tensors}, the same config: {same_config}")
sys.exit(0 if ok else 1)
PYEOF
done
# bad adapters
expect_error "another model's adapter" "module 'model.layers.0.linear_attn.in_proj_a' is not in this model \(an adapter for another model" \
    "$HYLA" forward "$G/qwen3_next/base" --tokens 1,2 --adapter "$G/qwen3_5/adapter"
expect_error "serve with another model's adapter" "is not in this model \(an adapter for another model" \
    "$HYLA" serve "$G/qwen3_next/base" --port 0 --adapter "$G/qwen3_5/adapter"
mkdir -p "$T/rank8" "$T/pattern" "$T/lone" "$T/notlora"
cp "$G/qwen3_5/adapter/adapter_model.safetensors" "$T/rank8/"
$PY -c "import json;c=json.load(open('$G/qwen3_5/adapter/adapter_config.json'));c['r']=8;json.dump(c,open('$T/rank8/adapter_config.json','w'))"
expect_error "an adapter of another rank" "must be \[8, 64\] \(r, in_features of" "$HYLA" forward "$G/qwen3_5/base" --tokens 1,2 --adapter "$T/rank8"
cp "$G/qwen3_5/adapter/adapter_model.safetensors" "$T/pattern/"
$PY -c "import json;c=json.load(open('$G/qwen3_5/adapter/adapter_config.json'));c['rank_pattern']={'.*q_proj':8};json.dump(c,open('$T/pattern/adapter_config.json','w'))"
expect_error "rank patterns" "'rank_pattern' is not supported" "$HYLA" eval "$G/qwen3_5/base" --text README.md --adapter "$T/pattern"
$PY - "$G/qwen3_5/adapter" "$T/lone" <<'PYEOF'
import json, shutil, struct, sys
src, dst = sys.argv[1:3]
b = open(src + "/adapter_model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
drop = sorted(k for k in h if k.endswith("lora_B.weight"))[0]
keep = {k: v for k, v in h.items() if k != drop and k != "__metadata__"}
data, off, out = b[8 + n:], 0, {}
blob = b""
for k, v in keep.items():
    s, e = v["data_offsets"]
    out[k] = dict(v, data_offsets=[len(blob), len(blob) + e - s])
    blob += data[s:e]
hdr = json.dumps(out).encode()
open(dst + "/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(hdr)) + hdr + blob)
shutil.copy(src + "/adapter_config.json", dst)
PYEOF
expect_error "a lora_A without its lora_B" "has no matching '.*lora_B.weight'" "$HYLA" generate "$G/qwen3_5/base" --prompt-tokens 1 --adapter "$T/lone"
cp "$G/qwen3_5/adapter/adapter_model.safetensors" "$T/notlora/"
echo '{"peft_type": "IA3", "r": 4}' > "$T/notlora/adapter_config.json"
expect_error "not a LoRA adapter" "peft_type must be \"LORA\"" "$HYLA" merge "$G/qwen3_5/base" --adapter "$T/notlora" --out "$T/x"
[ ! -e "$T/x" ] || fail "a refused merge left a directory"
[ "$fails" -eq 0 ] || { echo "  $fails adapter test(s) failed"; exit 1; }
