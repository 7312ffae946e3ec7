#!/usr/bin/env bash
# The main job: build hyla, write a small random hybrid model, inspect it and run a forward
# pass on it. Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/deps.sh
make -j"$(nproc)" build/hyla
out=build/demo
rm -rf "$out"
./build/hyla init --preset tiny-hybrid --seed 7 --out "$out/model"
./build/hyla inspect "$out/model"
./build/hyla forward "$out/model" --tokens 1,17,42,300,5,9,77,128,255,511,3,64
