#!/usr/bin/env bash
# Fuzz campaigns (issue 11): libFuzzer through cargo-fuzz on a nightly toolchain, for every
# target of wire/fuzz, tcp/fuzz and dataplane/fuzz or the one named, 10^7 executions each by default. Not
# part of CI: CI's smoke run is each fuzz crate's `cargo test` (scripts/test.sh).
# Installs what is missing: the nightly toolchain (rustup) and cargo-fuzz (cargo install
# --locked). Needs rustup: without it, it says so and exits 1.
#
#   scripts/fuzz.sh [TARGET] [--runs N] [-- LIBFUZZER_ARGS...]
#
# Corpus: $TARGET_DIR/fuzz-corpus/TARGET (kept between campaigns; the seeds in
# <crate>/fuzz/seeds/TARGET are read as well). A finding is written to
# $TARGET_DIR/fuzz-artifacts/TARGET/ and the script exits 1 naming it; replay a tcp_input
# finding with FLOWLANE_FUZZ_INPUT=PATH FLOWLANE_FUZZ_TRACE=1 cargo test -p
# flowlane-tcp-fuzz --test smoke replay -- --nocapture.
# The sanitizer is off by default (FLOWLANE_FUZZ_SANITIZER=address turns ASan on): the
# fuzzed crates forbid unsafe code, and ASan halves the executions per second. Debug
# assertions and overflow checks are on (cargo-fuzz's default build).
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/fuzz.sh [TARGET] [--runs N] [-- LIBFUZZER_ARGS...]" >&2
  exit 2
}

# Every target: fuzz_targets/NAME.rs of each fuzz crate (NAME, its crate directory).
declare -A crate_of=()
for f in wire/fuzz/fuzz_targets/*.rs tcp/fuzz/fuzz_targets/*.rs dataplane/fuzz/fuzz_targets/*.rs; do
  crate_of[$(basename "$f" .rs)]=$(dirname "$(dirname "$(dirname "$f")")")
done
all=$(printf '%s\n' "${!crate_of[@]}" | sort)

runs=10000000
targets=()
extra=()
while (($#)); do
  case $1 in
    --runs)
      [ $# -ge 2 ] || usage
      [[ $2 =~ ^[1-9][0-9]*$ ]] || {
        echo "fuzz.sh: --runs $2: give a positive number of executions, e.g. --runs 1000000" >&2
        exit 2
      }
      runs=$2
      shift 2
      ;;
    --)
      shift
      extra=("$@")
      break
      ;;
    -h | --help) usage ;;
    -*)
      echo "fuzz.sh: unknown option $1 (options: --runs N, then -- and libFuzzer's own)" >&2
      exit 2
      ;;
    *)
      [ -n "${crate_of[$1]:-}" ] || {
        echo "fuzz.sh: unknown target $1 (targets: $(echo $all))" >&2
        exit 2
      }
      targets+=("$1")
      shift
      ;;
  esac
done
((${#targets[@]})) || mapfile -t targets <<<"$all"

if ! command -v rustup >/dev/null; then
  echo "fuzz.sh: no rustup: cargo-fuzz runs on a nightly toolchain through rustup (cargo +nightly); install rustup (https://rustup.rs: curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh) and run this again, which then installs nightly and cargo-fuzz" >&2
  exit 1
fi
if ! rustup toolchain list | grep -q '^nightly'; then
  echo "== installing the nightly toolchain (cargo-fuzz needs its sanitizer-coverage flags)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

export CARGO_TARGET_DIR=$target_dir
sanitizer=${FLOWLANE_FUZZ_SANITIZER:-none}
summary=()
for t in "${targets[@]}"; do
  crate=${crate_of[$t]}
  corpus=$target_dir/fuzz-corpus/$t
  artifacts=$target_dir/fuzz-artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  # One log per campaign: two campaigns of one target at once must not share it.
  log=$target_dir/fuzz-$t.$$.log
  echo "== $t: $runs runs (crate $crate/fuzz, corpus $corpus, log $log)"
  marker=$(mktemp)
  started=$(date +%s)
  set +e
  (cd "$crate" && cargo +nightly fuzz run "$t" --sanitizer "$sanitizer" --features libfuzzer \
    "$corpus" "fuzz/seeds/$t" -- -runs="$runs" -artifact_prefix="$artifacts/" \
    -print_final_stats=1 "${extra[@]}") 2>&1 | tee "$log" | grep --line-buffered -E \
    '^#[0-9]+[[:space:]]+(pulse|DONE)|^(INFO: -max_len|stat::)|panicked|^SUMMARY|Test unit written'
  rc=${PIPESTATUS[0]}
  set -e
  finding=$(find "$artifacts" -type f -newer "$marker" | head -1)
  rm -f "$marker"
  if [ "$rc" -ne 0 ] || [ -n "$finding" ]; then
    echo "fuzz.sh: $t found a failure: ${finding:-(no artifact; see $log)}" >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  secs=$(($(date +%s) - started))
  rate=$((execs / (secs > 0 ? secs : 1)))
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  summary+=("$(printf '  %-12s %12s executions in %6s s (build included), %6s exec/s, %s' \
    "$t" "$execs" "$secs" "$rate" "$cov")")
done
echo "== summary: no findings"
printf '%s\n' "${summary[@]}"
