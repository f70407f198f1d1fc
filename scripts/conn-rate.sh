#!/usr/bin/env bash
# Connection rate: short-lived connections with one request each
# (`wrk -H 'Connection: close'` from the peer namespace) against flowlane's
# http-server (AF_XDP, one worker per queue), the same http-server on kernel
# sockets (`--backend kernel`, one pinned loop per queue), the AF_XDP server
# in queue-pair mode (`--mode queue-pair`, one application thread per queue)
# and nginx (kernel TCP, one worker process per queue) on the same test bed,
# in the same run; and the hyper example (`flowlane hyper-server`: hyper on
# tokio on flowlane's TCP over AF_XDP) against the same hyper service on
# tokio's own listener (`--tokio-baseline`, kernel TCP).
# With KEEPALIVE=1, requests per second on kept-alive connections instead.
#
#   scripts/conn-rate.sh [CLIENTS...]     # default: 50 500
#   KEEPALIVE=1 scripts/conn-rate.sh 100 1000
#   SERVERS="hyper hyper-tokio nginx" KEEPALIVE=1 scripts/conn-rate.sh 100
#
# Environment: SERVERS (which, in order; default: flowlane flowlane-qp
# flowlane-kernel nginx hyper hyper-tokio), SECS (measured seconds per cell, default 5), QUEUES (bed
# queues and server workers, default 2), FLOWLANE (a flowlane binary to
# use instead of building target/release/flowlane, e.g. to compare builds),
# FL_MSL_MS (flowlane's MSL in ms; default the stack's 30 s). Needs root; installs wrk and
# nginx-light (nginx where the distribution has no nginx-light) with apt when they are
# missing. Prints, per server and client count:
# connections/s (wrk's requests/s: one request per connection), errors
# wrk saw, and connections per CPU-second of the whole machine (from
# /proc/stat, over the measured seconds; wrk's own CPU is in it for both
# servers alike). A server that does not answer has the end of its log
# printed before the script exits.
#
# With SPLIT=1, each measured run is also recorded on every CPU (`perf
# record -a -g`, SPLIT_HZ samples a second per CPU, default 999; installs
# perf with apt when missing, and leaves the split out with one line on
# stderr when perf cannot record) and each sample classified by
# scripts/lib/conn_split.py as the server's part, the client's (wrk and its
# kernel TCP) or other work: on veth a packet's receive runs in the sender's
# context, so the server's receive in wrk's threads is the server's and the
# client's kernel TCP receive in the server's threads the client's. Then two
# more columns, the server's and the client's microseconds per connection
# (their shares of the busy samples times the busy CPU time, over the
# connections), and a second table: each server's microseconds per
# connection against nginx's of the same client count (nginx's / its own:
# the server-only ratio). perf's own CPU is in the busy time and counts as
# other. SPLIT_KEEP=DIR keeps each run's `perf script` text there (SERVER-CLIENTS.txt)
# and the classifier's arguments and output (SERVER-CLIENTS.split).
#
#   SPLIT=1 SERVERS="flowlane nginx" scripts/conn-rate.sh 50 500
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
caller_programs FLOWLANE
cd "$(dirname "$0")/.."
SECS=${SECS:-5}
QUEUES=${QUEUES:-2}
CLIENTS=("$@")
((${#CLIENTS[@]})) || CLIENTS=(50 500)
[ "$(id -u)" = 0 ] || { echo "conn-rate: needs root (network namespaces, XDP): run with sudo" >&2; exit 1; }
# apt_candidate PKG: whether apt has an installable version of PKG.
apt_candidate() {
  local c
  c=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}')
  [ -n "$c" ] && [ "$c" != "(none)" ]
}
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v nginx >/dev/null || missing+=(nginx-light)
SPLIT=${SPLIT:-0}
if [ "$SPLIT" = 1 ] && ! command -v perf >/dev/null; then
  # Debian's perf is linux-perf; Ubuntu's comes with linux-tools.
  if apt_candidate linux-perf; then missing+=(linux-perf); else missing+=(linux-tools-common "linux-tools-$(uname -r)"); fi
fi
if ((${#missing[@]})); then
  echo "conn-rate: apt-get update" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  for i in "${!missing[@]}"; do
    # Newer Debian and Ubuntu releases dropped nginx-light: nginx then.
    if [ "${missing[i]}" = nginx-light ] && ! apt_candidate nginx-light; then
      missing[i]=nginx
    fi
  done
  echo "conn-rate: apt-get install ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

if [ -z "${FLOWLANE:-}" ]; then
  cargo build --release -q -p flowlane-control
fi
F=${FLOWLANE:-$target_dir/release/flowlane}
BED=cr$$
NS=flowlane-$BED
PNS=flowlane-$BED-peer
WORK=$(mktemp -d /tmp/flowlane-conn-rate.XXXXXX)
FL_PID=
FL_MODE=
FK_PID=
FT_PID=
# Every step runs whatever failed before it (errexit off here: a `wait` on
# a killed server returns 143, which would end the handler early).
cleanup() {
  set +e
  local p
  for p in "$FL_PID" "$FK_PID" "$FT_PID"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null
  "$F" testbed down --bed "$BED" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

"$F" testbed up --bed "$BED" --queues "$QUEUES" >/dev/null
ADDR=$(ip netns exec "$NS" ip -4 -o addr show dev xsk0 | awk '{print $4}' | cut -d/ -f1)

# flowlane on AF_XDP: port 80, its default TIME-WAIT (60 s, as the
# kernel's; FL_MSL_MS sets the MSL in ms). The server closes first, so its
# side of every connection waits in TIME-WAIT and the peer's ports come back
# while it does: both stacks take such a SYN as a new incarnation (RFC
# 6191). One AF_XDP service owns the interface's queues at a time, so the
# run-to-completion and queue-pair servers and the hyper example take turns
# (xdp_server KIND: rtc, queue-pair or hyper).
xdp_server() {
  [ "$FL_MODE" = "$1" ] && return 0
  if [ -n "$FL_PID" ]; then
    kill "$FL_PID" 2>/dev/null && wait "$FL_PID" 2>/dev/null || true
  fi
  case $1 in
    hyper) cmd=(hyper-server) ;;
    *) cmd=(http-server --mode "$1") ;;
  esac
  "$F" "${cmd[@]}" --bed "$BED" --port 80 ${FL_MSL_MS:+--msl-ms "$FL_MSL_MS"} >"$WORK/flowlane-$1.log" 2>&1 &
  FL_PID=$!
  FL_MODE=$1
  wait_port 80
}
# The same server on kernel sockets: port 8081 (the XDP program passes it to
# the kernel), one pinned loop per queue.
"$F" http-server --bed "$BED" --port 8081 --backend kernel --queues "$QUEUES" >"$WORK/flowlane-kernel.log" 2>&1 &
FK_PID=$!
# The hyper service on tokio's own listener: port 8082, one runtime worker
# per queue.
"$F" hyper-server --bed "$BED" --port 8082 --tokio-baseline --queues "$QUEUES" >"$WORK/hyper-tokio.log" 2>&1 &
FT_PID=$!
# nginx: port 8080 on the same interface (flowlane's XDP program passes
# ports it does not own to the kernel), one worker per queue.
cat >"$WORK/nginx.conf" <<EOF
worker_processes $QUEUES;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK;
  proxy_temp_path $WORK;
  fastcgi_temp_path $WORK;
  uwsgi_temp_path $WORK;
  scgi_temp_path $WORK;
  server {
    listen $ADDR:8080 reuseport backlog=4096;
    location / { return 200 "hello from nginx\n"; }
  }
}
EOF
ip netns exec "$NS" nginx -c "$WORK/nginx.conf" -g 'daemon on;'

# wait_port PORT: until a server answers there; if none does, the end of
# that server's log on stderr (the trap removes $WORK), and exit 1.
wait_port() {
  local log
  for _ in $(seq 100); do
    ip netns exec "$PNS" curl -s -o /dev/null -m 1 "http://$ADDR:$1/" && return 0
    sleep 0.1
  done
  case $1 in
    80) log=$WORK/flowlane-$FL_MODE.log ;;
    8081) log=$WORK/flowlane-kernel.log ;;
    8082) log=$WORK/hyper-tokio.log ;;
    8080) log=$WORK/nginx-error.log ;;
  esac
  echo "conn-rate: nothing answers on $ADDR:$1; the end of ${log##*/}:" >&2
  tail -n 30 "$log" >&2 2>/dev/null || echo "  (no log)" >&2
  exit 1
}
wait_port 8081
wait_port 8082
wait_port 8080
# Whether perf records every CPU with call chains here (a VM or a
# perf_event_paranoid setting can refuse it): if not, no split.
if [ "$SPLIT" = 1 ] && ! perf record -a -g -o "$WORK/perf-check.data" -- true >"$WORK/perf-check.log" 2>&1; then
  echo "conn-rate: SPLIT=1 but perf cannot record every CPU ($(grep -m1 -iE 'error|not|denied' "$WORK/perf-check.log" || echo "perf record failed")): no split" >&2
  SPLIT=0
