#!/bin/bash
# quick matrix, base (c5f4e61) and new (HEAD) flowlane binaries, same flowlane-ttcp (HEAD)
cd /work/bench28
T=/work/main/target/release/flowlane-ttcp
i=0
for tag in base new; do
  i=$((i+1))
  /usr/bin/time -f "%e s" $T matrix --flowlane bin/flowlane.$tag --quick --out mx/$i-$tag > mx-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
