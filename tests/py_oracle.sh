#!/usr/bin/env bash
# Run a Python oracle test from .venv (scripts/pydeps.sh) in a temporary directory, or say loudly
# that it is skipped when the modules it needs are not installed.
# usage: tests/py_oracle.sh "MODULE[,MODULE...]" WHAT SCRIPT.py HYLA [ARGS...]   (SCRIPT gets HYLA WORKDIR ARGS...)
set -euo pipefail
cd "$(dirname "$0")/.."
modules=$1 what=$2 script=$3 hyla=$4
shift 4
PY=.venv/bin/python
if ! [ -x "$PY" ] || ! "$PY" -c "import $modules" 2>/dev/null; then
    echo "  SKIPPED: $what needs $modules in .venv (scripts/pydeps.sh installs them)"
    exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" "$script" "$hyla" "$W" "$@"
