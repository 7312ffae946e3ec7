#!/usr/bin/env bash
# Install the Debian packages hyla needs to build and test, if any is missing.
# Runs as root (CI, fresh machine) or via sudo when available.
set -euo pipefail
pkgs=(build-essential libcjson-dev libpcre2-dev libutf8proc-dev libdnnl-dev libopenblas-dev python3 python3-torch python3-numpy
      clang libclang-rt-14-dev libomp-14-dev  # clang, libFuzzer and libomp: make fuzz (tests/fuzz)
      pkg-config                              # tests/install_test.sh builds examples/ through hyla.pc
      cmake python3-venv libmicrohttpd-dev curl   # llama-cpp-python's build (scripts/pydeps.sh); hyla serve
      libopenmpi-dev openmpi-bin)             # hyla train across processes (mpirun)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
