#!/usr/bin/env bash
# JSONL / chat data against the tokenizers library and a float64 loss oracle (tests/jsonl/jsonl_test.py).
# usage: tests/jsonl/jsonl_test.sh [HYLA]     (needs .venv from scripts/pydeps.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
HYLA=${1:-build/hyla}
PY=.venv/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c "import tokenizers, numpy" 2>/dev/null; then
    echo "  SKIPPED: the JSONL data test needs the tokenizers library in .venv (scripts/pydeps.sh installs it)"
    exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" tests/jsonl/jsonl_test.py "$HYLA" "$W"
