#!/usr/bin/env bash
# The callgrind cases every change to `tcp/` or the data path is measured
# by (BENCHMARKS.md, "callgrind" commands): `tcp/examples/sim_bulk` warm
# (10 000 connections × 2 896 B, zero-copy), server-closes (10 000 × 1 000 B)
# and cold (the issue's `sim_bulk 10000`, 400 B), and the dataplane's
# `rx_cost` and `tx_cost` tests (one connection, 16 MiB, per data frame).
# Prints instructions per received segment (sim_bulk) or data frame.
#
#   scripts/callgrind-cases.sh OUT_DIR [--no-build]
#
# Builds the release `sim_bulk` and the dataplane's release test binary
# from the working tree (unless --no-build: OUT_DIR's copies are measured
# again), copies them into OUT_DIR and keeps callgrind's outputs there
# (`cg.CASE`, for `callgrind_annotate`) with the programs' own lines
# (`out.CASE`). Instruction counts do not depend on the machine's load, so
# the cases run two at a time. About two minutes on the 2-vCPU VM once
# built. Honours CARGO_TARGET_DIR.
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
cd "$(dirname "$0")/.."
if [[ $# -lt 1 || "$1" == -* ]]; then
    echo "usage: scripts/callgrind-cases.sh OUT_DIR [--no-build]" >&2
    exit 2
fi
out=$(realpath -m "$1")
build=1
[[ "${2:-}" == "--no-build" ]] && build=0
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
    echo "callgrind-cases: valgrind is not installed (apt-get install valgrind)" >&2
    exit 1
fi
mkdir -p "$out"
if [[ $build == 1 ]]; then
    cargo build --release -q -p flowlane-tcp --example sim_bulk
    # The test binary's path, from cargo's own report of what it built.
    dp=$(cargo test --release -q -p flowlane-dataplane --lib --no-run --message-format=json |
        python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == "flowlane_dataplane":
        print(m["executable"])' | tail -1)
    [[ -n "$dp" ]] || { echo "callgrind-cases: no dataplane test binary built" >&2; exit 1; }
    cp "$target_dir/release/examples/sim_bulk" "$out/sim_bulk"
    cp "$dp" "$out/dp"
fi
cd "$out"
[[ -x sim_bulk && -x dp ]] || { echo "callgrind-cases: $out holds no built programs" >&2; exit 1; }
cg() {
    local case=$1
    shift
    valgrind --tool=callgrind --callgrind-out-file="cg.$case" "$@" >"out.$case" 2>"err.$case" ||
        { echo "callgrind-cases: $case failed (see $out/err.$case)" >&2; return 1; }
}
cg warm --toggle-collect='*sim_deliver_to_b_measured*' ./sim_bulk 10000 2896 lend warm &
cg server-closes --toggle-collect='*sim_deliver_to_b_measured*' \
    ./sim_bulk 10000 1000 lend warm server-closes &
wait %1 && wait %2
cg cold --toggle-collect='*sim_deliver_to_b*' ./sim_bulk 10000 400 &
cg rx_cost --toggle-collect='*rx_measured*' ./dp --ignored --exact tcp_handler::tests::rx_cost --nocapture &
wait %1 && wait %2
cg tx_cost --toggle-collect='*tx_*_measured*' ./dp --ignored --exact tcp_handler::tests::tx_cost --nocapture
total() { callgrind_annotate "cg.$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
per() { python3 -c "import sys; print(f'{int(sys.argv[1]) / int(sys.argv[2]):.1f}')" "$1" "$2"; }
segments() { awk '/segments received \(B\)/ { print $NF }' "out.$1"; }
# What each test says it received or sent: "frames received N",
# "frames with data sent N".
frames() { grep -o "$2 [0-9]*" "out.$1" | grep -o '[0-9]*$' | head -1; }
rx_frames=$(frames rx_cost 'frames received')
tx_frames=$(frames tx_cost 'frames with data sent')
{
    for c in warm server-closes cold; do
        printf '%-14s %10s Ir per segment (%s segments, %s Ir)\n' "$c" \
            "$(per "$(total $c)" "$(segments $c)")" "$(segments $c)" "$(total $c)"
    done
    printf '%-14s %10s Ir per frame (%s frames, %s Ir)\n' rx_cost \
        "$(per "$(total rx_cost)" "$rx_frames")" "$rx_frames" "$(total rx_cost)"
    printf '%-14s %10s Ir per frame (%s frames, %s Ir)\n' tx_cost \
        "$(per "$(total tx_cost)" "$tx_frames")" "$tx_frames" "$(total tx_cost)"
} | tee summary.txt
