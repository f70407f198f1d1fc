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

printf '| server | clients | %s | errors | %s per CPU-second |\n' "$WHAT" "${WHAT%/s}"
printf '| --- | --- | --- | --- | --- |\n'
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
    j0=$(busy_jiffies)
    out=$(ip netns exec "$PNS" wrk -t 2 -c "$c" -d "$SECS" "${HEADER[@]}" "http://$ADDR:$port/")
    j1=$(busy_jiffies)
    rate=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    errors=$(awk '/Socket errors:/ {gsub(",", ""); n += $4 + $6 + $8 + $10} /Non-2xx/ {n += $NF} END {print n + 0}' <<<"$out")
    cpu_s=$(awk -v a="$j0" -v b="$j1" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", (b - a) / hz}')
    per_cpu=$(awk -v r="$rate" -v s="$SECS" -v c="$cpu_s" 'BEGIN {printf "%.0f", r * s / c}')
    printf '| %s | %s | %s | %s | %s |\n' "$server" "$c" "$rate" "${errors:-0}" "$per_cpu"
    sleep 2
  done
done
