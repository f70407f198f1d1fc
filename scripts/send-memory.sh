#!/usr/bin/env bash
# What peers that send and never read cost a service's memory: CONNS kernel
# TCP connections from the bed's peer namespace, each with the smallest
# receive buffer (SO_RCVBUF 1: its window shuts after a segment or two),
# send BYTES each to `echo-server` and read nothing, so that every echo waits
# in the service's send buffers; the service's anonymous memory is read
# before, once the attack has pushed for SECS seconds, 3 s after the
# connections are reset, and 10 s later (settled: each stack gives the free
# memory that lay idle back every second, the service trims the heap).
# flowlane's stack bounds its receive memory (`Config::recv_memory`) and its
# send memory (`Config::send_memory`, `--send-memory`); the kernel backend
# both (`Limits::rx_memory`, `tx_memory`), Linux both (tcp_mem).
#
#   scripts/send-memory.sh [xdp|kernel|xdp-qp|kernel-qp ...]   # default: xdp kernel
#
# `xdp-qp` and `kernel-qp` run the same backends in queue-pair mode
# (`--mode queue-pair`: the handlers on application threads, the bytes
# carried through each core's relay, whose memory `flowlane-qp` bounds).
#
# Environment: FLOWLANE (the binary; default: builds target/release/flowlane),
# CONNS (4000), BYTES (262144), SECS (30). Needs root and python3.
#
# One line per backend: connections, bytes the peers got rid of, the
# service's RssAnon (KiB) at start, under the attack, after it and settled,
# the attack's less the start per connection, and the writes the service's send memory
# cut short (its summary's `tx_memory_waits`).
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
cd "$(dirname "$0")/.."
BACKENDS=("$@")
((${#BACKENDS[@]})) || BACKENDS=(xdp kernel)
CONNS=${CONNS:-4000} BYTES=${BYTES:-262144} SECS=${SECS:-30}
for b in "${BACKENDS[@]}"; do
  case $b in xdp | kernel | xdp-qp | kernel-qp) ;; *) echo "send-memory: a backend is xdp, kernel, xdp-qp or kernel-qp (got '$b')" >&2; exit 2 ;; esac
done
for v in CONNS BYTES SECS; do
  case ${!v} in '' | *[!0-9]*) echo "send-memory: $v must be a whole number (got '${!v}')" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "send-memory: needs root (network namespaces, AF_XDP): run it with sudo" >&2; exit 1; }
command -v python3 >/dev/null || { echo "send-memory: needs python3 (apt-get install python3)" >&2; exit 1; }
if [ -z "${FLOWLANE:-}" ]; then
  cargo build --release -q -p flowlane-control
fi
BIN=$(realpath "${FLOWLANE:-$target_dir/release/flowlane}")

WORK=$(mktemp -d /tmp/flowlane-send-memory.XXXXXX)
BED=sendmem$$ SVC_PID= ATK_PID=
cleanup() {
  set +e
  local p
  for p in $ATK_PID $SVC_PID; do
    { kill "$p" && wait "$p"; } 2>/dev/null
  done
  "$BIN" testbed down --bed "$BED" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

# The peers: connect, push BYTES each without blocking while SECS last,
# print what went, then wait for SIGTERM (their sockets reset at exit:
# unread bytes).
cat >"$WORK/peers.py" <<'EOF'
import json, resource, signal, socket, sys, time
dst, port, n, size, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
socks, data, failed = [], b"x" * size, 0
for i in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * size)
    s.setblocking(False)
    try:
        s.connect((dst, port))
    except BlockingIOError:
        pass
    socks.append([s, 0])
    if i % 200 == 199:
        time.sleep(0.05)
sent, end = 0, time.time() + secs
while time.time() < end:
    moved = False
    for e in socks:
        if e[1] >= size:
            continue
        try:
            k = e[0].send(data[e[1]:])
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            e[1] = size
            failed += 1
            continue
        e[1] += k
        sent += k
        moved = moved or k > 0
    if not moved:
        time.sleep(0.2)
print(json.dumps({"sent": sent, "failed": failed}), flush=True)
signal.sigwait([signal.SIGTERM])
EOF

rss() { awk '/^RssAnon/ {print $2}' "/proc/$1/status"; }
"$BIN" testbed up --bed "$BED" --queues 2 >/dev/null
for b in "${BACKENDS[@]}"; do
  mode=()
  [[ $b == *-qp ]] && mode=(--mode queue-pair)
  "$BIN" echo-server --bed "$BED" --port 7 --backend "${b%-qp}" "${mode[@]}" >"$WORK/$b.out" 2>"$WORK/$b.err" &
  SVC_PID=$!
  for _ in $(seq 100); do
    ip netns exec "flowlane-$BED" ss -ltn 'sport = :7' | grep -q LISTEN && break
    grep -q 'TCP on' "$WORK/$b.err" && break
    sleep 0.1
  done
  sleep 1
  start=$(rss "$SVC_PID")
  rm -f "$WORK/peers.out"
  ip netns exec "flowlane-$BED-peer" python3 "$WORK/peers.py" 10.99.0.1 7 "$CONNS" "$BYTES" "$SECS" >"$WORK/peers.out" &
  ATK_PID=$!
  while ! [ -s "$WORK/peers.out" ]; do sleep 1; done
  held=$(rss "$SVC_PID")
  { kill "$ATK_PID" && wait "$ATK_PID"; } 2>/dev/null || true
  ATK_PID=
  sleep 3
  after=$(rss "$SVC_PID")
  sleep 10
  settled=$(rss "$SVC_PID")
  { kill "$SVC_PID" && wait "$SVC_PID"; } 2>/dev/null || true
  SVC_PID=
  waits=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    try:
        v = json.loads(l)
    except ValueError:
        continue
    if v.get("event") == "summary":
        print(v["counters"]["total"].get("tx_memory_waits", 0))
' "$WORK/$b.out")
  printf '%-6s conns %d peers %s rss_anon_kib start %d attack %d after %d settled %d per_conn_kib %d send_memory_waits %s\n' \
    "$b" "$CONNS" "$(cat "$WORK/peers.out")" "$start" "$held" "$after" "$settled" $(((held - start) / CONNS)) "${waits:-?}"
done
