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
#
#   scripts/demo.sh [--out DIR] [flowlane demo flags...]
#
# Results are kept (never deleted) in DIR, by default a new
# ./flowlane-demo-<date>-<time>/ under the current directory:
#   udp-rss.json              the UDP RSS demo's flows, predicted and observed queues
#   tcp/results.json, tcp/table.md, tcp/*.png   the TCP comparison and its plots
# Needs root. Other flags go to `flowlane demo`. Each part uses its own test
# bed and removes it on every way out. Exits non-zero if either part fails;
# the UDP result is printed either way.
set -euo pipefail

out=
args=()
while (($#)); do
  case $1 in
    --out)
      [ $# -ge 2 ] || { echo "demo: --out needs a folder (e.g. --out ./demo-results)" >&2; exit 2; }
      out=$2
      shift 2
      ;;
    --out=*) out=${1#--out=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
# Relative to where the user ran it, before moving to the repository.
out=${out:-flowlane-demo-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" || { echo "demo: --out $out: cannot create the folder" >&2; exit 2; }
out=$(cd "$out" && pwd)

cd "$(dirname "$0")/.."
echo "== [1/4] system packages and Rust (scripts/setup.sh; the first run installs packages, a few minutes)"
bash scripts/setup.sh
echo "== [2/4] building flowlane and flowlane-ttcp (release; the first build takes a few minutes)"
cargo build --release -p flowlane-control -p flowlane-ttcp

echo "== [3/4] UDP flows on the queues RSS predicts (own test bed, removed afterwards)"
rc=0
target/release/flowlane demo --out "$out" ${args[@]+"${args[@]}"} || rc=$?

echo
echo "== [4/4] TCP side by side: kernel vs flowlane as receiver and as sender, no delay and 10 ms each way (flowlane-ttcp matrix, short: 0.5 s warm-up, 1 s windows, about 1.5 min)"
if target/release/flowlane-ttcp matrix --flowlane target/release/flowlane \
    --backends kernel,flowlane --roles receiver,sender --conns 1,16 --sizes 64k \
    --delays 0,10 --latency-sizes 64 --warmup 0.5 --seconds 1 --out "$out/tcp"; then
    echo "(full quick matrix: scripts/ttcp-matrix.sh --quick; figures in BENCHMARKS.md)"
else
    echo "demo: the TCP side-by-side comparison failed (details above; the UDP demo result is above it)" >&2
    [ "$rc" -ne 0 ] || rc=1
fi

echo
echo "demo: results kept in $out/"
for f in "$out"/udp-rss.json "$out"/tcp/results.json "$out"/tcp/table.md "$out"/tcp/*.png; do
  [ -e "$f" ] && echo "  ${f#"$out"/}"
done
exit "$rc"
