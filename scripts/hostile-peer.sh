#!/usr/bin/env bash
# Hostile peers against a queue's receive memory: CONNS kernel TCP
# connections from the bed's peer namespace hold windows of one flowlane
# queue (a one-queue bed, `--frames-per-queue FRAMES`: a budget of
# FRAMES/2 segments, reached by a few thousand connections) while they
# sleep, trickle or burst, then a kernel client uploads BYTES to the same
# service; the upload's seconds say how much of the memory the attack took
# from a busy connection (tcp/src/stack.rs, `park_idle`, `touch_parked`).
#
#   scripts/hostile-peer.sh [ATTACK...]     # default: none trickle half
#
# Attacks (each connection; first one byte, then):
#   none       no attacker (the baseline)
#   idle       nothing more
#   trickle    1 byte every 0.5 s
#   half       724 bytes every second (half a segment a second)
#   threshold  1,400 bytes every second (just under a segment a second)
#   medium     1,448 bytes every 0.5 s (two segments a second)
#   burst      a byte every 0.5 s, and 16 KiB from every connection at once
#              every 4 s (with SERVICE=echo-server the echoes are checked)
#
# Environment: FLOWLANE (the binary; default: builds target/release/flowlane),
# BEFORE (a second binary: every run is made with it first, then FLOWLANE,
# labelled before/after), MODE (rtc or queue-pair, default rtc), SERVICE
# (bulk-sink or echo-server, default bulk-sink; echo-server also checks
# every byte the attackers get back), CONNS (2000), BYTES (50000000),
# FRAMES (4096), SETTLE (seconds between the attackers' connects and the
# upload, default 5: two looks for connections to park), REPS (1), OUT (a
# directory to keep every run's reports, metrics and logs in; without it
# they are removed). Needs root and python3.
#
# One line per run: the upload's seconds, what the attackers sent (Mbit/s),
# the queue's committed receive memory before the upload
# (`recv_memory_committed`, against the budget FRAMES/2 x MSS), connections
# parked during the upload (`recv_parked`), window retractions, the
# queue's frame drops (`no_buffer`: fill-ring starvation, from the
# daemon's metrics), the attackers' resets and echo check, and the
# service's anonymous memory (KiB) at start, before and after the upload.
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
caller_programs FLOWLANE BEFORE
caller_paths OUT
cd "$(dirname "$0")/.."
ATTACKS=("$@")
((${#ATTACKS[@]})) || ATTACKS=(none trickle half)
MODE=${MODE:-rtc} SERVICE=${SERVICE:-bulk-sink}
CONNS=${CONNS:-2000} BYTES=${BYTES:-50000000} FRAMES=${FRAMES:-4096}
SETTLE=${SETTLE:-5} REPS=${REPS:-1}
declare -A ATTACK_ARGS=(
  [none]="" [idle]="--size 0" [trickle]="--size 1 --interval 0.5"
  [half]="--size 724 --interval 1.0" [threshold]="--size 1400 --interval 1.0"
  [medium]="--size 1448 --interval 0.5"
  [burst]="--size 1 --interval 0.5 --burst-every 4 --burst-after 0.5 --burst-bytes 16384"
)
for a in "${ATTACKS[@]}"; do
  [ -n "${ATTACK_ARGS[$a]+x}" ] || {
    echo "hostile-peer: unknown attack '$a' (none, idle, trickle, half, threshold, medium, burst)" >&2
    exit 2
  }
done
case $MODE in rtc | queue-pair) ;; *) echo "hostile-peer: MODE must be rtc or queue-pair (got '$MODE')" >&2; exit 2 ;; esac
case $SERVICE in bulk-sink | echo-server) ;; *) echo "hostile-peer: SERVICE must be bulk-sink or echo-server (got '$SERVICE')" >&2; exit 2 ;; esac
for v in CONNS BYTES FRAMES SETTLE REPS; do
  case ${!v} in '' | *[!0-9]*) echo "hostile-peer: $v must be a whole number (got '${!v}')" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "hostile-peer: needs root (network namespaces, AF_XDP): run it with sudo" >&2; exit 1; }
command -v python3 >/dev/null || { echo "hostile-peer: needs python3 (apt-get install python3)" >&2; exit 1; }

if [ -z "${FLOWLANE:-}" ]; then
  cargo build --release -q -p flowlane-control
