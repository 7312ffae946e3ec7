#!/usr/bin/env bash
# The architecture's floors (README, Architecture): a file may include its own folder and the
# folders below it, never one above it or a sibling on its floor.
#   core < {io, parallel} < ops < model < engine < {train, infer} < {api, serve} < cli
set -uo pipefail
cd "$(dirname "$0")/.."
declare -A floor=([core]=0 [io]=1 [parallel]=1 [ops]=2 [model]=3 [engine]=4 [train]=5 [infer]=5 [api]=6 [serve]=6 [cli]=7)
bad=0
for f in src/*/*.[ch]; do
    dir=$(basename "$(dirname "$f")")
    [ -n "${floor[$dir]:-}" ] || { echo "  FAIL $f: folder '$dir' has no floor in tests/check_floors.sh"; bad=1; continue; }
    while IFS= read -r inc; do
        to=${inc%%/*}
        [ -n "${floor[$to]:-}" ] || continue
        if [ "$to" != "$dir" ] && [ "${floor[$to]}" -ge "${floor[$dir]}" ]; then
            echo "  FAIL $f includes $inc: $to is not below $dir"; bad=1
        fi
    done < <(sed -n 's/^#include "\([a-z]*\/[^"]*\)".*/\1/p' "$f")
done
[ $bad -eq 0 ] && echo "  ok    no include from a lower floor to a higher one (or a sibling)"
exit $bad
