#!/usr/bin/env bash
# Training across processes (mpirun), shard none (replicated) and fsdp (pieces):
#   - bit-identical to one process: `mpirun -np N train --accum A` gives the same losses, grad norms,
#     weights and AdamW moments, bit for bit, as one process with --accum N*A (the step's gradient is
#     summed in micro-batch order whatever the rank count: src/parallel/grad_reduce.h,
#     src/parallel/shard_comm.h; the norm sums fixed blocks exactly: core/exact_sum.h), for N = 2 and
#     4, both shardings, every remat policy (offloading ones included), layer / block / part units,
#     packed documents, bf16 compute, per-layer updates (both), no prefetch (fsdp), LoRA (both),
#     and FSDP on every oracle model layout. Every run is --threads 1 (the default under mpirun):
#     oneDNN's sgemm results depend on its thread count.
#   - measured == planned on every rank, exactly: weights (pieces + gathered high-water), gradients
#     (with the reduction's buffers), moments, activations, and bytes sent per step, against
#     hyla plan --devices N --rank R --shard none|fsdp --accum A;
#   - resume across rank counts: 10 steps on 2 ranks == 5 on 2 + resume on 1 + 5 == 5 on 2 + resume
#     on 4 + 5, bit for bit (the step's micro-batch count is kept: --accum follows the ranks); bf16
#     compute under FSDP resumes exactly (its fp32 masters);
#   - sharded checkpoints (--save-sharded): 2 ranks' pieces resumed on 1, 2 and 4 ranks == the
#     straight run, re-saved sharded on 4 ranks, consolidated by hyla convert == the plain
#     checkpoint's bytes; bf16 + MTP; damaged files; kill -9 of a rank during a sharded save;
#   - failure: ranks given other flags, another model or other data stop with a clear error on every
#     rank; a rank that fails stops the job; a LoRA checkpoint resumed on another base model; kill -9
#     of a rank mid-run stops every rank within seconds and leaves the last complete checkpoint in
#     place; bad --shard values, refused combinations;
#   - expert groups (--expert-groups G): bit-identical to one process and measured == planned with
#     2, 4 and 8 groups on 2 and 4 ranks, remat / units / offload / bf16 / per-layer / MTP / LoRA /
#     no prefetch, evaluation and --sample; refused combinations;
#   - the 10-step training test against the PyTorch oracle passes under mpirun -np 2 (both
#     shardings); hyla plan --expert-groups and the 397B-A17B goal (under 95 GB per device, with
#     flags hyla train accepts).
# usage: tests/mpi/mpi_cli_test.sh [HYLA [CASES]]
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/cli_lib.sh "${1:-build/hyla}" "${2:-build/cases}"
command -v mpirun >/dev/null || { echo "  FAIL: no mpirun (scripts/deps.sh installs openmpi-bin)"; exit 1; }
MPI=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
export OMPI_MCA_rmaps_base_oversubscribe=1
"$HYLA" init --preset tiny-hybrid --seed 4 --out "$T/m" >/dev/null && $PY tests/data/make_qwen_tokenizer.py "$T/m" >/dev/null ||
    { echo "  FAIL: cannot make the model"; exit 1; }
DATA=(--text data/kjv.txt)
BASE=(--batch 2 --seq 32 --steps 3 --warmup 1 --lr 3e-3 --seed 5 --threads 1)

# the step records without timing and per-rank figures: every field but seconds, tokens/s, copy and
# comm times and bytes, offload bytes (each rank offloads its own micro-batches) and the bytes of
# weights, gradients and moments (a rank holds its share; checked against the plan below)
records() { sed -E 's/"(seconds|tokens_per_s|gather_wait_seconds|gradient_bytes|weight_bytes|optimizer_bytes|offload_bytes|copy_seconds|copy_wait_seconds|copy_hidden_fraction|comm_bytes|comm_seconds|reduce_seconds|reduce_wait_seconds|context_seconds|context_chain_seconds|context_chain_wait_seconds|peak_rss_bytes)": [^,}]*[,]? ?//g; s/"context_chain_run_seconds": \[[^]]*\][,]? ?//g' "$1"; }
# same_run NAME DIR_A DIR_B: identical step records and checkpoint tensors (model, optimizer)
same_run() {
    local name=$1 a=$2 b=$3 f ok=1
    cmp -s <(records "$a/log.jsonl") <(records "$b/log.jsonl") || { ok=0; echo "      step records differ:"; diff <(records "$a/log.jsonl") <(records "$b/log.jsonl") | head -4; }
    for f in $(cd "$a/ckpt" && find . -name '*.safetensors' | sort); do
        cmp -s "$a/ckpt/$f" "$b/ckpt/$f" || { ok=0; echo "      $f differs"; }
    done
    [ -n "$(cd "$a/ckpt" && find . -name '*.safetensors')" ] || ok=0
    [ $ok -eq 1 ] && echo "  ok  $name" || fail "$name"
}
# train DIR NP ARGS...: a run (NP = 0: one process without mpirun) writing DIR/log.jsonl, DIR/ckpt
train() {
    local dir=$1 np=$2; shift 2
    mkdir -p "$dir"
    if [ "$np" -eq 0 ]; then
        "$HYLA" train "$@" --log-json "$dir/log.jsonl" --save "$dir/ckpt" >"$dir/out" 2>&1
    else
        "${MPI[@]}" -np "$np" "$HYLA" train "$@" --log-json "$dir/log.jsonl" --save "$dir/ckpt" >"$dir/out" 2>&1
    fi || { echo "      run failed ($dir):"; tail -5 "$dir/out"; return 1; }
}
# equal NAME NP ACCUM_PER_RANK SHARDS ARGS...: mpirun -np NP --accum A --shard S == one process
# --accum NP*A, for each S in SHARDS ("none fsdp" or one); runs in $T/NAME.one, $T/NAME.S
# (MODEL=DIR: another model than $T/m, here and in planned)
equal() {
    local name=$1 np=$2 acc=$3 shards=$4 sh; shift 4
    local d="$T/$(printf %s "$name" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' _)"
    train "$d.one" 0 --model "${MODEL:-$T/m}" "${DATA[@]}" "${BASE[@]}" --accum $((np * acc)) "$@" || { fail "$name: one process"; return; }
    for sh in $shards; do
        # shellcheck disable=SC2086
        train "$d.$sh" "$np" --model "${MODEL:-$T/m}" "${DATA[@]}" "${BASE[@]}" --accum "$acc" --shard "$sh" "$@" ${MPI_ONLY:-} &&
            same_run "$name: mpirun -np $np --accum $acc --shard $sh == one process --accum $((np * acc)), bit for bit" "$d.one" "$d.$sh" ||
            fail "$name, shard $sh"
    done
}
# measured == planned on every rank (rank r > 0 logs to FILE.rank<r>), every step: weights,
# gradients (with the reduction's buffers), moments, activations and the bytes it sends per step,
# against hyla plan --rank r
planned() { # NAME RUN_DIR NP ACCUM SHARD PLAN_ARGS...
    local name=$1 dir=$2 np=$3 acc=$4 sh=$5 r log ok=1; shift 5
    for r in $(seq 0 $((np - 1))); do
        log="$dir/log.jsonl"; [ "$r" -gt 0 ] && log="$dir/log.jsonl.rank$r"
        "$HYLA" plan "${MODEL:-$T/m}" --batch 2 --seq 32 --devices "$np" --rank "$r" --shard "$sh" --accum "$acc" --threads 1 --json "$@" \
            > "$dir/plan.$r.json" && [ -f "$log" ] && planned_rank "$dir/plan.$r.json" "$log" "$r" || ok=0
    done
    [ $ok -eq 1 ] && echo "  ok  $name" || fail "$name"
}
planned_rank() { # PLAN_JSON LOG RANK
    $PY - "$1" "$2" "$3" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
rec = [json.loads(l) for l in open(sys.argv[2])]
want = {"weight_bytes": p["param_bytes"] - p["adapter_bytes"] + p["gathered_weight_bytes"],
        "gradient_bytes": p["gradient_bytes"] + p["reduce_bytes"], "optimizer_bytes": p["optimizer_bytes"],
        "activation_bytes": p["checkpoint_bytes"] + p["work_bytes"] + p["offload_staging_bytes"] + p["carry_bytes"] +
                            p["context_bytes"],
        "comm_bytes": p["comm_bytes"]}
bad = [(k, r["step"], r[k], v) for r in rec for k, v in want.items() if r[k] != v]
last = rec[-1]
print(f"      rank {sys.argv[3]}: " + ", ".join(f"{k.replace('_bytes', '')} {last[k]} B" for k in want) +
      (" == planned" if not bad else f"; differ: {bad[:3]}"))
sys.exit(0 if not bad else 1)
PYEOF
}
equal "remat full" 2 1 "none fsdp"
planned "measured == planned: 2 ranks, shard none" "$T/remat_full.none" 2 1 none
planned "measured == planned: 2 ranks, shard fsdp" "$T/remat_full.fsdp" 2 1 fsdp
planned "measured == planned: one process --accum 2 (the reducer's shard)" "$T/remat_full.one" 1 2 none
equal "remat full 4 ranks" 4 1 "none fsdp"
planned "measured == planned: 4 ranks, shard none" "$T/remat_full_4_ranks.none" 4 1 none
planned "measured == planned: 4 ranks, shard fsdp" "$T/remat_full_4_ranks.fsdp" 4 1 fsdp
equal "remat none" 2 2 "none fsdp" --remat none
planned "measured == planned: 2 ranks x --accum 2, shard fsdp, remat none" "$T/remat_none.fsdp" 2 2 fsdp --remat none
equal "remat full, block units, clipping off" 2 1 "none fsdp" --remat-unit block --clip 0
planned "measured == planned: shard fsdp, block units (a unit's layers gathered)" "$T/remat_full__block_units__clipping_off.fsdp" 2 1 fsdp --remat-unit block
for pol in minimal minimal_with_context save_qkv_proj save_out_proj save_dot_except_mlp save_dot_except_mlpwi qkv_proj_offloaded; do
    equal "remat $pol" 2 1 fsdp --remat "$pol"