fi
AFTER=$(realpath "${FLOWLANE:-$target_dir/release/flowlane}")
BINS=("after=$AFTER")
[ -n "${BEFORE:-}" ] && BINS=("before=$(realpath "$BEFORE")" "${BINS[@]}")

WORK=$(mktemp -d /tmp/flowlane-hostile-peer.XXXXXX)
KEEP=${OUT:-}
[ -n "$KEEP" ] && mkdir -p "$KEEP"
BED= SVC_PID= D_PID= ATK_PID= BIN=
# Stops what the current run started and removes its bed.
stop_run() {
  local p
  for p in $ATK_PID $SVC_PID $D_PID; do
    { kill "$p" && wait "$p"; } 2>/dev/null || true
  done
  ATK_PID= SVC_PID= D_PID=
  [ -n "$BED" ] && "$BIN" testbed down --bed "$BED" >/dev/null 2>&1
  BED=
}
cleanup() {
  set +e
  stop_run
  rm -rf "$WORK"
}
trap cleanup EXIT

# The attackers: one process, one selector, every connection's writes on
# its own schedule; stats as JSON when SIGTERM ends it.
cat >"$WORK/attacker.py" <<'EOF'
import argparse, collections, errno, heapq, json, random, resource, selectors, signal, socket, time
ap = argparse.ArgumentParser()
ap.add_argument("--dst", required=True)
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--n", type=int, required=True)
ap.add_argument("--size", type=int, default=1)
ap.add_argument("--interval", type=float, default=0.5)
ap.add_argument("--burst-every", type=float, default=0.0)
ap.add_argument("--burst-after", type=float, default=0.0)
ap.add_argument("--burst-bytes", type=int, default=0)
ap.add_argument("--echo", action="store_true")
ap.add_argument("--ready", required=True)
ap.add_argument("--stats", required=True)
a = ap.parse_args()
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
PAT = bytes(j % 251 for j in range(251 + (1 << 20)))
def chunk(i, off, n):  # connection i's byte at offset k is (7i + k) mod 251
    s = (i * 7 + off) % 251
    return PAT[s:s + n]
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
sel = selectors.DefaultSelector()
st = collections.Counter()
conns, pending, i = {}, {}, 0
t_start = time.monotonic()
while (i < a.n or pending) and not stop:
    while i < a.n and len(pending) < 256:
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect((a.dst, a.port))
        except BlockingIOError:
            pass
        pending[s] = (i, time.monotonic())
        sel.register(s, selectors.EVENT_WRITE)
        i += 1
    for key, _ in sel.select(0.2):
        s = key.fileobj
        idx, _ = pending.pop(s)
        sel.unregister(s)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            st["connect_failed_" + errno.errorcode.get(err, str(err))] += 1
            s.close()
            continue
        conns[s.fileno()] = dict(s=s, i=idx, sent=0, echoed=0, out=b"", dead=False)
        sel.register(s, selectors.EVENT_READ)
    now = time.monotonic()
    for s in [s for s, (_, t) in pending.items() if now - t > 30]:
        pending.pop(s)
        sel.unregister(s)
        s.close()
        st["connect_failed_timeout"] += 1
st["connected"] = len(conns)
def kill(c, why):
    if not c["dead"]:
        c["dead"] = True
        st[why] += 1
        sel.unregister(c["s"])
def flush(c, data):
    try:
        k = c["s"].send(data)
    except BlockingIOError:
        k = 0
    except OSError as e:
        kill(c, "send_" + errno.errorcode.get(e.errno, str(e.errno)))
        return
    c["sent"] += k
    st["bytes_sent"] += k
    c["out"] = data[k:]
    sel.modify(c["s"], selectors.EVENT_READ | (selectors.EVENT_WRITE if c["out"] else 0))
def write(c, n):
    if c["dead"] or n <= 0:
        return
    data = chunk(c["i"], c["sent"] + len(c["out"]), n)
    if c["out"]:
        c["out"] += data
    else:
        flush(c, data)
def read(c):
    try:
        b = c["s"].recv(1 << 16)
    except BlockingIOError:
        return
    except OSError as e:
        kill(c, "recv_" + errno.errorcode.get(e.errno, str(e.errno)))
        return
    if not b:
        kill(c, "eof")
    elif not a.echo:
        st["unexpected_bytes"] += len(b)
    else:
        st["echo_mismatch"] += b != chunk(c["i"], c["echoed"], len(b))
        c["echoed"] += len(b)
        st["bytes_echoed"] += len(b)
