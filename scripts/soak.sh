#!/usr/bin/env bash
# Soak and leak hunt: flowlane services under a churning load mix for many
# minutes, then idle; every minute one row per service of what it holds
# (memory, threads, descriptors, connections by state, TIME-WAIT, receive
# memory committed, buffer memory, frames lent to receive buffers, UMEM
# frames held or being sent and frames missing from the queues' accounts,
# queue-pair relay memory, neighbours, drops, CPU) read from /proc and
# from `flowlane daemon`'s metrics page (and the services' control sockets
# for what the page does not show); at the end a PASS/FAIL verdict on
# "everything returns to its idle baseline".
# Not part of CI or scripts/test.sh: it runs for half an hour by default.
#
#   scripts/soak.sh [--minutes N] [--mode rtc|queue-pair] [--service LIST]
#                   [--settle-s S] [--flowlane BIN] [--out DIR] [--msl-ms MS]
#                   [--service-flags FLAGS] [--rebalance-poll-ms MS]
#
#   --minutes N     minutes of load (default 30), the first 2 of them warm-up
#   --mode M        rtc (default) or queue-pair: where the handlers run
#   --service LIST  comma-separated among http, echo, bulk (default
#                   http,echo): each on its own 2-queue test bed, all at once
#   --settle-s S    seconds of idle after the load (default 240: twice the
#                   longest timeout, the idle timeout of 30 s plus TIME-WAIT
#                   and FIN-WAIT-2 of 2 MSL, 60 s)
#   --flowlane BIN  the flowlane binary (default release/flowlane under
#                   $CARGO_TARGET_DIR or target/, built when missing)
#   --out DIR       where the table, samples.jsonl and the logs are kept
#                   (default ./flowlane-soak-<date>-<time>/)
#   --msl-ms MS     the services' MSL (default the stack's, 30 s)
#   --service-flags FLAGS  more flags for every service, split on spaces
#                   (e.g. "--move-cost fixed" or "--rebalance off": an A/B
#                   of the rebalancer is two runs, one after the other)
#   --rebalance-poll-ms MS  every MS ms during the load, each service's
#                   `flowlane rebalance status --json` into
#                   rebalance-SERVICE.jsonl, and at the end a table of what
#                   its rebalancing loop did (rebalance.txt): moves made,
#                   failed, connections they carried, moves refused for
#                   their price, the price, and the queues' skew (busiest
#                   queue's busy time over the mean, per window and per
#                   minute; default 0: not polled)
#
# The mix, from the bed's peer namespace, in cycles: wrk keep-alive and
# `Connection: close` load and curl loops (http), many short echo
# exchanges, streams half-closed with `nc -N`, clients killed with SIGKILL
# mid-transfer (their kernel resets), sockets closed with unread data
# (SO_LINGER 0: a reset), slow readers, idle connections left to the
# services' idle timeout (30 s), SYN bursts from spoofed addresses (a raw
# socket, with and without a neighbour), and, in a chaos loop per bed,
# loss and reordering on the link (`flowlane testbed impair`) for a minute
# in every five and `flowlane rebalance move`s every 2 minutes. Load
# generators run at a few thousand requests a second at most and sleep
# between phases (keep a CPU for others on a small machine).
#
# Verdict, per service, at the end of the idle period: no connection in
# any state (TIME-WAIT included), receive memory committed, buffer memory,
# frames lent, frames held or being sent, frames missing (the four
# flowlane_queue_frames gauges sum to --frames-per-queue; checked where
# the binary serves them) and relay memory all 0; threads as many as after
# the warm-up and descriptors no more; anonymous memory at the end of the
# load at most 10 % + 8 MiB over its middle (the plateau: the stack's
# chunk pools keep the chunks their busiest moment took, so memory steps
# up with each new peak early on, then stays), and no more than 8 MiB over
# that after the idle period; no counter went backwards; under 5 % of a
# CPU busy over the last idle minute; the daemon's memory at most
# twice its post-warm-up figure + 8 MiB. Exit 0 on PASS, 1 on FAIL, 2 on
# a bad flag, 130 on Ctrl-C. Every bed, namespace, service and load
# process it made is removed on every way out (Ctrl-C included); names are
# unique per run (soak<pid><n>). Needs root, wrk, curl, nc, python3.
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
cd "$(dirname "$0")/.."

