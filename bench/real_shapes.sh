#!/usr/bin/env bash
# hyla beside the real peers on the shapes people run, in one run, alternating engines (issue 21):
#   - Qwen3.5-0.8B (configs/qwen3.5-0.8b.json: vocab 248,320 tied, head_dim 256, 16 x 128 GDN heads;
#     random BF16 weights): prefill of PREFILL_SEQS tokens and 32 greedy decode steps — hyla fp32 and
#     bf16 (--param-dtype bf16), transformers fp32 and bf16 (logits_to_keep=1, its cache), llama.cpp
#     (llama-cpp-python) on BF16 and Q8_0 GGUF files written by `hyla convert`; every length
#     twice, the engines alternating, then hyla bf16 and llama.cpp twice more (see there), every
#     engine's best kept;
#   - a Qwen3-Next-80B-shaped model cut to 4 layers and 64 experts (hidden 2048, head_dim 256, 16 k /
#     32 v GDN heads of 128; bench/configs/qwen3-next-80b-cut.json): prefill 512 + decode, hyla bf16 vs
#     llama.cpp BF16;
#   - training, fp32, 1 x 512: a Qwen3-Next-shaped 0.6B MoE (bench/configs/qwen3-next-0.6b-moe.json:
#     hidden 1024, 8 layers, 32 experts top-4 + shared expert) — hyla (no remat, and full remat)
#     against transformers eager and torch.compile; its per-op profile and whole-step GEMM share of
#     the same-run FMA peak;
#   - LoRA r16 all-linear, 1 x 512, on the 0.8B shape — hyla (fp32 base, and the frozen base bf16 only:
#     its peak RSS against the plan; no remat, as PEFT; and hyla train's default full remat) against
#     transformers + PEFT (fp32 base, and a bf16 base with fp32 adapters).
# Training and LoRA run two rounds, each hyla run next to its peer's, every engine's best round kept
# (all rounds are in the JSON's "runs").
# The peaks (FMA, vdpbf16ps: build/bench/gemm_bench --peaks; DRAM read: infer_bench) come from the
# same run. The transformers peer is a multi-GB install made on demand by bench/hf_peer.sh (into
# ~/.cache/hyla-hf-peer, said on stderr); without it, or without llama-cpp-python in .venv
# (scripts/pydeps.sh), those columns are null. Models go to build/bench-models/ (about 9 GB with the
# GGUF files; made once). Writes OUT (JSON) and prints it. Not part of ./test.sh: 25-50 minutes.
# usage: bench/real_shapes.sh [THREADS=2] [PREFILL_SEQS="512 4096"] [OUT=build/bench-real-shapes.json]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; SEQS=${2:-512 4096}; OUT=${3:-build/bench-real-shapes.json}
NEW=32
make -j"$(nproc)" build/hyla build/bench/infer_bench build/bench/train_bench build/bench/lora_bench \
    build/bench/gemm_bench >/dev/null
export OMP_NUM_THREADS=$THREADS
D=build/bench-models
mkdir -p "$D"
R=$(mktemp -d)
trap '[ -f "$OUT.done" ] && rm -rf "$R" "$OUT.done" || echo "real_shapes: the runs are kept in $R" >&2' EXIT

model() { # DIR CONFIG DTYPE: a random-init checkpoint (seed 5) with a Qwen-style tokenizer
    [ -f "$1/model.safetensors" ] || {
        rm -rf "$1"
        echo "real_shapes: writing $1 (hyla init --config $2 --dtype $3)" >&2
        ./build/hyla init --config "$2" --dtype "$3" --seed 5 --out "$1" >/dev/null
        /usr/bin/python3 tests/data/make_qwen_tokenizer.py "$1" >/dev/null
    }
}
Q=$D/qwen3.5-0.8b.bf16
X=$D/qwen3-next-80b-cut.bf16
M=$D/qwen3-next-0.6b-moe
model "$Q" configs/qwen3.5-0.8b.json bf16
model "$X" bench/configs/qwen3-next-80b-cut.json bf16
model "$M" bench/configs/qwen3-next-0.6b-moe.json f32

