#!/usr/bin/env bash
# Software spill's cost: a 2-queue bed, `flowlane bulk-sink` with 2 workers
# (one per queue) and with 3 (the third without a queue: its share of queue
# 0's buckets forwarded to it, its ACKs sent through queue 0), kernel TCP
# senders in the peer namespace (CONNS connections, BYTES in all), system
# CPU from /proc/stat over the transfer, converted to cycles at the TSC rate.
#
#   docs/benchmarks/2026-11-25-spill/run.sh [FLOWLANE] [CONNS] [BYTES] [RUNS]
set -euo pipefail
BIN=${1:-target/release/flowlane}
CONNS=${2:-16}
BYTES=${3:-1073741824}
RUNS=${4:-3}
BED=spillbench$$
TSC_HZ=$(awk -F': ' '/^cpu MHz/ {print $2 * 1e6; exit}' /proc/cpuinfo)
cleanup() { "$BIN" testbed down --bed "$BED" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$BIN" testbed up --bed "$BED" --queues 2 >/dev/null
busy() { awk '/^cpu / {print $2+$3+$4+$6+$7+$8}' /proc/stat; }
sender='
import socket, sys, threading
host, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = bytes(65536)
def one(k):
    s = socket.create_connection((host, 5001))
    left = k
    while left > 0:
        left -= s.send(buf[: min(len(buf), left)])
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
ts = [threading.Thread(target=one, args=(total // n,)) for _ in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
'
for run in $(seq "$RUNS"); do
  for workers in 2 3; do
    "$BIN" bulk-sink --bed "$BED" --port 5001 --rebalance off --workers "$workers" \
      > /tmp/$BED.sink.out 2>/tmp/$BED.sink.err &
    sink=$!
    for _ in $(seq 100); do grep -q "TCP on" /tmp/$BED.sink.err && break; sleep 0.1; done
    t0=$(date +%s.%N); b0=$(busy)
    ip netns exec "flowlane-$BED-peer" python3 -c "$sender" 10.99.0.1 "$CONNS" "$BYTES"
    t1=$(date +%s.%N); b1=$(busy)
    kill -TERM "$sink"; wait "$sink" || true
    python3 - "$workers" "$t0" "$t1" "$b0" "$b1" "$BYTES" "$TSC_HZ" /tmp/$BED.sink.out <<'PY'
import json, os, sys
w, t0, t1, b0, b1, n, hz, out = sys.argv[1:]
secs = float(t1) - float(t0)
ticks = int(b1) - int(b0)
cpu_s = ticks / os.sysconf("SC_CLK_TCK")
lines = [json.loads(l) for l in open(out) if l.startswith("{")]
summary = [l for l in lines if l.get("event") == "summary"][-1]
queues = {q["queue"]: q["tcp"] for q in summary["counters"]["queues"]}
spilled = queues.get(2, {}).get("bytes_in", 0)
t = summary["counters"]["total"]
print(f"workers {w}: {int(n)*8/secs/1e6:.0f} Mbit/s, {cpu_s*float(hz)/int(n):.2f} cycles/B system, "
      f"{secs:.2f} s; bytes in {t['bytes_in']} ({spilled} by the worker without a queue), "
      f"forwarded {queues[0].get('spill_forwarded', 0)}, dropped {t['forward_dropped']}, {t.get('out_of_order', 0)} segments out of order")
PY
  done
done
