#!/bin/bash
set -u
T=/work/main/target/release
B=/work/tgt-before/release
O=/work/bench18/bed
cd /work/main
pkill -STOP -x tcp_input
for i in 1 2; do
$T/flowlane-ttcp matrix --flowlane $T/flowlane --backends kernel,kernel-wire,flowlane --roles sender --conns 1,16,256,1024 --sizes 64k --delays 0 --latency-sizes none --seconds 3 --out $O/sndw$i > $O/sndw$i.log 2>&1; echo "sndw$i rc=$? $(date)"
done
for i in 1 2 3; do
for v in before after; do
F=$T/flowlane; [ $v = before ] && F=$B/flowlane
$T/flowlane-ttcp matrix --flowlane $F --backends flowlane --roles receiver --conns 256,1024 --sizes 64k --delays 0 --latency-sizes none --seconds 4 --out $O/rx-$v-$i > $O/rx-$v-$i.log 2>&1; echo "rx-$v-$i rc=$? $(date)"
done
done
$T/flowlane-ttcp matrix --flowlane $T/flowlane --backends kernel,kernel-wire --roles receiver --conns 256,1024 --sizes 64k --delays 0 --latency-sizes none --seconds 4 --out $O/rx-kernel > $O/rx-kernel.log 2>&1; echo "rx-kernel rc=$? $(date)"
pkill -CONT -x tcp_input
echo "done $(date)"
