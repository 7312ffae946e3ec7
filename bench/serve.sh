#!/usr/bin/env bash
# Server throughput: 16 concurrent clients x 8 completions (16 tokens each, half greedy, half sampled)
# against `hyla serve --parallel 4` on loopback, and the same 128 requests one at a time; JSON with
# requests/s, tokens/s and the ratio (continuous batching's gain). Runs the server test's load phase.
# usage: bench/serve.sh [OUT.json]     (needs .venv: scripts/pydeps.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
make -j"$(nproc)" build/hyla >/dev/null
OUT=${1:-build/bench_serve.json}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
.venv/bin/python tests/serve/serve_test.py build/hyla "$W" --load-json "$OUT" | grep -E "load|FAIL" || true
cat "$OUT"
