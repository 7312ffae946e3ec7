#!/usr/bin/env bash
# GGUF conformance (tests/gguf/conformance.py): hyla's GGUF export read by the official gguf package
# and run by llama.cpp, all three architectures, F32 / F16 / BF16 / Q8_0 (and the tokenizers library
# reading the tokenizer.json a directory made from a GGUF file holds).
# usage: tests/gguf/conformance.sh [HYLA] [JSON_OUT]     (needs .venv from scripts/pydeps.sh)
cd "$(dirname "$0")/../.." && exec tests/py_oracle.sh "gguf, llama_cpp, numpy, tokenizers" "GGUF conformance" \
    tests/gguf/conformance.py "${1:-build/hyla}" ${2:+--json "$2"}
