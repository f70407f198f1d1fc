#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run calls exactly this).
# Installs system dependencies first (scripts/setup.sh). Tests that need root
# (network namespaces, BPF, AF_XDP) skip with a printed reason when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CARGO_TERM_COLOR=never
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -q -- -D warnings
echo "== cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
echo "== cargo build (binaries used by the integration tests)"
cargo build --workspace --bins -q
echo "== cargo test"
# Test beds are uniquely named per test; two threads keep the 2-vCPU machine
# responsive for the kernel peers.
cargo test --workspace -q -- --test-threads=2
echo "== cargo test -p flowlane-wire --all-features (ARP/ICMP/NDP are optional features)"
cargo test -p flowlane-wire --all-features -q
