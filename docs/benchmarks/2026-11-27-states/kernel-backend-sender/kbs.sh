#!/bin/bash
# The kernel backend as sender, before and after both memory budgets, alternated: base kb2 kb2 base.
cd /work/bench26
i=${START:-0}
for tag in ${TAGS:-base kb2 kb2 base}; do
  i=$((i+1))
  bin/$tag/flowlane-ttcp matrix --flowlane bin/$tag/flowlane --backends kernel --roles sender \
    --conns ${CONNS:-1,256,1024} --sizes 64k --delays 0 --latency-sizes none --seconds 3 --out kbs/$i-$tag > kbs-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