usage() { sed -n '/^#   scripts\/soak.sh/,/^#   --msl-ms/p' "$0" | sed 's/^# \{0,1\}//'; }
MINUTES=30
MODE=rtc
SERVICES=http,echo
SETTLE=240
FL=
OUT=
MSL=
SFLAGS=
POLL_MS=0
WARMUP_MIN=2
while (($#)); do
  case $1 in
    --minutes) MINUTES=${2:?}; shift 2 ;;
    --mode) MODE=${2:?}; shift 2 ;;
    --service) SERVICES=${2:?}; shift 2 ;;
    --settle-s) SETTLE=${2:?}; shift 2 ;;
    --flowlane) FL=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --msl-ms) MSL=${2:?}; shift 2 ;;
    --service-flags) SFLAGS=${2?}; shift 2 ;;
    --rebalance-poll-ms) POLL_MS=${2:?}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "soak: unknown flag $1 (see scripts/soak.sh --help)" >&2; exit 2 ;;
  esac
done
[[ $MINUTES =~ ^[0-9]+$ ]] && ((MINUTES >= 3)) || { echo "soak: --minutes must be a whole number, 3 or more" >&2; exit 2; }
[[ $SETTLE =~ ^[0-9]+$ ]] && ((SETTLE >= 60)) || { echo "soak: --settle-s must be a whole number, 60 or more" >&2; exit 2; }
[[ $POLL_MS =~ ^[0-9]+$ ]] || { echo "soak: --rebalance-poll-ms must be a whole number of milliseconds (0: off)" >&2; exit 2; }
((POLL_MS == 0)) || command -v jq >/dev/null || { echo "soak: --rebalance-poll-ms needs jq: install it (apt-get install jq)" >&2; exit 1; }
read -r -a SERVICE_FLAGS <<<"$SFLAGS"
case $MODE in rtc | queue-pair) ;; *) echo "soak: --mode must be rtc or queue-pair" >&2; exit 2 ;; esac
IFS=, read -r -a SVC <<<"$SERVICES"
for s in "${SVC[@]}"; do
  case $s in http | echo | bulk) ;; *) echo "soak: unknown service $s (http, echo, bulk)" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "soak: needs root (network namespaces, XDP): run with sudo" >&2; exit 1; }
for t in wrk curl nc python3; do
  command -v "$t" >/dev/null || { echo "soak: $t is missing: install it (apt-get install wrk curl netcat-openbsd python3)" >&2; exit 1; }
done
if [ -z "$FL" ]; then
  FL=$target_dir/release/flowlane
  [ -x "$FL" ] || cargo build --release -q -p flowlane-control