done
MPI_ONLY="--no-prefetch" equal "fsdp without the gather prefetch" 2 1 fsdp --remat-unit block
planned "measured == planned: shard fsdp --no-prefetch (one part gathered at a time)" "$T/fsdp_without_the_gather_prefetch.fsdp" 2 1 fsdp --remat-unit block --no-prefetch
equal "offload (minimal_offloaded), part units" 2 2 "none fsdp" --remat minimal_offloaded --remat-unit part
planned "measured == planned: shard fsdp, offload, part units" "$T/offload__minimal_offloaded___part_units.fsdp" 2 2 fsdp --remat minimal_offloaded --remat-unit part
# per-layer updates (FSDP: each unit's pieces updated as soon as they are summed) == whole-step
# updates of one process (clipping off: the same AdamW arithmetic; the norm's exact sum alike)
MPI_ONLY="--update-per-layer" equal "per-layer updates, block units" 2 1 fsdp --clip 0 --remat-unit block
planned "measured == planned: shard fsdp, per-layer updates (the head's and one unit's gradient pieces)" \
    "$T/per_layer_updates__block_units.fsdp" 2 1 fsdp --update-per-layer --remat-unit block
equal "bf16 compute" 2 1 "none fsdp" --act-dtype bf16
planned "measured == planned: shard fsdp, bf16 compute (a gathered matrix holds its bf16 copy too)" "$T/bf16_compute.fsdp" 2 1 fsdp --act-dtype bf16
equal "LoRA" 2 1 "none fsdp" --lora-rank 4
planned "measured == planned: LoRA on 2 ranks (the adapter's gradients)" "$T/lora.none" 2 1 none --lora-rank 4
# LoRA under FSDP: the frozen base as pieces, gathered layer by layer (never reduced), the
# adapter replicated with its gradient summed in order
planned "measured == planned: LoRA on 2 ranks, shard fsdp (base pieces + gathers, the adapter's reducer)" "$T/lora.fsdp" 2 1 fsdp --lora-rank 4
equal "LoRA fsdp 4 ranks, block units, bf16 compute" 4 1 fsdp --lora-rank 4 --remat-unit block --act-dtype bf16
# a GGUF model (hyla's F32 export of the same weights): each rank reads it whole as fp32, FSDP then keeps its pieces
"$HYLA" convert "$T/m" "$T/m.gguf" --to gguf --type f32 >/dev/null || fail "GGUF export for the GGUF model runs"
MODEL="$T/m.gguf" equal "a GGUF model" 2 1 "none fsdp"
# the MTP loss across ranks (shard none: replicated weights, the ordered gradient sum; the MTP
# cross-entropy sums gathered like the main loss's)
"$HYLA" init --preset tiny-hybrid --seed 4 --mtp-layers 1 --out "$T/mm" >/dev/null && $PY tests/data/make_qwen_tokenizer.py "$T/mm" >/dev/null &&
    train "$T/mtp.one" 0 --model "$T/mm" "${DATA[@]}" "${BASE[@]}" --accum 2 &&
    train "$T/mtp.none" 2 --model "$T/mm" "${DATA[@]}" "${BASE[@]}" --accum 1 --shard none &&
    grep -q '"mtp": ' "$T/mtp.none/log.jsonl" &&
    same_run "MTP loss (default weight 0.1): mpirun -np 2 --shard none == one process --accum 2, bit for bit" "$T/mtp.one" "$T/mtp.none" ||
    fail "MTP loss across ranks"
# ... and under FSDP: the head's input stage (final norm, embedding, fc and its norms), its layer
# and its output stage (mtp.norm, lm_head) gathered as parts, its gradients reduce-scattered
# with the head's (default weight 0.1, as without FSDP)
# FSDP with overlapped reduce-scatters (--overlap-reduce): a unit's started when its backward
# ends, finished (added in rank order) when the next unit's ends, the next unit in a second
# window; the non-layer gradients but the embedding's started when the loss head is done and
# finished after the micro-batch; the same sums, a second window and the staging planned
MPI_ONLY="--overlap-reduce" equal "overlapped reduce-scatters" 2 2 fsdp
planned "measured == planned: --overlap-reduce (a second window, the in-flight unit's staging)" \
    "$T/overlapped_reduce_scatters.fsdp" 2 2 fsdp --overlap-reduce
MPI_ONLY="--overlap-reduce --update-per-layer" equal "overlapped reduce-scatters, per-layer updates" 4 1 fsdp --clip 0 --remat-unit block
MODEL="$T/mm" MPI_ONLY="--overlap-reduce" equal "overlapped reduce-scatters, MTP loss, bf16" 2 1 fsdp --act-dtype bf16 --remat-unit part
MODEL="$T/mm" planned "measured == planned: --overlap-reduce with the MTP loss (the early head gradients' staging spans the MTP head)" \
    "$T/overlapped_reduce_scatters__mtp_loss__bf16.fsdp" 2 1 fsdp --overlap-reduce --act-dtype bf16 --remat-unit part --mtp-loss-weight 0.1
