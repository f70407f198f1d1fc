#!/bin/bash
# The quick matrix, base and new alternated (base new new base).
cd /work/bench26
i=0
for tag in base new new base; do
  i=$((i+1))
  bin/$tag/flowlane-ttcp matrix --flowlane bin/$tag/flowlane --quick --out mx/$i-$tag > mx-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
