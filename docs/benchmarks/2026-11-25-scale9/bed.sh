#!/bin/bash
# Session 18 bed runs: quick matrix before/after, sender with kernel-wire, conn-rate before/after.
set -u
T=/work/main/target/release
B=/work/tgt-before/release
O=/work/bench18/bed
cd /work/main
pkill -STOP -x tcp_input
echo "start $(date) load $(cat /proc/loadavg)"
$T/flowlane-ttcp matrix --flowlane $B/flowlane --quick --out $O/q-before > $O/q-before.log 2>&1; echo "q-before rc=$? $(date)"
$T/flowlane-ttcp matrix --flowlane $T/flowlane --quick --out $O/q-after > $O/q-after.log 2>&1; echo "q-after rc=$? $(date)"
for i in 1 2; do
$T/flowlane-ttcp matrix --flowlane $T/flowlane --backends kernel,kernel-wire,flowlane --roles sender --conns 1,16,256,1024 --sizes 64k --delays 0 --latency-sizes none --seconds 3 --out $O/snd$i > $O/snd$i.log 2>&1; echo "snd$i rc=$? $(date)"
done
FLOWLANE=$B/flowlane scripts/conn-rate.sh 50 500 > $O/cr-before.log 2>&1; echo "cr-before rc=$? $(date)"
FLOWLANE=$T/flowlane scripts/conn-rate.sh 50 500 > $O/cr-after.log 2>&1; echo "cr-after rc=$? $(date)"
pkill -CONT -x tcp_input
echo "done $(date)"
