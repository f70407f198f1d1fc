#!/usr/bin/env bash
# Black-box TCP conformance, packetdrill-style: the same scripted peer
# (scripts/conformance.py, raw frames through scapy, from the bed's peer
# namespace) against `flowlane echo-server` on flowlane's TCP (AF_XDP) and
# on Linux's TCP (`--backend kernel`, the reference), on one one-queue bed;
# prints both transcripts side by side as a unified diff (Linux first).
#
#   scripts/conformance.sh [CASE...]     # default: every case (~1.5 min)
#
# Environment: BACKENDS (default "xdp kernel"; one alone prints its
# transcript), PYTHON (one with scapy), FLOWLANE (the binary; default target/release/flowlane),
# OUT (a directory to keep kernel.txt, xdp.txt and the servers' logs in;
# default a temporary one, removed). Needs root and python3 with scapy
# (scripts/setup.sh installs python3-scapy). Not part of scripts/test.sh:
# a measurement to read, with timings (SYN-ACK and persist backoff) that a
# loaded machine shifts.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "conformance: needs root (raw sockets, a test bed): run it with sudo" >&2; exit 1; }
# The distribution's python3 where the first one on PATH (a pyenv's) lacks
# the distribution's scapy.
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import scapy' 2>/dev/null || PYTHON=/usr/bin/python3
"$PYTHON" -c 'import scapy' 2>/dev/null || { echo "conformance: python3 has no scapy: apt-get install python3-scapy (or scripts/setup.sh), or set PYTHON" >&2; exit 1; }
FLOWLANE=${FLOWLANE:-target/release/flowlane}
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
ip netns exec "$NS" ip neigh replace "$SRC" lladdr "$PEER_MAC" dev xsk0 nud permanent
# Segments as the kernel puts them on a wire: no TSO/GSO super-frames
# (flowlane's TCP sends MSS-sized frames; a veth carries GSO frames whole).
ip netns exec "$NS" ethtool -K xsk0 tso off gso off >/dev/null 2>&1 || true
ip netns exec "$PEER_NS" ethtool -K peer0 gro off >/dev/null 2>&1 || true

for backend in ${BACKENDS:-xdp kernel}; do
  "$FLOWLANE" echo-server --bed "$BED" --backend "$backend" --queues 1 --port 7 \
    --control-socket none --daemon-socket none >"$OUT/$backend.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 100); do
    ip netns exec "$NS" ss -Hltn 'sport = :7' | grep -q . && break
    grep -q "listening\|ready\|serving" "$OUT/$backend.log" && break
    sleep 0.1
  done
  sleep 1
  ip netns exec "$PEER_NS" "$PYTHON" scripts/conformance.py --iface peer0 --src "$SRC" \
    --dst 10.99.0.1 --dmac "$XSK_MAC" --port 7 --out "$OUT/$backend.txt" "$@"
  kill "$SERVER"
  wait "$SERVER" 2>/dev/null || true
  SERVER=
done
[ -f "$OUT/kernel.txt" ] && [ -f "$OUT/xdp.txt" ] || { cat "$OUT"/*.txt; exit 0; }
diff -u --label "linux (--backend kernel)" --label "flowlane (--backend xdp)" \
  "$OUT/kernel.txt" "$OUT/xdp.txt" || true
[ -z "$KEEP" ] || echo "conformance: transcripts in $OUT"
