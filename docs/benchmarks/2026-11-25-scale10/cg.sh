#!/bin/bash
# cg.sh BIN TAG [WORDS...] (session 19; writes under /work/bench19/TAG): the callgrind cases of BENCHMARKS, per received segment (B),
# plus the whole program of the 1-connection case. WORDS are passed after the mode (e.g. lend).
bin=$1; tag=$2; shift 2; extra="$*"; out=/work/bench19/$tag; mkdir -p $out; cd $out
run() { name=$1; toggle=$2; shift 2
  if [ -n "$toggle" ]; then t="--toggle-collect=$toggle"; else t=""; fi
  valgrind --tool=callgrind --cache-sim=yes $t --callgrind-out-file=$out/cg.$name $bin "$@" > $out/$name.out 2> $out/$name.err
  ir=$(grep -E "^summary:|^totals:" $out/cg.$name | head -1 | awk '{print $2}')
  segs=$(awk '/^data segments received/{print $NF}' $out/$name.out)
  segsb=$(awk '/^segments received \(B\)/{print $NF}' $out/$name.out)
  echo "$tag $name Ir=$ir data_segs=$segs segsB=$segsb per_data=$(echo "scale=1; $ir/$segs" | bc) per_B=$(echo "scale=1; $ir/$segsb" | bc)"
}
run one4mb '*sim_deliver_to_b*' 1 4000000 $extra
run one4mb_all '' 1 4000000 $extra
run setup '*sim_deliver_to_b*' 10000 2896 $extra
run one_steady '*sim_deliver_to_b_measured*' 1 20000000 steady $extra
run k_steady '*sim_deliver_to_b_measured*' 1000 20000000 steady $extra
