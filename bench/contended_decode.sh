#!/usr/bin/env bash
# Decode beside a memory neighbour (issue: quantized inference, "decode reads weights at >= 80% of the
# DRAM bandwidth measured in the same run"). hyla's decode (build/bench/infer_bench, 1 thread pinned to
# CPU 0) runs alone ("quiet") and with build/bench/memory_neighbour streaming reads over 1 GiB on CPU 1
# for the whole run ("contended"), alternating, ROUNDS rounds each (environment, default 2).
# infer_bench measures the DRAM rate it compares against in the same conditions (its reads run beside
# the neighbour too). One thread, not the issue's two: a neighbour on a core the decode uses would share
# the core, not the memory (bench/threads_under_load.sh measures that).
# What it reproduces and what not: the neighbour evicts the L3 and adds a core's traffic; it does not
# starve the memory. On the Intel Xeon VM one core's reads are bound by its own misses in flight
# (17 GB/s alone, 16 beside a neighbour reading 17, writing 25 or copying 21 GB/s), so a phase where
# the host's other tenants lower the 2-thread read from ~36 to ~25 GB/s cannot be made from inside the
# VM. Files: the issue's four (0.8B and MoE, Q8_0 and Q4_K_M), made by bench/gguf_infer.sh.
# One JSON on stdout, a line per file and mode on stderr.
# usage: bench/contended_decode.sh [SEQ=512] [NEW=32]
set -euo pipefail
cd "$(dirname "$0")/.."
SEQ=${1:-512} NEW=${2:-32} ROUNDS=${ROUNDS:-2}
for v in SEQ NEW ROUNDS; do
    [[ ${!v} =~ ^[1-9][0-9]{0,5}$ ]] ||
        { echo "contended_decode.sh: $v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
[ "$(nproc)" -ge 2 ] ||
    { echo "contended_decode.sh: needs 2 CPUs (the decode on one, the neighbour on the other)" >&2; exit 1; }
command -v taskset >/dev/null || { echo "contended_decode.sh: needs taskset (util-linux)" >&2; exit 1; }
D=build/bench-models
FILES="q35-08b-q8_0 q35-08b-q4_k_m next-moe-q8_0 next-moe-q4_k_m"
for f in $FILES; do
    [ -f "$D/$f.gguf" ] ||
        { echo "contended_decode.sh: $D/$f.gguf missing (bench/gguf_infer.sh makes it)" >&2; exit 1; }
done
make -j"$(nproc)" build/bench/infer_bench build/bench/memory_neighbour >/dev/null
export OMP_NUM_THREADS=1
NB=$(mktemp) NPID=
trap '[ -z "$NPID" ] || kill -TERM "$NPID" 2>/dev/null; rm -f "$NB"' EXIT # (no neighbour left if a run fails)
decode() { # FILE MODE: one infer_bench JSON with "mode" and, contended, the neighbour's rate, in ROUND
    local out gbs=0
    if [ "$2" = contended ]; then
        taskset -c 1 ./build/bench/memory_neighbour 3600 > "$NB" &
        NPID=$!
        sleep 1
    fi
    out=$(taskset -c 0 ./build/bench/infer_bench "$D/$1.gguf" "$SEQ" "$NEW")
    if [ "$2" = contended ]; then
        kill -TERM "$NPID"
        wait "$NPID"
        NPID=
        gbs=$(sed -n 's/.*"neighbour_gbs": \([0-9.]*\).*/\1/p' "$NB")
    fi
    ROUND="{\"file\": \"$1\", \"mode\": \"$2\", \"neighbour_gbs\": ${gbs:-0}, \"hyla\": $out}"
}
rounds=()
for f in $FILES; do
    for ((i = 0; i < ROUNDS; i++)); do
        for mode in quiet contended; do
            decode "$f" "$mode"
            rounds+=("$ROUND")
        done
    done
done
printf '%s\n' "${rounds[@]}" | python3 - "$SEQ" "$NEW" 3<&0 <<'PY'
import json, os, sys
rounds = [json.loads(l) for l in os.fdopen(3) if l.strip()]
summary = []
for f in dict.fromkeys(r["file"] for r in rounds):
    for mode in ("quiet", "contended"):
        rs = [r for r in rounds if r["file"] == f and r["mode"] == mode]
        h = [r["hyla"] for r in rs]
        row = {"file": f, "mode": mode,
               "decode_tokens_per_s": [x["decode_tokens_per_s"] for x in h],
               "dram_gbs_beside_decode": [x["dram_gbs_beside_decode"] for x in h],
               "decode_pct_of_dram_bw": [x["decode_pct_of_dram_bw"] for x in h],
               "interleaved_dram_gbs": [x["decode_interleaved"]["dram_gbs_mean"] for x in h],
               "interleaved_pct_of_dram_bw": [x["decode_interleaved"]["decode_pct_of_dram_bw"] for x in h],
               "neighbour_gbs": [r["neighbour_gbs"] for r in rs]}
        summary.append(row)
        print("  %-16s %-9s decode %s tok/s; DRAM beside %s GB/s -> %s%%; interleaved %s GB/s -> %s%%; "
              "neighbour %s GB/s"
              % (f, mode, "/".join("%.1f" % v for v in row["decode_tokens_per_s"]),
                 "/".join("%.1f" % v for v in row["dram_gbs_beside_decode"]),
                 "/".join("%.0f" % v for v in row["decode_pct_of_dram_bw"]),
                 "/".join("%.1f" % v for v in row["interleaved_dram_gbs"]),
                 "/".join("%.0f" % v for v in row["interleaved_pct_of_dram_bw"]),
                 "/".join("%.1f" % v for v in row["neighbour_gbs"])), file=sys.stderr)
print(json.dumps({"benchmark": "contended_decode", "threads": 1, "seq": int(sys.argv[1]), "new": int(sys.argv[2]),
                  "summary": summary, "rounds": rounds}, indent=1))
PY