expect_error "--overlap-reduce without FSDP" "needs --shard fsdp under mpirun" "$HYLA" train --model "$T/m" --synthetic --steps 1 --overlap-reduce
# FSDP's expert groups (--expert-groups G): the routed expert tensors are in no layer part; the
# experts ops gather them G groups at a time (the next group's gather in flight) and reduce-scatter
# each group's gradient rows right after its backward, zeroing them in the window: every expert's
# arithmetic is the same whichever group it is in, so the run == one process bit for bit; measured
# == planned per rank (a layer part without its experts + two groups of one tensor gathered, one
# group's gradient rows in the window, every experts op call's gather in the bytes sent)
MPI_ONLY="--expert-groups 2" equal "expert groups 2" 2 1 fsdp
planned "measured == planned: --expert-groups 2 (groups gathered on top of the layer part)" "$T/expert_groups_2.fsdp" 2 1 fsdp --expert-groups 2
MPI_ONLY="--expert-groups 4" equal "expert groups 4, 4 ranks x accum 2, remat minimal, part units" 4 2 fsdp --remat minimal --remat-unit part
planned "measured == planned: --expert-groups 4 on 4 ranks, recomputed experts ops gather again" \
    "$T/expert_groups_4__4_ranks_x_accum_2__remat_minimal__part_units.fsdp" 4 2 fsdp --expert-groups 4 --remat minimal --remat-unit part
MPI_ONLY="--expert-groups 8 --update-per-layer" equal "expert groups 8, per-layer updates, bf16 compute, block units" 2 1 fsdp --clip 0 --act-dtype bf16 --remat-unit block
planned "measured == planned: --expert-groups 8, per-layer updates, bf16 (each group's bf16 rows too)" \
    "$T/expert_groups_8__per_layer_updates__bf16_compute__block_units.fsdp" 2 1 fsdp --expert-groups 8 --update-per-layer --act-dtype bf16 --remat-unit block
MPI_ONLY="--expert-groups 2 --no-prefetch" equal "expert groups, no prefetch, offload" 2 1 fsdp --remat minimal_offloaded
planned "measured == planned: --expert-groups 2 --no-prefetch (one group at a time)" \
    "$T/expert_groups__no_prefetch__offload.fsdp" 2 1 fsdp --expert-groups 2 --no-prefetch --remat minimal_offloaded
MODEL="$T/mm" MPI_ONLY="--expert-groups 2" equal "expert groups, MTP loss (its layer's experts by group too)" 2 1 fsdp
MODEL="$T/mm" planned "measured == planned: --expert-groups 2 with the MTP loss" \
    "$T/expert_groups__mtp_loss__its_layer_s_experts_by_group_too_.fsdp" 2 1 fsdp --expert-groups 2 --mtp-loss-weight 0.1
# --overlap-reduce: a group's reduce-scatter runs while the next group computes (finished when the
# next group's backward ends or its unit's gradients are reduced): two groups' rows in the windows
# and one group's staging planned
MPI_ONLY="--expert-groups 4 --overlap-reduce" equal "expert groups, overlapped reduce-scatters" 2 2 fsdp
planned "measured == planned: --expert-groups 4 --overlap-reduce (two windows, a group's staging)" \
    "$T/expert_groups__overlapped_reduce_scatters.fsdp" 2 2 fsdp --expert-groups 4 --overlap-reduce
MODEL="$T/mm" MPI_ONLY="--expert-groups 2 --overlap-reduce" equal "expert groups, overlapped, MTP loss, bf16, part units, 4 ranks" 4 1 fsdp --act-dtype bf16 --remat-unit part
# ... with per-layer updates: the previous unit's reduce-scatters are finished and its pieces
# updated before this unit's first group sum lands in the unit's pieces
MPI_ONLY="--expert-groups 2 --overlap-reduce --update-per-layer" equal "expert groups, overlapped, per-layer updates, 4 ranks" 4 1 fsdp --clip 0 --remat-unit block
planned "measured == planned: --expert-groups 2 --overlap-reduce --update-per-layer" \
    "$T/expert_groups__overlapped__per_layer_updates__4_ranks.fsdp" 4 1 fsdp --expert-groups 2 --overlap-reduce --update-per-layer --remat-unit block
MPI_ONLY="--expert-groups 2" equal "expert groups, LoRA (the frozen base's experts by group)" 2 1 fsdp --lora-rank 4
planned "measured == planned: --expert-groups 2, LoRA" "$T/expert_groups__lora__the_frozen_base_s_experts_by_group_.fsdp" 2 1 fsdp --expert-groups 2 --lora-rank 4
expect_error "--expert-groups without FSDP" "needs --shard fsdp under mpirun" "$HYLA" train --model "$T/m" --synthetic --steps 1 --expert-groups 2
# context parallelism (--context-parallel C, C divides the ranks): every sequence cut into C slices,
# one per rank of a group of C ranks (the groups data parallel). The forward of every row is the
# whole sequence's bit for bit (slices of whole 64-row chunks: the conv window, the delta-rule
# state and attention's keys are passed, positions offset; the kernels' split == whole is shown in
# test_gdn_grads / test_op_grads), so step 1's loss differs only by how the rows' double sums are
# grouped (~1e-15 relative): equal to the printed 9 significant digits (one unit of the last one,
# x 1.5 for the decimal rounding of both). The gradient sums over rows are regrouped (each rank's
# rows, then the ranks in order; the earlier keys' attention gradients as two slices' parts): an
# n-term fp32 sum regrouped moves by <= 2 n u sum|terms| (u = 2^-24), n = the B T rows of a
# micro-batch; for the grad norm, dominated by large elements whose terms do not cancel, that is
# <= 2 n u relative (512 rows: 6.1e-5). Later steps start from weights updated by AdamW, which
# divides every gradient element by its own magnitude (+ eps 1e-8): an element whose row sum
# cancels to near zero can take a visibly different update (at most lr), so the later losses are
# held to 1e-4 relative (seen: <= 1.4e-5), still far below what an error in what is passed moves
# step 1's loss by (1e-3 or more). With bf16 compute the later steps are not compared (a master
# weight moved that way can round to the neighbouring bf16 value); step 1 is held to the same
# bounds.
cp_close() { # NAME NP C ACCUM ARGS...: mpirun -np NP --context-parallel C --accum ACCUM vs one process on the
              # whole sequences with --accum NP / C x ACCUM (the groups of C ranks are data parallel)
    local name=$1 np=$2 c=$3 acc=$4 d="$T/cp_$(printf %s "$1" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' _)"; shift 4
    local CPB=(${CP_DATA:---text data/kjv.txt} --batch 2 --seq 256 --steps 3 --warmup 1 --lr 3e-3 --seed 5 --threads 1)
    train "$d.one" 0 --model "${MODEL:-$T/m}" "${CPB[@]}" --accum $((np / c * acc)) "$@" &&
        train "$d.cp" "$np" --model "${MODEL:-$T/m}" "${CPB[@]}" --accum "$acc" --context-parallel "$c" "$@" ${MPI_ONLY:-} &&
        $PY - "$d.one/log.jsonl" "$d.cp/log.jsonl" "$name" "$*" <<'PYEOF' || fail "context parallel: $name"
import json, math, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
rows, u = 2 * 256, 2.0 ** -24
ok = len(a) == len(b) == 3
unit = lambda x: 1.5 * 10.0 ** (math.floor(math.log10(abs(x))) - 8)  # one unit of the 9th digit, x 1.5
ok = ok and abs(a[0]["loss"] - b[0]["loss"]) <= unit(a[0]["loss"]) and abs(a[0]["aux"] - b[0]["aux"]) <= unit(a[0]["aux"])
ok = ok and ("mtp" in a[0]) == ("mtp" in b[0]) and ("mtp" not in a[0] or abs(a[0]["mtp"] - b[0]["mtp"]) <= unit(a[0]["mtp"]))
gn = abs(a[0]["grad_norm"] - b[0]["grad_norm"]) / a[0]["grad_norm"]
ok = ok and gn <= 2 * rows * u
later = max(abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a[1:], b[1:]))
bf16 = "bf16" in sys.argv[4]
ok = ok and (bf16 or later <= 1e-4)
act = b[0]["activation_bytes"] / a[0]["activation_bytes"]  # (the link included: hyla plan --context-parallel)
print(f"  {'ok  ' if ok else 'FAIL'} {sys.argv[3]}: activations per rank {act:.2f}x one process's; step 1 loss {b[0]['loss']} (one process {a[0]['loss']}), grad norm "
      f"within {gn:.1e} (bound {2 * rows * u:.1e}), steps 2-3 losses within {later:.1e}" +
      (" (bf16: not bounded)" if bf16 else " (bound 1e-4)"))
