#!/usr/bin/env bash
# Run the whole test suite (release and sanitizer builds). Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/deps.sh
./scripts/pydeps.sh
exec ./tests/run.sh