LLAMA=""
if [ -x .venv/bin/python ] && .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    LLAMA=.venv/bin/python
    for f in "$Q:bf16" "$Q:q8_0" "$X:bf16"; do
        dir=${f%%:*} t=${f##*:}
        [ -f "$dir.$t.gguf" ] || ./build/hyla convert "$dir" "$dir.$t.gguf" --to gguf --type "$t" >/dev/null
    done
else
    echo "real_shapes: llama.cpp peer SKIPPED (no llama-cpp-python in .venv; scripts/pydeps.sh)" >&2
fi
HF=$(bench/hf_peer.sh) || HF=""

# run NAME CMD...: append the command's last output line (one JSON object) to $R/NAME.jsonl
run() {
    local name=$1
    shift
    echo "real_shapes: $name" >&2
    "$@" 2>>"$R/stderr" | tail -1 >>"$R/$name.jsonl" || echo "real_shapes: $name failed" >&2
}

# bf16_round T: hyla bf16 and llama.cpp (BF16, Q8_0) on a T-token prompt, one after another
bf16_round() {
    run "hyla_bf16_$1" ./build/bench/infer_bench "$Q" "$1" $NEW bf16
    if [ -n "$LLAMA" ]; then
        run "llama_bf16_$1" $LLAMA bench/llama_infer.py "$Q.bf16.gguf" "$1" $NEW "$THREADS"
        run "llama_q8_0_$1" $LLAMA bench/llama_infer.py "$Q.q8_0.gguf" "$1" $NEW "$THREADS"
    fi
}

./build/bench/gemm_bench --peaks >"$R/peaks.json"
for T in $SEQS; do
    # two rounds at every length (a 4,096-token round takes a few minutes for all engines): with one,
    # a decode measured in one of the VM's slow memory phases stood against a peer's in a fast one
    for ((i = 0; i < 2; i++)); do
        run "hyla_f32_$T" ./build/bench/infer_bench "$Q" "$T" $NEW f32
        [ -n "$HF" ] && run "transformers_f32_$T" "$HF" bench/hf_infer.py "$Q" "$T" $NEW "$THREADS" f32
        bf16_round "$T"
        [ -n "$HF" ] && [ "$T" -le 1024 ] && run "transformers_bf16_$T" "$HF" bench/hf_infer.py "$Q" "$T" $NEW "$THREADS" bf16
    done
done
# the bf16 engines two rounds more at every length (four in all; a round of each is seconds at 512
# tokens and under a minute at 4,096): hyla's decode reads at the memory's rate, and the VM's rate
# swings between ~50 and ~86 GB/s in phases of seconds to minutes, so with two rounds whether hyla
# met a fast phase was luck; llama.cpp's decode (~45-50 GB/s) moves less with the phase. Every
# engine's best round per figure is compared, as above, and "rounds" says how many each had.
for T in $SEQS; do
    for ((i = 0; i < 2; i++)); do
        bf16_round "$T"
    done
done
run hyla_bf16_80b_cut ./build/bench/infer_bench "$X" 512 $NEW bf16
[ -n "$LLAMA" ] && run llama_bf16_80b_cut $LLAMA bench/llama_infer.py "$X.bf16.gguf" 512 $NEW "$THREADS"

# training and LoRA: two rounds, each engine beside its peer in turn (a shared VM's speed drifts by
# 20-30% within minutes); each figure is the engine's best round, every round is in "runs"
for ((i = 0; i < 2; i++)); do
    run hyla_train ./build/bench/train_bench "$M" 1 512 3 none:layer
    if [ -n "$HF" ]; then
        run transformers_train "$HF" bench/hf_train.py "$M" 1 512 3 "$THREADS" f32
        run transformers_train_compile "$HF" bench/hf_train.py "$M" 1 512 3 "$THREADS" f32 compile
    fi
    # LoRA without remat, as PEFT runs (no gradient checkpointing)
    HYLA_BENCH_POLICY=none run hyla_lora ./build/bench/lora_bench "$Q" 1 512 3 16 lora
    if [ -n "$HF" ]; then run transformers_lora "$HF" bench/hf_lora.py "$Q" 1 512 3 "$THREADS" 16 f32; fi
    HYLA_BENCH_POLICY=none run hyla_lora_bf16base ./build/bench/lora_bench "$Q" 1 512 3 16 lora-bf16base
    if [ -n "$HF" ]; then run transformers_lora_bf16base "$HF" bench/hf_lora.py "$Q" 1 512 3 "$THREADS" 16 bf16; fi
done
run hyla_train_full ./build/bench/train_bench "$M" 1 512 3 full:layer
HYLA_BENCH_POLICY=full run hyla_lora_full_remat ./build/bench/lora_bench "$Q" 1 512 3 16 lora # hyla train's default

/usr/bin/python3 - "$R" "$OUT" "$THREADS" "$SEQS" <<'PY'
import glob, json, os, sys
R, out_path, threads, seqs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
runs = {}
for f in glob.glob(os.path.join(R, "*.jsonl")):
    rows = []
    for line in open(f):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    runs[os.path.basename(f)[:-6]] = rows
peaks = json.load(open(os.path.join(R, "peaks.json")))
fma, bf16_peak = peaks["peak_gflops"], peaks["peak_bf16_gflops"]

def best(name, key):
    vals = [r[key] for r in runs.get(name, []) if key in r]
    return max(vals) if vals else None

def ratio(a, b):
    return a / b if a and b else None

inference = {}
for T in seqs:
    e = {k: {"prefill_tokens_per_s": best(f"{k}_{T}", "prefill_tokens_per_s"),
             "decode_tokens_per_s": best(f"{k}_{T}", "decode_tokens_per_s")}
         for k in ("hyla_f32", "hyla_bf16", "transformers_f32", "transformers_bf16", "llama_bf16", "llama_q8_0")}
    for k in list(e):
        e[k]["rounds"] = len(runs.get(f"{k}_{T}", []))
    p = lambda k: e[k]["prefill_tokens_per_s"]
    d = lambda k: e[k]["decode_tokens_per_s"]
    # the DRAM shares of hyla's best bf16 decode round (each round's are in "runs")
    h = [max(runs.get(f"hyla_bf16_{T}") or [{}], key=lambda r: r.get("decode_tokens_per_s", 0))]
    e["ratios"] = {"prefill_hyla_f32_over_transformers_f32": ratio(p("hyla_f32"), p("transformers_f32")),
                   "prefill_hyla_bf16_over_llama_bf16": ratio(p("hyla_bf16"), p("llama_bf16")),
                   "prefill_hyla_bf16_over_llama_q8_0": ratio(p("hyla_bf16"), p("llama_q8_0")),
                   "decode_hyla_bf16_over_llama_bf16": ratio(d("hyla_bf16"), d("llama_bf16")),
                   "decode_hyla_bf16_over_llama_q8_0": ratio(d("hyla_bf16"), d("llama_q8_0")),
                   "decode_hyla_f32_over_transformers_f32": ratio(d("hyla_f32"), d("transformers_f32"))}
    e["hyla_bf16_decode_pct_of_dram_bw"] = h[-1].get("decode_pct_of_dram_bw")
    e["hyla_bf16_decode_pct_of_best_dram_bw"] = h[-1].get("decode_pct_of_best_dram_bw")
    e["dram_gbs_beside_decode"] = h[-1].get("dram_gbs_beside_decode")
    e["dram_gbs"] = h[-1].get("dram_gbs")
    for k, peak in (("bf16", bf16_peak if peaks.get("bf16_products") == "native" else fma), ("f32", fma)):
        r = (runs.get(f"hyla_{k}_{T}") or [{}])[-1]
        ms, gf = r.get("prefill_profile_ms") or {}, r.get("prefill_gemm_gflop") or {}
        e[f"hyla_{k}_prefill_profile"] = {op: dict({"ms": v}, **({"gflops": round(gf[op] / v * 1e3, 1),
                                                               "pct_of_peak": round(100 * gf[op] / v * 1e3 / peak, 1)}
                                                              if gf.get(op) and v > 0 else {}))
                                          for op, v in sorted(ms.items(), key=lambda kv: -kv[1])}
    inference[T] = e
cut = {"hyla_bf16": (runs.get("hyla_bf16_80b_cut") or [None])[-1], "llama_bf16": (runs.get("llama_bf16_80b_cut") or [None])[-1]}
if cut["hyla_bf16"] and cut["llama_bf16"]:
    cut["ratios"] = {k: cut["hyla_bf16"][k] / cut["llama_bf16"][k] for k in ("prefill_tokens_per_s", "decode_tokens_per_s")}

def op_table(profile, steps, peak, top=None):
    """per op: ms per step, and for ops with GEMM work its GFLOP/s and % of the given peak"""
    rows = {}
    for p in sorted(profile, key=lambda p: -p["seconds"])[:top]:
        row = {"ms": round(1e3 * p["seconds"] / steps, 1)}
        if p.get("gemm_flops", 0) > 0 and p["seconds"] > 0:
            rate = p["gemm_flops"] / p["seconds"] / 1e9
            row.update(gflops=round(rate, 1), pct_of_peak=round(100.0 * rate / peak, 1))
        rows[p["op"]] = row
    return rows

def best_round(name):
    """the round with the most tokens/s (copied: the per-round rows stay as they were in "runs")"""
    rows = [r for r in runs.get(name, []) if "tokens_per_s" in r]
    return dict(max(rows, key=lambda r: r["tokens_per_s"]), rounds=len(rows)) if rows else None

def train_row(name):
    r = best_round(name)
    if r and "gemm_flops_per_step" in r:
        r["gemm_pct_of_fma_peak"] = 100.0 * r["gemm_flops_per_step"] / r["best_step_seconds"] / 1e9 / fma
        r["profile_per_step_vs_fma_peak"] = op_table(r.pop("profile", []), r["steps"], fma)
    return r

tr = {k: train_row(k) for k in ("hyla_train", "hyla_train_full", "transformers_train", "transformers_train_compile")}
tok = lambda k: tr[k]["tokens_per_s"] if tr[k] else None
tr["ratios"] = {"hyla_over_transformers_eager": ratio(tok("hyla_train"), tok("transformers_train")),
                "hyla_over_transformers_compile": ratio(tok("hyla_train"), tok("transformers_train_compile")),
                "hyla_full_remat_over_transformers_eager": ratio(tok("hyla_train_full"), tok("transformers_train"))}
def lora_row(name):
    r = best_round(name)
    if r and "profile" in r:  # the bf16 base's products against the vdpbf16ps peak, fp32's against FMA
        peak = bf16_peak if r["mode"] == "lora-bf16base" and peaks.get("bf16_products") == "native" else fma
        r["profile_per_step"] = op_table(r.pop("profile"), r["steps"], peak, 16)
        r["profile_peak"] = "vdpbf16ps" if peak == bf16_peak else "fma"
        r["whole_step_gemm_gflops"] = r["gemm_flops_per_step"] / r["best_step_seconds"] / 1e9
    return r

lora = {k: lora_row(n) for k, n in (("hyla", "hyla_lora"), ("hyla_bf16_base", "hyla_lora_bf16base"),
                                    ("hyla_full_remat", "hyla_lora_full_remat"), ("transformers_peft", "transformers_lora"),
                                    ("transformers_peft_bf16_base", "transformers_lora_bf16base"))}
ltok = lambda k: lora[k]["tokens_per_s"] if lora[k] else None
lora["ratios"] = {"hyla_over_peft": ratio(ltok("hyla"), ltok("transformers_peft")),
                  "hyla_bf16_base_over_peft": ratio(ltok("hyla_bf16_base"), ltok("transformers_peft")),
                  "hyla_bf16_base_over_peft_bf16_base": ratio(ltok("hyla_bf16_base"), ltok("transformers_peft_bf16_base")),
                  "hyla_full_remat_over_peft": ratio(ltok("hyla_full_remat"), ltok("transformers_peft"))}
out = {"benchmark": "real shapes (issue 21)", "threads": threads,
       "peaks": {"fma_gflops": fma, "vdpbf16ps_gflops": bf16_peak, "bf16_products": peaks.get("bf16_products")},
       "inference_qwen3.5-0.8b": inference, "inference_qwen3-next-80b-cut": cut,
       "training_qwen3-next-0.6b-moe_fp32_1x512": tr, "lora_r16_qwen3.5-0.8b_1x512": lora, "runs": runs}
json.dump(out, open(out_path, "w"), indent=1)
print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=1))
PY
touch "$OUT.done"
