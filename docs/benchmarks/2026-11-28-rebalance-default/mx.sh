#!/bin/bash
# quick matrix alternated; each build's own flowlane-ttcp (the receiver runs inside it)
cd /work/bench30
rm -rf mx; mkdir -p mx
i=0
for tag in ${TAGS:-base auto auto base}; do
  i=$((i+1))
  /usr/bin/time -f "%e s" /work/bench30/ttcp.$tag matrix --flowlane /work/bench30/flowlane.auto --quick --out mx/$i-$tag > mx-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
