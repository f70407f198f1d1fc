#!/bin/bash
# The quick matrix, base (5085abd) and head alternated (base head head base).
cd /work/bench27
i=0
for tag in base5085 head head base5085; do
  i=$((i+1))
  /usr/bin/time -f "%e s" bin/flowlane-ttcp.$tag matrix --flowlane bin/flowlane.$tag --quick --out mx/$i-$tag > mx-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
