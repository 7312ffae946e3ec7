#!/usr/bin/env bash
# Training across processes (issue: MPI data parallel + FSDP): bench-100m, the same global batch
# (2 micro-batches of BATCH x SEQ per step) as 2 ranks x 1 thread (mpirun -np 2, --accum 1) with
# shard none, shard fsdp, shard fsdp --no-prefetch, shard fsdp --overlap-reduce, and shard fsdp
# --expert-groups 4 without and with --overlap-reduce, and shard fsdp --context-parallel 2 (each
# sequence in two slices), and as 1 process x 2 threads (--accum 2).
# Paired runs (the eight in turn, REPEATS times) so drift hits all alike; a run's step time is the
# mean over steps 2..STEPS, the best run of REPEATS kept. Reports tokens/s and the ratio to one
# process, bytes each rank sends per step (measured, and planned by hyla plan --devices 2
# --shard ...), per-rank weight / gradient / moment bytes, seconds in collectives, and the share of
# communication hidden behind compute: FSDP's weight gathers, 1 - (gather wait with the
# prefetch) / (gather wait without it); the gradient reductions' time and share of the step,
# and the share of FSDP's reduce-scatters that --overlap-reduce hides, 1 - (its wait for them) /
# (the blocking run's time in them); context parallelism's state passing (the delta-rule chain,
# what of it compute still waits for) and the link's messages, their shares of the step.
# usage: bench/dist_train.sh [BATCH=1] [SEQ=512] [STEPS=4] [REPEATS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-1}; SEQ=${2:-512}; STEPS=${3:-4}; REPEATS=${4:-2}; THREADS=2
. bench/common.sh
bench_setup bench-100m gemm_bench
unset OMP_NUM_THREADS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
CONFIGS=(none fsdp fsdp_noprefetch fsdp_overlap fsdp_groups fsdp_groups_overlap fsdp_context)
flags() { # CONFIG -> its train / plan flags
    case $1 in
    none) echo --shard none ;; fsdp) echo --shard fsdp ;; fsdp_noprefetch) echo --shard fsdp --no-prefetch ;;
    fsdp_overlap) echo --shard fsdp --overlap-reduce ;; fsdp_groups) echo --shard fsdp --expert-groups 4 ;;
    fsdp_groups_overlap) echo --shard fsdp --expert-groups 4 --overlap-reduce ;;
    fsdp_context) echo --shard fsdp --context-parallel 2 ;;
    esac
}
TRAIN=(train --model "$MODEL" --synthetic --steps "$STEPS" --batch "$B" --seq "$SEQ" --warmup 1 --seed 3)
for i in $(seq "$REPEATS"); do
    ./build/hyla "${TRAIN[@]}" --accum 2 --threads 2 --log-json "$out/one.$i.jsonl" >/dev/null
    for sh in "${CONFIGS[@]}"; do
        read -ra extra <<< "$(flags "$sh")"
        # (context parallel: the step's 2 micro-batches of B x SEQ each cut into 2 slices, --accum 2 per rank)
        [ "$sh" = fsdp_context ] && extra+=(--accum 2)
        mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to core ./build/hyla "${TRAIN[@]}" --accum 1 --threads 1 \
            "${extra[@]}" --log-json "$out/$sh.$i.jsonl" >/dev/null
    done
done
for sh in "${CONFIGS[@]}"; do
    read -ra extra <<< "$(flags "$sh")"
    [ "$sh" = fsdp_context ] && extra+=(--accum 2)
    ./build/hyla plan "$MODEL" --batch "$B" --seq "$SEQ" --devices 2 "${extra[@]}" --threads 1 --json > "$out/plan.$sh.json"
done
/usr/bin/python3 - "$out" "$REPEATS" <<'PY'
import json, sys
out, reps = sys.argv[1], int(sys.argv[2])
def run(path):
    rec = [json.loads(l) for l in open(path)][1:]  # step 1 pays for first touches
    secs = sum(r["seconds"] for r in rec) / len(rec)
    comm = sum(r["comm_seconds"] for r in rec) / len(rec)
    keys = ("comm_bytes", "weight_bytes", "gradient_bytes", "optimizer_bytes", "activation_bytes")
    wait = sum(r["gather_wait_seconds"] for r in rec) / len(rec)
    reduce = sum(r["reduce_seconds"] for r in rec) / len(rec)
    reduce_wait = sum(r["reduce_wait_seconds"] for r in rec) / len(rec)
    context = sum(r["context_seconds"] for r in rec) / len(rec)
    chain = sum(r["context_chain_seconds"] for r in rec) / len(rec)
    return {"tokens_per_s": rec[0]["tokens"] / secs, "step_seconds": secs, "comm_seconds": comm,
            "gather_wait_seconds": wait, "gradient_reduce_seconds": reduce, "gradient_reduce_wait_seconds": reduce_wait,
            "context_seconds": context, "state_passing_seconds": chain,
            **{k: rec[-1][k] for k in keys}}
def best(name):
    return max((run(f"{out}/{name}.{i}.jsonl") for i in range(1, reps + 1)), key=lambda r: r["tokens_per_s"])
