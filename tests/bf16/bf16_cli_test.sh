#!/usr/bin/env bash
# bf16 through the CLI: the precision flags' rules and errors, bf16 inference and mixed-precision
# training end to end. Usage: tests/bf16/bf16_cli_test.sh build/hyla CASES_DIR
set -uo pipefail
. "$(dirname "$0")/../cli_lib.sh" "$1" "$2"
M="$CASES/q35_moe"
TOK=1,5,9,2,7,3,8,4

# --- the rules ------------------------------------------------------------------------------------
expect_error "act dtype f16" "--act-dtype must be f32 or bf16, got 'f16'" "$HYLA" forward "$M" --tokens $TOK --act-dtype f16
expect_error "bf16 weights, f32 activations" "--param-dtype bf16 with --act-dtype f32" "$HYLA" generate "$M" \
    --prompt-tokens $TOK --param-dtype bf16 --act-dtype f32
expect_error "train bf16 master weights" "--param-dtype bf16: training keeps fp32 master weights" "$HYLA" train \
    --preset tiny-hybrid --steps 1 --param-dtype bf16
expect_error "train bf16 moments" "--opt-dtype bf16: training keeps fp32" "$HYLA" train --preset tiny-hybrid --steps 1 --opt-dtype bf16
expect_error "train grad dtype typo" "--grad-dtype must be f32 or bf16, got 'q8'" "$HYLA" train --preset tiny-hybrid --grad-dtype q8
expect_error "plan act dtype f16" "--act-dtype must be f32 or bf16" "$HYLA" plan "$M" --act-dtype f16
expect_error "eval bad dtype" "--param-dtype must be f32 or bf16" "$HYLA" eval "$M" --text /dev/null --param-dtype int8
expect_error "dtype flag on convert" "--act-dtype" "$HYLA" convert "$M" "$T/conv" --act-dtype bf16
expect_error "dtype flag on tokenize" "--param-dtype" "$HYLA" tokenize --tokenizer x.json --text hi --param-dtype bf16

# a value bf16 cannot hold (3.40e38: above bf16's largest, 3.39e38, by more than half its spacing) in an F32 model
HUGE=model.layers.0.mlp.down_proj.weight
cp -r "$CASES/all_linear" "$T/huge"
$PY - "$T/huge/model.safetensors" "$HUGE" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
t = h[sys.argv[2]]; assert t['dtype'] == 'F32'
struct.pack_into('<f', b, 8 + n + t['data_offsets'][0] + 4 * 5, 3.40e38)
open(p, 'wb').write(b)
PY
expect_error "bf16 overflow at load" "tensor '$HUGE' element 5 .* does not fit in bf16" \
    "$HYLA" forward "$T/huge" --tokens $TOK --param-dtype bf16
"$HYLA" forward "$T/huge" --tokens $TOK >/dev/null 2>&1 && echo "  ok  the same model loads in fp32" || fail "fp32 load of the huge model"

# --- inference ----------------------------------------------------------------------------------------
a=$("$HYLA" forward "$M" --tokens $TOK --param-dtype bf16 --json | grep '"loss"')
b=$("$HYLA" forward "$M" --tokens $TOK --act-dtype bf16 --json | grep '"loss"')
c=$("$HYLA" forward "$M" --tokens $TOK --json | grep '"loss"')
[ -n "$a" ] && [ "$a" = "$b" ] && echo "  ok  forward: bf16 weights == bf16 compute over fp32 weights ($a)" || fail "bf16 weights vs compute copy: $a / $b"
[ "$a" != "$c" ] && echo "  ok  forward: bf16 differs from fp32 ($c)" || fail "bf16 forward equals fp32: was bf16 used?"
"$HYLA" convert "$M" "$T/m16" --dtype bf16 >/dev/null || fail "convert --dtype bf16"
d=$("$HYLA" forward "$T/m16" --tokens $TOK --param-dtype bf16 --json | grep '"loss"')
e=$("$HYLA" forward "$T/m16" --tokens $TOK --act-dtype bf16 --json | grep '"loss"')
[ -n "$d" ] && [ "$d" = "$e" ] && echo "  ok  a BF16-stored model runs as stored == widened to fp32 and copied ($d)" \
    || fail "BF16-stored model: $d vs $e"
"$HYLA" generate "$T/m16" --prompt-tokens $TOK --max-new 4 --param-dtype bf16 >/dev/null 2>&1 \
    && echo "  ok  generate --param-dtype bf16" || fail "generate --param-dtype bf16"

# --- mixed-precision training: runs, saves the source dtype, resumes in bf16 ---------------------------
"$HYLA" train --model "$T/m16" --synthetic --steps 2 --batch 2 --seq 16 --act-dtype bf16 --save "$T/ck" >"$T/tr.out" 2>&1 \
    || { fail "train --act-dtype bf16"; cat "$T/tr.out"; }
grep -q '"torch_dtype":[[:space:]]*"bfloat16"' "$T/ck/config.json" \
    && echo "  ok  a bf16-stored model trained in bf16 saves BF16 (config says bfloat16)" || fail "checkpoint dtype"
grep -q '"act-dtype":[[:space:]]*"bf16"' "$T/ck/trainer_state.json" \
    && echo "  ok  trainer_state.json records --act-dtype bf16" || fail "act dtype not recorded"
"$HYLA" train --resume "$T/ck" --steps 3 --save "$T/ck3" >"$T/res.out" 2>&1 && grep -q "^done: 3 steps (1 this run)" "$T/res.out" \
    && echo "  ok  resume continues in bf16" || { fail "resume of a bf16 run"; cat "$T/res.out"; }
# 3 straight steps == 2 + resume + 1, bit for bit (the fp32 master weights travel in optimizer/)
"$HYLA" train --model "$T/m16" --synthetic --steps 3 --batch 2 --seq 16 --act-dtype bf16 --save "$T/ck3s" >/dev/null 2>&1 \
    || fail "3 straight bf16 steps"
cmp -s "$T/ck3/model.safetensors" "$T/ck3s/model.safetensors" && cmp -s "$T/ck3/optimizer/model.safetensors" \
    "$T/ck3s/optimizer/model.safetensors" && echo "  ok  bf16 resume bit-identical to a straight run (model, moments, masters)" \
    || fail "bf16 resume differs from a straight run"

[ $fails -eq 0 ] || { echo "  $fails bf16 CLI test(s) failed"; exit 1; }
