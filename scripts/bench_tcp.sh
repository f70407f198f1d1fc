#!/usr/bin/env bash
# TCP receive goodput of one flowlane worker vs kernel-to-kernel TCP (iperf3)
# on the same one-queue test bed, in the same run. Root; release build.
# Usage: scripts/bench_tcp.sh [BYTES]   (default 1 GiB)
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
cd "$(dirname "$0")/.."
BYTES=${1:-1073741824}
BED=bt$$
F=$target_dir/release/flowlane
cargo build --release -q -p flowlane-control
SINK_OUT=$(mktemp /tmp/flowlane-bench-tcp.XXXXXX)
SINK=
IPERF=
# Every step runs whatever failed before it (errexit off in the handler).
cleanup() {
  set +e
  [ -n "${IPERF:-}" ] && kill "$IPERF" 2>/dev/null
  [ -n "${SINK:-}" ] && kill "$SINK" 2>/dev/null
  "$F" testbed down --bed "$BED" >/dev/null 2>&1
  rm -f "$SINK_OUT"
}
trap cleanup EXIT
$F testbed up --bed "$BED" --queues 1 >/dev/null
NS=flowlane-$BED; PNS=flowlane-$BED-peer
echo "== offloads (peer0 = kernel sender, xsk0 = receiver)"
for x in "$PNS peer0" "$NS xsk0"; do
  set -- $x
  ip netns exec "$1" ethtool -k "$2" | grep -E '^(tcp-segmentation-offload|generic-segmentation-offload|generic-receive-offload|tx-checksumming|rx-checksumming):' | sed "s/^/$2 /"
  ip netns exec "$1" ip -o link show "$2" | grep -o 'mtu [0-9]*' | sed "s/^/$2 /"
done
# flowlane's sink (worker pinned to CPU 0) stays up for the whole run, so
# that its XDP program is attached during the kernel-to-kernel run too.
$F bulk-sink --bed "$BED" --port 5001 --count 1 --no-hash --timeout 300 >"$SINK_OUT" &
SINK=$!
sleep 2
echo "== kernel -> kernel (iperf3, one stream, client on CPU 1, server on CPU 0, 10 s)"
# `ip netns exec` and taskset exec iperf3: $! is the server's own pid.
ip netns exec "$NS" taskset -c 0 iperf3 -s -1 -p 5201 >/dev/null &
IPERF=$!
sleep 0.5
ip netns exec "$PNS" taskset -c 1 iperf3 -c 10.99.0.1 -p 5201 -t 10 -f g | grep -E 'sender|receiver'
wait "$IPERF" 2>/dev/null || true
IPERF=
echo "== kernel -> flowlane bulk-sink ($BYTES bytes, sender on CPU 1)"
ip netns exec "$PNS" taskset -c 1 python3 -c "
import socket, sys
n = int(sys.argv[1]); buf = bytes(1 << 20); s = socket.create_connection(('10.99.0.1', 5001))
m = memoryview(buf)
while n > 0:
    k = min(n, len(buf)); s.sendall(m[:k]); n -= k
s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
" "$BYTES"
wait "$SINK" || true
SINK=
grep '"event":"sink"' "$SINK_OUT" || {
  echo "bench_tcp: the sink reported no transfer; its output:" >&2
  cat "$SINK_OUT" >&2
  exit 1
}
# Goodput and the worker's CPU ns per byte. Cycles per byte need the TSC
# rate, which flowlane-ttcp reads (ttcp/src/procfs.rs): scripts/ttcp-matrix.sh
# reports them for this same comparison.
python3 - "$SINK_OUT" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith("{"):
        continue
    v = json.loads(l)
    if v.get("event") == "sink":
        print("flowlane: %.2f Gbit/s goodput, %.2f worker ns/byte (cycles/byte: scripts/ttcp-matrix.sh)"
              % (v["gbit_per_s"], v["cpu_ns_per_byte"]))
PY
