#!/bin/bash
# quick matrix alternated base/new/new/base; each build's own flowlane-ttcp
# (the matrix's flowlane receiver runs inside flowlane-ttcp; --flowlane only sets up the bed)
cd /work/bench29
rm -rf mx; mkdir -p mx
i=0
for tag in ${TAGS:-base b2048 b2048 base}; do
  i=$((i+1))
  /usr/bin/time -f "%e s" /work/bench29/ttcp.$tag matrix --flowlane /work/bench29/flowlane.base --quick --out mx/$i-$tag > mx-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
