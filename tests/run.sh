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

# The real Qwen3 tokenizer.json (11 MB) is committed gzip-compressed (2 MB).
gunzip -c tests/tokenizer/qwen3/tokenizer.json.gz > tests/tokenizer/qwen3/tokenizer.json

echo "== tokenizer oracle: tests/tokenizer/expected.json against Hugging Face tokenizers (.venv)"
# test_tokenizer itself reads the committed expected.json; here the oracle library recomputes it.
TOKDIR=tests/tokenizer
if [ -x .venv/bin/python ] && .venv/bin/python -c "import tokenizers" 2>/dev/null; then
    if .venv/bin/python "$TOKDIR/oracle.py" "$TOKDIR/texts.json" build/tokenizer_expected.json --check "$TOKDIR/expected.json" >/dev/null; then
        echo "  ok    expected.json == the tokenizers library's ids on every text"
    else
        echo "  FAIL  $TOKDIR/expected.json differs from the tokenizers library: .venv/bin/python $TOKDIR/oracle.py $TOKDIR/texts.json OUT --check $TOKDIR/expected.json"; exit 1
    fi
else
    echo "  SKIPPED: no tokenizers library in .venv (scripts/pydeps.sh installs it)"
fi

echo "== architecture floors"
tests/check_floors.sh

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
    echo "== hostile input, output directories, kill -9 ($build)"
    if tests/hardening_test.sh "$build/hyla" "$CASES"; then echo "  ok    hardening_test.sh"; else echo "  FAIL  hardening_test.sh"; fail=1; fi
    echo "== LoRA adapters (PEFT format) against transformers + PEFT golden files ($build)"
    if tests/peft/peft_test.sh "$build/hyla"; then echo "  ok    peft_test.sh"; else echo "  FAIL  peft_test.sh"; fail=1; fi
    echo "== LoRA fine-tuning through the CLI: frozen base, exact resume, bad flags ($build)"
    if tests/lora/lora_cli_test.sh "$build/hyla"; then echo "  ok    lora_cli_test.sh"; else echo "  FAIL  lora_cli_test.sh"; fail=1; fi
    echo "== packing through the CLI: eval --pack == --no-pack, exact resume, bad flags ($build)"
    if tests/pack/pack_cli_test.sh "$build/hyla"; then echo "  ok    pack_cli_test.sh"; else echo "  FAIL  pack_cli_test.sh"; fail=1; fi
    echo "== the MTP head: training with the MTP loss, exact resume, plan, --draft == plain greedy ($build)"
    if tests/mtp/mtp_cli_test.sh "$build/hyla" "$CASES"; then echo "  ok    mtp_cli_test.sh"; else echo "  FAIL  mtp_cli_test.sh"; fail=1; fi
    echo "== bf16 CLI tests ($build)"
    if tests/bf16/bf16_cli_test.sh "$build/hyla" "$CASES"; then echo "  ok    bf16_cli_test.sh"; else echo "  FAIL  bf16_cli_test.sh"; fail=1; fi
    echo "== JSONL and chat data: tokenizers library, masked-loss oracle, shuffling ($build)"
    if tests/jsonl/jsonl_test.sh "$build/hyla"; then echo "  ok    jsonl_test.sh"; else echo "  FAIL  jsonl_test.sh"; fail=1; fi
    echo "== training across processes: mpirun data parallel == one process, bit for bit ($build)"
    # ASan: OpenMPI's own start-up allocations are reported as leaks; the address checks stay on
    if ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0} tests/mpi/mpi_cli_test.sh "$build/hyla" "$CASES"; then
        echo "  ok    mpi_cli_test.sh"; else echo "  FAIL  mpi_cli_test.sh"; fail=1; fi
    echo "== hyla serve with the openai client and curl ($build)"
    if tests/serve/serve_test.sh "$build/hyla" "build/serve_load.$build.json"; then echo "  ok    serve_test.sh"; else echo "  FAIL  serve_test.sh"; fail=1; fi
done
echo "== install: make install, pkg-config, examples/generate.c"
if tests/install_test.sh; then echo "  ok    install_test.sh"; else echo "  FAIL  install_test.sh"; fail=1; fi
echo "== GGUF conformance: gguf package + llama.cpp (tests/gguf/conformance.sh)"
if tests/gguf/conformance.sh build/hyla build/gguf_conformance.json; then echo "  ok    gguf conformance"; else echo "  FAIL  gguf conformance"; fail=1; fi
echo "== fuzz smoke (tests/fuzz/smoke.sh 20: every libFuzzer harness for 20 s)"
if tests/fuzz/smoke.sh 20; then echo "  ok    fuzz smoke"; else echo "  FAIL  fuzz smoke"; fail=1; fi
if [ $fail -ne 0 ]; then
    echo "TESTS FAILED"; exit 1
fi
echo "ALL TESTS PASSED"
