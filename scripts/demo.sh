#!/usr/bin/env bash
# The main demo: brings up a 4-queue veth test bed with an emulated RSS NIC,
# runs flowlane's AF_XDP UDP echo on every queue, sends 64 flows from the
# kernel side, and prints per queue the flows that arrived next to the queue
# the Toeplitz hash predicted — then rewrites the indirection table and shows
# every flow moving. Then a short TCP comparison (about 1.5 min): flowlane-ttcp
# on kernel TCP and on flowlane's TCP over AF_XDP, as receiver and as sender
# against kernel TCP, 1 and 16 connections, with no delay and with 10 ms each
# way through the test bed's delay line, plus ping-pong latency; printed side
# by side.
# Needs root. Extra flags go to `flowlane demo`. Exits non-zero if either
# part fails; the UDP result is printed either way.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release -q -p flowlane-control -p flowlane-ttcp
rc=0
target/release/flowlane demo "$@" || rc=$?

echo
echo "== TCP side by side: kernel vs flowlane as receiver and as sender, no delay and 10 ms each way (flowlane-ttcp matrix, short: 0.5 s warm-up, 1 s windows, about 1.5 min)"
out=$(mktemp -d /tmp/flowlane-demo-ttcp.XXXXXX)
if target/release/flowlane-ttcp matrix --flowlane target/release/flowlane \
    --backends kernel,flowlane --roles receiver,sender --conns 1,16 --sizes 64k \
    --delays 0,10 --latency-sizes 64 --warmup 0.5 --seconds 1 --out "$out"; then
    echo "(full quick matrix: scripts/ttcp-matrix.sh --quick; figures in BENCHMARKS.md)"
else
    echo "demo: the TCP side-by-side comparison failed (details above; the UDP demo result is above it)" >&2
    [ "$rc" -ne 0 ] || rc=1
fi
rm -rf "$out"
exit "$rc"
