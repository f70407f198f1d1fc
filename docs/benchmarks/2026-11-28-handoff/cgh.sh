#!/bin/bash
# cgh.sh BIN TAG: export and import Ir per connection (100 conns, 50 moves)
for w in export import; do
  n=$(valgrind --tool=callgrind --callgrind-out-file=/work/bench28/cg.$w.$2 --toggle-collect="*measured_$w*" $1 100 50 2>&1 | awk '/Collected/{print $4}')
  echo "$2 $w $n $(python3 -c "print($n/5000)")"
done
