#!/usr/bin/env bash
# Hostile and careless input, one reproducer per defect class of the hardening issue: each must
# give ONE clear error line and a non-zero exit (never a crash, hang or huge allocation), and
# nothing a user owns may be deleted or overwritten. Ends with the kill -9 test: random kill
# points while checkpointing every step, resumed until done, bit-identical to an uninterrupted
# run, no stale temporaries left. usage: tests/hardening_test.sh HYLA_BINARY CASES_DIR
set -uo pipefail
. "$(dirname "$0")/cli_lib.sh" "$@"
TRAIN0=(train --preset tiny-hybrid --batch 2 --seq 16)
TRAIN=("${TRAIN0[@]}" --synthetic)

# --- 1. output directories: only hyla's own are replaced ------------------------------------------
mkdir -p "$T/notes" && echo "my notes" > "$T/notes/todo.txt"
expect_error "--save over a user's folder" "notes: exists and is not a directory hyla wrote" "$HYLA" "${TRAIN[@]}" --steps 1 --save "$T/notes"
grep -q "^step" "$T/out" && fail "--save over a user's folder: refused only after training"
expect_error "init over a user's folder" "notes: exists and is not a directory hyla wrote" "$HYLA" init --preset tiny-hybrid --out "$T/notes"
"$HYLA" init --preset tiny-hybrid --out "$T/model" >/dev/null || fail "init"
expect_error "convert into a user's folder" "notes: exists and is not a directory hyla wrote" "$HYLA" convert "$T/model" "$T/notes"
[ "$(cat "$T/notes/todo.txt" 2>/dev/null)" = "my notes" ] && [ "$(ls -A "$T/notes")" = "todo.txt" ] \
    || fail "a refused write changed the user's folder"
echo "data" > "$T/afile"
ln -s "$T/afile" "$T/afile_link"
"$HYLA" forward "$T/model" --tokens 1,2 --logits-out "$T/afile_link" >/dev/null && [ -L "$T/afile_link" ] \
    && [ "$(stat -c %s "$T/afile")" -gt 5 ] || fail "--logits-out through a symlink replaced the link, not its target"
echo "data" > "$T/afile"
expect_error "--save over a file" "afile: exists and is not a directory" "$HYLA" "${TRAIN[@]}" --steps 1 --save "$T/afile"
ln -s "$T/model" "$T/link"
expect_error "--save over a symlink" "link: is a symbolic link" "$HYLA" "${TRAIN[@]}" --steps 1 --save "$T/link"
expect_error "--save over a hyla model" "model: is a hyla model, not a checkpoint" "$HYLA" "${TRAIN[@]}" --steps 1 --save "$T/model"
"$HYLA" "${TRAIN[@]}" --steps 1 --save "$T/ck" >/dev/null || fail "train --save"
expect_error "init over a checkpoint" "ck: is a hyla checkpoint, not a model" "$HYLA" init --preset tiny-hybrid --out "$T/ck"
mkdir "$T/empty" && "$HYLA" init --preset tiny-hybrid --out "$T/empty" >/dev/null && [ -f "$T/empty/config.json" ] \
    || fail "init into an empty directory"
# stale temporaries of dead runs (marker or empty) go at the next save; a live pid's and a
# directory that is not hyla's stay
mkdir -p "$T/ck.tmp.999999" "$T/ck.tmp.999998" "$T/ck.tmp.999997" "$T/ck.tmp.1"
touch "$T/ck.tmp.999999/hyla-output.json"; echo "mine" > "$T/ck.tmp.999997/keep.txt"
"$HYLA" "${TRAIN[@]}" --steps 1 --save "$T/ck" >/dev/null || fail "train --save over a checkpoint"
[ ! -e "$T/ck.tmp.999999" ] && [ ! -e "$T/ck.tmp.999998" ] || fail "stale temporaries not cleaned by the next save"
[ -f "$T/ck.tmp.999997/keep.txt" ] && [ -d "$T/ck.tmp.1" ] || fail "a temporary that is not a dead hyla run's was removed"
echo "  ok  output directories: user folders, files, symlinks and other kinds refused; stale temporaries cleaned"

