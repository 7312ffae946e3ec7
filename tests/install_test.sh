#!/usr/bin/env bash
# Packaging: `make install` into a temporary prefix; examples/generate.c builds against the
# installed library through pkg-config, runs, and its greedy tokens equal `hyla generate`'s;
# `hyla --version` prints the version and GEMM backend. usage: tests/install_test.sh
set -uo pipefail
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/hyla_install.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "  FAIL: $*"; fails=$((fails + 1)); }
P=$T/prefix
make -s install PREFIX="$P" >"$T/install.log" 2>&1 || { fail "make install"; tail -5 "$T/install.log"; exit 1; }
for f in bin/hyla lib/libhyla.a lib/libhyla.so include/hyla.h lib/pkgconfig/hyla.pc; do
    [ -e "$P/$f" ] || fail "make install did not install $f"
done
version=$(sed -n 's/^#define HYLA_VERSION_STRING "\(.*\)"/\1/p' include/hyla.h)
"$P/bin/hyla" --version | grep -qE "^hyla $version \(GEMM backend: [a-z]+\)$" || fail "hyla --version: $("$P/bin/hyla" --version)"
export PKG_CONFIG_PATH=$P/lib/pkgconfig
[ "$(pkg-config --modversion hyla)" = "$version" ] || fail "pkg-config --modversion hyla"
cc -std=c11 -Wall -Wextra -Werror examples/generate.c $(pkg-config --cflags --libs hyla) -o "$T/generate" \
    || { fail "examples/generate.c does not build with pkg-config"; exit 1; }
"$P/bin/hyla" init --preset tiny-hybrid --seed 4 --out "$T/model" >/dev/null || fail "init"
LD_LIBRARY_PATH=$P/lib "$T/generate" "$T/model" --ids 5,17,42,99 12 >"$T/example.out" 2>&1 || { fail "example run"; cat "$T/example.out"; }
want=$("$P/bin/hyla" generate "$T/model" --prompt-tokens 5,17,42,99 --max-new 12 --json 2>/dev/null \
    | /usr/bin/python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
got=$(sed -n 's/^tokens: //p' "$T/example.out")
[ -n "$want" ] && [ "$got" = "$want" ] || fail "example tokens '$got' != hyla generate '$want'"
# text in, text out through the model directory's tokenizer.json
/usr/bin/python3 tests/data/make_byte_tokenizer.py "$T/model/tokenizer.json"
LD_LIBRARY_PATH=$P/lib "$T/generate" "$T/model" "the cat" 6 >"$T/text.out" 2>&1 || { fail "example run with text"; cat "$T/text.out"; }
want=$("$P/bin/hyla" generate "$T/model" --prompt "the cat" --max-new 6 --json 2>/dev/null \
    | /usr/bin/python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
[ -n "$want" ] && [ "$(sed -n 's/^tokens: //p' "$T/text.out")" = "$want" ] && grep -q "^text: " "$T/text.out" \
    || fail "example with text: $(cat "$T/text.out") vs hyla generate $want"
LD_LIBRARY_PATH=$P/lib "$T/generate" "$T/model" --ids 5,999999 4 >"$T/bad.out" 2>&1 && fail "an out-of-range prompt id was accepted"
grep -q "out of range" "$T/bad.out" || fail "out-of-range prompt id: $(cat "$T/bad.out")"
if [ $fails -ne 0 ]; then echo "  $fails install test(s) failed"; exit 1; fi
echo "  ok  make install, pkg-config, examples/generate.c == hyla generate (tokens $got), hyla --version"
