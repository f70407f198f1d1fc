#!/usr/bin/env bash
# flowlane-ttcp matrix on a fresh veth test bed: backends × connections ×
# buffer sizes × tc netem delay, with a progress bar, JSON results, a
# side-by-side table and PNG/SVG plots under results/<date>/ (or --out DIR).
#
#   scripts/ttcp-matrix.sh --quick        # 1,16,256,1024 conns; 64k; 0,1,10 ms (~1 min per backend)
#   scripts/ttcp-matrix.sh                # 1..10000 conns; 1k,64k; 0,1,10,50 ms
#   scripts/ttcp-matrix.sh --help         # every flag
#
# Needs root (namespaces, tc). Delays need sch_netem; a kernel without it (this
# VM: CONFIG_NET_SCH_NETEM is not set) runs delay 0 only and says so. Both
# receiver backends run by default (--backends kernel,flowlane): kernel TCP,
# and flowlane's TCP on AF_XDP (one worker per queue); the sender is kernel TCP.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p flowlane-ttcp -p flowlane-control
exec target/release/flowlane-ttcp matrix --flowlane target/release/flowlane "$@"
