#!/usr/bin/env bash
# TCP receive goodput of one flowlane worker vs kernel-to-kernel TCP (iperf3)
# on the same one-queue test bed, in the same run. Root; release build.
# Usage: scripts/bench_tcp.sh [BYTES]   (default 1 GiB)
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${1:-1073741824}
BED=bt$$
F=target/release/flowlane
cargo build --release -q -p flowlane-control
$F testbed up --bed "$BED" --queues 1 >/dev/null
trap '$F testbed down --bed "$BED" >/dev/null; kill $SINK 2>/dev/null || true' EXIT
NS=flowlane-$BED; PNS=flowlane-$BED-peer
echo "== offloads (peer0 = kernel sender, xsk0 = receiver)"
for x in "$PNS peer0" "$NS xsk0"; do
  set -- $x
  ip netns exec "$1" ethtool -k "$2" | grep -E '^(tcp-segmentation-offload|generic-segmentation-offload|generic-receive-offload|tx-checksumming|rx-checksumming):' | sed "s/^/$2 /"
  ip netns exec "$1" ip -o link show "$2" | grep -o 'mtu [0-9]*' | sed "s/^/$2 /"
done
# flowlane's sink (worker pinned to CPU 0) stays up for the whole run, so
# that its XDP program is attached during the kernel-to-kernel run too.
$F bulk-sink --bed "$BED" --port 5001 --count 1 --no-hash --timeout 300 > /tmp/$BED.sink &
SINK=$!
sleep 2
echo "== kernel -> kernel (iperf3, one stream, client on CPU 1, server on CPU 0, 10 s)"
ip netns exec "$NS" taskset -c 0 iperf3 -s -1 -p 5201 >/dev/null &
sleep 0.5
ip netns exec "$PNS" taskset -c 1 iperf3 -c 10.99.0.1 -p 5201 -t 10 -f g | grep -E 'sender|receiver'
wait %2 2>/dev/null || true
echo "== kernel -> flowlane bulk-sink ($BYTES bytes, sender on CPU 1)"
ip netns exec "$PNS" taskset -c 1 python3 -c "
import socket, sys
n = int(sys.argv[1]); buf = bytes(1 << 20); s = socket.create_connection(('10.99.0.1', 5001))
m = memoryview(buf)
while n > 0:
    k = min(n, len(buf)); s.sendall(m[:k]); n -= k
s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
" "$BYTES"
wait $SINK || true
grep '"event":"sink"' /tmp/$BED.sink
MHZ=$(awk -F: '/cpu MHz/ {print $2; exit}' /proc/cpuinfo)
python3 - "$MHZ" /tmp/$BED.sink <<'PY'
import json, sys
mhz = float(sys.argv[1])
for l in open(sys.argv[2]):
    v = json.loads(l)
    if v.get("event") == "sink":
        print("flowlane: %.2f Gbit/s goodput, %.2f worker ns/byte = %.2f cycles/byte at %.0f MHz TSC"
              % (v["gbit_per_s"], v["cpu_ns_per_byte"], v["cpu_ns_per_byte"] * mhz / 1000, mhz))
PY
