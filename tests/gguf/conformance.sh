#!/usr/bin/env bash
# GGUF conformance (tests/gguf/conformance.py): hyla's GGUF export read by the official gguf package
# and run by llama.cpp, all three architectures, F32 / F16 / BF16 / Q8_0.
# usage: tests/gguf/conformance.sh [HYLA] [JSON_OUT]     (needs .venv from scripts/pydeps.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
HYLA=${1:-build/hyla}
PY=.venv/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c "import gguf, llama_cpp, numpy" 2>/dev/null; then
    echo "  SKIPPED: GGUF conformance needs gguf and llama-cpp-python in .venv (scripts/pydeps.sh installs them)"
    exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" tests/gguf/conformance.py "$HYLA" "$W" ${2:+--json "$2"}
