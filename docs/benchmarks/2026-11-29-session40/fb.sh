#!/bin/bash
# fb.sh TAG [build]: the mesh's cost per frame (forward_bench), callgrind and two threads.
set -e
T=$1; D=${BENCH_DIR:-/tmp/fb}/$T; mkdir -p $D
cd "$(git rev-parse --show-toplevel)"
if [ "$2" = build ]; then
  bin=$(cargo test --release -p flowlane-dataplane --lib --no-run 2>&1 | grep -o 'target/release/deps/flowlane_dataplane-[0-9a-f]*' | head -1)
  cp $bin $D/dp
fi
cd $D
for k in forward transmit; do
  ir=$(FLOWLANE_BENCH_KIND=$k FLOWLANE_BENCH_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=$D/cg.$k --toggle-collect='*mesh_measured*' ./dp --ignored --exact handoff::forward_bench::forward_time --nocapture 2>&1 | awk '/Collected/{print $4}')
  python3 -c "print('$T $k Ir/frame', round($ir/128000,1))"
done
./dp --ignored --exact handoff::forward_bench::forward_time --nocapture 2>&1 | grep "a frame" | sed "s/^/$T /"