sys.exit(0 if ok else 1)
PYEOF
}
cp_close "2 slices, shard none" 2 2 1 --shard none
planned "measured == planned: --context-parallel 2, shard none (a slice's step + the link)" "$T/cp_2_slices__shard_none.cp" 2 1 none \
    --seq 256 --context-parallel 2
MPI_ONLY="--expert-groups 2" cp_close "4 slices, fsdp, accum 2, remat minimal_offloaded, expert groups" 4 4 2 --remat minimal_offloaded
planned "measured == planned: --context-parallel 4 with FSDP, expert groups, offload (the slices' messages in the bytes sent)" \
    "$T/cp_4_slices__fsdp__accum_2__remat_minimal_offloaded__expert_groups.cp" 4 2 fsdp --seq 256 --context-parallel 4 \
    --remat minimal_offloaded --expert-groups 2
cp_close "4 slices, fsdp, bf16 compute, block units, per-layer updates" 4 4 1 --act-dtype bf16 --remat-unit block --update-per-layer --clip 0
# beside data parallelism: 4 ranks = 2 groups of 2 slices (the link over each group's own communicator)
MPI_ONLY="--expert-groups 2" cp_close "2 slices x 2 data-parallel groups, fsdp, expert groups" 4 2 1
planned "measured == planned: 4 ranks, --context-parallel 2 (two groups; FSDP over all four)" \
    "$T/cp_2_slices_x_2_data_parallel_groups__fsdp__expert_groups.cp" 4 1 fsdp --seq 256 --context-parallel 2 --expert-groups 2
# packed documents: a piece cut by a slice edge continues in the next slice (its window, state and
# keys passed, positions going on); a piece starting at a slice's first token starts fresh there
CP_DATA="--data-jsonl data/chat_kjv.jsonl --pack" cp_close "2 slices, packed documents" 2 2 1 --shard none
CP_DATA="--data-jsonl data/chat_kjv.jsonl --pack" MPI_ONLY="--expert-groups 2" cp_close "4 slices, packed documents, fsdp, accum 2" 4 4 2
# the MTP loss: the head's input at a slice's last row takes the token after the slice, its target
# the next slice's first (hyla train hands each slice both); its layer's attention over the slices
# like the trunk's
MODEL="$T/mm" cp_close "2 slices, the MTP loss" 2 2 1 --shard none --mtp-loss-weight 0.1
MODEL="$T/mm" CP_DATA="--data-jsonl data/chat_kjv.jsonl --pack" cp_close "4 slices, the MTP loss, packed documents, fsdp, accum 2" 4 4 2 --mtp-loss-weight 0.1
MODEL="$T/mm" planned "measured == planned: --context-parallel 4 with the MTP loss and packed documents" \
    "$T/cp_4_slices__the_mtp_loss__packed_documents__fsdp__accum_2.cp" 4 2 fsdp --seq 256 --context-parallel 4 --mtp-loss-weight 0.1
# evaluation and --sample under context parallelism run on whole sequences (each rank its share of
# the eval batches, as without it): the same sample, eval losses within the later steps' bound
head -20 data/chat_kjv.jsonl > "$T/eval.jsonl"
CPE=(--text data/kjv.txt --batch 2 --seq 128 --steps 3 --warmup 1 --lr 3e-3 --seed 5 --threads 1 --eval-data "$T/eval.jsonl" --eval-every 2 --sample 12)
train "$T/cpe.one" 0 --model "$T/m" "${CPE[@]}" --accum 2 && train "$T/cpe.cp" 4 --model "$T/m" "${CPE[@]}" --accum 1 --context-parallel 2 &&
    [ -n "$(grep '^sample>' "$T/cpe.one/out")" ] && [ "$(grep '^sample>' "$T/cpe.one/out")" = "$(grep '^sample>' "$T/cpe.cp/out")" ] &&
    $PY - "$T/cpe.one/log.jsonl" "$T/cpe.cp/log.jsonl" <<'PYEOF' || fail "evaluation / sample with context parallelism"
import json, sys
ev = [[json.loads(l)["eval_loss"] for l in open(p) if "eval_loss" in l] for p in sys.argv[1:3]]
ok = len(ev[0]) == len(ev[1]) == 2 and all(abs(x - y) / x <= 1e-4 for x, y in zip(*ev))
print(f"  {'ok  ' if ok else 'FAIL'} evaluation and --sample with --context-parallel 2 on 4 ranks: eval losses {ev[1]} (one process {ev[0]}), the same sample")
sys.exit(0 if ok else 1)
PYEOF
refused_cp() { # NAME PATTERN NP ARGS...
    local name=$1 pattern=$2 np=$3; shift 3
    timeout 60 "${MPI[@]}" -np "$np" "$HYLA" train --model "$T/m" --text data/kjv.txt --batch 1 --seq 64 --steps 1 "$@" >"$T/out" 2>"$T/err"; local rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q -- "$pattern" "$T/err" && echo "  ok  $name: $(grep -m1 -- "$pattern" "$T/err")" ||
        { fail "$name: rc $rc"; head -3 "$T/err"; }
}
refused_cp "--context-parallel that does not divide the ranks" "must divide the ranks" 2 --context-parallel 4
refused_cp "--context-parallel with a --seq that does not divide" "must divide into the slices" 2 --context-parallel 2 --seq 63
# evaluation and --sample across ranks: the eval batches split round-robin (3 ranks: uneven
# rounds, empty batches at the tail), FSDP's layers gathered as used (no whole copy), the sums
# added in batch order: the eval records and the sample == one process's
head -20 data/chat_kjv.jsonl > "$T/eval.jsonl"
equal "evaluation and sample" 3 1 "none fsdp" --eval-data "$T/eval.jsonl" --eval-every 2 --sample 12
# (part units: the step acquires each layer twice in a row, an evaluation once)
equal "evaluation, part units" 2 1 fsdp --remat-unit part --eval-data "$T/eval.jsonl" --eval-every 3
for sh in none fsdp; do
    grep -q '"eval_loss"' "$T/evaluation_and_sample.$sh/log.jsonl" && [ -n "$(grep '^sample>' "$T/evaluation_and_sample.one/out")" ] &&
        [ "$(grep '^sample>' "$T/evaluation_and_sample.one/out")" = "$(grep '^sample>' "$T/evaluation_and_sample.$sh/out")" ] &&
        echo "  ok  --sample on 3 ranks, shard $sh == one process: $(grep '^sample>' "$T/evaluation_and_sample.$sh/out")" ||
        fail "evaluation / sample across ranks, shard $sh"