fi
[ -x "$FL" ] || { echo "soak: $FL is not an executable flowlane binary" >&2; exit 1; }
PY=$(command -v python3)
OUT=${OUT:-$PWD/flowlane-soak-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
TAG=soak$$
WORK=$(mktemp -d /tmp/flowlane-soak.XXXXXX)
mkdir -p "$WORK/ctl" "$WORK/dstate" "$WORK/run"
# The beds' records go to this run's own directory, not another user's.
export FLOWLANE_RUN_DIR=$WORK/run
BEDS=()
PIDS=()   # services and the daemon
GROUPS_=() # load and chaos loops: each its own process group

cleanup() {
  set +e
  local g p b
  for g in "${GROUPS_[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done  # a nap's sleep
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  for b in "${BEDS[@]}"; do
    "$FL" testbed impair --bed "$b" --clear >/dev/null 2>&1
    "$FL" testbed down --bed "$b" >/dev/null 2>&1 || "$FL" testbed down --bed "$b" --force >/dev/null 2>&1
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "soak: interrupted; cleaning up" >&2; exit 130' INT TERM

# The Python helpers: load clients (run in the peer namespace) and the
# sampler (run here).
cat >"$WORK/soak.py" <<'PYEOF'
import json, os, random, select, socket, struct, sys, time, urllib.request

def clients(addr, port, n):
    """n short echo exchanges: 1-16 KiB each way, then a close."""
    for _ in range(n):
        try:
            s = socket.create_connection((addr, port), timeout=5)
            data = os.urandom(random.randint(1, 16)) * 1024
            s.sendall(data)
            got = 0
            while got < len(data):
                b = s.recv(65536)
                if not b:
                    break
                got += len(b)
            s.close()
        except OSError:
            pass

def resets(addr, port, n, send):
    """n connections that send (or not) and are closed with SO_LINGER 0."""
    for _ in range(n):
        try:
            s = socket.create_connection((addr, port), timeout=5)
            if send:
                s.sendall(b"x" * random.randint(1, 200000))
            time.sleep(0.05)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        except OSError:
            pass

def slow(addr, port, nbytes, request):
    """A slow reader: sends its bytes (or the request), reads 4 KiB per 50 ms."""
    try:
        s = socket.create_connection((addr, port), timeout=30)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        s.sendall(request.encode() if request else b"s" * nbytes)
        end = time.time() + 20
        while time.time() < end:
            b = s.recv(4096)
            if not b:
                break
            time.sleep(0.05)
        s.close()
    except OSError:
        pass

def idle(addr, port, n, secs):
    """n connections that say nothing for secs (the server's idle timeout ends them)."""
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection((addr, port), timeout=5))
        except OSError:
            pass
    end = time.time() + secs
    while socks and time.time() < end:
        r, _, _ = select.select(socks, [], [], 1)
        for s in r:
            try:
                if not s.recv(4096):
                    socks.remove(s); s.close()
            except OSError:
                socks.remove(s); s.close()
    for s in socks:
        s.close()

def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF

def synflood(addr, port, n, rate):
    """n SYNs at about `rate` a second from spoofed sources of the bed's
    /24: half from the peer's own address (its kernel resets the SYN-ACK),
    half from addresses nobody holds (no neighbour)."""
    me = socket.inet_aton(os.environ.get("SOAK_PEER", "10.99.0.2"))
    dst = socket.inet_aton(addr)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    net = dst[:3]
    t0 = time.time()
    for i in range(n):
        src = me if i % 2 else net + bytes([random.randint(100, 250)])
        sport = random.randint(1024, 65535)
        tcp = struct.pack("!HHIIBBHHH", sport, port, random.getrandbits(32), 0, 5 << 4, 0x02, 64240, 0, 0)
        pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
        tcp = tcp[:16] + struct.pack("!H", csum(pseudo + tcp)) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), random.getrandbits(16), 0, 64, 6, 0, src, dst)
        try:
            s.sendto(ip + tcp, (addr, 0))
        except OSError:
            pass
        if i % 100 == 99:
            ahead = (i + 1) / rate - (time.time() - t0)
            if ahead > 0:
                time.sleep(ahead)

