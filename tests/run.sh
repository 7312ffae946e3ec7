#!/usr/bin/env bash
# hyla test suite: release build + sanitizer build, unit tests, oracle comparisons, CLI tests.
# Every step must pass; the first failure stops the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
PY=/usr/bin/python3   # Debian's python, where python3-torch lives

echo "== build (release, sanitizer)"
make -j"$JOBS" all >/dev/null
make -j"$JOBS" asan >/dev/null

echo "== oracle: generate reference models and expected outputs (PyTorch, float64)"
CASES=build/cases
rm -rf "$CASES"
$PY tests/reference/make_cases.py "$CASES"

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# ASan: LeakSanitizer cannot trace through OpenMP's thread-local pools reliably; leaks are
# still reported for ordinary allocations. UBSan aborts on the first finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

fail=0
for build in build build-asan; do
    echo "== unit and oracle tests ($build)"
    for t in "$build"/tests/*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        if "$t" "$CASES" > "build/$name.$(basename $build).log" 2>&1; then
            echo "  ok    $name"
        else
            echo "  FAIL  $name (log: build/$name.$(basename $build).log)"; tail -20 "build/$name.$(basename $build).log"; fail=1
        fi
    done
    echo "== CLI tests ($build)"
    if tests/cli_test.sh "$build/hyla" "$CASES"; then echo "  ok    cli_test.sh"; else echo "  FAIL  cli_test.sh"; fail=1; fi
done
if [ $fail -ne 0 ]; then
    echo "TESTS FAILED"; exit 1
fi
echo "ALL TESTS PASSED"