done
MPI_ONLY="--expert-groups 4" equal "expert groups, evaluation and sample" 2 1 fsdp --eval-data "$T/eval.jsonl" --eval-every 2 --sample 12
[ "$(grep '^sample>' "$T/expert_groups__evaluation_and_sample.one/out")" = "$(grep '^sample>' "$T/expert_groups__evaluation_and_sample.fsdp/out")" ] &&
    echo "  ok  --sample with expert groups == one process" || fail "--sample with expert groups"
# per-layer updates with shard none across ranks: each unit's window summed over the ranks (in
# rank order) inside backward, before its layers' update; the head's after the step
MPI_ONLY="--update-per-layer" equal "per-layer updates, shard none" 2 1 none --clip 0
planned "measured == planned: shard none, per-layer updates (the head's reducer and the window's)" \
    "$T/per_layer_updates__shard_none.none" 2 1 none --update-per-layer
MPI_ONLY="--update-per-layer" equal "per-layer updates, shard none, 4 ranks, block units, bf16" 4 1 none --clip 0 --remat-unit block --act-dtype bf16
MODEL="$T/mm" equal "MTP loss fsdp" 2 1 fsdp
grep -q '"mtp": ' "$T/mtp_loss_fsdp.fsdp/log.jsonl" || fail "MTP loss fsdp: no MTP loss in the records"
MODEL="$T/mm" planned "measured == planned: shard fsdp with the MTP loss (its parts gathered, its pieces reduced)" \
    "$T/mtp_loss_fsdp.fsdp" 2 1 fsdp --mtp-loss-weight 0.1
MODEL="$T/mm" equal "MTP loss fsdp 4 ranks, block units, bf16 compute" 4 1 fsdp --remat-unit block --act-dtype bf16 --remat minimal
MODEL="$T/mm" equal "MTP loss fsdp, offload, part units" 2 2 fsdp --remat minimal_offloaded --remat-unit part
MODEL="$T/mm" MPI_ONLY="--update-per-layer" equal "MTP loss fsdp, per-layer updates" 2 1 fsdp --clip 0
MODEL="$T/mm" planned "measured == planned: shard fsdp, MTP loss, per-layer updates (the compact head spans the MTP head)" \
    "$T/mtp_loss_fsdp__per_layer_updates.fsdp" 2 1 fsdp --mtp-loss-weight 0.1 --update-per-layer
MODEL="$T/mm" equal "MTP only fsdp" 2 1 fsdp --mtp-only
MODEL="$T/mm" equal "MTP weight 0 fsdp (the head frozen)" 2 1 fsdp --mtp-loss-weight 0
# (weight 0: the head's tensors come out as they went in, the trunk's do not)
$PY - "$T/mm/model.safetensors" "$T/mtp_weight_0_fsdp__the_head_frozen_.fsdp/ckpt/model.safetensors" <<'PYEOF' || fail "MTP weight 0 under fsdp: the head moved"
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
head = [k for k in a if k.startswith("mtp.")]
same = [k for k in head if a[k] == b[k]]
moved = [k for k in a if not k.startswith("mtp.") and a[k] != b[k]]
print(f"  ok  MTP weight 0 under fsdp: the head's {len(same)}/{len(head)} tensors unchanged, {len(moved)} trunk tensors trained"
      if head and len(same) == len(head) and moved else f"      head unchanged {len(same)}/{len(head)}, trunk moved {len(moved)}")
sys.exit(0 if head and len(same) == len(head) and moved else 1)
PYEOF
# packed chat documents (the data walk, document tiling and labels are the step's, on every rank)
PACK=(--data-jsonl data/chat_kjv.jsonl --seq 256 --pack)
d="$T/pack"
train "$d.one" 0 --model "$T/m" "${BASE[@]}" "${PACK[@]}" --accum 2 && train "$d.mpi" 2 --model "$T/m" "${BASE[@]}" "${PACK[@]}" &&
    same_run "packed JSONL documents: mpirun -np 2 (fsdp, the default) == --accum 2, bit for bit" "$d.one" "$d.mpi" || fail "packed documents"
grep -q "data parallel: 4 ranks" "$T/remat_full_4_ranks.fsdp/out" && [ "$(grep -c '^done:' "$T/remat_full_4_ranks.fsdp/out")" -eq 1 ] &&
    echo "  ok  rank 0 alone prints (one summary line for 4 ranks)" || fail "output of ranks other than 0"

# the 10-step training test against the PyTorch oracle (tests/test_train.c), data parallel
if [ -n "$CASES" ] && [ -x "$(dirname "$HYLA")/mpi/test_train_mpi" ]; then
    "${MPI[@]}" -np 2 "$(dirname "$HYLA")/mpi/test_train_mpi" "$CASES" >"$T/oracle" 2>&1 &&
        echo "  ok  test_train's 10 steps vs the PyTorch oracle under mpirun -np 2, shard none and fsdp ($(grep -c 'failures' "$T/oracle") ranks: $(grep -m1 -o 'ok: 0 failures' "$T/oracle"))" ||
        { fail "test_train under mpirun -np 2"; tail -5 "$T/oracle"; }
else
    fail "no cases directory or $(dirname "$HYLA")/mpi/test_train_mpi"
fi

# FSDP over 4 ranks on the oracle's models (other layouts: tied / untied heads, dense and MoE
# layers, tensors smaller than a rank's 4096-element chunk, so ranks with empty pieces)
for mdl in next_moe_8l q35_moe q35_dense irregular all_attention; do
    [ -d "$CASES/$mdl" ] || { fail "no $CASES/$mdl"; continue; }
    # (with their MTP heads: the MTP loss at its default weight where the model has one)
    C=(--model "$CASES/$mdl" --synthetic --steps 2 --batch 1 --seq 16 --seed 3)
    train "$T/c_$mdl.one" 0 "${C[@]}" --accum 4 --threads 1 && train "$T/c_$mdl.fsdp" 4 "${C[@]}" --shard fsdp &&
        same_run "$mdl: mpirun -np 4 --shard fsdp == one process --accum 4, bit for bit" "$T/c_$mdl.one" "$T/c_$mdl.fsdp" ||
        fail "$mdl under FSDP"
done

# resume across rank counts (a constant schedule: the first run's --steps 5 does not change its lr)
R=(--model "$T/m" "${DATA[@]}" "${BASE[@]}" --steps 10 --save-every 5 --schedule constant)
train "$T/r10" 2 "${R[@]}" --accum 2 || fail "10 steps on 2 ranks"
train "$T/r5" 2 "${R[@]}" --accum 2 --steps 5 || fail "5 steps on 2 ranks"
for np in 0 4; do
    cp -r "$T/r5" "$T/r5.$np"
    if [ $np -eq 0 ]; then
        "$HYLA" train --resume "$T/r5.$np/ckpt" --steps 10 --threads 1 --log-json "$T/r5.$np/log.jsonl" --save "$T/r5.$np/ckpt" >"$T/r5.$np/out" 2>&1
    else
        "${MPI[@]}" -np 4 "$HYLA" train --resume "$T/r5.$np/ckpt" --steps 10 --log-json "$T/r5.$np/log.jsonl" --save "$T/r5.$np/ckpt" >"$T/r5.$np/out" 2>&1
    fi || { tail -3 "$T/r5.$np/out"; fail "resume on ${np/0/1} rank(s)"; continue; }
    same_run "10 steps on 2 ranks == 5 on 2 + resume on $([ $np -eq 0 ] && echo '1 process (--accum 4)' || echo '4 ranks (--accum 1)') + 5" "$T/r10" "$T/r5.$np"
