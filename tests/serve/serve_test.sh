#!/usr/bin/env bash
# hyla serve against the official openai client and curl (tests/serve/serve_test.py).
# usage: tests/serve/serve_test.sh [HYLA] [LOAD_JSON_OUT]     (needs .venv from scripts/pydeps.sh, and curl)
set -euo pipefail
cd "$(dirname "$0")/../.."
HYLA=${1:-build/hyla}
PY=.venv/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c "import openai" 2>/dev/null || ! command -v curl >/dev/null; then
    echo "  SKIPPED: the server test needs the openai client in .venv (scripts/pydeps.sh) and curl"
    exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" tests/serve/serve_test.py "$HYLA" "$W" ${2:+--load-json "$2"}
