#!/bin/bash
# The kernel backend (flowlane-kernel, what the matrix's kernel cells run) before and after the
# receive memory budget, alternated: base kb kb base.
cd /work/bench26
i=0
for tag in base kb kb base; do
  i=$((i+1))
  bin/$tag/flowlane-ttcp matrix --flowlane bin/$tag/flowlane --backends kernel --roles receiver \
    --conns 1,256,1024 --sizes 64k --delays 0 --latency-sizes none --seconds 3 --out kb/$i-$tag > kb-$i-$tag.log 2>&1
  echo "$i $tag rc=$?"
done