done
# sharded checkpoints (--save-sharded, model/pieces.h): every rank writes its own pieces in
# parallel; resumed on 1, 2 and 4 ranks == the straight run, bit for bit; hyla convert
# consolidates one to the plain checkpoint's bytes; a model loads from one directly
RS=(--model "$T/m" "${DATA[@]}" "${BASE[@]}" --schedule constant --accum 2)
train "$T/sh4" 2 "${RS[@]}" --steps 4 && train "$T/pl2" 2 "${RS[@]}" --steps 2 && train "$T/sh2" 2 "${RS[@]}" --steps 2 --save-sharded &&
    [ -f "$T/sh2/ckpt/hyla-pieces.json" ] && [ -f "$T/sh2/ckpt/pieces/rank-00001-of-00002.safetensors" ] &&
    [ ! -e "$T/sh2/ckpt/model.safetensors" ] && [ ! -e "$T/sh2/ckpt/optimizer" ] &&
    echo "  ok  --save-sharded: one file of pieces per rank and the index, no whole tensor written" || fail "sharded save"
for np in 0 2 4; do
    rm -rf "$T/sh2.$np" && cp -r "$T/sh2" "$T/sh2.$np"
    if [ $np -eq 0 ]; then
        "$HYLA" train --resume "$T/sh2.$np/ckpt" --steps 4 --threads 1 --log-json "$T/sh2.$np/log.jsonl" --save "$T/sh2.$np/ckpt" >"$T/sh2.$np/out" 2>&1
    else
        "${MPI[@]}" -np $np "$HYLA" train --resume "$T/sh2.$np/ckpt" --steps 4 --log-json "$T/sh2.$np/log.jsonl" --save "$T/sh2.$np/ckpt" >"$T/sh2.$np/out" 2>&1
    fi || { tail -3 "$T/sh2.$np/out"; fail "sharded resume on ${np/0/1} rank(s)"; continue; }
    same_run "sharded checkpoint of 2 ranks resumed on $([ $np -eq 0 ] && echo '1 process' || echo "$np ranks") == the straight run, bit for bit" "$T/sh4" "$T/sh2.$np"
done
"$HYLA" convert "$T/sh2/ckpt" "$T/sh2.hf" >/dev/null && cmp -s "$T/sh2.hf/model.safetensors" "$T/pl2/ckpt/model.safetensors" &&
    cmp -s "$T/sh2.hf/config.json" "$T/pl2/ckpt/config.json" && cmp -s "$T/sh2.hf/tokenizer.json" "$T/pl2/ckpt/tokenizer.json" &&
    echo "  ok  hyla convert of a sharded checkpoint == the plain checkpoint's model.safetensors and config.json, byte for byte" ||
    fail "convert of a sharded checkpoint"
"$HYLA" generate "$T/sh2/ckpt" --prompt "And" --max-new 6 >"$T/sh.gen" 2>&1 && "$HYLA" generate "$T/pl2/ckpt" --prompt "And" --max-new 6 >"$T/pl.gen" 2>&1 &&
    [ "$(head -1 "$T/sh.gen")" = "$(head -1 "$T/pl.gen")" ] && echo "  ok  generate from a sharded checkpoint == from the plain one" ||
    fail "generate from a sharded checkpoint"
# a sharded checkpoint as the --model of a new run (each rank reads its pieces) == the plain one
FM=("${DATA[@]}" "${BASE[@]}" --steps 2)
train "$T/from_sh" 2 --model "$T/sh2/ckpt" "${FM[@]}" && train "$T/from_pl" 2 --model "$T/pl2/ckpt" "${FM[@]}" &&
    same_run "a new FSDP run from a sharded checkpoint == from the plain one, bit for bit" "$T/from_pl" "$T/from_sh" ||
    fail "a sharded checkpoint as --model"
# ... written sharded again on 4 ranks from 2 ranks' pieces (re-sharded), then consolidated
rm -rf "$T/sh2.r" && cp -r "$T/sh2" "$T/sh2.r" &&
    "${MPI[@]}" -np 4 "$HYLA" train --resume "$T/sh2.r/ckpt" --steps 4 --save-sharded --save "$T/sh2.r/ckpt" >"$T/sh2.r/out" 2>&1 &&
    [ -f "$T/sh2.r/ckpt/pieces/rank-00003-of-00004.safetensors" ] && "$HYLA" convert "$T/sh2.r/ckpt" "$T/sh2.r.hf" >/dev/null &&
    cmp -s "$T/sh2.r.hf/model.safetensors" "$T/sh4/ckpt/model.safetensors" &&
    echo "  ok  2 ranks' pieces resumed and saved sharded on 4 ranks, consolidated == the straight run's weights" ||
    fail "re-sharded save"
# bf16 compute (the fp32 masters are the pieces) with the MTP loss (the head's pieces too)
RM=(--model "$T/mm" "${DATA[@]}" "${BASE[@]}" --schedule constant --act-dtype bf16)
train "$T/shm4" 2 "${RM[@]}" --steps 4 && train "$T/shm2" 2 "${RM[@]}" --steps 2 --save-sharded &&
    "${MPI[@]}" -np 2 "$HYLA" train --resume "$T/shm2/ckpt" --steps 4 --log-json "$T/shm2/log.jsonl" --save "$T/shm2/ckpt" >"$T/shm2/out2" 2>&1 &&
    same_run "bf16 compute + MTP loss, fsdp: 4 steps == 2 + sharded save + resume + 2, bit for bit" "$T/shm4" "$T/shm2" ||
    fail "sharded bf16 + MTP resume"
# a damaged sharded checkpoint: a clear error naming the file
cp -r "$T/sh2/ckpt" "$T/shbad1" && truncate -s -100 "$T/shbad1/pieces/rank-00001-of-00002.safetensors"
expect_error "sharded checkpoint with a truncated rank file" "rank-00001-of-00002.safetensors: .* bytes, the index says" \
    "$HYLA" train --resume "$T/shbad1" --steps 3 --threads 1
cp -r "$T/sh2/ckpt" "$T/shbad2" && rm "$T/shbad2/pieces/rank-00000-of-00002.safetensors"
expect_error "sharded checkpoint missing a rank's file" "rank 0's pieces are missing" "$HYLA" generate "$T/shbad2" --prompt "And"
cp -r "$T/sh2/ckpt" "$T/shbad3" && sed -i 's/\["layers.0.gdn_qkv", 32768\]/["layers.0.gdn_qkv", 32769]/' "$T/shbad3/hyla-pieces.json"
expect_error "sharded checkpoint whose index disagrees with config.json" "parameter 2 must be \[\"layers.0.gdn_qkv\", 32768\]" \
    "$HYLA" convert "$T/shbad3" "$T/shbad3.out"
[ ! -e "$T/shbad3.out" ] && echo "  ok  ... and nothing written in its place" || fail "convert of a bad sharded checkpoint wrote output"
expect_error "--save-sharded with one process" "needs --shard fsdp under mpirun" "$HYLA" train --model "$T/m" --synthetic --steps 1 --save-sharded --save "$T/x"

# bf16 compute under FSDP: the fp32 masters are saved beside the moments and taken back as pieces
R16=(--model "$T/m" "${DATA[@]}" "${BASE[@]}" --steps 4 --save-every 2 --schedule constant --act-dtype bf16)
train "$T/b4" 2 "${R16[@]}" && train "$T/b2" 2 "${R16[@]}" --steps 2 &&
    "${MPI[@]}" -np 2 "$HYLA" train --resume "$T/b2/ckpt" --steps 4 --log-json "$T/b2/log.jsonl" --save "$T/b2/ckpt" >"$T/b2/out2" 2>&1 &&
    same_run "bf16 compute, shard fsdp: 4 steps == 2 + resume + 2, bit for bit" "$T/b4" "$T/b2" || fail "bf16 fsdp resume"
