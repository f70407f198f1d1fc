#!/bin/bash
# cg4.sh: the four callgrind cases of BENCHMARKS (cg.sh of scale10, lend), base and new alternated.
cd "${OUT:-/work/bench26}"
for tag in "$@"; do
  bin=${BINS:-/work/bench26/bin}/sim_bulk.$tag; out=${OUT:-/work/bench26}/$tag; mkdir -p $out
  run() { name=$1; toggle=$2; shift 2
    valgrind --tool=callgrind --toggle-collect=$toggle --callgrind-out-file=$out/cg.$name $bin "$@" > $out/$name.out 2> $out/$name.err
    ir=$(grep -E "^summary:|^totals:" $out/cg.$name | head -1 | awk '{print $2}')
    segsb=$(awk '/^segments received \(B\)/{print $NF}' $out/$name.out)
    echo "$tag $name Ir=$ir segsB=$segsb per_B=$(echo "scale=1; $ir/$segsb" | bc)"
  }
  run one4mb '*sim_deliver_to_b*' 1 4000000 lend
  run setup '*sim_deliver_to_b*' 10000 2896 lend
  run one_steady '*sim_deliver_to_b_measured*' 1 20000000 steady lend
  run k_steady '*sim_deliver_to_b_measured*' 1000 20000000 steady lend
done