# --- 2. sizes that overflow -------------------------------------------------------------------------
"$HYLA" generate "$T/model" --prompt-tokens 1,2,3 --max-new 4 --record-routing "$T/route.bin" >/dev/null 2>&1 || fail "record routing"
$PY - "$T/route.bin" "$T/route_wrap.bin" <<'PYEOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
layers, k = struct.unpack_from("<II", b, 8)
# rows such that layers * rows * k * 4 wraps 2^64 to the bytes actually present
present = len(b) - 24
rows = (2**64 + present) // (4 * layers * k)
struct.pack_into("<Q", b, 16, rows)
open(sys.argv[2], "wb").write(b)
PYEOF
expect_error "routing rows that wrap" "route_wrap.bin: header says [0-9]+ rows" "$HYLA" train --model "$T/model" --synthetic \
    --batch 1 --seq 2 --steps 1 --replay-routing "$T/route_wrap.bin"
expect_error "--steps that wrap the replay rows" "more than 2\^63 rows" "$HYLA" train --model "$T/model" --synthetic \
    --batch 1 --seq 2 --steps 4611686018427387904 --accum 4 --replay-routing "$T/route.bin"
$PY - "$T/model/config.json" "$T" <<'PYEOF'
import json, os, sys
c = json.load(open(sys.argv[1]))
def put(name, **edits):
    d = os.path.join(sys.argv[2], name); os.makedirs(d, exist_ok=True)
    text = json.dumps(dict(c, **edits)).replace("Infinity", "1e999")  # JSON has no infinity; 1e999 parses as one
    open(os.path.join(d, "config.json"), "w").write(text)
put("cfg_1e7_experts", num_experts=10**7)
put("cfg_2p31_experts", num_experts=2**31)
put("cfg_overflow", hidden_size=2**40, intermediate_size=2**40, vocab_size=2**40)
put("cfg_zero_heads", num_attention_heads=0)
put("cfg_neg_layers", num_hidden_layers=-4)
put("cfg_inf_theta", rope_parameters={"rope_type": "default", "rope_theta": 1e999})
PYEOF
expect_error "10^7 experts" "num_experts' = 10000000 exceeds hyla's limit of 1024" "$HYLA" inspect "$T/cfg_1e7_experts/config.json"
expect_error "2^31 experts" "num_experts' = 2147483648 exceeds" "$HYLA" plan "$T/cfg_2p31_experts/config.json"
expect_error "sizes past 2^63" "vocab_size' = 1099511627776 exceeds" "$HYLA" inspect "$T/cfg_overflow/config.json"
expect_error "zero heads" "num_attention_heads' = 0 must be >= 1" "$HYLA" inspect "$T/cfg_zero_heads/config.json"
expect_error "negative layers" "num_hidden_layers' = -4 must be >= 1" "$HYLA" inspect "$T/cfg_neg_layers/config.json"
expect_error "infinite rope_theta" "rope_theta' must be a positive number" "$HYLA" inspect "$T/cfg_inf_theta/config.json"
# hyla plan at absurd token counts allocates nothing per token (it used 3.1 GB here): peak RSS
# of the child well under what 256M tokens of positions and labels alone would take (3 GB)
$PY - "$HYLA" "$T/plan.out" <<'PYEOF' || fail "plan at 256 x 1M tokens"
import resource, subprocess, sys
with open(sys.argv[2], "w") as out:
    rc = subprocess.run([sys.argv[1], "plan", "configs/qwen3-next-80b-a3b.json", "--batch", "256", "--seq", "1000000"],
                        stdout=out, stderr=subprocess.STDOUT).returncode
peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
assert rc == 0, "plan exited %d" % rc
assert peak_mb < 400, "plan at 256 x 1M tokens peaked at %.0f MB" % peak_mb
print("  ok  plan at 256 x 1M tokens: peak RSS %.0f MB" % peak_mb)
PYEOF
expect_error "plan past 2^32 tokens" "more than 2\^32 tokens per micro-batch" "$HYLA" plan configs/qwen3-next-80b-a3b.json \
    --batch 1048576 --seq 16777216
expect_error "train past 2^31 routed slots" "routed slots per micro-batch" "$HYLA" train --preset tiny-hybrid --synthetic \
    --batch 1048576 --seq 4096 --steps 1

# --- 3. regex denial of service ---------------------------------------------------------------------
QWEN_TOK=tests/tokenizer/qwen3/tokenizer.json
[ -f "$QWEN_TOK" ] || gunzip -c "$QWEN_TOK.gz" > "$QWEN_TOK"
evil_tokenizer() { # PATTERN OUT: the real Qwen tokenizer with its Split pattern replaced
    $PY - "$QWEN_TOK" "$1" "$2" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
def swap(o):
    if isinstance(o, dict):
        if o.get("type") == "Split":
            o["pattern"]["Regex"] = sys.argv[2]; return True
        return any(swap(v) for v in o.values())
    return isinstance(o, list) and any(swap(v) for v in o)
assert swap(j["pre_tokenizer"])
json.dump(j, open(sys.argv[3], "w"))
PYEOF
}
$PY -c 'print("a" * 1500 + "!", end="")' > "$T/aaaa.txt"
evil_tokenizer '(a|aa)+b|.' "$T/evil_exp.json"
expect_error "exponential backtracking" "regex '\(a\|aa\)\+b\|\.' failed at input byte 0: match limit exceeded" \
    timeout 30 "$HYLA" tokenize --tokenizer "$T/evil_exp.json" --file "$T/aaaa.txt"
