# Shared by the CLI test scripts: `. tests/cli_lib.sh HYLA_BINARY CASES_DIR` sets HYLA, CASES,
# PY (Debian's python, where python3-torch lives) and T (a scratch directory removed on exit).
HYLA=$1
CASES=$2
PY=/usr/bin/python3
T=$(mktemp -d /tmp/hyla_test.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "  FAIL: $*"; fails=$((fails + 1)); }

# expect_error NAME PATTERN CMD...: non-zero exit, one stderr line matching PATTERN, no sanitizer output.
expect_error() {
    local name=$1 pattern=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    local lines; lines=$(grep -c . "$T/err")
    if [ $rc -eq 0 ]; then fail "$name: exit 0 (expected an error)"; return; fi
    if [ $rc -ge 128 ]; then fail "$name: crashed (rc $rc)"; cat "$T/err"; return; fi
    if grep -qiE 'sanitizer|runtime error' "$T/err"; then fail "$name: sanitizer report"; cat "$T/err"; return; fi
    if [ "$lines" -ne 1 ]; then fail "$name: expected one error line, got $lines"; cat "$T/err"; return; fi
    if ! grep -qE -- "$pattern" "$T/err"; then fail "$name: error does not match '$pattern': $(cat "$T/err")"; return; fi
    echo "  ok  $name: $(cat "$T/err")"
}
