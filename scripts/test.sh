#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run calls exactly this).
# Installs system dependencies first (scripts/setup.sh). Tests that need root
# (network namespaces, BPF, AF_XDP) skip with a printed reason when not root.
#
# Tests run one crate at a time (`cargo test -p <crate>`), each under a
# `== suite <crate>` header, with cargo's `Running <file>` line naming each
# test binary; a failing suite does not stop the others, nor does a failing
# check before them (fmt, clippy, doc, the check of the binaries: each one
# line of the summary, counted as a failure). The run ends with a
# summary: per suite its counts, the failed test binaries by name, and one
# cargo-style `test result:` line summing them. Exits non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CARGO_TERM_COLOR=never
# CI builds from scratch once: incremental caches would only cost time and
# about 2 GB of target/.
if [ "${CI:-}" = true ]; then
  export CARGO_INCREMENTAL=0
fi
logs=$(mktemp -d /tmp/flowlane-test.XXXXXX)
trap 'rm -rf "$logs"' EXIT
start=$(date +%s.%N)
summary=()
failures=()
total_passed=0 total_failed=0 total_ignored=0

# suite_counts LOG: "passed failed ignored [failed binaries...]" of one
# suite's output: per test binary (cargo's "Running X (...)" / "Doc-tests X"
# lines) its `test result:` line; the shell suite ends with "N passed, N failed".
suite_counts() {
  awk '
    # A binary that printed no `test result:` line crashed (a signal, an
    # abort): it counts as one failure.
    function ended() { if (bin != "" && !result) { f++; bad = bad " " bin "(crashed)" } }
    /^ *Running / { ended(); bin = ($2 == "unittests") ? $2 " " $3 : $2; result = 0 }
    /^ *Doc-tests / { ended(); bin = "doc-tests " $2; result = 0 }
    /^test result: / {
      result = 1
      if (bin == "") bin = "(unnamed)"
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^passed;?$/) p += $(i - 1)
        if ($i ~ /^failed;?$/) f += $(i - 1)
        if ($i ~ /^ignored;?$/) g += $(i - 1)
      }
      if ($3 == "FAILED.") bad = bad " " bin
    }
    /: [0-9]+ passed, [0-9]+ failed$/ { p += $(NF - 3); f += $(NF - 1) }
    END { ended(); printf "%d %d %d%s\n", p, f, g, bad }
  ' "$1"
}

# add_suite NAME RC LOG SECS: adds one suite's counts to the totals and its
# line, with the seconds it took, to the summary. RC is the exit status of
# what ran it ("-" when one command ran several suites: a failure is then
# known only from the counts).
add_suite() {
  local name=$1 rc=$2 log=$3 secs=$4 passed failed ignored bad
  read -r passed failed ignored bad <<<"$(suite_counts "$log")"
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  total_ignored=$((total_ignored + ignored))
  local status=ok
  if { [ "$rc" != - ] && [ "$rc" -ne 0 ]; } || [ "$failed" -ne 0 ]; then
    status=FAILED
    if [ -n "$bad" ]; then
      failures+=("$name:$(printf ' %s' $bad)")
    else
      failures+=("$name: exit status $rc (did not build, or a test binary crashed: see its output above)")
      # Count it, so that the final line says FAILED.
      [ "$failed" -ne 0 ] || total_failed=$((total_failed + 1))
    fi
  fi
  summary+=("$(printf '  %-34s %-6s %5d passed, %d failed, %d ignored %6ss' "$name" "$status" "$passed" "$failed" "$ignored" "$secs")")
}

# since T: seconds from T (a `date +%s.%N`) to now, one decimal.
since() {
  echo "$1 $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}'
}

# run_suite NAME CMD...: runs one suite, output shown and kept.
run_suite() {
  local name=$1 log rc=0 t0
  shift
  log="$logs/$(echo "$name" | tr -c 'A-Za-z0-9_.-' _).log"
  echo
  echo "== suite $name ($*)"
  t0=$(date +%s.%N)
  "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
  add_suite "$name" "$rc" "$log" "$(since "$t0")"
}

# run_check NAME CMD...: one check that has no test counts (formatting,
# lints, docs, the build): a failure is a failed suite in the summary, and
# the run goes on.
run_check() {
  local name=$1 rc=0 t0
  shift
  echo "== $name"
  t0=$(date +%s.%N)
  "$@" || rc=$?
  local secs
  secs=$(since "$t0")
  if [ "$rc" -eq 0 ]; then
    summary+=("$(printf '  %-34s %-6s (a check: no tests) %17ss' "$name" ok "$secs")")
  else
    summary+=("$(printf '  %-34s %-6s (a check: exit status %d) %10ss' "$name" FAILED "$rc" "$secs")")
    failures+=("$name: exit status $rc (see its output above)")
    total_failed=$((total_failed + 1))
  fi
}
run_check "cargo fmt --check" cargo fmt --all -- --check
run_check "cargo clippy -D warnings" cargo clippy --workspace --all-targets -q -- -D warnings
run_check "cargo doc (warnings are errors)" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
# The binaries with their own features compile: checked, not built. The
# test build below compiles them again with the dev-dependencies' features
# (tokio's test-util, hyper's client, flowlane-app's testing, ...: every
# workspace crate and much of what it uses) and the tests run that build's
# `flowlane`, so a build here was thrown away: 203 s of a from-scratch run
# on the 2-vCPU VM, where the check takes 1-14 s after the docs' (which
# compile the same crates' metadata with the same features) and the test
# build 176 s after it, against 190 s after the build (session 56).
run_check "cargo check --workspace --bins" cargo check --workspace --bins -q

run_suite "setup.sh toolchain logic" bash scripts/setup-test.sh

