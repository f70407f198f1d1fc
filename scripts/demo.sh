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
#   scripts/demo.sh [--out DIR] [flowlane demo flags...]   (--help: the flags)
#
# Results are kept (never deleted) in DIR, by default a new
# ./flowlane-demo-<date>-<time>/ under the current directory:
#   udp-rss.json              the UDP RSS demo's flows, predicted and observed queues
#   tcp/results.json, tcp/table.md, tcp/*.png, tcp/*.svg   the TCP comparison and its plots
# Needs root. Other flags go to `flowlane demo`. Flags are checked before
# anything runs: an unknown one is refused (exit 2) with nothing made. Each
# part uses its own test bed and removes it on every way out. Exits non-zero
# if either part fails; Ctrl-C (or any signal that ends a part) ends the demo
# at once with status 130 (the signal's), keeping what was measured.
set -euo pipefail

usage() {
  cat <<'EOF2'
usage: scripts/demo.sh [--out DIR] [--bed NAME] [--queues N] [--flows N] [--packets N] [--port PORT] [--json]
  --out DIR   keep the results in DIR (default: ./flowlane-demo-<date>-<time>/)
  --bed, --queues, --flows, --packets, --port, --json
              go to the UDP part, `flowlane demo` (its --help tells them)
  -h, --help  this help
Needs root (test beds are network namespaces; flowlane's data path is BPF and AF_XDP).
EOF2
}

out=
args=()
while (($#)); do
  case $1 in
    -h | --help)
      usage
      exit 0
      ;;
    --out)
      [ $# -ge 2 ] || { echo "demo: --out needs a folder (e.g. --out ./demo-results)" >&2; exit 2; }
      out=$2
      shift 2
      ;;
    --out=*) out=${1#--out=}; shift ;;
    --json | --bed=* | --queues=* | --flows=* | --packets=* | --port=*) args+=("$1"); shift ;;
    --bed | --queues | --flows | --packets | --port)
      [ $# -ge 2 ] || { echo "demo: $1 needs a value (scripts/demo.sh --help)" >&2; exit 2; }
      args+=("$1" "$2")
      shift 2
      ;;
    *)
      echo "demo: unknown flag or argument '$1' (the flags are below)" >&2
      usage >&2
      exit 2
      ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (test beds are network namespaces; flowlane's data path is BPF and AF_XDP): run it as root, e.g. sudo $0" >&2
  exit 1
fi
# Relative to where the user ran it, before moving to the repository; made
# when the first part needs it.
out=${out:-flowlane-demo-$(date +%Y%m%d-%H%M%S)}
source "$(dirname "$0")/lib/caller-paths.sh"
caller_paths out

# Ctrl-C reaches every process of the foreground group: the part running
# cleans up (its test bed) and exits, and the demo, told here, stops after it.
signalled=0
trap 'signalled=130' INT

# stop_if_signalled STATUS: a part that ended with a signal's status (128 +
# the signal; `flowlane demo` exits 130 on Ctrl-C after removing its test
# bed), or any part after a Ctrl-C (flowlane-ttcp exits 1 then), ends the
# demo at once with that status (130 for the Ctrl-C).
stop_if_signalled() {
  local status=$1
  ((signalled == 0)) || status=$signalled
  if [ "$status" -ge 128 ]; then
    echo "demo: interrupted (exit status $status): stopped here; results so far are in $out/" >&2
    exit "$status"
  fi
}

# The build's folder (before moving to the repository: a relative
# $CARGO_TARGET_DIR is the user's).
source "$(dirname "$0")/lib/target-dir.sh"

cd "$(dirname "$0")/.."
bin=$target_dir/release
echo "== [1/4] system packages and Rust (scripts/setup.sh; the first run installs packages, a few minutes)"
bash scripts/setup.sh
echo "== [2/4] building flowlane and flowlane-ttcp (release; the first build takes a few minutes)"
cargo build --release -p flowlane-control -p flowlane-ttcp

echo "== [3/4] UDP flows on the queues RSS predicts (own test bed, removed afterwards)"
mkdir -p "$out" || { echo "demo: --out $out: cannot create the folder" >&2; exit 2; }
rc=0
"$bin/flowlane" demo --out "$out" ${args[@]+"${args[@]}"} || rc=$?
stop_if_signalled "$rc"
if [ "$rc" -eq 2 ]; then
  # A flag's value `flowlane demo` refused (its line above).
  echo "demo: flowlane demo refused a flag (above); scripts/demo.sh --help lists them" >&2
  exit 2
fi

echo
echo "== [4/4] TCP side by side: kernel vs flowlane as receiver and as sender, no delay and 10 ms each way (flowlane-ttcp matrix, short: 0.5 s warm-up, 1 s windows, about 1.5 min)"
tcp=0
"$bin/flowlane-ttcp" matrix --flowlane "$bin/flowlane" \
    --backends kernel,flowlane --roles receiver,sender --conns 1,16 --sizes 64k \
    --delays 0,10 --latency-sizes 64 --warmup 0.5 --seconds 1 --out "$out/tcp" || tcp=$?
stop_if_signalled "$tcp"
if [ "$tcp" -eq 0 ]; then
    echo "(full quick matrix: scripts/ttcp-matrix.sh --quick; figures in BENCHMARKS.md)"
else
    echo "demo: the TCP side-by-side comparison failed (details above)" >&2
    [ "$rc" -ne 0 ] || rc=1
fi

echo
echo "demo: results kept in $out/"
(cd "$out" && find . -type f | sed 's|^\./|  |' | LC_ALL=C sort)
exit "$rc"
