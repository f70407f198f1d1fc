#!/bin/bash
# quick matrix alternated; each build's own flowlane-ttcp (the receiver runs inside it)
cd ${WORK:-.}
rm -rf mx; mkdir -p mx
i=0
for tag in ${TAGS:-base new new base}; do
  i=$((i+1))
  /usr/bin/time -f "%e s" ${WORK:-.}/ttcp.$tag matrix --flowlane ${WORK:-.}/flowlane.new --quick --out mx/$i-$tag > mx-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
