#!/bin/bash
# cg.sh BIN TAG: the four callgrind cases of BENCHMARKS, per received data segment.
bin=$1; tag=$2; out=/work/bench18/$tag; mkdir -p $out; cd $out
run() { name=$1; toggle=$2; shift 2
  valgrind --tool=callgrind --cache-sim=yes --toggle-collect="$toggle" --callgrind-out-file=$out/cg.$name $bin "$@" > $out/$name.out 2> $out/$name.err
  ir=$(grep -E "^summary:|^totals:" $out/cg.$name | head -1 | awk '{print $2}')
  segs=$(awk '/^data segments received/{print $NF}' $out/$name.out)
  segsb=$(awk '/^segments received \(B\)/{print $NF}' $out/$name.out)
  echo "$tag $name Ir=$ir data_segs=$segs segsB=$segsb per_data=$(echo "scale=1; $ir/$segs" | bc) per_B=$(echo "scale=1; $ir/$segsb" | bc)"
}
run one4mb '*sim_deliver_to_b*' 1 4000000
run setup '*sim_deliver_to_b*' 10000 2896
run one_steady '*sim_deliver_to_b_measured*' 1 20000000 steady
run k_steady '*sim_deliver_to_b_measured*' 1000 20000000 steady
