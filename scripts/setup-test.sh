#!/usr/bin/env bash
# Tests scripts/setup.sh's toolchain decision with fake versions (no apt, no
# network): sources setup.sh, which then only defines its functions.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=setup.sh
. scripts/setup.sh

passed=0 failed=0
check() { # check WHAT EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $1: expected '$2', got '$3'"
  fi
}
ge() { if version_ge "$1" "$2"; then echo yes; else echo no; fi; }

check "1.85 >= 1.85" yes "$(ge 1.85 1.85)"
check "1.85.0 >= 1.85" yes "$(ge 1.85.0 1.85)"
check "1.95.0 >= 1.85" yes "$(ge 1.95.0 1.85)"
check "1.100.0 >= 1.85 (numeric, not lexical)" yes "$(ge 1.100.0 1.85)"
check "2.0 >= 1.85" yes "$(ge 2.0 1.85)"
check "1.63.0 < 1.85" no "$(ge 1.63.0 1.85)"
check "1.84.1 < 1.85" no "$(ge 1.84.1 1.85)"
check "1.9 < 1.85 (numeric)" no "$(ge 1.9 1.85)"

check "Debian bookworm" 1.63.0 "$(upstream_version 1.63.0+dfsg1-2)"
check "Debian trixie" 1.85.0 "$(upstream_version 1.85.0+dfsg3-1)"
check "epoch and tilde" 1.85.0 "$(upstream_version '1:1.85.0~rc1-1')"
check "Ubuntu" 1.75.0 "$(upstream_version 1.75.0+dfsg0ubuntu1~bpo0-0ubuntu0.22.04)"
check "no candidate" "" "$(upstream_version '(none)')"

check "rust-version of this workspace" "$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)" "$(rust_min_version Cargo.toml)"

check "installed, new enough" ok "$(rust_plan 1.95.0 '' 1.85)"
check "installed, exactly the minimum" ok "$(rust_plan 1.85.0 1.63.0 1.85)"
check "installed, too old" old "$(rust_plan 1.80.1 1.90.0 1.85)"
check "none; distribution's new enough" apt "$(rust_plan '' 1.85.0 1.85)"
check "none; distribution's too old (bookworm)" rustup "$(rust_plan '' 1.63.0 1.85)"
check "none; distribution has none" rustup "$(rust_plan '' '' 1.85)"

echo "setup.sh toolchain logic: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
