#!/usr/bin/env bash
# Idle connections at scale: COUNT real kernel TCP clients (several peer
# addresses in the peer namespace) hold connections open without sending
# a byte, first to flowlane's echo-server (AF_XDP, one stack per queue),
# then, from the same client process, to a kernel TCP acceptor on another
# port of the same interface (flowlane's XDP program passes ports it does
# not own to the kernel), in the same run. Resident memory is read at steps.
#
#   scripts/idle-conns.sh [COUNT]     # default: 200000
#
# Environment: QUEUES (bed queues and flowlane workers, default 2),
# FLOWLANE (a flowlane binary to use instead of building
# target/release/flowlane), OUT (a directory for the raw samples: every
# /proc reading, flowlane's reports, the client's log; without it they are
# kept in a temporary folder when the run fails, removed when it succeeds), SETTLE (seconds
# to wait after each step before reading, default 3), HOLD (seconds the
# connections stay idle before the final check, default 30). Needs root;
# installs python3 and iproute2 with apt when they are missing.
#
# What each figure is:
#  - flowlane: VmRSS and RssAnon of the flowlane process (/proc/PID/status).
#    Its UMEM (64 MiB per queue) is shared memory, counted in VmRSS from the
#    start and never in RssAnon; connection state is anonymous memory. The
#    growth over the warmed-up baseline, divided by the connections, is
#    "B per connection": slots, table, timers, allocator slack, all of it.
#  - kernel: the slab caches a TCP socket uses (TCP, sock_inode_cache,
#    dentry, filp, eventpoll_epi, eventpoll_pwq, tcp_bind(2)_bucket,
#    request_sock_TCP; merged caches counted once, under the first alias),
#    objects in use x their size in the slab, machine-wide (partly empty
#    slabs not counted: a lower bound of the pages). The clients' sockets are kernel
#    sockets too: their share is what the same caches grew by while the
#    clients connected to flowlane (no kernel socket on that side), and is
#    subtracted. Plus the growth of /proc/net/sockstat's TCP "mem" (pages
#    of buffers, machine-wide) and the acceptor's own RSS (a Python epoll
#    loop that holds bare descriptors, each registered for reading so that
#    it could echo like flowlane's server). Not counted: the acceptor's
#    descriptor table (8 B per descriptor). The 128-byte merged cache holds
#    both the acceptor's epitems and the clients' bind buckets, which the
#    second phase mostly reuses: the server's figure is low by up to 128 B.
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
caller_programs FLOWLANE
caller_paths OUT
cd "$(dirname "$0")/.."
COUNT=${1:-200000}
QUEUES=${QUEUES:-2}
SETTLE=${SETTLE:-3}
HOLD=${HOLD:-30}
case $COUNT in '' | *[!0-9]*) echo "idle-conns: COUNT must be a number of connections, e.g. 200000 (got '$COUNT')" >&2; exit 2 ;; esac
((COUNT >= 8)) || { echo "idle-conns: COUNT must be at least 8 (got $COUNT)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "idle-conns: needs root (network namespaces, XDP): run with sudo" >&2; exit 1; }
missing=()
command -v python3 >/dev/null || missing+=(python3)
command -v ss >/dev/null || missing+=(iproute2)
if ((${#missing[@]})); then
  echo "idle-conns: apt-get update; apt-get install ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

if [ -z "${FLOWLANE:-}" ]; then
  cargo build --release -q -p flowlane-control
fi
F=${FLOWLANE:-$target_dir/release/flowlane}
BED=ic$$
NS=flowlane-$BED
PNS=flowlane-$BED-peer
FL_PORT=7
K_PORT=8007
PER_ADDR=25000 # connections per source address and destination port
WORK=$(mktemp -d /tmp/flowlane-idle-conns.XXXXXX)
RAW=${OUT:-$WORK/raw}
mkdir -p "$RAW"
FL_PID=
ACC_PID=
CL_PID=
# Every step runs whatever failed before it (errexit off in the handler).
# On a failure the raw samples and logs stay (the messages point at them)
# when they are under $WORK, and the script says where.
cleanup() {
  local rc=$? p
  set +e
  exec 3>&- 4<&-
  for p in $CL_PID $ACC_PID $FL_PID; do
    { kill "$p" && wait "$p"; } 2>/dev/null
  done
  "$F" testbed down --bed "$BED" >/dev/null 2>&1
  if [ "$rc" -ne 0 ] && [ -z "${OUT:-}" ]; then
    echo "idle-conns: kept $RAW (samples, the servers' and the client's logs); rm -rf $WORK when done" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT

# The client: commands on stdin, one answer line each on stdout. One
# process may hold no more descriptors than the hard RLIMIT_NOFILE (root
# without CAP_SYS_RESOURCE cannot raise it), so the sockets live in worker
# processes filled up to it.
cat >"$WORK/client.py" <<'EOF'
import collections, ctypes, errno, signal, multiprocessing as mp, resource, selectors, socket, sys, time
# Every process may hold at most the hard RLIMIT_NOFILE descriptors (raising
# it needs CAP_SYS_RESOURCE), so the sockets are spread over worker
# processes, each filled up to that limit; this one only coordinates.
dst, srcs = sys.argv[1], sys.argv[2].split(",")
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
CAP = hard - 256  # sockets per worker (each also inherits the pipes to earlier ones)
IP_BIND_ADDRESS_NO_PORT = 24
WINDOW = 256      # connects in flight in all (flowlane: 1024 half-open per queue)
TIMEOUT = 30.0    # seconds a connect may take
def die_with_parent():  # prctl(PR_SET_PDEATHSIG, SIGTERM)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)

def worker_open(conns, port, n, window, first):
    sel = selectors.DefaultSelector()
    pending, ok, failed, started = {}, 0, collections.Counter(), 0
    last_scan = time.monotonic()
    while ok + sum(failed.values()) < n:
        while started < n and len(pending) < window:
            src = srcs[(first + started) % len(srcs)]
            started += 1
            try:
                s = socket.socket()
            except OSError as e:
                failed["socket:" + errno.errorcode.get(e.errno, str(e.errno))] += 1
                continue
            try:
                s.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                s.bind((src, 0))
                s.setblocking(False)
                s.connect((dst, port))
            except BlockingIOError:
                pass
            except OSError as e:
                failed[errno.errorcode.get(e.errno, str(e.errno))] += 1
                s.close()
                continue
            sel.register(s, selectors.EVENT_WRITE)
            pending[s] = time.monotonic() + TIMEOUT
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            sel.unregister(s)
            del pending[s]
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err == 0:
                conns[port].append(s)
                ok += 1
            else:
                failed[errno.errorcode.get(err, str(err))] += 1
                s.close()
        now = time.monotonic()
        if now - last_scan > 1.0:
            last_scan = now
            for s in [s for s, d in pending.items() if d < now]:
                sel.unregister(s)
                del pending[s]
                failed["timeout"] += 1
                s.close()
    sel.close()
    return ok, failed

def worker_echo(conns, port, idxs):
    ok = 0
    for i in idxs:
        s = conns[port][i]
        msg = b"idle-conns %08d\n" % i
        try:
            s.settimeout(5)
            s.sendall(msg)
            got = b""
            while len(got) < len(msg):
                b = s.recv(len(msg) - len(got))
                if not b:
                    break
                got += b
            ok += got == msg
        except OSError:
            pass
        finally:
            s.setblocking(False)
    return ok

def worker_main(pipe):
    die_with_parent()
    conns = collections.defaultdict(list)
    while True:
        cmd = pipe.recv()
        if cmd[0] == "open":
            pipe.send(worker_open(conns, *cmd[1:]))
        elif cmd[0] == "close":
            for s in conns.pop(cmd[1], []):
                s.close()
            pipe.send(None)
        elif cmd[0] == "alive":  # TCP_INFO's first byte is the state; 1 is ESTABLISHED
            pipe.send(sum(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] == 1 for s in conns[cmd[1]]))
        elif cmd[0] == "echo":
            pipe.send(worker_echo(conns, cmd[1], cmd[2]))

class Worker:
    def __init__(self):
        self.pipe, child = mp.Pipe()
        self.proc = mp.Process(target=worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.count = collections.Counter()  # sockets per port

workers, nxt = [], 0

def open_conns(port, n):
    global nxt
    t0, plan, left = time.monotonic(), [], n
    while left:
        w = next((w for w in workers if sum(w.count.values()) < CAP and w not in [p[0] for p in plan]), None)
        if w is None:
            w = Worker()
            workers.append(w)
        k = min(left, CAP - sum(w.count.values()))
        plan.append((w, k))
        left -= k
    for w, k in plan:
        w.pipe.send(("open", port, k, max(16, WINDOW // len(plan)), nxt))
        nxt += k
    ok, failed = 0, collections.Counter()
    for w, k in plan:
        try:
            o, f = w.pipe.recv()
        except EOFError:
            w.proc.join(5)
            sys.exit(f"a client worker (pid {w.proc.pid}) died: exit code {w.proc.exitcode}")
        w.count[port] += o
        ok += o
        failed += f
    errs = ",".join(f"{k}:{v}" for k, v in failed.most_common()) or "-"
    return f"ok={ok} failed={sum(failed.values())} errors={errs} secs={time.monotonic() - t0:.1f} workers={len(workers)}"

def ask(cmd, port, per_worker=None):
    ws = [w for w in workers if w.count[port]]
    for w in ws:
        w.pipe.send((cmd, port) + ((per_worker[w],) if per_worker else ()))
    return [(w, w.pipe.recv()) for w in ws]

def echo(port, k):
    total = sum(w.count[port] for w in workers)
    idxs, base = collections.defaultdict(list), 0
    picks = sorted({i * total // k for i in range(k)}) if total else []
    for w in workers:
        for g in picks:
            if base <= g < base + w.count[port]:
                idxs[w].append(g - base)
        base += w.count[port]
    ok = sum(r for _, r in ask("echo", port, idxs))
    return f"echoed={ok} of={len(picks)}"

for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "open":
        out = open_conns(int(cmd[1]), int(cmd[2]))
    elif cmd[0] == "close":
        port = int(cmd[1])
        ask("close", port)
        for w in workers:
            w.count[port] = 0
        out = "closed"
    elif cmd[0] == "alive":
        port = int(cmd[1])
        out = f"established={sum(r for _, r in ask('alive', port))} of={sum(w.count[port] for w in workers)}"
    elif cmd[0] == "echo":
        out = echo(int(cmd[1]), int(cmd[2]))
    elif cmd[0] == "quit":
        break
    else:
        out = f"unknown command {cmd[0]}"
    print(out, flush=True)
EOF

# The kernel's side: children sharing one listening socket, each accepting
# up to the descriptor limit; every descriptor is registered for reading
# (and echoes what it reads); nothing else is held per connection.
cat >"$WORK/acceptor.py" <<'EOF'
import ctypes, os, resource, select, signal, socket, sys
# One listening socket shared by forked children, each accepting until it
# holds as many descriptors as the hard RLIMIT_NOFILE allows (raising it
# needs CAP_SYS_RESOURCE). Every accepted descriptor is registered for
# reading (what it reads it echoes); nothing else is kept per connection.
addr, port, count, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
CAP = hard - 64
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((addr, port))
ls.listen(65535)
ls.setblocking(False)

def child(i):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    ep = select.epoll()
    ep.register(ls.fileno(), select.EPOLLIN | select.EPOLLEXCLUSIVE)
    n, written, listening = 0, -1, True
    while True:
        for fd, ev in ep.poll(0.5):
            if fd == ls.fileno():
                while n < CAP:
                    try:
                        c, _ = ls._accept()
                    except BlockingIOError:
                        break
                    os.set_blocking(c, False)
                    ep.register(c, select.EPOLLIN)
                    n += 1
                if n >= CAP and listening:
                    ep.unregister(ls.fileno())
                    listening = False
            else:
                try:
                    b = os.read(fd, 4096)
                except BlockingIOError:
                    continue
                if b:
                    os.write(fd, b)
                else:
                    ep.unregister(fd)
                    os.close(fd)
                    n -= 1
        if n != written:
            with open(f"{out}/tmp.{i}", "w") as f:
                f.write(f"{n}\n")
            os.replace(f"{out}/tmp.{i}", f"{out}/accepted.{i}")
            written = n

pids = []
for i in range(count // CAP + 1):
    pid = os.fork()
    if pid == 0:
        try:
            child(i)
        finally:
            os._exit(1)
    pids.append(pid)
with open(f"{out}/pids", "w") as f:
    f.write(" ".join(map(str, [os.getpid()] + pids)) + "\n")
for _ in pids:
    os.wait()
EOF

"$F" testbed up --bed "$BED" --queues "$QUEUES" >/dev/null
ADDR=$(ip netns exec "$NS" ip -4 -o addr show dev xsk0 | awk '{print $4}' | cut -d/ -f1)
PEER=$(ip netns exec "$PNS" ip -4 -o addr show dev peer0 | awk '{print $4}' | cut -d/ -f1)
NADDR=$(((COUNT + PER_ADDR - 1) / PER_ADDR))
((NADDR >= 4)) || NADDR=4
SRCS=()
base=${PEER%.*}
for i in $(seq 1 "$NADDR"); do
  a=$base.$((100 + i))
  ip netns exec "$PNS" ip addr add "$a/24" dev peer0
  SRCS+=("$a")
done
ip netns exec "$PNS" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535"
ip netns exec "$NS" sysctl -q -w net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535
mkdir "$WORK/acc"

"$F" echo-server --bed "$BED" --port "$FL_PORT" --report "$RAW/flowlane-report.json" >"$RAW/flowlane.log" 2>&1 &
FL_PID=$!
for _ in $(seq 100); do [ -s "$RAW/flowlane-report.json" ] && break; sleep 0.1; done
[ -s "$RAW/flowlane-report.json" ] || { echo "idle-conns: flowlane echo-server did not come up (see $RAW/flowlane.log)" >&2; cat "$RAW/flowlane.log" >&2; exit 1; }
ip netns exec "$NS" python3 "$WORK/acceptor.py" "$ADDR" "$K_PORT" "$COUNT" "$WORK/acc" 2>"$RAW/acceptor.log" &
ACC_PID=$!
for _ in $(seq 100); do [ -s "$WORK/acc/pids" ] && break; sleep 0.1; done
[ -s "$WORK/acc/pids" ] || { echo "idle-conns: the kernel-side acceptor did not start (see $RAW/acceptor.log)" >&2; cat "$RAW/acceptor.log" >&2; exit 1; }

mkfifo "$WORK/cmd" "$WORK/ans"
ip netns exec "$PNS" python3 "$WORK/client.py" "$ADDR" "$(IFS=,; echo "${SRCS[*]}")" \
  <"$WORK/cmd" >"$WORK/ans" 2>"$RAW/client.log" &
CL_PID=$!
exec 3>"$WORK/cmd" 4<"$WORK/ans"
client() {
  echo "$*" >&3
  read -r REPLY <&4 || { echo "idle-conns: the client died (see $RAW/client.log)" >&2; cat "$RAW/client.log" >&2; exit 1; }
  echo "client $*: $REPLY" >>"$RAW/log.txt"
}
field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
fl_report() {
  rm -f "$RAW/flowlane-report.json"
  kill -USR1 "$FL_PID"
  for _ in $(seq 100); do [ -s "$RAW/flowlane-report.json" ] && break; sleep 0.1; done
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))["counters"]
print(d["total"]["connections"], " ".join(str(q["tcp"]["connections"]) for q in d["queues"]))' "$RAW/flowlane-report.json"
}
# Slab bytes of the caches a TCP socket uses (objects in use x their size
# in the slab; not the slabs' pages, which keep freed objects of earlier
# runs and so depend on history), each
# merged cache once; "NAME=BYTES ..." then the sum.
SLAB_NAMES="TCP sock_inode_cache dentry filp eventpoll_epi eventpoll_pwq tcp_bind_bucket tcp_bind2_bucket request_sock_TCP"
slab_bytes() {
  local seen="" total=0 out="" n real b
  for n in $SLAB_NAMES; do
    real=$(readlink -f "/sys/kernel/slab/$n" 2>/dev/null) || continue
    [ -d "$real" ] || continue
    case " $seen " in *" $real "*) continue ;; esac
    seen="$seen $real"
    b=$(($(cut -d' ' -f1 "$real/objects") * $(cat "$real/slab_size")))
    out="$out $n=$b"
    total=$((total + b))
  done
  echo "$total$out"
}
accepted() { cat "$WORK"/acc/accepted.* 2>/dev/null | awk '{n += $1} END {print n + 0}'; }
sockstat_mem() { ip netns exec "$NS" awk '/^TCP:/ {for (i = 2; i < NF; i++) if ($i == "mem") print $(i + 1)}' /proc/net/sockstat; }

# Steps: an eighth, a quarter, half, all.
STEPS=()
for d in 8 4 2 1; do
  s=$((COUNT / d))
  ((${#STEPS[@]} == 0 || s > STEPS[-1])) && STEPS+=("$s")
done

# Warm-up: a few hundred connections opened and closed on each server.
client open "$FL_PORT" 200
client close "$FL_PORT"
client open "$K_PORT" 200
client close "$K_PORT"
sleep "$SETTLE"

fail=""
sample() { # $1: label, $2: established so far on flowlane's port
  local fl conns rss anon slab mem acc
  fl=$(fl_report)
  rss=$(status_kb "$FL_PID" VmRSS)
  anon=$(status_kb "$FL_PID" RssAnon)
  slab=$(slab_bytes)
  mem=$(sockstat_mem)
  acc=0
  for p in $(cat "$WORK/acc/pids"); do acc=$((acc + $(status_kb "$p" RssAnon))); done
  echo "$1 flowlane_conns=${fl%% *} per_queue=${fl#* } vmrss_kb=$rss rssanon_kb=$anon sockstat_mem_pages=$mem acceptor_rss_kb=$acc slab_total=${slab%% *} ${slab#* }" >>"$RAW/samples.txt"
  S_FL=${fl%% *} S_QUEUES=${fl#* } S_RSS=$rss S_ANON=$anon S_SLAB=${slab%% *} S_MEM=$mem S_ACC=$acc
}
settle_flowlane() { # waits until flowlane counts $1 connections (or 30 s)
  for _ in $(seq 30); do
    [ "$(fl_report | cut -d' ' -f1)" -ge "$1" ] && break
    sleep 1
  done
  sleep "$SETTLE"
}

# Phase 1: flowlane.
sample "flowlane-base" 0
FB_RSS=$S_RSS FB_ANON=$S_ANON FB_SLAB=$S_SLAB
declare -A FL_ROW CLIENT_SLAB
have=0
for s in "${STEPS[@]}"; do
  client open "$FL_PORT" $((s - have))
  have=$((have + $(field ok "$REPLY")))
  ((have >= s)) || fail="flowlane: only $have of $s connections established ($REPLY)"
  settle_flowlane "$have"
  sample "flowlane-$s" "$have"
  grow=$(((S_ANON - FB_ANON) * 1024))
  FL_ROW[$s]="$have|$S_QUEUES|$((S_RSS / 1024))|$(awk -v g="$grow" 'BEGIN {printf "%.1f", g / 1048576}')|$(awk -v g="$grow" -v n="$have" 'BEGIN {printf "%.0f", n ? g / n : 0}')"
  CLIENT_SLAB[$s]=$((S_SLAB - FB_SLAB))
  [ -n "$fail" ] && break
done
FL_HAVE=$have

# Phase 2: the kernel, the same clients, flowlane's connections still open.
K_HAVE=0
declare -A K_ROW
if [ -z "$fail" ]; then
  sample "kernel-base" 0
  KB_SLAB=$S_SLAB KB_MEM=$S_MEM KB_ACC=$S_ACC
  for s in "${STEPS[@]}"; do
    client open "$K_PORT" $((s - K_HAVE))
    ok=$(field ok "$REPLY")
    K_HAVE=$((K_HAVE + ok))
    ((K_HAVE >= s)) || fail="kernel: only $K_HAVE of $s connections established ($REPLY)"
    for _ in $(seq 30); do
      [ "$(accepted)" -ge "$K_HAVE" ] && break
      sleep 1
    done
    sleep "$SETTLE"
    sample "kernel-$s" "$K_HAVE"
    both=$((S_SLAB - KB_SLAB))
    server=$((both - ${CLIENT_SLAB[$s]:-0}))
    mem=$(((S_MEM - KB_MEM) * 4096))
    acc=$(((S_ACC - KB_ACC) * 1024))
    total=$((server + mem + acc))
    K_ROW[$s]="$(accepted)|$(awk -v g="$server" -v n="$K_HAVE" 'BEGIN {printf "%.0f", g / n}')|$(awk -v g="$mem" -v n="$K_HAVE" 'BEGIN {printf "%.0f", g / n}')|$(awk -v g="$acc" -v n="$K_HAVE" 'BEGIN {printf "%.0f", g / n}')|$(awk -v g="$total" 'BEGIN {printf "%.1f", g / 1048576}')|$(awk -v g="$total" -v n="$K_HAVE" 'BEGIN {printf "%.0f", g / n}')|$(awk -v g="${CLIENT_SLAB[$s]:-0}" -v n="$s" 'BEGIN {printf "%.0f", g / n}')"
    [ -n "$fail" ] && break
  done
fi

# Still alive after HOLD idle seconds: every client socket ESTABLISHED (the
# client's TCP_INFO and ss), flowlane still counting them, and 100 of them
# (spread over all) echo a line through flowlane; as many through the kernel.
sleep "$HOLD"
client alive "$FL_PORT"
fl_alive=$(field established "$REPLY")
client alive "$K_PORT"
k_alive=$(field established "$REPLY")
ss_est=$(ip netns exec "$PNS" ss -Htn state established | wc -l)
client echo "$FL_PORT" 100
fl_echo=$REPLY
client echo "$K_PORT" 100
k_echo=$REPLY
fl_end=$(fl_report)
echo "end: flowlane port $FL_PORT established=$fl_alive flowlane_conns=${fl_end%% *}; kernel port $K_PORT established=$k_alive; ss established in the peer namespace: $ss_est; flowlane echo: $fl_echo; kernel echo: $k_echo" | tee -a "$RAW/log.txt"
sample "end" "$FL_HAVE"

echo
echo "COUNT=$COUNT, $QUEUES queues, ${#SRCS[@]} client addresses (${SRCS[0]}..${SRCS[-1]}), connections idle $HOLD s before the check"
echo
echo "flowlane echo-server (base: VmRSS $((FB_RSS / 1024)) MiB, RssAnon $((FB_ANON / 1024)) MiB, after warm-up):"
echo
printf '| connections | per queue | VmRSS MiB | RssAnon growth MiB | B per connection |\n'
printf '| --- | --- | --- | --- | --- |\n'
for s in "${STEPS[@]}"; do
  [ -n "${FL_ROW[$s]:-}" ] || continue
  IFS='|' read -r a b c d e <<<"${FL_ROW[$s]}"
  printf '| %s | %s | %s | %s | %s |\n' "$a" "${b// / + }" "$c" "$d" "$e"
done
if ((${#K_ROW[@]})); then
  echo
  echo "kernel TCP acceptor, same clients (B per connection; server slab = socket caches' growth less the clients' share):"
  echo
  printf '| connections | server slab | sockstat mem | acceptor RSS | total MiB | total B per connection | clients'"'"' slab, B per connection |\n'
  printf '| --- | --- | --- | --- | --- | --- | --- |\n'
  for s in "${STEPS[@]}"; do
    [ -n "${K_ROW[$s]:-}" ] || continue
    IFS='|' read -r a b c d e f g <<<"${K_ROW[$s]}"
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g"
  done
fi
if ((${#K_ROW[@]})); then
  echo
  echo "server slab at $K_HAVE connections by cache, B per connection (merged caches under their first alias):"
  echo
  python3 - "$RAW/samples.txt" "${STEPS[-1]}" "$K_HAVE" <<'EOF'
import sys
rows = {l.split()[0]: dict(kv.split("=", 1) for kv in l.split()[1:] if "=" in kv) for l in open(sys.argv[1])}
last, n = sys.argv[2], int(sys.argv[3])
fb, fl, kb, kl = (rows[k] for k in ("flowlane-base", f"flowlane-{last}", "kernel-base", f"kernel-{last}"))
skip = ("flowlane_conns", "per_queue", "vmrss_kb", "rssanon_kb", "sockstat_mem_pages", "acceptor_rss_kb", "slab_total")
caches = [k for k in kl if k not in skip]
print("| " + " | ".join(caches) + " |")
print("|" + " --- |" * len(caches))
print("| " + " | ".join(str(round(((int(kl[c]) - int(kb[c])) - (int(fl[c]) - int(fb[c]))) / n)) for c in caches) + " |")
EOF
fi
echo
echo "after $HOLD s idle: flowlane $fl_alive of $FL_HAVE ESTABLISHED at the client, flowlane counts ${fl_end%% *}; $fl_echo"
echo "                  kernel $k_alive of $K_HAVE ESTABLISHED at the client; $k_echo"

if [ -z "$fail" ]; then
  ((fl_alive >= COUNT)) || fail="flowlane: $fl_alive of $COUNT connections still ESTABLISHED after $HOLD s (see $RAW)"
fi
if [ -n "$fail" ]; then
  echo "idle-conns: $fail" >&2
  exit 1
fi
