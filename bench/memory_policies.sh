#!/usr/bin/env bash
# Memory-policy benchmark (issue: host offload and --remat auto): step time against activation
# memory for `full`, --remat auto at equal and larger budgets (with and without offloading), and
# the offloading presets against their on-device twins. One JSON document; figures as ratios.
#
# Budgets are `hyla train --memory-budget` values: planned peak = arguments (parameters,
# optimizer moments, batch) + temp (activations, gradients). Everything but the activations is
# the same for every policy, so the sweep scales full's planned activation bytes A_full:
# budget(F) = peak_full + (F - 1) * A_full, F = 1 (equal memory), 1.25, 1.5, 2, and none's
# planned peak. Each row: the auto policy chosen for the budget, its planned peak, its measured
# activation bytes (hyla_trainer_activation_bytes) and its best step time (first step warm-up).
#
# Times are paired (train_bench --vs full:layer): this VM's speed drifts by 10-20% over tens of
# seconds, more than the differences measured, so each row runs next to a fresh `full` trainer,
# their timed steps alternating ABBA; time_vs_full = row's best step / full's best step in the
# same window (also the median of per-pair ratios). `full` itself runs as a row first and last:
# an A/A check whose distance from 1 is the run's noise (noise_aa_full_vs_full). A budget that
# chooses a policy already measured is not measured again (same_policy_as). A row whose own or
# full's step times spread by more than 10% (max/min) caught a burst of host noise: noisy.
# usage: bench/memory_policies.sh [THREADS=2] [BATCH=1] [SEQ=512] [STEPS=4]   (~4 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}; B=${2:-1}; SEQ=${3:-512}; STEPS=${4:-4}
. bench/common.sh
bench_setup bench-100m train_bench
specs=(full:layer none:layer minimal:layer minimal_offloaded:layer save_qkv_proj:layer qkv_proj_offloaded:layer)
for f in 1 1.25 1.5 2 none; do
    if [ "$f" = none ]; then ref=none; else ref="full*$f"; fi
    specs+=("auto@$ref:layer" "auto-nohost@$ref:layer")
done
specs+=(full:layer)
start=$(date +%s.%N)
rows=$(./build/bench/train_bench "$MODEL" "$B" "$SEQ" "$STEPS" --vs full:layer "${specs[@]}")
end=$(date +%s.%N)
/usr/bin/python3 - "$rows" "$THREADS" "$start" "$end" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
measured = {f'{r["policy"]}:{r["unit"]}': r for r in rows if "same_as" not in r}
for r in rows:  # a policy chosen twice was measured once: copy its figures
    if "same_as" in r:
        r.update({k: v for k, v in measured[r["same_as"]].items() if k not in r and k != "chosen"})
threads, wall = int(sys.argv[2]), float(sys.argv[4]) - float(sys.argv[3])
fulls = [r for r in rows if r["policy"] == "full"]
full = fulls[0]
a_full, p_full = full["activation_bytes"], full["planned_peak_bytes"]
by = {r["policy"]: r for r in rows}
# A/A: full against itself; how far from 1 its ratios land is this run's noise
noise = max(max(abs(r["time_vs_ref"] - 1), abs(r["time_vs_ref_median_pair"] - 1)) for r in fulls)

def compact(chosen):  # the same policy in short custom syntax (unlisted names: remat)
    kv = [e.split("=") for e in chosen[len("custom:"):].split(",")]
    return "custom:" + ",".join(f"{k}={v}" for k, v in kv if v != "remat" or k == "decoder_layer_input")

def spread(t):
    return max(t) / min(t) - 1

NOISY = 0.10  # a row whose own or whose full's step times spread wider than this had a burst of host noise

def base(r):
    sp = max(spread(r["step_seconds"]), spread(r["ref_step_seconds"]))
    return {"spread": sp, "noisy": sp > NOISY,"time_vs_full": r["time_vs_ref"], "time_vs_full_median_pair": r["time_vs_ref_median_pair"],
            "activation_bytes": r["activation_bytes"], "activation_vs_full": r["activation_bytes"] / a_full,
            "planned_peak_bytes": r["planned_peak_bytes"], "planned_peak_vs_full": r["planned_peak_bytes"] / p_full,
            "gemm_flops_vs_full": r["gemm_flops_per_step"] / full["gemm_flops_per_step"],
            "best_step_seconds": r["best_step_seconds"], "full_best_step_seconds": r["ref_best_step_seconds"],
            "step_seconds": r["step_seconds"], "full_step_seconds": r["ref_step_seconds"]}

reference = {p: dict(base(by[p]), policy=p) for p in ("none", "minimal", "save_qkv_proj")}
reference["full_aa"] = [dict(base(r), policy="full") for r in fulls]