fi
[ -n "${SPLIT_KEEP:-}" ] && mkdir -p "$SPLIT_KEEP"
HEADER=(-H 'Connection: close')
WHAT="connections/s"
if [ "${KEEPALIVE:-0}" = 1 ]; then
  HEADER=()
  WHAT="requests/s"
fi

# The machine's work in ticks, as testbed/src/proc_stat.rs's CpuTimes::work
# counts it: user + nice + system + irq + softirq (fields 2, 3, 4, 7, 8 of
# the `cpu` line); idle ($5), iowait ($6) and steal ($9) left out.
busy_jiffies() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }

# split_args SERVER: conn_split.py's description of that server: how it
# receives, its processes (by id: other flowlane and wrk processes may run
# on the machine).
split_args() {
  local p
  case $1 in
    flowlane | flowlane-qp | hyper) echo --rx xdp --server-pid "$FL_PID" ;;
    flowlane-kernel) echo --rx kernel --server-pid "$FK_PID" ;;
    hyper-tokio) echo --rx kernel --server-pid "$FT_PID" ;;
    nginx)
      echo --rx kernel --server-pid "$(cat "$WORK/nginx.pid")"
      for p in $(pgrep -P "$(cat "$WORK/nginx.pid")"); do echo --server-pid "$p"; done
      ;;
  esac
}
declare -A SERVER_US=()
if [ "$SPLIT" = 1 ]; then
  printf '| server | clients | %s | errors | %s per CPU-second | server µs per %s | client µs per %s |\n' \
    "$WHAT" "${WHAT%/s}" "${WHAT%s/s}" "${WHAT%s/s}"
  printf '| --- | --- | --- | --- | --- | --- | --- |\n'
