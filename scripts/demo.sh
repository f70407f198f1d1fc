#!/usr/bin/env bash
# The main demo: brings up a 4-queue veth test bed with an emulated RSS NIC,
# runs flowlane's AF_XDP UDP echo on every queue, sends 64 flows from the
# kernel side, and prints per queue the flows that arrived next to the queue
# the Toeplitz hash predicted — then rewrites the indirection table and shows
# every flow moving. Needs root. Extra flags go to `flowlane demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release -q -p flowlane-control
exec target/release/flowlane demo "$@"
