#!/usr/bin/env bash
# Session 29 device A/B: bench handoff, preparts (db995ce: a bucket exported whole, then
# imported) against parts2 (exported 32 connections at a time, each part imported while the
# next is exported), alternated, workers sleeping then spinning (--busy-poll).
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/o}
KIT=$(pwd)/target/device-kit
export PATH="$PATH:$KIT/bin"
LIBS=$(mktemp -d)
for lib in "$KIT"/lib/*; do n=$(basename "$lib"); ldconfig -p | grep -q "^[[:space:]]*$n " || ln -s "$lib" "$LIBS/$n"; done
export LD_LIBRARY_PATH=$LIBS
for mode in sleep spin; do
  extra=; [ $mode = spin ] && extra=--busy-poll
  i=0
  for t in preparts parts2 parts2 preparts; do
    i=$((i+1))
    echo "== $mode $i $t"
    timeout 60 "$KIT/bin/flowlane.$t" bench handoff --moves 300 --idle 100,250 --busy 0 $extra --json >"/tmp/ho-$mode-$i-$t.json" 2>/tmp/e || echo "failed: $(tail -c 300 /tmp/e)"
    python3 -c "
import json,sys
for c in json.load(open(sys.argv[1])):
    d,e,r=c['duration_us'],c['export_us'],c['drain_us']
    print(c['idle'],'move p50/p99/max %.0f %.0f %.0f'%tuple(d),'export %.0f %.0f'%tuple(e),'drain %.0f %.0f'%tuple(r))
" "/tmp/ho-$mode-$i-$t.json"
  done
done
python3 -c "
import json,glob,os
out={os.path.basename(f):json.load(open(f)) for f in sorted(glob.glob('/tmp/ho-*.json'))}
json.dump(out,open(os.environ['OUT']+'/ho-all.json','w'),indent=1)
"
