#!/usr/bin/env bash
# FSDP at a size one process is not allowed: a 0.6B Qwen3-Next-shaped MoE
# (bench/configs/qwen3-next-0.6b-moe.json, 603M parameters: fp32 weights + gradient + AdamW
# moments = 9.7 GB) trained on 4 ranks, each in a memory cgroup of its own whose limit is below
# the whole model's training state (and below what a rank that loaded the whole model would
# need), then a sharded save, a resume of that checkpoint on 2 ranks (a higher limit: half the
# model per rank) and the shard-none control, which must not fit. Per rank: peak resident memory
# over the whole process (load, steps, save: /usr/bin/time's maximum RSS) against
# hyla plan --devices N --rank R --shard fsdp. Then the same 4-rank training with
# --expert-groups 8 (an MoE layer's experts gathered 4 of 32 at a time) under its own plan's
# limit. Writes JSON to stdout.
# usage: bench/fsdp_memory.sh [SEQ=64] [STEPS=2]   (as root, cgroup v1 memory controller; ~3 min)
set -euo pipefail
cd "$(dirname "$0")/.."
SEQ=${1:-64}; STEPS=${2:-2}
make -j"$(nproc)" build/hyla >/dev/null
MODEL=build/bench-models/qwen3-next-0.6b-moe
[ -f "$MODEL/model.safetensors" ] || { rm -rf "$MODEL"; ./build/hyla init --config bench/configs/qwen3-next-0.6b-moe.json --seed 5 --out "$MODEL" >/dev/null; }
CG=/sys/fs/cgroup/memory
[ -w "$CG" ] || { echo "bench/fsdp_memory.sh: needs a writable cgroup v1 memory controller at $CG (run as root)" >&2; exit 1; }
out=${KEEP:-$(mktemp -d)}; mkdir -p "$out"
trap 'rm -rf "$out"; for d in "$CG"/hyla_bench_*; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done; true' EXIT
# each rank: its own cgroup (LIMIT bytes, swap off), its peak RSS from /usr/bin/time
cat > "$out/rank.sh" <<'EOF'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:-0}; d=/sys/fs/cgroup/memory/hyla_bench_${TAG}_$r
mkdir -p "$d" && echo "$LIMIT" > "$d/memory.limit_in_bytes" && { echo "$LIMIT" > "$d/memory.memsw.limit_in_bytes"; } 2>/dev/null
echo $$ > "$d/cgroup.procs"
exec /usr/bin/time -f "%M" -o "$OUTDIR/$TAG.rss.$r" "$@"
EOF
chmod +x "$out/rank.sh"
MPI=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -x LIMIT -x OUTDIR -x TAG)
plan() { # NP RANK [TAG ARGS...] -> plan JSON
    local np=$1 r=$2 tag=${3:-}; shift 2; shift $(($# > 0 ? 1 : 0))
    ./build/hyla plan "$MODEL" --batch 1 --seq "$SEQ" --devices "$np" --rank "$r" --shard fsdp --threads 1 --json "$@" > "$out/plan$tag.$np.$r.json"
}
for r in 0 1 2 3; do plan 4 $r; plan 4 $r .g8 --expert-groups 8; done
for r in 0 1; do plan 2 $r; done
read -r STATE P4 P2 P4G < <(/usr/bin/python3 -c '
import json, sys
o = sys.argv[1]
p = json.load(open(f"{o}/plan.4.0.json"))
print(int(p["params"]) * 16, int(json.load(open(f"{o}/plan.4.0.json"))["total_bytes"]), int(json.load(open(f"{o}/plan.2.0.json"))["total_bytes"]),
      int(json.load(open(f"{o}/plan.g8.4.0.json"))["total_bytes"]))' "$out")
export OUTDIR=$out
TRAIN=(train --synthetic --batch 1 --seq "$SEQ" --seed 3 --warmup 1)
# 4 ranks: the limit is the plan + 8% (the process itself: binary, libraries, MPI)
export LIMIT=$((P4 * 108 / 100)) TAG=fsdp4
"${MPI[@]}" -np 4 "$out/rank.sh" ./build/hyla "${TRAIN[@]}" --model "$MODEL" --steps "$STEPS" --save-sharded --save "$out/ckpt" \
    --log-json "$out/fsdp4.jsonl" > "$out/fsdp4.out" 2>&1 || { tail -5 "$out/fsdp4.out" >&2; exit 1; }
LIMIT4=$LIMIT
# the resume on 2 ranks
export LIMIT=$((P2 * 108 / 100)) TAG=fsdp2
"${MPI[@]}" -np 2 "$out/rank.sh" ./build/hyla train --resume "$out/ckpt" --steps $((STEPS + 1)) \
    --log-json "$out/fsdp2.jsonl" > "$out/fsdp2.out" 2>&1 || { tail -5 "$out/fsdp2.out" >&2; exit 1; }
LIMIT2=$LIMIT
# 4 ranks with expert groups, under their own plan + 8%
export LIMIT=$((P4G * 108 / 100)) TAG=groups4
"${MPI[@]}" -np 4 "$out/rank.sh" ./build/hyla "${TRAIN[@]}" --model "$MODEL" --steps "$STEPS" --expert-groups 8 \
    --log-json "$out/groups4.jsonl" > "$out/groups4.out" 2>&1 || { tail -5 "$out/groups4.out" >&2; exit 1; }
LIMIT4G=$LIMIT
# the control: replicated weights and moments under the 4-rank limit
export LIMIT=$LIMIT4 TAG=none4
set +e
timeout 600 "${MPI[@]}" -np 4 "$out/rank.sh" ./build/hyla "${TRAIN[@]}" --model "$MODEL" --steps 1 --shard none > "$out/none4.out" 2>&1
none_rc=$?
set -e
/usr/bin/python3 - "$out" "$STATE" "$LIMIT4" "$LIMIT2" "$none_rc" "$LIMIT4G" <<'PY'
import json, sys
out, state, l4, l2, none_rc, l4g = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def ranks(tag, np, plan_tag=""):
    rows = []
    for r in range(np):
        plan = json.load(open(f"{out}/plan{plan_tag}.{np}.{r}.json"))["total_bytes"]
        rss = int(open(f"{out}/{tag}.rss.{r}").read().split()[-1]) * 1024
        rows.append({"rank": r, "peak_rss_bytes": rss, "planned_bytes": plan, "rss_over_plan": round(rss / plan, 4)})
    return rows
res = {"bench": "fsdp_memory", "model": "bench/configs/qwen3-next-0.6b-moe.json",
       "whole_training_state_bytes": state,
       "train_4_ranks": {"limit_per_rank_bytes": l4, "limit_over_whole_state": round(l4 / state, 3), "ranks": ranks("fsdp4", 4)},
       "resume_sharded_on_2_ranks": {"limit_per_rank_bytes": l2, "ranks": ranks("fsdp2", 2)},
       "train_4_ranks_expert_groups_8": {"limit_per_rank_bytes": l4g, "ranks": ranks("groups4", 4, ".g8")},
       "shard_none_under_the_4_rank_limit": {"exit_status": none_rc, "fits": none_rc == 0}}
print(json.dumps(res, indent=1))
PY
