#!/usr/bin/env bash
# callgrind on `tcp/examples/sim_bulk N BYTES steady`, instrumented only
# after the (native-speed) warm-up, so that 10 000 connections take minutes
# instead of hours. Prints callgrind's totals for the measured phase and the
# sim's own lines (segments received: divide by them for per-segment costs).
#
#   scripts/callgrind-steady.sh [--bin PATH] [CONNECTIONS] [BYTES] [WORDS...]
#
# WORDS go to sim_bulk after `steady` (`lend`: zero-copy receive, B is lent
# each segment's buffer).
# Defaults: the release sim_bulk (built if missing), 10000, 20000000. A
# second phase of BYTES, unmeasured but simulated, warms the simulated
# caches first (SIM_BULK_PAUSE=N makes it N bytes instead).
# CG_LL=SIZE,ASSOC,LINE gives the simulated last-level cache (valgrind
# otherwise takes the host's: 256 MiB direct-mapped on the project's VM,
# in which nothing misses), e.g. CG_LL=8388608,16,64 for 8 MiB, 16 ways.
# CG_OUT=FILE keeps callgrind's output (for callgrind_annotate).
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
bin=""
if [[ "${1:-}" == "--bin" ]]; then bin=$2; shift 2; fi
# --bin and CG_OUT as the user gave them, from where the script was started.
caller_programs bin
caller_paths CG_OUT
cd "$(dirname "$0")/.."
conns=${1:-10000}
bytes=${2:-20000000}
shift $(($# < 2 ? $# : 2))
words=("$@")
if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null; then
    echo "callgrind-steady: valgrind is not installed (apt-get install valgrind)" >&2
    exit 1
fi
if [[ -z "$bin" ]]; then
    cargo build --release -q -p flowlane-tcp --example sim_bulk
    bin=$target_dir/release/examples/sim_bulk
fi
work=$(mktemp -d /tmp/flowlane-cgsteady.XXXXXX)
pid=""
# Every step runs whatever failed before it (errexit off in the handler).
cleanup() {
    set +e
    exec 3>&-
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkfifo "$work/go"
ll=()
[[ -n "${CG_LL:-}" ]] && ll=("--LL=$CG_LL")
SIM_BULK_PAUSE=${SIM_BULK_PAUSE:-x} valgrind --tool=callgrind --cache-sim=yes "${ll[@]}" --instr-atstart=no \
    --toggle-collect='*sim_deliver_to_b_measured*' \
    --callgrind-out-file="$work/out.cg" \
    "$bin" "$conns" "$bytes" steady "${words[@]}" >"$work/sim.log" 2>"$work/valgrind.log" <"$work/go" &
pid=$!
exec 3>"$work/go"
until grep -qs '^warm$' "$work/valgrind.log"; do
    if ! kill -0 "$pid" 2>/dev/null; then
        cat "$work/valgrind.log" >&2
        echo "callgrind-steady: the sim exited during the warm-up" >&2
        exit 1
    fi
    sleep 1
done
callgrind_control -i on "$pid" >/dev/null 2>&1
echo go >&3
exec 3>&-
wait "$pid"
pid=""
cat "$work/sim.log"
grep -E '^(events|summary):' "$work/out.cg"
if [[ -n "${CG_OUT:-}" ]]; then cp "$work/out.cg" "$CG_OUT"; fi
