#!/bin/bash
# As run in session 27: binaries were copied to /work/bench27/bin/flowlane.TAG (base, new, qpmove); run as root.
# ka.sh ROUNDS: keep-alive and close, base and new alternated (conn-rate.sh, flowlane rtc + nginx)
cd /work/main
for r in $(seq $1); do for t in base new; do
  echo "== $t round $r keepalive"; SERVERS="flowlane flowlane-qp nginx" KEEPALIVE=1 FLOWLANE=/work/bench27/bin/flowlane.$t scripts/conn-rate.sh 100 1000 2>&1 | grep "^| [a-z]"
  echo "== $t round $r close"; SERVERS="flowlane nginx" FLOWLANE=/work/bench27/bin/flowlane.$t scripts/conn-rate.sh 50 500 2>&1 | grep "^| [a-z]"
done; done
