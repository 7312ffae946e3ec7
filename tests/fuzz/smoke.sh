#!/usr/bin/env bash
# Fuzz smoke test: build the harnesses (make fuzz), make the seed corpora (make_corpus.sh) and run
# every harness for SECONDS (default 20) on a copy of its corpus (build/fuzz/corpus/<h> plus the
# committed tests/fuzz/seeds/<h>), up to $(nproc) at a time. Exits non-zero on any crash, leak,
# timeout or OOM, naming the harness and the reproducer.
# Usage: tests/fuzz/smoke.sh [SECONDS]
# A long run: FUZZ_OUT=build-fuzz/long FUZZ_JOBS=2 tests/fuzz/smoke.sh 600 (10 min per harness, one core each).
# env: FUZZ_JOBS (harnesses at a time), FUZZ_ONLY="h1 h2" (a subset), FUZZ_SKIP_BUILD=1 (no make fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-20}
JOBS=${FUZZ_JOBS:-$(nproc)}
# harness and its -max_len (bytes)
HARNESSES=(
    "fuzz_safetensors 32768"
    "fuzz_model_load 32768"
    "fuzz_st_index 1200000"      # the hyla-written sharded seed is ~1.1 MB (shards are >= 1 MiB)
    "fuzz_config 8192"
    "fuzz_tokenizer 16384"
    "fuzz_tokenizer_encode 4096"
    "fuzz_tokens 4096"
    "fuzz_routing 4096"
    "fuzz_checkpoint_state 32768"
    "fuzz_jsonl 8192"
    "fuzz_gguf 65536"
    "fuzz_gguf_model 65536"
)

mkdir -p build-fuzz
[ -n "${FUZZ_SKIP_BUILD:-}" ] || make -j"$(nproc)" fuzz >build-fuzz/build.log 2>&1 || { echo "fuzz smoke: make fuzz failed (build-fuzz/build.log)"; tail -20 build-fuzz/build.log; exit 1; }
[ -f tests/tokenizer/qwen3/tokenizer.json ] || gunzip -c tests/tokenizer/qwen3/tokenizer.json.gz > tests/tokenizer/qwen3/tokenizer.json
tests/fuzz/make_corpus.sh build/fuzz/corpus >/dev/null

export OMP_NUM_THREADS=1
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SMOKE=${FUZZ_OUT:-build-fuzz/smoke}   # FUZZ_OUT: keep a long run apart from the CI smoke
rm -rf "$SMOKE"

run_one() { # name max_len
    local h=$1 max=$2 d=$SMOKE/$1
    mkdir -p "$d/corpus" "$d/artifacts"
    cp build/fuzz/corpus/"$h"/* "$d/corpus/" 2>/dev/null || true
    cp tests/fuzz/seeds/"$h"/* "$d/corpus/" 2>/dev/null || true
    local rc=0
    build-fuzz/fuzz/"$h" -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=10 -max_len="$max" \
        -print_final_stats=1 -artifact_prefix="$d/artifacts/" "$d/corpus" >"$d/log" 2>&1 || rc=$?
    echo "$rc" >"$d/rc"
}

running=0
for entry in "${HARNESSES[@]}"; do
    set -- $entry
    if [ -n "${FUZZ_ONLY:-}" ] && [[ " $FUZZ_ONLY " != *" $1 "* ]]; then continue; fi
    run_one "$1" "$2" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

fail=0
for entry in "${HARNESSES[@]}"; do
    set -- $entry
    h=$1 d=$SMOKE/$1
    [ -f "$d/rc" ] || continue
    rc=$(cat "$d/rc")
    found=$(find "$d/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
    done_line=$(grep -E '^#[0-9]+.*cov: ' "$d/log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$d/log" | tail -1)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log" | tail -1)
    if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
        fail=1
        echo "  FAIL  $h (rc $rc; log: $d/log)"
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*ALARM|.*out-of-memory)' "$d/log" | head -5 | sed 's/^/        /'
        for f in $found; do echo "        reproducer: $f   (rerun: build-fuzz/fuzz/$h $f)"; done
    else
        printf '  ok    %-24s %8s execs  %6s exec/s  cov: %-5s ft: %s\n' "$h" "${runs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}"
    fi
done
exit $fail