grep -q "resume: 4 rank(s) x --accum 1 (the checkpoint ran on 2 rank(s) x 2)" "$T/r5.4/out" &&
    echo "  ok  resume says how the step is split over the new ranks" || fail "resume notice"
expect_error "resume with a step of another size" "4 micro-batches per step differs from the checkpoint's 4|differs from the checkpoint's" \
    "$HYLA" train --resume "$T/r10/ckpt" --steps 12 --accum 3 --threads 1

# ranks that disagree: every rank says so, the job exits non-zero
agree_error() { # NAME PATTERN MPMD-ARGS...
    local name=$1 pattern=$2; shift 2
    timeout 60 "${MPI[@]}" "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "$name: rc $rc"; tail -3 "$T/err"; return; fi
    if [ "$(grep -c -- "$pattern" "$T/err")" -lt 2 ]; then fail "$name: not every rank reported '$pattern'"; cat "$T/err" | head -8; return; fi
    echo "  ok  $name: $(grep -m1 -- "$pattern" "$T/err")"
}
S=(--text data/kjv.txt --batch 2 --seq 32 --steps 2 --seed 5)
agree_error "ranks launched with other flags" "rank 1's flags differ from rank 0's" \
    -np 1 "$HYLA" train --model "$T/m" "${S[@]}" --lr 1e-3 : -np 1 "$HYLA" train --model "$T/m" "${S[@]}" --lr 2e-3
# the same flags naming other files: relative paths from two working directories
mkdir -p "$T/w0" "$T/w1"
cp -r "$T/m" "$T/w0/model" && "$HYLA" init --preset tiny-hybrid --seed 9 --out "$T/w1/model" >/dev/null
head -c 300000 data/kjv.txt > "$T/w0/train.txt" && head -c 200000 data/kjv.txt > "$T/w1/train.txt"
W=(train --model model --text train.txt --batch 2 --seq 32 --steps 2 --seed 5)
agree_error "ranks launched with other models (same flags)" "rank 1's model weights differ from rank 0's" \
    -np 1 -wdir "$T/w0" "$PWD/$HYLA" "${W[@]}" : -np 1 -wdir "$T/w1" "$PWD/$HYLA" "${W[@]}"
cp -r "$T/m" "$T/w1/same" && cp -r "$T/m" "$T/w0/same"
W=(train --model same --text train.txt --batch 2 --seq 32 --steps 2 --seed 5)
agree_error "ranks launched with other data (same flags)" "rank 1's data differs from rank 0's" \
    -np 1 -wdir "$T/w0" "$PWD/$HYLA" "${W[@]}" : -np 1 -wdir "$T/w1" "$PWD/$HYLA" "${W[@]}"
timeout 60 "${MPI[@]}" -np 1 "$HYLA" train --model "$T/m" "${S[@]}" : -np 1 "$HYLA" train --model "$T/m" "${S[@]/data\/kjv.txt/$T/missing.txt}" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "missing.txt" "$T/err" && echo "  ok  a rank that fails stops the job (rc $rc): $(grep -m1 missing.txt "$T/err")" ||
    fail "a failing rank: rc $rc"
# a LoRA checkpoint resumed on another base model: every rank says so
"$HYLA" init --config "$CASES/q35_dense/config.json" --out "$T/other" >/dev/null &&
    train "$T/la" 2 --model "$T/m" "${DATA[@]}" "${BASE[@]}" --steps 1 --lora-rank 4 --shard none &&
    agree_error "resuming a LoRA checkpoint on another model" "is not in this model" \
        -np 2 "$HYLA" train --resume "$T/la/ckpt" --model "$T/other" --steps 2 --shard none || fail "LoRA resume on another model"
expect_error "--shard fsdp with one process" "sharding needs more than one process" "$HYLA" train --model "$T/m" "${S[@]}" --shard fsdp
expect_error "--shard with an unknown value" "--shard 'zero3': none or fsdp" "$HYLA" train --model "$T/m" "${S[@]}" --shard zero3
refused() { # NAME PATTERN TRAIN-ARGS...: every rank of an mpirun -np 2 job says PATTERN, non-zero exit
    local name=$1 pattern=$2; shift 2
    timeout 60 "${MPI[@]}" -np 2 "$HYLA" train --model "$T/m" "${S[@]}" "$@" >"$T/out" 2>"$T/err"; local rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c -- "$pattern" "$T/err")" -ge 1 ] &&
        echo "  ok  $name: $(grep -m1 -- "$pattern" "$T/err")" || { fail "$name: rc $rc"; head -3 "$T/err"; }
}
refused "--update-per-layer with --accum 2 per rank" "per-layer updates need --accum 1 and --clip 0" --update-per-layer --clip 0 --accum 2
refused "LoRA with shard fsdp over a bf16-only base" "drop --param-dtype bf16" --lora-rank 4 --param-dtype bf16 --act-dtype bf16
refused "--expert-groups that does not divide the experts" "does not divide the model's 8 routed experts" --expert-groups 3
refused "--expert-groups with shard none" "needs --shard fsdp" --expert-groups 2 --shard none

# the plan of sharded runs: --expert-groups, and the goal it exists for (seed 002's setting:
# Qwen3.5-397B-A17B, 1 x 1024 tokens per device, 64 devices, fp32 weights and moments, bf16
# activations) under 95 GB per device, with flags hyla train accepts (--expert-groups 32
# --update-per-layer --act-dtype bf16 --shard fsdp, executed and checked == plan above)
# (seed 002's model, MaxText's, has no MTP head: the config without mtp_num_hidden_layers)
$PY -c 'import json, sys; c = json.load(open(sys.argv[1])); c["text_config"].pop("mtp_num_hidden_layers"); json.dump(c, open(sys.argv[2], "w"))' \
    configs/qwen3.5-397b-a17b.json "$T/397b-no-mtp.json"
P397=(plan "$T/397b-no-mtp.json" --seq 1024 --devices 64 --act-dtype bf16 --json)
"$HYLA" "${P397[@]}" > "$T/g1.json" && "$HYLA" "${P397[@]}" --expert-groups 8 > "$T/g8.json" &&
    "$HYLA" "${P397[@]}" --expert-groups 32 --update-per-layer > "$T/g16u.json" &&
    $PY - "$T/g1.json" "$T/g8.json" "$T/g16u.json" <<'PYEOF' && echo "  ok  plan --expert-groups: 397B-A17B on 64 devices" || fail "plan --expert-groups"
import json, sys
g1, g8, g16u = (json.load(open(p)) for p in sys.argv[1:4])
# 8 groups: the layer's other parameters plus two groups (the one computing, the next in flight) of
# 64 of its 512 experts of one tensor: the gathered weights and the unit's gradient shrink, the
# pieces (argument) do not
# (the gathered high-water then becomes the head's: lm_head and its bf16 copy, 6.1 GB)
ok = g8["gathered_weight_bytes"] < g1["gathered_weight_bytes"] and g8["gradient_bytes"] < g1["gradient_bytes"]
ok = ok and g8["expert_groups"] == 8 and g8["argument_bytes"] == g1["argument_bytes"]
ok = ok and g1["total_bytes"] > 95e9 and g16u["total_bytes"] < 95e9
print(f"      total per device: {g1['total_bytes']/1e9:.1f} GB whole layers, {g8['total_bytes']/1e9:.1f} GB with 8 expert groups, "
      f"{g16u['total_bytes']/1e9:.1f} GB with 32 groups + per-layer updates (95 GB budget)")
