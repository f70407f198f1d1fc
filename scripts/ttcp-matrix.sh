#!/usr/bin/env bash
# flowlane-ttcp matrix on a fresh veth test bed: backends × roles ×
# connections × buffer sizes × one-way WAN delay, with a progress bar, JSON
# results, a side-by-side table and PNG/SVG plots under results/<date>/ (or
# --out DIR), from the folder it is started in.
#
#   scripts/ttcp-matrix.sh --quick        # receivers; 1,16,256,1024 conns; 64k; 0,1,10 ms (~2 min)
#   scripts/ttcp-matrix.sh                # receivers and senders; 1..10000 conns; 1k,64k; 0,1,10,50 ms
#   scripts/ttcp-matrix.sh --help         # every flag
#
# Needs root (namespaces, tc, BPF). Both backends run by default (--backends
# kernel,flowlane): kernel TCP, and flowlane's TCP on AF_XDP (one worker per
# queue), each as receiver and as sender (--roles) against kernel TCP in the
# peer namespace. Delay is `flowlane testbed delay` (a user-space delay line
# on the peer device, both directions, for both backends alike: this kernel
# has no sch_netem, and netem on flowlane's device would miss AF_XDP's
# transmit path); each cell records the round trip the line really added.
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
# Run from where it was started, so that --out DIR (and the default
# results/<date>/) are the user's folder, not the repository's.
cargo build --release -q --manifest-path "$(dirname "$0")/../Cargo.toml" -p flowlane-ttcp -p flowlane-control
exec "$target_dir/release/flowlane-ttcp" matrix --flowlane "$target_dir/release/flowlane" "$@"