evil_tokenizer '(?:a|aa){1,22}b|.' "$T/evil_bounded.json"   # each match just under PCRE2's default limit
expect_error "backtracking at every position" "evil_bounded.json: pre-tokenizer regex" \
    timeout 30 "$HYLA" tokenize --tokenizer "$T/evil_bounded.json" --file "$T/aaaa.txt"
$PY -c 'print("a" * 300000, end="")' > "$T/aaaa_long.txt"
evil_tokenizer '.(?=.*z)|.' "$T/evil_scan.json"             # a lookahead over the rest of the run, per match
expect_error "quadratic lookahead" "evil_scan.json: pre-tokenizer regex '.*' takes over [0-9]+ s" \
    timeout 60 "$HYLA" tokenize --tokenizer "$T/evil_scan.json" --file "$T/aaaa_long.txt"

# --- 4. non-regular files -------------------------------------------------------------------------
mkdir -p "$T/fifo_model" && cp "$T/model/model.safetensors" "$T/fifo_model/" && mkfifo "$T/fifo_model/config.json"
expect_error "config.json is a FIFO" "config.json: not a regular file" timeout 20 "$HYLA" inspect "$T/fifo_model"
mkfifo "$T/fifo_data"
expect_error "--data is a FIFO" "fifo_data: not a regular file" timeout 20 "$HYLA" "${TRAIN0[@]}" --steps 1 --data "$T/fifo_data"
expect_error "--text is a directory" "notes: not a regular file" timeout 20 "$HYLA" "${TRAIN0[@]}" --steps 1 --text "$T/notes"
cp -r "$T/model" "$T/fifo_st" && rm "$T/fifo_st/model.safetensors" && mkfifo "$T/fifo_st/model.safetensors"
expect_error "safetensors is a FIFO" "model.safetensors: not a regular file" timeout 20 "$HYLA" forward "$T/fifo_st" --tokens 1,2

# --- 5. non-finite numbers ------------------------------------------------------------------------
poison() { # DIR TENSOR VALUE: set element 0 of an F32 tensor
    $PY - "$1/model.safetensors" "$2" "$3" <<'PYEOF'
import json, struct, sys
path, name, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
b = bytearray(open(path, "rb").read())
n = struct.unpack_from("<Q", b, 0)[0]
h = json.loads(b[8:8 + n])
assert h[name]["dtype"] == "F32", h[name]
struct.pack_into("<f", b, 8 + n + h[name]["data_offsets"][0], value)
open(path, "wb").write(b)
PYEOF
}
cp -r "$T/model" "$T/nan_router" && poison "$T/nan_router" model.layers.0.mlp.gate.weight nan
expect_error "NaN router weights" "tensor 'model.layers.0.mlp.gate.weight' holds a non-finite value \(NaN\)" \
    "$HYLA" forward "$T/nan_router" --tokens 1,2,3
cp -r "$T/model" "$T/inf_embed" && poison "$T/inf_embed" model.embed_tokens.weight inf
expect_error "infinite embeddings (train)" "model.embed_tokens.weight' holds a non-finite value \(infinity\)" \
    "$HYLA" train --model "$T/inf_embed" --synthetic --batch 2 --seq 16 --steps 1
state_case() { # NAME PATTERN PYTHON-EDIT (on dict s)
    rm -rf "$T/ck_$1"; cp -r "$T/ck" "$T/ck_$1"
    $PY - "$T/ck_$1/trainer_state.json" "$3" <<'PYEOF'
import json, sys
s = json.load(open(sys.argv[1])); exec(sys.argv[2]); open(sys.argv[1], "w").write(json.dumps(s))
PYEOF
    expect_error "trainer_state: $1" "$2" "$HYLA" train --resume "$T/ck_$1" --synthetic --batch 2 --seq 16 --steps 9
}
state_case "optimizer_step 1e300" "'optimizer_step' must be an integer in \[0, step\]" "s['optimizer_step'] = 1e300"
state_case "step 1e19" "'step' must be an integer in \[0, 2\^53\]" "s['step'] = 1e19"
state_case "negative data_pos" "'data_pos' must be an integer" "s['data_pos'] = -5"
state_case "seed not a number" "'seed' must be a decimal integer" "s['seed'] = '12abc'"
expect_error "diverging run" "step 2: the loss is NaN; the update was not applied" "$HYLA" "${TRAIN[@]}" --steps 4 \
    --lr 1e30 --save "$T/ck_nan"