sys.exit(0 if ok else 1)
PYEOF
expect_error "plan --expert-groups that does not divide the experts" "does not divide the model's 512 routed experts" \
    "$HYLA" plan configs/qwen3.5-397b-a17b.json --devices 64 --expert-groups 7
expect_error "plan --expert-groups on a dense model" "the model has no routed experts" \
    "$HYLA" plan configs/qwen3.5-0.8b.json --devices 4 --expert-groups 2
expect_error "plan --expert-groups without FSDP" "need --shard fsdp over more than one device" \
    "$HYLA" plan configs/qwen3.5-397b-a17b.json --devices 64 --shard none --expert-groups 8
# the plan of context parallelism at a real size: one 32,768-token sequence of Qwen3-Next-80B-A3B on 8
# devices, 8 slices: every rank's activations an eighth of the whole sequence's on one (the link
# on top), the link's messages in the bytes sent (a middle rank's both ways)
P80=(plan configs/qwen3-next-80b-a3b.json --seq 32768 --devices 8 --act-dtype bf16 --expert-groups 8 --update-per-layer --json)
"$HYLA" "${P80[@]}" > "$T/80b.json" && for r in 0 3 7; do "$HYLA" "${P80[@]}" --context-parallel 8 --rank $r > "$T/80b.cp$r.json" || break; done &&
    $PY - "$T/80b.json" "$T/80b.cp0.json" "$T/80b.cp3.json" "$T/80b.cp7.json" <<'PYEOF' && echo "  ok  plan --context-parallel 8: 32k tokens of Qwen3-Next-80B-A3B on 8 devices" || fail "plan --context-parallel 8 (80B, 32k)"
import json, sys
whole, *cp = (json.load(open(p)) for p in sys.argv[1:5])
act = lambda p: p["checkpoint_bytes"] + p["work_bytes"] + p["carry_bytes"] + p["offload_staging_bytes"]
ratio = act(cp[0]) / act(whole)
ok = 0.11 < ratio < 0.14 and all(p["context_parallel"] == 8 and p["context_bytes"] > 0 for p in cp)
# (the ranks' FSDP pieces differ by the alignment of the last ones: totals within 0.1%)
ok = ok and all(abs(p["total_bytes"] / cp[0]["total_bytes"] - 1) < 1e-3 for p in cp) and cp[0]["total_bytes"] < whole["total_bytes"]
ok = ok and cp[1]["context_comm_bytes"] > cp[0]["context_comm_bytes"]  # a middle rank sends both ways
print(f"      per rank: activations {act(cp[0])/1e9:.2f} GB = {ratio:.3f} x the whole sequence's {act(whole)/1e9:.2f} GB, "
      f"the link {cp[0]['context_bytes']/1e9:.3f} GB, total {cp[0]['total_bytes']/1e9:.1f} GB (without: {whole['total_bytes']/1e9:.1f}); "
      f"its messages {cp[0]['context_comm_bytes']/1e9:.2f} / {cp[1]['context_comm_bytes']/1e9:.2f} / {cp[2]['context_comm_bytes']/1e9:.2f} GB per step (ranks 0, 3, 7)")
sys.exit(0 if ok else 1)
PYEOF
expect_error "plan --context-parallel that does not divide the devices" "must divide --devices" \
    "$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 6 --context-parallel 4
expect_error "plan --context-parallel with a --seq that does not divide" "must divide into slices" \
    "$HYLA" plan configs/qwen3-next-80b-a3b.json --devices 4 --context-parallel 4 --seq 4098

# kill -9 of one rank mid-run: the others stop within seconds; the checkpoint is the last complete one
K=(--model "$T/m" --text data/kjv.txt --batch 2 --seq 64 --steps 100000 --save-every 2 --seed 5)
"${MPI[@]}" -np 2 "$HYLA" train "${K[@]}" --save "$T/k" >"$T/kout" 2>"$T/kerr" &
job=$!
for _ in $(seq 100); do [ -f "$T/k/trainer_state.json" ] && break; sleep 0.2; done
sleep 1
victim=$(pgrep -f "hyla train --model $T/m --text data/kjv.txt --batch 2 --seq 64" | tail -1)
[ -n "$victim" ] && kill -9 "$victim"
t0=$(date +%s.%N)
for _ in $(seq 150); do kill -0 $job 2>/dev/null || break; sleep 0.2; done
if kill -0 $job 2>/dev/null; then
    fail "kill -9 of a rank: the job still runs after 30 s"; kill -9 $job; pkill -9 -f "hyla train --model $T/m" 
else
    wait $job; rc=$?
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    sleep 0.5
    left=$(pgrep -fc "hyla train --model $T/m --text" || true)
    [ $rc -ne 0 ] && [ "$left" = 0 ] && "$HYLA" inspect "$T/k" >/dev/null 2>&1 &&
        "$HYLA" train --resume "$T/k" --steps "$(( $(sed -n 's/.*"step":[[:space:]]*\([0-9]*\).*/\1/p' "$T/k/trainer_state.json" | head -1) + 1 ))" --threads 1 >/dev/null 2>&1 &&
        echo "  ok  kill -9 of rank $victim: every rank stopped in ${secs%.*} s (rc $rc); the checkpoint left is complete (it resumes)" ||
        fail "kill -9 of a rank: rc $rc, $left processes left, or the checkpoint does not resume"
fi
# ... and of one rank while a sharded save is being written (its file appears in DIR.tmp.PID):
# nothing is published, the previous sharded checkpoint resumes
K=(--model "$T/m" --text data/kjv.txt --batch 2 --seq 64 --steps 100000 --save-every 3 --seed 5 --save-sharded)
"${MPI[@]}" -np 2 "$HYLA" train "${K[@]}" --save "$T/ks" >"$T/kout" 2>"$T/kerr" &
job=$!
for _ in $(seq 100); do [ -f "$T/ks/hyla-pieces.json" ] && break; sleep 0.2; done
victim=$(pgrep -f "hyla train --model $T/m --text data/kjv.txt --batch 2 --seq 64 --steps 100000 --save-every 3" | tail -1)
for _ in $(seq 20000); do compgen -G "$T/ks.tmp.*" >/dev/null && break; done # the next save has begun
[ -n "$victim" ] && kill -9 "$victim"
for _ in $(seq 150); do kill -0 $job 2>/dev/null || break; sleep 0.2; done
if kill -0 $job 2>/dev/null; then
    fail "kill -9 during a sharded save: the job still runs after 30 s"; kill -9 $job; pkill -9 -f "hyla train --model $T/m"
else
    wait $job; rc=$?
    sleep 0.5
    partial=$(compgen -G "$T/ks.tmp.*" | wc -l)
    step=$(sed -n 's/.*"step":[[:space:]]*\([0-9]*\).*/\1/p' "$T/ks/trainer_state.json" | head -1)
    [ $rc -ne 0 ] && [ "$partial" -ge 1 ] && [ -n "$step" ] && "${MPI[@]}" -np 2 "$HYLA" train --resume "$T/ks" --steps $((step + 1)) >"$T/kres" 2>&1 &&
        grep -q "^done: $((step + 1)) steps" "$T/kres" &&
        echo "  ok  kill -9 of a rank during a sharded save (rc $rc; the partial DIR.tmp.PID left beside, removed by the next save): the previous checkpoint (step $step) resumes" ||
        { fail "kill -9 during a sharded save: rc $rc, or the checkpoint (step $step) does not resume"; tail -3 "$T/kres"; }
fi
[ $fails -eq 0 ]
