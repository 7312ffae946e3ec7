#!/usr/bin/env bash
# hyla serve against the official openai client and curl (tests/serve/serve_test.py).
# usage: tests/serve/serve_test.sh [HYLA] [LOAD_JSON_OUT]     (needs .venv from scripts/pydeps.sh, and curl)
cd "$(dirname "$0")/../.." || exit 1
command -v curl >/dev/null || { echo "  SKIPPED: the server test needs curl"; exit 0; }
exec tests/py_oracle.sh "openai" "the server test" tests/serve/serve_test.py "${1:-build/hyla}" ${2:+--load-json "$2"}