[ ! -e "$T/ck_nan" ] || fail "a run that diverged still wrote a checkpoint"
expect_error "diverging run, per-layer updates" "step 2: non-finite gradient \(NaN or infinity\) in layers\.[0-9]+\." \
    "$HYLA" "${TRAIN[@]}" --steps 4 --lr 1e30 --clip 0 --update-per-layer

# --- 6. failed writes ---------------------------------------------------------------------------------
if [ -w /dev/full ]; then
    expect_error "--log-json on a full disk" "/dev/full: write failed at step 1" "$HYLA" "${TRAIN[@]}" --steps 2 --log-json /dev/full
    "$HYLA" inspect "$T/model" >/dev/full 2>"$T/err"; rc=$?
    [ $rc -ne 0 ] && grep -q "standard output: write failed" "$T/err" || fail "stdout on a full disk: rc $rc"
    expect_error "--logits-out on a full disk" "/dev/full: write failed" "$HYLA" forward "$T/model" --tokens 1,2 --logits-out /dev/full
    [ -c /dev/full ] || fail "writing to /dev/full replaced the device node"
fi

# --- 7. no file contents in messages ------------------------------------------------------------------
"$HYLA" convert "$T/model" "$T/sharded" --shard-mb 1 >/dev/null || fail "convert --shard-mb"
printf 'SECRETS!the rest of a private file' > "$T/private.txt"
shard=$(ls "$T/sharded" | grep -m1 'model-0.*safetensors')
rm "$T/sharded/$shard" && ln -s "$T/private.txt" "$T/sharded/$shard"
secret_number=$($PY -c 'import struct; print(struct.unpack("<Q", b"SECRETS!")[0])')
expect_error "shard symlink to a private file" "$shard.*not a safetensors file" "$HYLA" forward "$T/sharded" --tokens 1,2
grep -qE "SECRET|$secret_number" "$T/err" && fail "the error message shows the linked file's bytes"

# --- kill -9 while checkpointing every step: resume until done, bit-identical ----------------------
STEPS=30
"$HYLA" "${TRAIN[@]}" --steps $STEPS --save "$T/ref" --save-every 1 >/dev/null 2>&1 || fail "uninterrupted run"
seed=${HYLA_KILL_SEED:-$RANDOM}
RANDOM=$seed
kills=0
for attempt in $(seq 1 40); do
    if [ -d "$T/run" ]; then args=(train --resume "$T/run" --synthetic --batch 2 --seq 16); else args=("${TRAIN[@]}"); fi
    if [ $attempt -eq 40 ]; then "$HYLA" "${args[@]}" --steps $STEPS --save "$T/run" --save-every 1 >/dev/null 2>&1; break; fi
    "$HYLA" "${args[@]}" --steps $STEPS --save "$T/run" --save-every 1 >"$T/kill.out" 2>&1 & pid=$!
    sleep "0.$(printf '%03d' $((RANDOM % 700 + 50)))"
    if kill -9 $pid 2>/dev/null; then kills=$((kills + 1)); wait $pid 2>/dev/null; else wait $pid; break; fi
    if [ -d "$T/run" ]; then # whatever instant it died at, the checkpoint is a complete one
        $PY -c "import json,sys; json.load(open(sys.argv[1]))['step']" "$T/run/trainer_state.json" 2>/dev/null \
            || fail "kill -9 (attempt $attempt): the checkpoint is incomplete"
    fi
done
step=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$T/run/trainer_state.json" 2>/dev/null)
[ "$step" = "$STEPS" ] || fail "kill -9: the resumed run did not finish (step $step)"
for f in model.safetensors optimizer/model.safetensors trainer_state.json; do
    cmp -s "$T/ref/$f" "$T/run/$f" || fail "kill -9 (seed $seed): $f differs from the uninterrupted run's"
done
stale=$(ls -d "$T"/run.tmp.* 2>/dev/null | wc -l)
[ "$stale" -eq 0 ] || fail "kill -9: $stale stale temporaries left after the last save"
echo "  ok  kill -9 x $kills at random points (seed $seed), resumed: bit-identical to the uninterrupted run, no temporaries left"

if [ $fails -ne 0 ]; then
    echo "  $fails hardening test(s) failed"
    exit 1
fi
