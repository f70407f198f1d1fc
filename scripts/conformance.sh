#!/usr/bin/env bash
# Black-box TCP conformance, packetdrill-style: the same scripted peer
# (scripts/conformance.py, raw frames through scapy, from the bed's peer
# namespace) against `flowlane echo-server` on flowlane's TCP (AF_XDP) and
# on Linux's TCP (`--backend kernel`, the reference), on one one-queue bed;
# prints both transcripts side by side as a unified diff (Linux first).
#
#   scripts/conformance.sh [CASE...]     # default: every case (~1.5 min)
#
# The passive cases run against echo-server; then the active-open cases
# (`active_*`: flowlane as the side that connects) run with the server
# stopped, each starting `flowlane bulk-source --connect` (same backend)
# toward the scripted peer, which answers as the responder.
#
# Environment: BACKENDS (default "xdp kernel"; one alone prints its
# transcript), FAMILIES (default "4"; "4 6" or "6" runs the cases over IPv6
# too, from fd99::3, the bed's IPv6 prefix; transcripts kernel6.txt, xdp6.txt),
# ACTIVE (default 1; 0 leaves the active-open cases out), PYTHON (one with scapy), FLOWLANE (the binary; default target/release/flowlane, under $CARGO_TARGET_DIR when set),
# OUT (a directory to keep kernel.txt, xdp.txt and the servers' logs in;
# default a temporary one, removed). Needs root and python3 with scapy
# (scripts/setup.sh installs python3-scapy). Not part of scripts/test.sh:
# a measurement to read, with timings (SYN-ACK and persist backoff) that a
# loaded machine shifts.
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
# FLOWLANE, PYTHON and OUT as the user gave them, from where the script was started.
caller_programs FLOWLANE PYTHON
caller_paths OUT
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "conformance: needs root (raw sockets, a test bed): run it with sudo" >&2; exit 1; }
# The distribution's python3 where the first one on PATH (a pyenv's) lacks
# the distribution's scapy.
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import scapy' 2>/dev/null || PYTHON=/usr/bin/python3
"$PYTHON" -c 'import scapy' 2>/dev/null || { echo "conformance: python3 has no scapy: apt-get install python3-scapy (or scripts/setup.sh), or set PYTHON" >&2; exit 1; }
FLOWLANE=${FLOWLANE:-$target_dir/release/flowlane}
[ -x "$FLOWLANE" ] || { echo "conformance: no $FLOWLANE: cargo build --release -p flowlane-control, or set FLOWLANE" >&2; exit 1; }
BED=conf$$
KEEP=${OUT:-}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
SERVER=
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
  "$FLOWLANE" testbed down --bed "$BED" >/dev/null 2>&1 || true
  [ -n "$KEEP" ] || rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$FLOWLANE" testbed up --bed "$BED" --queues 1 >/dev/null
NS=flowlane-$BED
PEER_NS=flowlane-$BED-peer
PEER_MAC=$(ip netns exec "$PEER_NS" cat /sys/class/net/peer0/address)
XSK_MAC=$(ip netns exec "$NS" cat /sys/class/net/xsk0/address)
# The scripted peer's address is one no kernel owns: the peer's kernel
# answers nothing for its connections, and the server side reaches it
# through this entry (flowlane's TCP learns the MAC from the frames).
SRC=10.99.0.3
SRC6=fd99::3
ip netns exec "$NS" ip neigh replace "$SRC" lladdr "$PEER_MAC" dev xsk0 nud permanent
ip netns exec "$NS" ip -6 neigh replace "$SRC6" lladdr "$PEER_MAC" dev xsk0 nud permanent
# Segments as the kernel puts them on a wire: no TSO/GSO super-frames
# (flowlane's TCP sends MSS-sized frames; a veth carries GSO frames whole).
ip netns exec "$NS" ethtool -K xsk0 tso off gso off >/dev/null 2>&1 || true
ip netns exec "$PEER_NS" ethtool -K peer0 gro off >/dev/null 2>&1 || true

# run BACKEND FAMILY [CASE...]: the passive cases against echo-server, then
# the active ones with bulk-source as the client.
run() {
  local backend=$1 fam=$2 src=$SRC dst=10.99.0.1 sfx=""
  shift 2
  [ "$fam" = 6 ] && { src=$SRC6; dst=fd99::1; sfx=6; }
  local py=(ip netns exec "$PEER_NS" "$PYTHON" scripts/conformance.py --iface peer0 --src "$src"
            --dst "$dst" --dmac "$XSK_MAC" --port 7)
  local passive=() active=() c
  for c in "$@"; do case $c in active_*) active+=("$c") ;; *) passive+=("$c") ;; esac; done
  : >"$OUT/$backend$sfx.txt"
  if [ $# -eq 0 ] || [ ${#passive[@]} -gt 0 ]; then
    "$FLOWLANE" echo-server --bed "$BED" --backend "$backend" --queues 1 --port 7 \
      --control-socket none --daemon-socket none >"$OUT/$backend$sfx.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 100); do
      ip netns exec "$NS" ss -Hltn 'sport = :7' | grep -q . && break
      grep -q "listening\|ready\|serving" "$OUT/$backend$sfx.log" && break
      sleep 0.1
    done
    sleep 1
    "${py[@]}" --out "$OUT/$backend$sfx.passive" "${passive[@]}"
    cat "$OUT/$backend$sfx.passive" >>"$OUT/$backend$sfx.txt"
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=
  fi
  if [ "${ACTIVE:-1}" = 1 ] && { [ $# -eq 0 ] || [ ${#active[@]} -gt 0 ]; }; then
    # The client runs where this script does (--bed refuses the peer's
    # namespace, whose /sys `ip netns exec` mounted anew).
    "${py[@]}" --out "$OUT/$backend$sfx.active" --client "nsenter --net=/proc/$$/ns/net \
      --mount=/proc/$$/ns/mnt -- $FLOWLANE bulk-source --bed $BED \
      --backend $backend --queues 1 --connect {addr}:{port} --bytes 3000 --timeout 20 \
      --control-socket none --daemon-socket none" "${active[@]}"
    cat "$OUT/$backend$sfx.active" >>"$OUT/$backend$sfx.txt"
  fi
}

for fam in ${FAMILIES:-4}; do
  for backend in ${BACKENDS:-xdp kernel}; do
    run "$backend" "$fam" "$@"
  done
  sfx=${fam/4/}
  [ -f "$OUT/kernel$sfx.txt" ] && [ -f "$OUT/xdp$sfx.txt" ] || { cat "$OUT"/*"$sfx".txt; continue; }
  diff -u --label "linux (--backend kernel) IPv$fam" --label "flowlane (--backend xdp) IPv$fam" \
    "$OUT/kernel$sfx.txt" "$OUT/xdp$sfx.txt" || true
done
[ -z "$KEEP" ] || echo "conformance: transcripts in $OUT"
