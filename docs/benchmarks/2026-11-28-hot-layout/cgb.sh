#!/bin/bash
# cgb.sh BIN TAG: sim_bulk callgrind cases (Ir per segment received at B and per connection)
B=$1; T=$2
run() { # label toggle args...
  local label=$1 tog=$2; shift 2
  local out=$(valgrind --tool=callgrind --callgrind-out-file=${OUT:-/tmp}/cgb.$T.$label --toggle-collect="$tog" $B "$@" 2>&1)
  local ir=$(echo "$out" | awk '/Collected/{print $4}')
  local segs=$(echo "$out" | grep -i "segments received (B)" | grep -o "[0-9][0-9 ]*" | head -1 | tr -d ' ')
  echo "$T $label Ir=$ir segsB=$segs"
}
run cold1 '*sim_deliver_to_b*' 10000 1 lend
run cold2896 '*sim_deliver_to_b*' 10000 2896 lend
run warm1 '*sim_deliver_to_b_measured*' 10000 1 lend warm
run warm2896 '*sim_deliver_to_b_measured*' 10000 2896 lend warm
run steady1 '*sim_deliver_to_b_measured*' 1 20000000 steady lend
