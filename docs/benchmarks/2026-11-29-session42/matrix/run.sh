#!/bin/bash
cd /work/bench42/mx
i=0
for tag in base new new base; do
  i=$((i+1))
  /usr/bin/time -f "%e s" ./ttcp.$tag matrix --flowlane ./flowlane.$tag --quick --out q$i-$tag > q$i-$tag.log 2>&1
  echo "quick $i $tag rc=$?"
done
i=0
for tag in base new new base; do
  i=$((i+1))
  /usr/bin/time -f "%e s" ./ttcp.$tag matrix --flowlane ./flowlane.$tag --roles sender --conns 1,256 --sizes 64k --delays 0 --out s$i-$tag > s$i-$tag.log 2>&1
  echo "sender $i $tag rc=$?"
done
