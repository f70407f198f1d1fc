#!/bin/bash
cd /work/main
for i in 4 5 6; do
  for f in 131072 32768; do
    out=/work/bench7/fr-$i-f$f
    EXP_FRAMES=$f target/release/flowlane-ttcp matrix --flowlane target/release/flowlane --backends flowlane --conns 1024 --sizes 64k --delays 0 --roles receiver --seconds 5 --latency-sizes none --out $out > $out.log 2>&1
  done
done
echo done > /work/bench7/fr2.done
