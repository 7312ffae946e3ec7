#!/usr/bin/env bash
# Threads under load: hyla's decode and training tokens/s on a quiet machine and with competing
# CPU-bound processes (one busy loop per core), for --threads 1 and, with --threads 2: hyla's
# default OpenMP wait (a bounded spin, GOMP_SPINCOUNT=30000, set by the CLI), a passive wait
# (OMP_WAIT_POLICY=passive) and libgomp's own default (GOMP_SPINCOUNT=300000, what hyla ran with
# before). Each figure is the best of REPEATS runs. JSON on stdout.
# usage: bench/threads_under_load.sh [REPEATS]   (env: MODEL_PRESET, default tiny-hybrid)
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-3}
PRESET=${MODEL_PRESET:-tiny-hybrid}
make -j"$(nproc)" build/hyla >/dev/null
MODEL=build/bench-models/$PRESET
[ -f "$MODEL/model.safetensors" ] || { rm -rf "$MODEL"; ./build/hyla init --preset "$PRESET" --seed 5 --out "$MODEL" >/dev/null; }
unset OMP_NUM_THREADS OMP_WAIT_POLICY GOMP_SPINCOUNT

decode_tps() { # ENV... -- THREADS
    "$@" ./build/hyla generate "$MODEL" --prompt-tokens 1,2,3,4,5,6,7,8 --max-new 128 --threads "$T" 2>&1 \
        | sed -n 's/.*decode [0-9]* tokens at \([0-9.]*\) tokens\/s.*/\1/p' | tail -1
}
train_tps() {
    "$@" ./build/hyla train --model "$MODEL" --synthetic --steps 8 --batch 4 --seq 64 --threads "$T" 2>&1 \
        | sed -n 's/^step .* \([0-9]*\) tok\/s.*/\1/p' | tail -3 | sort -n | tail -1
}
best() { # FUNC ENV...: the best of REPEATS
    local f=$1 b=0 v; shift
    for _ in $(seq "$REPEATS"); do v=$($f "$@"); v=${v:-0}; b=$(python3 -c "print(max($b, $v))"); done
    echo "$b"
}
measure() { # LABEL
    local out="\"$1\": {"
    local sep=""
    for mode in "threads1" "threads2" "threads2_passive" "threads2_libgomp_default"; do
        case $mode in
            threads1) T=1; envs=(env) ;;
            threads2) T=2; envs=(env) ;;
            threads2_passive) T=2; envs=(env OMP_WAIT_POLICY=passive) ;;
            threads2_libgomp_default) T=2; envs=(env GOMP_SPINCOUNT=300000) ;;
        esac
        out+="$sep\"$mode\": {\"decode_tokens_per_s\": $(best decode_tps "${envs[@]}"), \"train_tokens_per_s\": $(best train_tps "${envs[@]}")}"
        sep=", "
    done
    echo "$out}"
}
quiet=$(measure quiet)
pids=()
for _ in $(seq "$(nproc)"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
loaded=$(measure "loaded_${#pids[@]}_busy_processes")
kill "${pids[@]}" 2>/dev/null || true
echo "{\"model\": \"$PRESET\", \"cores\": $(nproc), \"repeats\": $REPEATS, $quiet, $loaded}"