auto = {"with_offload": [], "without_offload": []}
for r in rows:
    if not r["policy"].startswith("auto"):
        continue
    ref = r["policy"].split("@")[1]
    factor = float(ref.split("*")[1]) if "*" in ref else (1.0 if ref == "full" else None)
    row = dict(budget=ref, budget_bytes=r["budget_bytes"], activation_factor=factor,
               budget_activation_vs_full=(r["budget_bytes"] - p_full) / a_full + 1,
               chosen=compact(r["chosen"]), same_policy_as=r.get("same_as"), **base(r),
               host_bytes=r["host_bytes"], offload_bytes_per_step=r["offload_bytes_per_step"],
               copy_seconds_per_step=r["copy_seconds_per_step"], copy_hidden_fraction=r["copy_hidden_fraction"])
    auto["without_offload" if r["policy"].startswith("auto-nohost") else "with_offload"].append(row)

offload = []
for off, dev in (("minimal_offloaded", "minimal"), ("qkv_proj_offloaded", "save_qkv_proj")):
    o, d = by[off], by[dev]
    offload.append(dict(policy=off, device_twin=dev, time_vs_twin=o["time_vs_ref"] / d["time_vs_ref"],
                        activation_vs_twin=o["activation_bytes"] / d["activation_bytes"],
                        twin_time_vs_full=d["time_vs_ref"], twin_activation_bytes=d["activation_bytes"], **base(o),
                        host_bytes=o["host_bytes"], offload_bytes_per_step=o["offload_bytes_per_step"],
                        copy_seconds_per_step=o["copy_seconds_per_step"],
                        copy_wait_seconds_per_step=o["copy_wait_seconds_per_step"],
                        copy_seconds_vs_step=o["copy_seconds_per_step"] / o["best_step_seconds"],
                        copy_hidden_fraction=o["copy_hidden_fraction"]))

every = auto["with_offload"] + auto["without_offload"]
eq = {k: [r for r in v if r["activation_factor"] == 1.0][0] for k, v in auto.items()}
slower = [f'{r["budget"]} ({k}): {r["time_vs_full"]:.3f}' + (" (noisy)" if r["noisy"] else "")
          for k, v in auto.items() for r in v if r["time_vs_full"] > 1]
summary = {
    "auto_equal_memory_vs_full_time_ratio": {k: r["time_vs_full"] for k, r in eq.items()},
    "auto_equal_memory_vs_full_time_ratio_median_pair": {k: r["time_vs_full_median_pair"] for k, r in eq.items()},
    "auto_equal_memory_chosen": {k: r["chosen"] for k, r in eq.items()},
    "auto_equal_memory_planned_peak_le_full": {k: r["planned_peak_bytes"] <= p_full for k, r in eq.items()},
    "auto_equal_memory_measured_activation_vs_full": {k: r["activation_vs_full"] for k, r in eq.items()},
    "auto_never_slower": not slower,
    "auto_never_slower_within_noise": all(r["time_vs_full"] <= 1 + noise for r in every),
    "auto_never_slower_excluding_noisy_rows": all(r["time_vs_full"] <= 1 for r in every if not r["noisy"]),
    "auto_never_slower_median_pair": all(r["time_vs_full_median_pair"] <= 1 for r in every),
    "noise_aa_full_vs_full": noise,
    "auto_slower_rows": slower,
    "noisy_rows": [f'{r["budget"]} ({k})' for k, v in auto.items() for r in v if r["noisy"]] +
                  [p for p in ("none", "minimal", "save_qkv_proj") if reference[p]["noisy"]] +
                  [o["policy"] for o in offload if o["noisy"]] + ["full A/A" for r in reference["full_aa"] if r["noisy"]],
    "auto_time_vs_full_min_max": [min(r["time_vs_full"] for r in every), max(r["time_vs_full"] for r in every)],
    "auto_planned_peak_within_budget": all(r["planned_peak_bytes"] <= r["budget_bytes"] for r in every),
    "none_vs_full_time_ratio": reference["none"]["time_vs_full"],
    "none_vs_full_activation_ratio": reference["none"]["activation_vs_full"],
    "offloaded_vs_device_time_ratio": {o["policy"]: o["time_vs_twin"] for o in offload},
    "offloaded_vs_device_activation_ratio": {o["policy"]: o["activation_vs_twin"] for o in offload},
    "hidden_copy_fraction": dict({o["policy"]: o["copy_hidden_fraction"] for o in offload},
                                 auto_equal_memory=eq["with_offload"]["copy_hidden_fraction"]),
}
print(json.dumps({"benchmark": "memory_policies", "model": "bench-100m", "threads": threads, "batch": full["batch"],
                  "seq": full["seq"], "steps": full["steps"], "unit": "layer", "timing": "paired with full",
                  "wall_seconds": wall, "summary": summary, "reference": reference, "auto": auto, "offload": offload},
                 indent=1))
PY
