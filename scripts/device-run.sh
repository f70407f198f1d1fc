#!/usr/bin/env bash
# The measurements this 2-vCPU VM cannot make, prepared as one short run on a
# lent multi-core machine (the workplace's device tool: no network, a fresh
# image each start, about 15 minutes of device time per session, 10 per
# command). Here both ends of the bed, the workers and the move controller
# share two vCPUs; there they get cores of their own.
#
#   scripts/device-kit.sh                                   # here, first
#   device tool: carry ["target/device-kit"], timeout_s 540,
#                command "bash scripts/device-run.sh"
#
# Runs, within a budget of BUDGET seconds (default 510, under the tool's 540 s
# limit): each step's timeout is its own bound or what is left of the budget,
# whichever is less, and a step with less than its minimum left is skipped,
# saying so. A step that fails or times out makes the script exit 1.
#   1. machine facts (CPUs, kernel, root) into $OUT/facts.txt;
#   2. `flowlane bench handoff --moves 300 --idle 0,100 --busy 0,4`: the move
#      time per RSS bucket (issue 13's goal: p99 <= 100 us for a bucket of
#      100 idle connections), JSON and table; then the same with the sink's
#      workers spinning when idle (`--busy-poll`), each case also with 256
#      connections streaming in other buckets (`--background 0,256`: loaded
#      workers whose receive passes run to 2 048 frames, the moved bucket's
#      state out of their caches);
#   3. the receive cells of the scale matrix at 1, 16, 256 and 1 024
#      connections (issue 12), flowlane beside kernel TCP in the same run, and
#      its 64-byte ping-pong latency cells; then flowlane's cells at 16, 256
#      and 1 024 again without the rebalancing loop (`--rebalance off`: the
#      loop's effect on a machine with cores to spare, issue 13);
#   4. the receive cell at 10 000 connections, the same way;
#   5. the sender cells at 1 and 1 024 connections, beside the kernel with
#      TSO/GSO off (the fair baseline) and with its offloads;
#   6. after the handoff runs, `move_prefetch_bench` (a move's export and
#      import per connection from a cold cache, with and without the
#      prefetch) and `forward_bench` (ns per frame one worker hands
#      another through the mesh, two threads); time left,
#      `rx_prefetch_bench` (the data path's ns per frame, frames lent, with
#      and without the next frame's state prefetched, 1 to 100 000
#      connections); all three into prefetch.txt.
# Writes under $OUT (default /tmp/flowlane-device-out) at most 8 files (what
# the device tool brings back): facts.txt, handoff.json, handoff-spin.json, each matrix's
# results.json and prefetch.txt (8 files); the matrices' plots stay on the machine. Prints the tables as
# it goes, so that the tool's output tail holds them even if files do not
# come back. Works here too (about 2 minutes, measuring this VM):
#   OUT=/tmp/d bash scripts/device-run.sh
set -uo pipefail
OUT=${OUT:-/tmp/flowlane-device-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
KIT=${KIT:-$(dirname "$0")/../target/device-kit}
if [ ! -x "$KIT/bin/flowlane" ]; then
  echo "device-run: no $KIT/bin/flowlane: run scripts/device-kit.sh here and carry target/device-kit" >&2
  exit 1
fi
KIT=$(cd "$KIT" && pwd)
if [ "$(id -u)" != 0 ]; then
  echo "device-run: needs root (network namespaces, XDP)" >&2
  exit 1
fi
# The system's tools and libraries first; the kit's only for what the image
# lacks (its copies of libraries a system tool also loads could be older).
export PATH="$PATH:$KIT/bin"
LIBS=$(mktemp -d /tmp/flowlane-kit-lib.XXXXXX)
for lib in "$KIT"/lib/*; do
  name=$(basename "$lib")
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$name " || ln -s "$lib" "$LIBS/$name"
done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for t in ip ethtool sysctl; do
  command -v "$t" >/dev/null || {
    echo "device-run: no $t here or in the kit (a test bed runs it)" >&2
    exit 1
  }
done
F=$KIT/bin/flowlane
T=$KIT/bin/flowlane-ttcp

{
  echo "kit commit: $(cat "$KIT/commit" 2>/dev/null)"
  echo "date: $(date -u +%FT%TZ)"
  echo "cpus: $(nproc)"
  uname -r
  lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA|L2|L3' || true
  echo "tools: $(command -v ip) $(command -v ethtool) $(command -v sysctl)"
  echo "kit libraries used: $(ls "$LIBS" | tr '\n' ' ')"
} >"$OUT/facts.txt" 2>&1
cat "$OUT/facts.txt"
if ! "$F" --version >"$LIBS/version.txt" 2>&1; then
  echo "device-run: the kit's flowlane does not start here: $(head -c 300 "$LIBS/version.txt")" >&2
  ldd "$F" >&2 || true
  exit 1
fi

status=0
BUDGET=${BUDGET:-510}
skipped=()
# budget NAME BOUND MIN: sets STEP_T to BOUND or the seconds left of the
# budget, whichever is less; if that is under MIN, says the step is skipped
# and returns 1.
budget() {
  local left=$((BUDGET - SECONDS))
  STEP_T=$((left < $2 ? left : $2))
  if [ "$STEP_T" -lt "$3" ]; then
    echo "== $1 skipped: $((left > 0 ? left : 0)) s left of the ${BUDGET} s budget (it needs at least $3 s)"
    skipped+=("$1")
    return 1
  fi
}
# failed NAME RC LOG: the step failed (RC 124: its timeout ran out); the end
# of its log, and the script's status 1.
failed() {
  status=1
  if [ "$2" -eq 124 ]; then
    echo "device-run: $1 timed out after its ${STEP_T} s: $(tail -c 400 "$3")"
  else
    echo "device-run: $1 failed (exit status $2): $(tail -c 400 "$3")"
  fi
}
# The handoff bench, once with workers that sleep when idle and once with
# workers that spin (--busy-poll): each move of an idle bucket first wakes
# two sleeping workers, and on a VM that wake-up is the tail.
handoff() {
  local name=$1 rc=0
  shift
  budget "handoff $name" 150 40 || return 0
  echo "== handoff $name (at most ${STEP_T} s): $*"
  timeout "$STEP_T" "$F" bench handoff --moves 300 --json "$@" \
    >"$OUT/$name.json" 2>"/tmp/flowlane-$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then
    python3 - "$OUT/$name.json" <<'PY' 2>/dev/null || cat "$OUT/$name.json"
import json, sys
print("idle busy bgnd moves | move us p50 p99 max | export us p50 p99 | drain us p50 p99 | fwd mean max | held mean max | scanned mean max | timeouts")
for c in json.load(open(sys.argv[1])):
    d, e, f, h = c["duration_us"], c["export_us"], c["frames_forwarded"], c["frames_held"]
    r, s = c.get("drain_us", [0, 0]), c.get("frames_scanned", [0, 0])
    print(f"{c['idle']:4} {c['busy']:4} {c.get('background', 0):4} {c['moves']:5} | {d[0]:8.0f} {d[1]:8.0f} {d[2]:8.0f} | "
          f"{e[0]:7.0f} {e[1]:7.0f} | {r[0]:7.0f} {r[1]:7.0f} | {f[0]:6.0f} {f[1]:5.0f} | {h[0]:6.0f} {h[1]:5.0f} | {s[0]:7.0f} {s[1]:6.0f} | {c['hold_timeouts']}")
PY
  else
    failed "bench handoff $name" "$rc" "/tmp/flowlane-$name.err"
  fi
}
handoff handoff --idle 0,100 --busy 0,4
handoff handoff-spin --idle 0,100 --busy 0,4 --background 0,256 --busy-poll

# unit_bench NAME BOUND MIN TITLE PATTERN TEST [VAR=VALUE...]: one ignored
# measurement of the data path's unit tests (no bed, one core): its figure
# lines (PATTERN) printed as they come and appended to prefetch.txt.
rm -f "$OUT/prefetch.txt"
unit_bench() {
  local name=$1 bound=$2 min=$3 title=$4 pattern=$5 test=$6 log rcs
  shift 6
  [ -x "$KIT/bin/dataplane-tests" ] || return 0
  budget "$name" "$bound" "$min" || return 0
  echo "== $name ($title; at most ${STEP_T} s)"
  log=/tmp/flowlane-$name.log
  env "$@" timeout "$STEP_T" "$KIT/bin/dataplane-tests" --ignored --exact "$test" --nocapture \
    2>&1 | tee "$log" | grep -E "$pattern" | tee -a "$OUT/prefetch.txt"
  rcs=("${PIPESTATUS[@]}")
  if [ "${rcs[0]}" -ne 0 ]; then
    failed "$name" "${rcs[0]}" "$log"
  elif [ "${rcs[2]}" -ne 0 ]; then
    status=1
    echo "device-run: $name printed no figures: $(tail -c 400 "$log")"
  fi
}
# A move's export and import from a cold cache, with and without the
# prefetch of the connections ahead (session 37): some ten seconds.
unit_bench move_prefetch_bench 90 20 "ns per connection exported, prefetch off / on; imported" \
  '^ *(cache|[0-9]+ )' \
  tcp_handler::move_prefetch_bench::move_prefetch_time
# The mesh's cost per frame between two workers on cores of their own
# (session 40: frames in batches), some ten seconds.
unit_bench forward_bench 60 20 "ns per frame one worker hands another" \
  'a frame' handoff::forward_bench::forward_time

# One matrix run: NAME, then its flags. Plots and logs stay in a scratch
# folder; results.json comes back as $OUT/NAME.json.
matrix() {
  local name=$1 rc=0
  shift
  local dir
  budget "matrix $name" 200 45 || return 0
  dir=$(mktemp -d "/tmp/flowlane-matrix-$name.XXXXXX")
  echo "== matrix $name (at most ${STEP_T} s): $*"
  timeout "$STEP_T" "$T" matrix --flowlane "$F" --sizes 64k --delays 0 --seconds 3 \
    --out "$dir" "$@" >"$dir/log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    grep '^|' "$dir/log"
  else
    failed "the matrix $name" "$rc" "$dir/log"
  fi
  cp "$dir/results.json" "$OUT/$name.json" 2>/dev/null || true
}
matrix receive --backends kernel,flowlane --roles receiver --conns 1,16,256,1024 --latency-sizes 64
# The same flowlane cells without the rebalancing loop (the receive matrix
# above runs with the default, `auto`; session 29's figures had none).
matrix receive-off --backends flowlane --roles receiver --conns 16,256,1024 --latency-sizes none \
  --rebalance off
matrix receive10k --backends kernel,flowlane --roles receiver --conns 10000 --latency-sizes none
matrix send --backends kernel-wire,kernel,flowlane --roles sender --conns 1,1024 --latency-sizes none

# The prefetch of the next frame's connection state (issue 12, session 32),
# on a server CPU's caches: about a minute; last, with what the budget has
# left (skipped under 90 s).
unit_bench rx_prefetch_bench 120 90 "ns per frame, prefetch off / on" \
  '^ *(connections|[0-9]+ )' \
  tcp_handler::rx_prefetch_bench::rx_prefetch_time \
  FLOWLANE_BENCH_LEND=1 FLOWLANE_BENCH_CONNS=1,1000,10000,50000,100000
echo "== device-run: ${SECONDS} s of the ${BUDGET} s budget used${skipped[*]:+; skipped: ${skipped[*]}}"
exit $status