# Every crate's tests, from one build of the workspace. `cargo test -p X`
# for one crate at a time unified the dependencies' features per crate, so
# that libbpf-sys, libbpf-cargo, bindgen, hwlocality-sys and the crates
# after them were compiled up to four times over: minutes of a CI run. The
# features here are the workspace's with its dev-dependencies' (those of
# `cargo clippy --all-targets` above); flowlane-wire's own default (no ARP,
# no ICMP) is tested alone below.
echo
echo "== cargo test --workspace --no-run (every test binary, built once)"
build_rc=0
t0=$(date +%s.%N)
cargo test --workspace --no-run -q --message-format=json-render-diagnostics \
  >"$logs/test-build.json" || build_rc=$?
build_secs=$(since "$t0")
# Which crate each test binary belongs to (cargo prints its path relative to
# the workspace root in its "Running" line), so that each crate's binaries
# are a suite with its own header and counts.
python3 - "$logs/test-build.json" "$PWD" >"$logs/test-bins.tsv" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = m["package_id"].split("#")[-1].split("@")[0].split("/")[-1]
        print(os.path.relpath(m["executable"], sys.argv[2]) + "\t" + name)
PY
ws_rc=0
# Test beds are uniquely named per test; two threads keep the 2-vCPU machine
# responsive for the kernel peers. Cargo runs the binaries crate by crate
# (sorted by name), doc tests last.
# mawk (Debian's awk) reads a pipe in blocks: told to read it line by line,
# the output shows as it comes and each suite's start is timed when it starts.
live_awk=(awk)
if awk -W version 2>&1 | grep -q mawk; then
  live_awk=(awk -W interactive)
fi
cargo test --workspace --no-fail-fast -- --test-threads=2 2>&1 |
  "${live_awk[@]}" -v map="$logs/test-bins.tsv" -v dir="$logs" '
    BEGIN { FS = "\t"; while ((getline l < map) > 0) { split(l, a, "\t"); crate[a[1]] = a[2] }; FS = " " }
    /^ *Running / { s = $0; sub(/.*\(/, "", s); sub(/\).*/, "", s); c = (s in crate) ? crate[s] : "(unknown crate)" }
    /^ *Doc-tests / { c = "doc tests (every crate)" }
    function now(  t) { "date +%s.%N" | getline t; close("date +%s.%N"); return t }
    /^ *(Running|Doc-tests) / && c != cur {
      cur = c; out = dir "/ws-" (++n) ".log"
      # Each suite with the time it began; the end of the run follows them.
      print cur "\t" out "\t" now() > (dir "/ws-suites.tsv")
      printf "\n== suite %s (cargo test --workspace)\n", cur
    }
    { print; fflush(); if (out != "") print > out }
    END { print now() > (dir "/ws-end") }
  ' || ws_rc=${PIPESTATUS[0]}
ws_rc=$((build_rc | ws_rc))
failed_before_ws=$total_failed
ws_counted=0
if [ -f "$logs/ws-suites.tsv" ]; then
  # A suite's seconds: from its start to the next one's (the last: to the
  # run's end).
  while IFS=$'\t' read -r name log secs; do
    add_suite "$name" - "$log" "$secs"
    ws_counted=$((ws_counted + 1))
  done < <(awk -F'\t' -v end="$(cat "$logs/ws-end" 2>/dev/null || date +%s.%N)" '
    { name[NR] = $1; log_[NR] = $2; t[NR] = $3 }
    END { for (i = 1; i <= NR; i++) printf "%s\t%s\t%.1f\n", name[i], log_[i], ((i < NR) ? t[i + 1] : end) - t[i] }
  ' "$logs/ws-suites.tsv")
fi
if [ "$ws_rc" -ne 0 ] && [ "$total_failed" -eq "$failed_before_ws" ]; then
  # Nothing failed by name: the build failed or a binary crashed.
  echo "cargo test --workspace: exit status $ws_rc" >"$logs/ws-status.log"
  add_suite "cargo test --workspace" "$ws_rc" "$logs/ws-status.log" -
fi
echo "($ws_counted crates' suites from the workspace run; their test binaries built in ${build_secs}s)"

# ARP/ICMP/NDP are optional features of the codec: the workspace turns them
# on (the data path and the fuzz targets use them); without them it must
# still build and pass.
run_suite "flowlane-wire (default features)" cargo test -p flowlane-wire --no-fail-fast -- --test-threads=2
# More than 4 GiB on one connection through the simulator (issue 11): seconds
# in a release build, far too long in a debug one.
run_suite "flowlane-tcp long_transfer (release, > 4 GiB)" cargo test --release -p flowlane-tcp --test long_transfer --no-fail-fast -- --ignored
# The benchmark examples still run (sim_idle once stopped at the default
# connection caps unnoticed): a small run of each, release, no counts.
run_suite "flowlane-tcp examples (sim_idle, sim_bulk)" bash -c \
  'cargo run --release -q -p flowlane-tcp --example sim_idle -- 70000 &&
   cargo run --release -q -p flowlane-tcp --example sim_bulk -- 100 40000 lend &&
   cargo run --release -q -p flowlane-tcp --example sim_bulk -- 10 400000 steady'

secs=$(echo "$start $(date +%s.%N)" | awk '{printf "%.2f", $2 - $1}')
echo
echo "== summary (${#summary[@]} suites)"
printf '%s\n' "${summary[@]}"
if ((${#failures[@]})); then
  echo "failed suites (test binaries):"
  printf '  %s\n' "${failures[@]}"
  result=FAILED
else
  result=ok
fi
echo "test result: $result. $total_passed passed; $total_failed failed; $total_ignored ignored; 0 measured; 0 filtered out; finished in ${secs}s"
[ "$result" = ok ]