heap, t0 = [], time.monotonic()
for c in conns.values():
    write(c, 1)
    if a.size > 0:
        heapq.heappush(heap, (t0 + random.uniform(0, a.interval), c["s"].fileno()))
open(a.ready, "w").write("ready\n")
next_burst = t0 + a.burst_after if a.burst_every > 0 else None
while not stop:
    now = time.monotonic()
    while heap and heap[0][0] <= now:
        _, fd = heapq.heappop(heap)
        write(conns[fd], a.size)
        heapq.heappush(heap, (now + a.interval, fd))
    if next_burst is not None and now >= next_burst:
        for c in conns.values():
            write(c, a.burst_bytes)
        next_burst = now + a.burst_every
    wait = min(0.05, max(0.0, heap[0][0] - now)) if heap else 0.05
    for key, ev in sel.select(wait):
        c = conns[key.fileobj.fileno()]
        if ev & selectors.EVENT_READ:
            read(c)
        if ev & selectors.EVENT_WRITE and not c["dead"] and c["out"]:
            flush(c, c["out"])
if a.echo:  # up to 10 s for the echoes of what was sent
    end = time.monotonic() + 10
    while time.monotonic() < end and any(c["echoed"] < c["sent"] for c in conns.values() if not c["dead"]):
        for key, _ in sel.select(0.1):
            read(conns[key.fileobj.fileno()])
    st["bytes_not_echoed"] = sum(c["sent"] - c["echoed"] for c in conns.values())
st["alive"] = sum(not c["dead"] for c in conns.values())
st["secs"] = round(time.monotonic() - t0, 2)
open(a.stats, "w").write(json.dumps(dict(st)) + "\n")
EOF

# The upload: connect, send BYTES, half-close, wait for the service's
# close; an echo service's bytes are read back meanwhile.
cat >"$WORK/upload.py" <<'EOF'
import json, os, socket, sys, threading, time
dst, port, total, echo = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "echo"
buf = os.urandom(1 << 20)
s = socket.create_connection((dst, port), timeout=600)
t0, got = time.monotonic(), [0]
def reader():
    while b := s.recv(1 << 20):
        got[0] += len(b)
th = threading.Thread(target=reader)
th.start()
left = total
while left:
    n = min(left, len(buf))
    s.sendall(buf[:n])
    left -= n
s.shutdown(socket.SHUT_WR)
th.join()
print(json.dumps(dict(secs=round(time.monotonic() - t0, 3), echoed=got[0])))
EOF

