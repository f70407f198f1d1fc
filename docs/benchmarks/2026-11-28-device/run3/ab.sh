#!/usr/bin/env bash
# Session 29 device A/B: the receive matrix with base's flowlane-ttcp (4395fa6, 256-frame
# passes) and adapt's (db995ce, passes sized by the connections touched), alternated
# base, adapt, adapt, base; kernel cells in the first run. The flowlane receiver runs
# inside flowlane-ttcp; --flowlane (the bed) is the same binary for all.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/o}
KIT=$(pwd)/target/device-kit
export PATH="$PATH:$KIT/bin"
LIBS=$(mktemp -d)
for lib in "$KIT"/lib/*; do n=$(basename "$lib"); ldconfig -p | grep -q "^[[:space:]]*$n " || ln -s "$lib" "$LIBS/$n"; done
export LD_LIBRARY_PATH=$LIBS
F=$KIT/bin/flowlane
i=0
for tag in base adapt adapt base; do
  i=$((i+1))
  b=flowlane; [ $i = 1 ] && b=kernel,flowlane
  d=$(mktemp -d)
  echo "== $i $tag"
  timeout 120 "$KIT/bin/flowlane-ttcp.$tag" matrix --flowlane "$F" --backends $b --roles receiver --conns 16,256,1024,10000 --sizes 64k --delays 0 --seconds 3 --latency-sizes 64 --out "$d" >"$d/log" 2>&1 || echo "run $i failed: $(tail -c 300 $d/log)"
  grep '^|' "$d/log"
  cp "$d/results.json" "$OUT/ab-$i-$tag.json"
done