def metrics(url):
    """The daemon's page as {service: {name: [(labels, value)]}}."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        head, _, val = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",") if "=" in kv) if rest else {}
        labels = {k: v.strip('"') for k, v in labels.items()}
        try:
            v = float(val)
        except ValueError:
            continue
        out.setdefault(labels.get("service", ""), {}).setdefault(name, []).append((labels, v))
    return out

def control(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    s.sendall(b'{"op":"counters"}\n')
    buf = b""
    while not buf.endswith(b"\n"):
        d = s.recv(1 << 20)
        if not d:
            break
        buf += d
    return json.loads(buf)

def proc(pid):
    st = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.split()
    anon = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                anon = int(line.split()[1])
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return {
        "rss_kib": int(st["VmRSS"][0]), "rss_anon_kib": int(st["RssAnon"][0]),
        "anon_kib": anon, "threads": int(st["Threads"][0]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")), "cpu_s": cpu,
    }

def total(m, name, **want):
    return sum(v for l, v in m.get(name, []) if all(l.get(k) == w for k, w in want.items()))

def sample(url, work, phase, minute, daemon_pid, kinds):
    """One row per service; appends them to work/samples.jsonl and keeps
    the previous counters there to see any that went backwards."""
    m = metrics(url)
    prev_path = os.path.join(work, "prev.json")
    prev = json.load(open(prev_path)) if os.path.exists(prev_path) else {}
    rows, now = [], {}
    daemon = proc(daemon_pid)
    for kind, service in kinds:
        sm = m.get(service, {})
        row = {"t": round(time.time()), "minute": minute, "phase": phase, "service": kind,
               "daemon_rss_kib": daemon["rss_kib"]}
        pids = {l.get("pid") for l, _ in sm.get("flowlane_service_info", [])}
        if len(pids) != 1:
            row["error"] = "service not on the metrics page"
            rows.append(row); continue
        pid = pids.pop()
        row.update(proc(pid))
        row["state"] = {l["state"]: 0 for l, _ in sm.get("flowlane_tcp_connections", [])}
        for l, v in sm.get("flowlane_tcp_connections", []):
            row["state"][l["state"]] += int(v)
        row["connections"] = sum(row["state"].values())
        row["recv_committed"] = int(total(sm, "flowlane_tcp_receive_memory_committed_bytes"))
        row["buffer_memory"] = int(total(sm, "flowlane_tcp_buffer_memory_bytes"))
        row["seg_dropped"] = {}
        for l, v in sm.get("flowlane_tcp_dropped_segments_total", []):
            row["seg_dropped"][l["reason"]] = row["seg_dropped"].get(l["reason"], 0) + int(v)
        row["frames_dropped"] = int(total(sm, "flowlane_queue_dropped_frames_total"))
        row["fill_empty"] = int(total(sm, "flowlane_queue_fill_ring_empty_total"))
        # Where each queue's UMEM frames are (flowlane_queue_frames: not on
        # the page of a flowlane before it; None then): those held or being
        # sent, and those missing from the four places (lost).
        frames = sm.get("flowlane_queue_frames", [])
        if frames:
            queues = {l["queue"] for l, _ in frames}
            row["frames_busy"] = int(sum(v for l, v in frames if l["where"] in ("tx", "held")))
            row["frames_lost"] = len(queues) * FRAMES_PER_QUEUE - int(sum(v for _, v in frames))
        else:
            row["frames_busy"] = row["frames_lost"] = None
        c = control(os.path.join(work, "ctl", kind + ".sock"))
        tcp = [q["tcp"] for q in c["queues"]]
        row["frames_lent"] = sum(q["frames_lent"] for q in tcp)
        row["neighbors"] = sum(q["neighbor_entries"] for q in tcp)
        qp = c.get("queue_pair") or {}
        row["relay_rx"] = sum(r["rx_held"] for r in qp.get("relay_memory", []))
        row["relay_tx"] = sum(r["tx_held"] for r in qp.get("relay_memory", []))
        counters = {}
        for i, q in enumerate(c["queues"]):
            for part in ("io", "tcp"):
                for k, v in q[part].items():
                    if isinstance(v, int) and k not in GAUGES:
                        counters[f"{i}.{part}.{k}"] = v
        back = [k for k, v in counters.items() if v < prev.get(kind, {}).get(k, 0)]
        row["backwards"] = back
        now[kind] = counters
        rows.append(row)
    json.dump(now, open(prev_path, "w"))
    with open(os.path.join(work, "samples.jsonl"), "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows

# The frames each queue owns (the services run with --frames-per-queue so).
FRAMES_PER_QUEUE = 32768

# The TCP counters that are levels, not totals: they may go down.
GAUGES = {"connections", "time_wait", "in_syn_sent", "in_syn_received", "in_established",
          "in_fin_wait1", "in_fin_wait2", "in_closing", "in_time_wait", "in_close_wait",
          "in_last_ack", "neighbor_entries", "finishing", "connection_limit", "buffer_memory", "buffer_memory_cached",
          "recv_memory_committed", "frames_lent", "buckets_published_seq",
          "buckets_published_ns", "buckets_busy_ns", "tx_outstanding_max", "frames_late_max_us",
          "rx_memory_peak", "tx_memory_peak", "frames_free", "frames_fill", "frames_tx",
          "frames_held"}

def fmt(r, prev_cpu):
    if "error" in r:
        return "%4s %-7s %-6s %s" % (r["minute"], r["phase"], r["service"], r["error"])
    st = r["state"]
    est = st.get("established", 0)
    tw = st.get("time_wait", 0)
    other = r["connections"] - est - tw
    cpu = 100 * (r["cpu_s"] - prev_cpu) / 60 if prev_cpu is not None else 0
    drops = sum(r["seg_dropped"].values())
    opt = lambda v: "-" if v is None else str(v)
    return "%4s %-7s %-5s %8.1f %8.1f %4d %4d %6d %6d %6d %8d %8d %6d %6s %6s %9d %5d %8d %8d %6d %6.1f %7.1f%s" % (
        r["minute"], r["phase"], r["service"], r["rss_kib"] / 1024, r["anon_kib"] / 1024,
        r["threads"], r["fds"], est, other, tw, r["recv_committed"] // 1024,
        r["buffer_memory"] // 1024, r["frames_lent"], opt(r.get("frames_busy")), opt(r.get("frames_lost")),
        (r["relay_rx"] + r["relay_tx"]) // 1024, r["neighbors"], drops, r["frames_dropped"], r["fill_empty"], cpu,
        r["daemon_rss_kib"] / 1024, "  BACKWARDS:" + ",".join(r["backwards"][:4]) if r["backwards"] else "")

HEADER = ("%4s %-7s %-5s %8s %8s %4s %4s %6s %6s %6s %8s %8s %6s %6s %6s %9s %5s %8s %8s %6s %6s %7s" % (
    "min", "phase", "svc", "rss_MiB", "anon_MiB", "thr", "fds", "estab", "other", "twait",
    "rcvc_KiB", "buf_KiB", "lent", "f_busy", "f_lost", "relay_KiB", "neigh", "seg_drop", "frm_drop", "fill0", "cpu%", "dmn_MiB"))

def verdict(work):
    rows = [json.loads(l) for l in open(os.path.join(work, "samples.jsonl"))]
    ok = True
    lines = []
    for kind in sorted({r["service"] for r in rows}):
        rs = [r for r in rows if r["service"] == kind and "error" not in r]
        if not rs:
            lines.append(f"FAIL {kind}: never sampled"); ok = False; continue
        plateau = [r for r in rs if r["phase"] == "load"]
        base = plateau[0] if plateau else rs[0]
        load = plateau or rs
        last = rs[-1]
        idle = [r for r in rs if r["phase"] == "idle"]
        fails = []
        if last["phase"] != "idle":
            fails.append("the idle period was not reached")
        for k in ("connections", "recv_committed", "buffer_memory", "frames_lent", "relay_rx", "relay_tx",
                  "frames_busy", "frames_lost"):
            if last.get(k):
                fails.append(f"{k} {last[k]} at the end (expected 0)")
        if last["threads"] != base["threads"]:
            fails.append(f"threads {base['threads']} after warm-up, {last['threads']} at the end")
        if last["fds"] > base["fds"]:
            fails.append(f"descriptors {base['fds']} after warm-up, {last['fds']} at the end")
        # The stack's chunk pools keep freed chunks up to their bound (the
        # queue's receive memory) and the allocator keeps what it was
        # given back: memory may rise until the pools are warm, not after.
        # The plateau is the middle of the load; a leak grows past it.
        mid = load[len(load) // 2]
        end_load = load[-1]
        if end_load["anon_kib"] > mid["anon_kib"] * 1.10 + 8192:
            fails.append(f"anonymous memory grew under steady load: {mid['anon_kib']//1024} MiB at its middle, {end_load['anon_kib']//1024} MiB at its end")
        if last["anon_kib"] > end_load["anon_kib"] + 8192:
            fails.append(f"anonymous memory grew while idle: {end_load['anon_kib']//1024} MiB at the end of the load, {last['anon_kib']//1024} MiB at the end")
        back = sorted({k for r in rs for k in r["backwards"]})
        if back:
            fails.append("counters went backwards: " + ", ".join(back[:8]))
        if len(idle) >= 2:
            busy = (idle[-1]["cpu_s"] - idle[-2]["cpu_s"]) / max(1, idle[-1]["t"] - idle[-2]["t"])
            if busy > 0.05:
                fails.append(f"{100*busy:.1f} % of a CPU busy while idle")
        if last["daemon_rss_kib"] > 2 * base["daemon_rss_kib"] + 8192:
            fails.append(f"daemon RSS {base['daemon_rss_kib']//1024} MiB after warm-up, {last['daemon_rss_kib']//1024} MiB at the end")
        lines.append(f"{kind}: anonymous memory {base['anon_kib']//1024} MiB after warm-up, "
                     f"{mid['anon_kib']//1024} MiB at the middle of the load, {end_load['anon_kib']//1024} MiB at its end "
                     f"({max(r['anon_kib'] for r in load)//1024} MiB at most), {last['anon_kib']//1024} MiB after the idle period")
        if fails:
            ok = False
            lines.append(f"FAIL {kind}: " + "; ".join(fails))
        else:
            lines.append(f"PASS {kind}: returned to its idle baseline")
    print("\n".join(lines))
    return ok

def rebalance(out, services):
    """What each service's rebalancing loop did over the load (its move
    lines in service-S.log, its status polled into rebalance-S.jsonl)."""
    def q(xs, p):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
    for s in services:
        moves = []
        for line in open(os.path.join(out, "service-%s.log" % s), errors="replace"):
            if line.startswith("{"):
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if m.get("event") == "move" and str(m.get("cause", "")).startswith("balance"):
                    moves.append(m)
        done = [m for m in moves if "error" not in m]
        polls = []
        try:
            for line in open(os.path.join(out, "rebalance-%s.jsonl" % s)):
                try:
                    polls.append(json.loads(line))
                except ValueError:
                    pass
        except OSError:
            pass
        windows = []  # (seconds since the first poll, busiest / mean)
        for a, b in zip(polls, polls[1:]):
            sa, sb = a["status"], b["status"]
            span = sb["uptime_ns"] - sa["uptime_ns"]
            if span <= 0:
                continue
            was = {x["queue"]: x["busy_ns"] for x in sa["queues"]}
            busy = [(x["busy_ns"] - was.get(x["queue"], 0)) / span for x in sb["queues"]]
            mean = sum(busy) / len(busy) if busy else 0
            if mean >= 0.05:  # as bench skew: windows under 5 % busy carry no load to judge
                windows.append((b["t"] - polls[0]["t"], max(busy) / mean))
        price = polls[-1]["status"].get("move_cost") if polls else None
        fixed = [p["status"]["move_cost"]["fixed_ns"] / 1e6 for p in polls if p["status"].get("move_cost")]
        ratios = [r for _, r in windows]
        print("rebalance %s: %d loop moves made, %d failed, %d connections moved, "
              "move duration median %.1f ms p90 %.1f ms" % (
                  s, len(done), len(moves) - len(done),
                  sum(m.get("connections", 0) for m in done),
                  q([m.get("duration_us", 0) / 1e3 for m in done], 0.5),
                  q([m.get("duration_us", 0) / 1e3 for m in done], 0.9)))
        if price:
            print("rebalance %s: %s refused for their price; price at the end %.2f ms + %.1f us a connection "
                  "(%s), fixed part over the run min %.2f median %.2f max %.2f ms" % (
                      s, price.get("refused_for_cost", 0), price["fixed_ns"] / 1e6,
                      price["per_connection_ns"] / 1e3,
                      "fixed" if price.get("fixed_price") else "learned from %d moves" % price["fit_moves"],
                      min(fixed), q(fixed, 0.5), max(fixed)))
        print("rebalance %s: skew (busiest queue / mean, %d windows of %d polls with load): "
              "median %.2f p90 %.2f, over 1.2 in %.0f %% of them" % (
                  s, len(windows), len(polls), q(ratios, 0.5), q(ratios, 0.9),
                  100.0 * sum(r > 1.2 for r in ratios) / max(1, len(ratios))))
        per_min = {}
        for t, r in windows:
            per_min.setdefault(int(t // 60), []).append(r)
        print("rebalance %s: skew median by minute: %s" % (
            s, " ".join("%d:%.2f" % (m + 1, q(v, 0.5)) for m, v in sorted(per_min.items()))))

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "clients": clients(args[0], int(args[1]), int(args[2]))
    elif cmd == "resets": resets(args[0], int(args[1]), int(args[2]), args[3] == "send")
    elif cmd == "slow": slow(args[0], int(args[1]), int(args[2]), args[3] if len(args) > 3 else "")
    elif cmd == "idle": idle(args[0], int(args[1]), int(args[2]), float(args[3]))
    elif cmd == "synflood": synflood(args[0], int(args[1]), int(args[2]), float(args[3]))
    elif cmd == "sample":
        url, work, phase, minute, dpid, prev_cpu = args[:6]
        kinds = [k.split("=", 1) for k in args[6:]]
        prev = json.loads(prev_cpu)
        rows = sample(url, work, phase, minute, int(dpid), kinds)
        for r in rows:
            print(fmt(r, prev.get(r["service"])), flush=True)
        json.dump({r["service"]: r.get("cpu_s") for r in rows}, open(os.path.join(work, "cpu.json"), "w"))
    elif cmd == "header": print(HEADER)
    elif cmd == "rebalance": rebalance(args[0], args[1:])
    elif cmd == "verdict": sys.exit(0 if verdict(args[0]) else 1)
PYEOF

# Each service: its kind's command and port, on its own bed.
declare -A PORT=([http]=80 [echo]=7 [bulk]=5001)
declare -A CMD=([http]=http-server [echo]=echo-server [bulk]=bulk-sink)
declare -A BEDOF ADDROF
BODY=$(head -c 65536 /dev/zero | tr '\0' b)
i=0
for s in "${SVC[@]}"; do
  bed=$TAG$i
  i=$((i + 1))
  "$FL" testbed up --bed "$bed" --queues 2 >"$OUT/bed-$s.log" 2>&1 || { echo "soak: testbed up --bed $bed failed:" >&2; cat "$OUT/bed-$s.log" >&2; exit 1; }
  BEDS+=("$bed")
  BEDOF[$s]=$bed
  ADDROF[$s]=$(ip netns exec "flowlane-$bed" ip -4 -o addr show dev xsk0 | awk '{print $4}' | cut -d/ -f1)
  extra=(--idle-timeout 30 --frames-per-queue 32768)
  [ "$s" = http ] && extra+=(--body "$BODY")
  "$FL" "${CMD[$s]}" --bed "$bed" --mode "$MODE" --port "${PORT[$s]}" ${MSL:+--msl-ms "$MSL"} \
    --control-socket "$WORK/ctl/$s.sock" --daemon-socket none "${extra[@]}" ${SERVICE_FLAGS[@]+"${SERVICE_FLAGS[@]}"} >"$OUT/service-$s.log" 2>&1 &
  PIDS+=($!)
done
DPORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$FL" daemon --metrics "127.0.0.1:$DPORT" --run-dir "$WORK/ctl" --socket none --state-dir "$WORK/dstate" >"$OUT/daemon.log" 2>&1 &
DAEMON=$!
PIDS+=("$DAEMON")
URL=http://127.0.0.1:$DPORT/metrics
for s in "${SVC[@]}"; do
  for _ in $(seq 100); do
    [ -S "$WORK/ctl/$s.sock" ] && ip netns exec "flowlane-${BEDOF[$s]}-peer" nc -z -w 1 "${ADDROF[$s]}" "${PORT[$s]}" && break
    sleep 0.2
  done
  [ -S "$WORK/ctl/$s.sock" ] || { echo "soak: ${CMD[$s]} did not start; the end of its log:" >&2; tail -n 20 "$OUT/service-$s.log" >&2; exit 1; }
done
curl -sf -o /dev/null "$URL" || sleep 2

# load KIND: the kind's cycle, over and over, in the peer namespace.
load() {
  local s=$1 a=${ADDROF[$1]} p=${PORT[$1]} pns=flowlane-${BEDOF[$1]}-peer
  local in=(ip netns exec "$pns") j doomed
  while :; do
    doomed=()
    case $s in
      http)
        "${in[@]}" wrk -t 1 -c 16 -d 4s "http://$a/" >/dev/null 2>&1 || true
        "${in[@]}" wrk -t 1 -c 8 -d 4s -H 'Connection: close' "http://$a/" >/dev/null 2>&1 || true
        for j in $(seq 30); do "${in[@]}" curl -s -o /dev/null -m 5 "http://$a/" || true; done
        for j in $(seq 6); do
          "${in[@]}" curl -s -o /dev/null --limit-rate 16k -m 30 "http://$a/" &
          doomed+=($!)
        done
        for j in $(seq 10); do
          printf 'GET / HTTP/1.1\r\nHost: soak\r\n\r\n' | "${in[@]}" nc -N -w 5 "$a" "$p" >/dev/null 2>&1 || true
        done
        "${in[@]}" "$PY" "$WORK/soak.py" slow "$a" "$p" 0 $'GET / HTTP/1.1\r\nHost: soak\r\n\r\n' &
        "${in[@]}" "$PY" "$WORK/soak.py" resets "$a" "$p" 10 send
        ;;
      echo)
        "${in[@]}" "$PY" "$WORK/soak.py" clients "$a" "$p" 300
        for j in $(seq 6); do
          head -c 2000000 /dev/zero | "${in[@]}" nc -N -w 10 "$a" "$p" >/dev/null 2>&1 &
        done
        for j in $(seq 6); do
          "${in[@]}" nc -w 10 "$a" "$p" </dev/zero >/dev/null 2>&1 &
          doomed+=($!)
        done
        "${in[@]}" "$PY" "$WORK/soak.py" slow "$a" "$p" 1000000 &
        "${in[@]}" "$PY" "$WORK/soak.py" resets "$a" "$p" 10 send
        ;;
      bulk)
        for j in $(seq 4); do head -c 8000000 /dev/zero | "${in[@]}" nc -N -w 10 "$a" "$p" >/dev/null 2>&1 || true; done
        for j in $(seq 4); do
          "${in[@]}" nc -w 10 "$a" "$p" </dev/zero >/dev/null 2>&1 &
          doomed+=($!)
        done
        "${in[@]}" "$PY" "$WORK/soak.py" resets "$a" "$p" 10 send
        ;;
    esac
    # Clients killed mid-transfer: SIGKILL, a second in (their kernel
    # resets, having unread bytes).
    sleep 1
    disown -a
    kill -KILL "${doomed[@]}" 2>/dev/null || true
    "${in[@]}" "$PY" "$WORK/soak.py" idle "$a" "$p" 20 45 &
    "${in[@]}" env SOAK_PEER=10.99.0.2 "$PY" "$WORK/soak.py" synflood "$a" "$p" 3000 3000
    sleep 5
  done
}

# chaos KIND: loss and reordering for a minute in every five; a bucket
# moved by hand every 2 minutes.
chaos() {
  local s=$1 bed=${BEDOF[$1]} m=0
  while :; do
    sleep 60
    m=$((m + 1))
    if ((m % 5 == 3)); then
      "$FL" testbed impair --bed "$bed" --loss 1 --reorder 2 >/dev/null 2>&1 || echo "soak: impair failed on $bed" >&2
    elif ((m % 5 == 4)); then
      "$FL" testbed impair --bed "$bed" --clear >/dev/null 2>&1 || true
    fi
    if ((m % 2 == 0)); then
      "$FL" rebalance move --socket "$WORK/ctl/$s.sock" --bucket $((RANDOM % 128)) --to-queue $((RANDOM % 2)) >>"$OUT/moves-$s.log" 2>&1 || true
    fi
  done
}

# poll KIND: the service's rebalancing status every --rebalance-poll-ms,
# one JSON line each ({"t": unix seconds, "status": ...}).
poll() {
  local s=$1
  while :; do
    "$FL" rebalance status --socket "$WORK/ctl/$s.sock" --interval-ms 0 --json 2>/dev/null |
      jq -c --argjson t "$(date +%s.%N)" '{t: $t, status: .}' >>"$OUT/rebalance-$s.jsonl" || true
    sleep "$(awk -v ms="$POLL_MS" 'BEGIN { printf "%.3f", ms / 1000 }')"
  done
}

KINDS=()
for s in "${SVC[@]}"; do KINDS+=("$s=${CMD[$s]}"); done
echo "soak: $MINUTES min of load (the first $WARMUP_MIN warm-up), then ${SETTLE}s idle; mode $MODE; services ${SVC[*]}${SFLAGS:+ with $SFLAGS}; beds ${BEDS[*]}; out $OUT" | tee "$OUT/table.txt"
for s in "${SVC[@]}"; do
  export -f load chaos
  export WORK PY FL OUT
  setsid bash -c "$(declare -p PORT BEDOF ADDROF); load $s" >>"$OUT/load-$s.log" 2>&1 &
  GROUPS_+=($!)
  setsid bash -c "$(declare -p BEDOF); chaos $s" >>"$OUT/chaos-$s.log" 2>&1 &
  GROUPS_+=($!)
  if ((POLL_MS > 0)); then
    export -f poll
    export POLL_MS
    setsid bash -c "poll $s" >>"$OUT/poll-$s.log" 2>&1 &
    GROUPS_+=($!)
  fi
  disown -a
done
"$PY" "$WORK/soak.py" header | tee -a "$OUT/table.txt"
echo '{}' >"$WORK/cpu.json"
# nap S: sleep S seconds, interruptible (a signal runs its trap at once,
# not after a foreground sleep ends).
nap() { sleep "$1" & wait $!; }
row() { "$PY" "$WORK/soak.py" sample "$URL" "$WORK" "$1" "$2" "$DAEMON" "$(cat "$WORK/cpu.json")" "${KINDS[@]}" | tee -a "$OUT/table.txt"; }
for m in $(seq 1 "$MINUTES"); do
  nap 60
  if ((m <= WARMUP_MIN)); then row warmup "$m"; else row load "$m"; fi
done
for g in "${GROUPS_[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
GROUPS_=()
for b in "${BEDS[@]}"; do "$FL" testbed impair --bed "$b" --clear >/dev/null 2>&1 || true; done
echo "soak: load stopped; idle for ${SETTLE}s" | tee -a "$OUT/table.txt"
m=$MINUTES
left=$SETTLE
while ((left > 0)); do
  step=$((left < 60 ? left : 60))
  nap "$step"
  left=$((left - step))
  m=$((m + 1))
  row idle "$m"
done
cp "$WORK/samples.jsonl" "$OUT/"
if ((POLL_MS > 0)); then
  "$PY" "$WORK/soak.py" rebalance "$OUT" "${SVC[@]}" | tee "$OUT/rebalance.txt" | tee -a "$OUT/table.txt"
fi
if "$PY" "$WORK/soak.py" verdict "$WORK" | tee -a "$OUT/table.txt"; then
  echo "soak: PASS (table and samples in $OUT)" | tee -a "$OUT/table.txt"
  exit 0
fi
echo "soak: FAIL (table and samples in $OUT)" | tee -a "$OUT/table.txt"
exit 1
