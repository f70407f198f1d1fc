#!/usr/bin/env bash
# Which 64-byte lines of each connection's slot a steady transfer touches,
# per received segment: sim_bulk (with slot-lines-instrumentation.patch
# applied, which prints the slabs' addresses and field offsets after the
# warm-up) under valgrind's lackey, every load and store traced.
#
#   git apply docs/benchmarks/2026-11-28-hot-layout/slot-lines-instrumentation.patch
#   cargo build --release -p flowlane-tcp --example sim_bulk
#   docs/benchmarks/2026-11-28-hot-layout/slot-lines.sh target/release/examples/sim_bulk 2 1500000 OUT
#   git apply -R docs/benchmarks/2026-11-28-hot-layout/slot-lines-instrumentation.patch
#
# The trace covers the whole run (the warm-up of 16 KiB per connection too,
# a few per cent of the accesses); OUT/hist.txt has, per side (A sends, B
# receives) and per slot, the lines with at least 0.25 accesses per
# segment, and every offset touched with the field at or before it.
set -euo pipefail
bin=$1; conns=$2; bytes=$3; out=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
(sleep 5; echo go) | SIM_BULK_PAUSE=0 valgrind --tool=lackey --trace-mem=yes --log-file="$out/trace" \
    "$bin" "$conns" "$bytes" steady lend >"$out/sim.out" 2>"$out/sim.log"
segs=$(grep "segments received (B)" "$out/sim.out" | grep -o '[0-9]\+' | head -1)
python3 "$here/slot_lines.py" "$out/sim.log" "$out/trace" "$segs" "$conns" >"$out/hist.txt"
rm -f "$out/trace"
echo "$out/hist.txt"
