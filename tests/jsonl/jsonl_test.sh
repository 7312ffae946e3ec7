#!/usr/bin/env bash
# JSONL / chat data against the tokenizers library and a float64 loss oracle (tests/jsonl/jsonl_test.py).
# usage: tests/jsonl/jsonl_test.sh [HYLA]     (needs .venv from scripts/pydeps.sh)
cd "$(dirname "$0")/../.." && exec tests/py_oracle.sh "tokenizers, numpy" "the JSONL data test" \
    tests/jsonl/jsonl_test.py "${1:-build/hyla}"