# One run: $1 label, $2 binary, $3 attack.
run() {
  local label=$1 attack=$3 dir mport pid anon0 anon1 anon2 up atk
  BIN=$2
  dir=$WORK/$label
  mkdir -p "$dir/run"
  BED=hp$$
  "$BIN" testbed up --bed "$BED" --queues 1 >/dev/null
  local ns=flowlane-$BED pns=flowlane-$BED-peer addr port=5001
  addr=$(ip netns exec "$ns" ip -4 -o addr show dev xsk0 | awk '{print $4}' | cut -d/ -f1)
  ip netns exec "$pns" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535"
  local args=(--bed "$BED" --queues 1 --port "$port" --frames-per-queue "$FRAMES" --mode "$MODE"
    --rebalance off --control-socket "$dir/run/service.sock" --daemon-socket none --report "$dir/report.json")
  [ "$SERVICE" = bulk-sink ] && args+=(--no-hash)
  "$BIN" "$SERVICE" "${args[@]}" >"$dir/service.out" 2>"$dir/service.err" &
  SVC_PID=$!
  for _ in $(seq 100); do [ -s "$dir/report.json" ] && break; sleep 0.1; done
  [ -s "$dir/report.json" ] || { echo "hostile-peer: $SERVICE did not start:" >&2; tail -5 "$dir/service.err" >&2; exit 1; }
  mport=$((20000 + RANDOM % 10000))
  "$BIN" daemon --run-dir "$dir/run" --socket none --metrics "127.0.0.1:$mport" >"$dir/daemon.out" 2>&1 &
  D_PID=$!
  # `--bed` runs the service again inside the bed's namespace: the child.
  pid=$(pgrep -P "$SVC_PID" -x flowlane | head -1 || true)
  pid=${pid:-$SVC_PID}
  anon() { awk '/^RssAnon/ {print $2}' "/proc/$pid/status"; }
  report() {
    rm -f "$dir/report.json"
    kill -USR1 "$pid"
    for _ in $(seq 50); do [ -s "$dir/report.json" ] && break; sleep 0.1; done
    cp "$dir/report.json" "$dir/$1.json"
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
      "http://127.0.0.1:$mport/metrics" >"$dir/$1.metrics" 2>&1 || true
  }
  anon0=$(anon)
  if [ "$attack" != none ]; then
    local extra=()
    [ "$SERVICE" = echo-server ] && extra+=(--echo)
    # shellcheck disable=SC2086 # the attack's flags are words
    ip netns exec "$pns" python3 "$WORK/attacker.py" --dst "$addr" --port "$port" --n "$CONNS" \
      --ready "$dir/ready" --stats "$dir/attack.json" ${ATTACK_ARGS[$attack]} "${extra[@]}" >"$dir/attack.out" 2>&1 &
    ATK_PID=$!
    for _ in $(seq 1200); do [ -s "$dir/ready" ] || ! kill -0 "$ATK_PID" 2>/dev/null && break; sleep 0.1; done
    [ -s "$dir/ready" ] || { echo "hostile-peer: the attackers did not connect:" >&2; tail -5 "$dir/attack.out" >&2; exit 1; }
    sleep "$SETTLE"
  fi
  report before
  anon1=$(anon)
  up=$(ip netns exec "$pns" python3 "$WORK/upload.py" "$addr" "$port" "$BYTES" \
    "$([ "$SERVICE" = echo-server ] && echo echo || echo sink)" 2>"$dir/upload.err") ||
    up='{"secs": null, "error": "the upload failed (upload.err)"}'
  report after
  anon2=$(anon)
  atk='{}'
  if [ -n "$ATK_PID" ]; then
    kill "$ATK_PID"
    wait "$ATK_PID" || true
    ATK_PID=
    atk=$(cat "$dir/attack.json" 2>/dev/null || echo '{}')
  fi
  python3 - "$dir" "$label" "$attack" "$up" "$atk" "$anon0" "$anon1" "$anon2" <<'EOF'
import json, re, sys
d, label, attack, up, atk = sys.argv[1:6]
anon = "/".join(sys.argv[6:9])
up, atk = json.loads(up), json.loads(atk)
tcp = lambda n: json.load(open(f"{d}/{n}.json"))["counters"]["total"]
b, a = tcp("before"), tcp("after")
drops = 0
for line in open(f"{d}/after.metrics"):
    if line.startswith("flowlane_queue_dropped_frames_total{") and 'reason="no_buffer"' in line:
        drops += float(line.split()[-1])
secs = up.get("secs")
mbit = 8 * atk.get("bytes_sent", 0) / atk["secs"] / 1e6 if atk.get("secs") else 0.0
resets = sum(v for k, v in atk.items() if k.startswith(("recv_", "send_")) or k == "eof")
echo = f" not_echoed={atk.get('bytes_not_echoed')} mismatches={atk.get('echo_mismatch', 0)}" if "bytes_not_echoed" in atk else ""
print(f"{label:7s} {attack:9s} upload={secs if secs is not None else up.get('error')}s attackers={atk.get('connected', 0)} sent={mbit:.1f}Mbit/s "
      f"committed={b['recv_memory_committed']} parked_during={a['recv_parked'] - b['recv_parked']} "
      f"retractions={a['window_retractions'] - b['window_retractions']} no_buffer_drops={int(drops)} "
      f"attacker_resets={resets}{echo} anon_kib={anon}", flush=True)
EOF
  [ -n "$KEEP" ] && cp -r "$dir" "$KEEP/"
  stop_run
}

echo "hostile-peer: $SERVICE ($MODE), one queue, --frames-per-queue $FRAMES, $CONNS attackers, upload $BYTES B"
for rep in $(seq "$REPS"); do
  for attack in "${ATTACKS[@]}"; do
    for b in "${BINS[@]}"; do
      run "${b%%=*}" "${b#*=}" "$attack"
    done
  done
done