else
  printf '| server | clients | %s | errors | %s per CPU-second |\n' "$WHAT" "${WHAT%/s}"
  printf '| --- | --- | --- | --- | --- |\n'
fi
for c in "${CLIENTS[@]}"; do
  for server in ${SERVERS:-flowlane flowlane-qp flowlane-kernel nginx hyper hyper-tokio}; do
    case $server in
      flowlane) port=80; xdp_server rtc ;;
      flowlane-qp) port=80; xdp_server queue-pair ;;
      flowlane-kernel) port=8081 ;;
      nginx) port=8080 ;;
      hyper) port=80; xdp_server hyper ;;
      hyper-tokio) port=8082 ;;
      *) echo "conn-rate: unknown server $server" >&2; exit 2 ;;
    esac
    # A short warm-up, then the measured run.
    ip netns exec "$PNS" wrk -t 2 -c "$c" -d 1 "${HEADER[@]}" "http://$ADDR:$port/" >/dev/null 2>&1 || true
    sleep 1
    perf_pid=
    if [ "$SPLIT" = 1 ]; then
      # The measured window: perf records every CPU for as long as wrk runs.
      perf record -a -g -F "${SPLIT_HZ:-999}" -o "$WORK/perf.data" -- sleep "$SECS" >"$WORK/perf.log" 2>&1 &
      perf_pid=$!
    fi
    j0=$(busy_jiffies)
    # In the background for its process id (`ip netns exec` runs wrk in its
    # own process).
    ip netns exec "$PNS" wrk -t 2 -c "$c" -d "$SECS" "${HEADER[@]}" "http://$ADDR:$port/" >"$WORK/wrk.out" &
    wrk_pid=$!
    wait "$wrk_pid"
    j1=$(busy_jiffies)
    out=$(cat "$WORK/wrk.out")
    [ -n "$perf_pid" ] && { wait "$perf_pid" || echo "conn-rate: perf record failed: $(tail -n 1 "$WORK/perf.log")" >&2; }
    rate=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    errors=$(awk '/Socket errors:/ {gsub(",", ""); n += $4 + $6 + $8 + $10} /Non-2xx/ {n += $NF} END {print n + 0}' <<<"$out")
    cpu_s=$(awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", (b - a) / hz}')
    per_cpu=$(awk -v r="$rate" -v s="$SECS" -v c="$cpu_s" 'BEGIN {printf "%.0f", r * s / c}')
    if [ "$SPLIT" = 1 ]; then
      su=- cu=-
      perf script -i "$WORK/perf.data" -F comm,pid,tid,ip,sym >"$WORK/perf.txt" 2>/dev/null || true
      [ -n "${SPLIT_KEEP:-}" ] && cp "$WORK/perf.txt" "$SPLIT_KEEP/$server-$c.txt"
      conns=$(awk -v r="$rate" -v s="$SECS" 'BEGIN {print r * s}')
      # shellcheck disable=SC2207 # split_args's words are separate arguments
      args=($(split_args "$server") --client-pid "$wrk_pid" --conns "$conns" --busy-cpu-s "$cpu_s")
      if split=$(python3 scripts/lib/conn_split.py "${args[@]}" "$WORK/perf.txt" 2>&1); then
        su=$(sed -n 's/^split .*server_us=\([0-9.]*\).*/\1/p' <<<"$split")
        cu=$(sed -n 's/^split .*client_us=\([0-9.]*\).*/\1/p' <<<"$split")
        SERVER_US[$server,$c]=$su
      else
        echo "conn-rate: no split for $server, $c clients: $split" >&2
      fi
      [ -n "${SPLIT_KEEP:-}" ] && printf '# conn_split.py %s\n%s\n' "${args[*]}" "$split" >"$SPLIT_KEEP/$server-$c.split"
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$server" "$c" "$rate" "${errors:-0}" "$per_cpu" "$su" "$cu"
    else
      printf '| %s | %s | %s | %s | %s |\n' "$server" "$c" "$rate" "${errors:-0}" "$per_cpu"
    fi
    sleep 2
  done
done
# The server-only ratio: nginx's own microseconds per connection over each
# server's, per client count.
if [ "$SPLIT" = 1 ] && [ "${#SERVER_US[@]}" -gt 0 ]; then
  echo
  printf '| server | clients | server µs per %s | nginx'"'"'s | server-only ratio (nginx / it) |\n' "${WHAT%s/s}"
  printf '| --- | --- | --- | --- | --- |\n'
  for c in "${CLIENTS[@]}"; do
    n=${SERVER_US[nginx,$c]:-}
    for server in ${SERVERS:-flowlane flowlane-qp flowlane-kernel nginx hyper hyper-tokio}; do
      s=${SERVER_US[$server,$c]:-}
      [ -z "$s" ] || [ "$server" = nginx ] && continue
      ratio=$(awk -v n="$n" -v s="$s" 'BEGIN {if (n == "" || s == 0) print "-"; else printf "%.2f×", n / s}')
      printf '| %s | %s | %s | %s | %s |\n' "$server" "$c" "$s" "${n:--}" "$ratio"
    done
  done
fi
