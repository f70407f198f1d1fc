#!/usr/bin/env bash
# The execution models side by side (issue 15): `flowlane bulk-sink` run to
# completion and in queue-pair mode, on AF_XDP and on kernel sockets, each
# receiving the same bulk transfers from kernel TCP senders in the peer
# namespace, on one two-queue test bed, in one run. Prints per model and
# connection count: aggregate Gbit/s (the bytes the sink received over its
# own time of the longest transfer, accept to end of stream), and the CPU the network cores
# (threads flowlane-q*) and the application threads (flowlane-app*) spent,
# as % of one CPU per Gbit/s (TOAD's measure). On kernel sockets the
# network cores' figure leaves out the kernel's TCP work in softirq.
#
#   scripts/exec-models.sh [CONNS...]      # default: 1 16
#
# Environment: MIB (MiB per connection, default 256), QUEUES (default 2),
# FLOWLANE (a flowlane binary instead of building target/release/flowlane).
# Needs root.
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
caller_programs FLOWLANE
cd "$(dirname "$0")/.."
MIB=${MIB:-256}
QUEUES=${QUEUES:-2}
CONNS=("$@")
((${#CONNS[@]})) || CONNS=(1 16)
[ "$(id -u)" = 0 ] || { echo "exec-models: needs root (network namespaces, XDP): run with sudo" >&2; exit 1; }
if [ -z "${FLOWLANE:-}" ]; then
  cargo build --release -q -p flowlane-control
fi
F=${FLOWLANE:-$target_dir/release/flowlane}
BED=em$$
PNS=flowlane-$BED-peer
WORK=$(mktemp -d /tmp/flowlane-exec-models.XXXXXX)
SINK=
# Every step runs whatever failed before it (errexit off here: a `wait` on
# the killed sink returns 143, which would end the handler early).
cleanup() {
  set +e
  [ -n "$SINK" ] && kill "$SINK" 2>/dev/null && wait "$SINK" 2>/dev/null
  "$F" testbed down --bed "$BED" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
"$F" testbed up --bed "$BED" --queues "$QUEUES" >/dev/null

cat >"$WORK/send.py" <<'PY'
import socket, sys, threading
n, size = int(sys.argv[1]), int(sys.argv[2]) << 20
buf = bytes(range(256)) * 4096
def one():
    s = socket.create_connection(('10.99.0.1', 5001), timeout=60)
    left = size
    while left:
        k = s.send(buf[:min(len(buf), left)])
        left -= k
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    s.close()
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
PY

printf '| model | connections | Gbit/s | network cores, %% of a CPU per Gbit/s | application threads, %% of a CPU per Gbit/s |\n'
printf '| --- | --- | --- | --- | --- |\n'
for c in "${CONNS[@]}"; do
  for model in "xdp rtc" "xdp queue-pair" "kernel rtc" "kernel queue-pair"; do
    set -- $model
    "$F" bulk-sink --bed "$BED" --port 5001 --no-hash --count "$c" --backend "$1" --mode "$2" \
      --report "$WORK/report.json" --timeout 120 >"$WORK/sink.out" 2>"$WORK/sink.err" &
    SINK=$!
    for _ in $(seq 100); do [ -f "$WORK/report.json" ] && break; sleep 0.1; done
    ip netns exec "$PNS" python3 "$WORK/send.py" "$c" "$MIB"
    wait "$SINK" || { echo "exec-models: the sink failed ($model): $(cat "$WORK/sink.err")" >&2; exit 1; }
    SINK=
    rm -f "$WORK/report.json"
    # The wall time is the sink's own: each transfer's `secs` (accept to end
    # of stream, one JSON line per transfer), the longest of them. The
    # sender opens every connection at once (threads started together), so
    # that is the span of the run to within the connects' spread, without
    # the sender's interpreter start-up that a clock around it would count.
    python3 - "$WORK/sink.out" "$model" "$c" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
s = next(l for l in lines if l.get('event') == 'summary')
done = [l for l in lines if l.get('event') == 'sink' and l.get('ok')]
if not done:
    sys.exit('exec-models: %s: no transfer ended well' % sys.argv[2])
if len(done) != int(sys.argv[3]):
    print('exec-models: %s: only %d of %s transfers ended well (their bytes alone counted)'
          % (sys.argv[2], len(done), sys.argv[3]), file=sys.stderr)
got = sum(l['bytes'] for l in done)
wall = max(l['secs'] for l in done)
gbit = got * 8 / wall / 1e9
net = sum(x or 0 for x in s.get('worker_cpu_ns', [])) / 1e9
app = sum(x or 0 for x in s.get('app_thread_cpu_ns', [])) / 1e9
per = lambda cpu: cpu / wall * 100 / gbit
app_s = '%.1f' % per(app) if s.get('app_thread_cpu_ns') else '-'
print('| %s | %s | %.2f | %.1f | %s |' % (sys.argv[2], sys.argv[3], gbit, per(net), app_s))
PY
  done
done