one = best("one")
res = {"benchmark": "dist_train", "model": "bench-100m", "one_process_2_threads": one}
for sh in ("none", "fsdp", "fsdp_noprefetch", "fsdp_overlap", "fsdp_groups", "fsdp_groups_overlap", "fsdp_context"):
    two, plan = best(sh), json.load(open(f"{out}/plan.{sh}.json"))
    res["global_batch"] = "2 x %s x %s" % (plan["batch"], plan["seq"])
    two["comm_share_of_step"] = two["comm_seconds"] / two["step_seconds"]
    two["comm_hidden_fraction"] = 0.0  # blocking collectives (fsdp: set below from the gather waits)
    two["comm_bytes_planned"] = plan["comm_bytes"]
    # the gradient reductions: their share of the step, and (--overlap-reduce, below) the share of
    # the blocking run's that the overlap hid; there is no state passing (no context parallelism yet)
    two["gradient_reduce_share_of_step"] = two["gradient_reduce_seconds"] / two["step_seconds"]
    two["gradient_reduce_hidden_fraction"] = 0.0
    two["comm_gbytes_per_s"] = two["comm_bytes"] / two["comm_seconds"] / 1e9 if two["comm_seconds"] else None
    two["tokens_per_s_vs_one_process"] = two["tokens_per_s"] / one["tokens_per_s"]
    two["state_bytes_vs_one_process"] = (two["weight_bytes"] + two["gradient_bytes"] + two["optimizer_bytes"]) / (
        one["weight_bytes"] + one["gradient_bytes"] + one["optimizer_bytes"])
    res[f"two_ranks_1_thread_shard_{sh}"] = two
# FSDP's gathers: the share of the blocking run's gather wait that the prefetch hid (the reduce-
# scatters and the norm stay blocking, as in shard none)
blocking, hidden = res["two_ranks_1_thread_shard_fsdp_noprefetch"], res["two_ranks_1_thread_shard_fsdp"]
if blocking["gather_wait_seconds"] > 0:
    hidden["comm_hidden_fraction"] = 1 - hidden["gather_wait_seconds"] / blocking["gather_wait_seconds"]
    hidden["comm_hidden_of"] = "weight gathers (vs --no-prefetch)"
ov, rs = res["two_ranks_1_thread_shard_fsdp_overlap"], res["two_ranks_1_thread_shard_fsdp"]
if rs["gradient_reduce_seconds"] > 0:
    ov["gradient_reduce_hidden_fraction"] = 1 - ov["gradient_reduce_wait_seconds"] / rs["gradient_reduce_seconds"]
    ov["gradient_reduce_hidden_of"] = "reduce-scatters (vs the blocking ones of shard fsdp)"
# expert groups (--expert-groups 4: bench-100m's 8 experts gathered 2 at a time inside the experts
# ops, the next group prefetched): their gathers' wait against plain FSDP's, and the share of the
# groups' blocking reduce-scatters (and the units') that --overlap-reduce hides
gov, gr = res["two_ranks_1_thread_shard_fsdp_groups_overlap"], res["two_ranks_1_thread_shard_fsdp_groups"]
if gr["gradient_reduce_seconds"] > 0:
    gov["gradient_reduce_hidden_fraction"] = 1 - gov["gradient_reduce_wait_seconds"] / gr["gradient_reduce_seconds"]
    gov["gradient_reduce_hidden_of"] = "the units' and expert groups' reduce-scatters (vs --expert-groups 4 blocking)"
if blocking["gather_wait_seconds"] > 0:
    gr["comm_hidden_fraction"] = 1 - gr["gather_wait_seconds"] / blocking["gather_wait_seconds"]
    gr["comm_hidden_of"] = "weight gathers, layer parts and expert groups prefetched (vs --no-prefetch without groups)"
# context parallelism (--context-parallel 2: each of the step's sequences cut in two, a slice per
# rank): the state passing (the delta rule's chain, point to point, pipelined over consecutive
# Gated DeltaNet layers: what is left is the time a rank still waits for the state, the bubble
# included) and the link's messages in all, their shares of the step; the chain as one process
# would run it serially is not measured, so no hidden fraction is claimed
cx = res["two_ranks_1_thread_shard_fsdp_context"]
cx["state_passing_share_of_step"] = cx["state_passing_seconds"] / cx["step_seconds"]
cx["context_messages_share_of_step"] = cx["context_seconds"] / cx["step_seconds"]
# hidden: against the chain run rank after rank (no pipelining), where rank r would wait, per
# chain, for the delta rules of the r ranks before it (forward) and of the C - 1 - r after it
# (backward): 1 - (the waits measured, every rank) / (those serial waits, from each rank's own
# delta-rule time inside the chain; slices of equal size)
C, hid = 2, []
for i in range(1, reps + 1):
    wait = serial = 0.0
    for r in range(C):
        recs = [json.loads(l) for l in open(f"{out}/fsdp_context.{i}.jsonl" + (f".rank{r}" if r else ""))][1:]
        wait += sum(x["context_chain_wait_seconds"] for x in recs)
        serial += sum(r * x["context_chain_run_seconds"][0] + (C - 1 - r) * x["context_chain_run_seconds"][1] for x in recs)
    hid.append(1 - wait / serial if serial > 0 else 0.0)
cx["state_passing_hidden_fraction"] = sum(hid) / len(hid)
cx["state_passing_hidden_of"] = "the chain's waits against the chain run rank after rank (pipelined over layers)"
print(json.dumps(res, indent=1))
PY
