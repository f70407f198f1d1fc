#!/bin/bash
cd /work/main
for i in 1 2 3; do
  for f in 32768 131072; do
    out=/work/bench7/fr-$i-f$f
    be=flowlane; [ $i = 1 ] && [ $f = 32768 ] && be=kernel,flowlane
    EXP_FRAMES=$f target/release/flowlane-ttcp matrix --flowlane target/release/flowlane --backends $be --conns 256,1024 --sizes 64k --delays 0 --roles receiver --seconds 5 --latency-sizes none --out $out > $out.log 2>&1
  done
done
echo done > /work/bench7/fr.done
