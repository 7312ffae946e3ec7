#!/usr/bin/env bash
# The Python oracles that are not Debian packages, in a project-local virtual environment (.venv,
# with Debian's numpy / torch visible): gguf (reads GGUF files), llama-cpp-python (llama.cpp itself,
# built from its vendored sources: about 6 minutes on 2 cores, once), openai (the official client,
# for the server tests), tokenizers (Hugging Face's tokenizer, the tokenizer oracle). Pinned versions. Idempotent: returns at once when they are installed.
# A failure here (no package registry) is not fatal: the tests that need these oracles say loudly
# that they are skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
PKGS=(gguf==0.19.0 llama-cpp-python==0.3.36 openai==3.57.0 tokenizers==0.23.3)
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import gguf, llama_cpp, openai, tokenizers" 2>/dev/null; then
    exit 0
fi
echo "pydeps: installing ${PKGS[*]} into $VENV (llama-cpp-python compiles llama.cpp: several minutes)"
/usr/bin/python3 -m venv --system-site-packages "$VENV" || exit 0
# llama.cpp as a CPU library only: no tests, examples, tools or server of its own
CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF" \
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$VENV/bin/pip" install --quiet --no-cache-dir "${PKGS[@]}" || echo "pydeps: install failed; oracle tests will be skipped"
exit 0
