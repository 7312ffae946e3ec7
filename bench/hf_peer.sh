#!/usr/bin/env bash
# The transformers peer's Python: torch 2, transformers and peft in a virtual environment in a cache
# folder (default ~/.cache/hyla-hf-peer; HYLA_HF_PEER_DIR overrides), installed on first use — a
# multi-GB download of PyPI's CUDA build of torch (about 5.6 GB on disk), never part of ./test.sh.
# Prints the interpreter's path; exits non-zero (saying why) when it cannot be installed.
set -uo pipefail
DIR=${HYLA_HF_PEER_DIR:-$HOME/.cache/hyla-hf-peer}
PKGS=(torch==2.15.0 transformers==5.24.0 peft==0.21.2)
if ! "$DIR/bin/python" -c "import torch, transformers, peft" 2>/dev/null; then
    echo "hf_peer: installing ${PKGS[*]} into $DIR (multi-GB, once)" >&2
    python3 -m venv "$DIR" >&2 && "$DIR/bin/pip" install --quiet --no-cache-dir "${PKGS[@]}" >&2 \
        || { echo "hf_peer: install failed: the transformers peer is skipped" >&2; exit 1; }
fi
echo "$DIR/bin/python"
