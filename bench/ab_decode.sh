#!/usr/bin/env bash
# A decode of this working tree's hyla against revision REV's, in one process, alternating windows
# of 8 tokens (bench/ab_decode.c says why: the VM's memory phases cancel). REV is built in a
# temporary git worktree. One JSON line: b_over_a > 1 when the working tree decodes faster.
# usage: bench/ab_decode.sh REV MODEL [P=64] [WINDOWS=60] [bf16]
#   e.g. bench/ab_decode.sh HEAD~1 build/bench-models/q35-08b-q4_k_m.gguf 500 60
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/ab_decode.sh REV MODEL [P=64] [WINDOWS=60] [bf16]" >&2; exit 2; }
REV=$1
shift
W=$(mktemp -d)
trap 'git worktree remove --force "$W" >/dev/null 2>&1 || rm -rf "$W"' EXIT
git worktree add -q --detach "$W" "$REV"
make -C "$W" -j"$(nproc)" build/libhyla.so >/dev/null
make -j"$(nproc)" build/libhyla.so build/bench/ab_decode >/dev/null
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ./build/bench/ab_decode "$W/build/libhyla.so" build/libhyla.so "$@"
