#!/bin/bash
# Session 34: instructions at B per kind of received segment (SYN, pure ACK, data, data with
# FIN) in `sim_bulk 10000 2896 lend warm`. Builds sim_bulk with per-kind.patch applied (each
# kind delivered through its own never-inlined function, k_syn ... k_datafin, which callgrind
# then collects alone; the counts of each kind are printed on stderr), reverts the patch, and
# runs callgrind once per kind (two at a time).
#   docs/benchmarks/2026-11-28-conn-life/per-kind.sh TAG     (outputs in $BENCH, default /tmp)
set -e
cd "$(dirname "$0")/../../.."
ROOT=$PWD
BENCH=${BENCH:-/tmp}
git apply docs/benchmarks/2026-11-28-conn-life/per-kind.patch
trap 'git -C "$ROOT" checkout -q tcp/tests/sim/mod.rs tcp/examples/sim_bulk.rs' EXIT
cargo build --release -p flowlane-tcp --example sim_bulk 2>&1 | grep -E "^error|Finished"
cp target/release/examples/sim_bulk "$BENCH/sim_bulk.k$1"
cd "$BENCH"
for k in k_ack k_syn k_data k_datafin; do
  valgrind --tool=callgrind --toggle-collect="*sim::$k" --callgrind-out-file=cg.k$1.$k \
    ./sim_bulk.k$1 10000 2896 lend warm >/dev/null 2>&1 &
  [ "$k" = k_syn ] && wait
done
wait
for k in k_ack k_syn k_data k_datafin; do echo "$k $(grep totals cg.k$1.$k)"; done
