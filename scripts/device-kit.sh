#!/usr/bin/env bash
# Packs what `scripts/device-run.sh` needs on a lent machine that cannot
# reach a package registry: the release `flowlane` and `flowlane-ttcp` and
# the data path's unit tests (`dataplane-tests`), stripped, and the shared libraries they (and `ip`) load that a bare image
# may lack, and the tools a test bed runs (`ip`, `ethtool`, `sysctl`; used
# there only where the image has none). The lent-device tool carries ignored
# paths of at most 64 MiB in all; the kit is about 20 MiB.
#
#   scripts/device-kit.sh            # builds, then writes target/device-kit/
#
# Then, with the lent-device tool: carry ["target/device-kit"], command
# "bash scripts/device-run.sh" (see that script).
set -euo pipefail
source "$(dirname "$0")/lib/target-dir.sh"
cd "$(dirname "$0")/.."
cargo build --release -q -p flowlane-control -p flowlane-ttcp
KIT=target/device-kit
rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/lib"
for b in flowlane flowlane-ttcp; do
  cp "$target_dir/release/$b" "$KIT/bin/$b"
  strip "$KIT/bin/$b"
done
# The data path's unit tests, for their ignored prefetch measurement
# (`dataplane/src/rx_prefetch_bench.rs`, `move_prefetch_bench.rs`): no bed, one core.
# Cargo's diagnostics go rendered to the log (json-render-diagnostics), its
# JSON to the filter; a failure prints the log's end.
log=target/device-kit-test-build.log
if ! tests=$(cargo test --release -q -p flowlane-dataplane --lib --no-run \
  --message-format=json-render-diagnostics 2>"$log" |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "flowlane_dataplane":
        print(m["executable"])'); then
  echo "device-kit: building the data path's unit tests failed" \
    "(cargo test --release -p flowlane-dataplane --lib --no-run); the end of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
if [ -z "$tests" ]; then
  echo "device-kit: cargo built no flowlane_dataplane test binary (see $log)" >&2
  exit 1
fi
cp "$tests" "$KIT/bin/dataplane-tests"
strip "$KIT/bin/dataplane-tests"
# What a bed runs (`ip netns exec`, `ethtool -K`, `sysctl`), in case the
# image has none.
for t in ip ethtool sysctl; do
  if command -v "$t" >/dev/null; then
    cp "$(command -v "$t")" "$KIT/bin/$t"
  fi
done
# Every library those load except the C library's own (the lent machine's
# loader must match its libc); device-run.sh uses only those it lacks.
for f in "$KIT"/bin/*; do
  ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $3}' || true
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$KIT/lib/" ;;
  esac
done
git rev-parse HEAD >"$KIT/commit"
size=$(du -sm "$KIT" | cut -f1)
echo "device kit: $KIT, ${size} MiB, commit $(cat "$KIT/commit")"
if [ "$size" -ge 64 ]; then
  echo "device-kit: ${size} MiB is over the 64 MiB the device tool carries" >&2
  exit 1
fi
