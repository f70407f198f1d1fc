#!/bin/bash
# Session 19 bed runs: zero-copy receive (default) against --copy-receive, same build, alternated.
set -u
T=/work/main/target/release
O=/work/bench19/bed
cd /work/main
pkill -STOP -x tcp_input
echo "start $(date) load $(cat /proc/loadavg)"
for i in 1 2 3; do
for v in zc copy; do
X=""; [ $v = copy ] && X="--copy-receive"
$T/flowlane-ttcp matrix --flowlane $T/flowlane $X --backends flowlane --roles receiver --conns 1,256,1024 --sizes 64k --delays 0 --latency-sizes none --seconds 4 --out $O/ab-$v-$i > $O/ab-$v-$i.log 2>&1; echo "ab-$v-$i rc=$? $(date)"
done
done
pkill -CONT -x tcp_input
echo "done $(date)"
