#!/bin/bash
# quick matrix alternated; each build's own flowlane-ttcp (the receiver runs inside it)
cd /work/bench33
mkdir -p mx
i=0
for tag in ${TAGS:-base key key base}; do
  i=$((i+1))
  /usr/bin/time -f "%e s" /work/bench33/ttcp.$tag matrix --flowlane /work/bench33/flowlane.new --quick --out mx/$i-$tag > mx-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
