#!/bin/bash
# As run in session 27: binaries were copied to /work/bench27/bin/flowlane.TAG (base, new, qpmove; BIN=DIR for another folder, as session 34 did); run as root.
# cost.sh TAG CLIENTS [close]: flowlane http-server (rtc) CPU per request and syscalls per request.
set -u
F=${BIN:-/work/bench27/bin}/flowlane.$1
BED=cs$$; NS=flowlane-$BED; PNS=flowlane-$BED-peer
W=$(mktemp -d); $F testbed up --bed $BED --queues 2 >/dev/null
ADDR=$(ip netns exec $NS ip -4 -o addr show dev xsk0 | awk '{print $4}' | cut -d/ -f1)
$F http-server --bed $BED --port 80 --mode ${MODE:-rtc} > $W/fl.log 2>&1 & PID=$!
sleep 2
H=(); [ "${3:-}" = close ] && H=(-H 'Connection: close')
SPID=$(pgrep -P $PID -f http-server || echo $PID)
ip netns exec $PNS wrk -t 2 -c $2 -d 1 "${H[@]}" http://$ADDR:80/ >/dev/null 2>&1
t0=$(awk '{print $14+$15}' /proc/$SPID/stat)
perf stat -e 'syscalls:sys_enter_read,syscalls:sys_enter_poll,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom' -p $SPID -o $W/ps.txt -- sleep 5 &
SP=$!
ip netns exec $PNS wrk -t 2 -c $2 -d 5 "${H[@]}" http://$ADDR:80/ > $W/wrk.out 2>&1
wait $SP
t1=$(awk '{print $14+$15}' /proc/$SPID/stat)
kill $PID; wait $PID 2>/dev/null
$F testbed down --bed $BED >/dev/null 2>&1
req=$(awk '/^Requests\/sec:/ {print $2*5}' $W/wrk.out)
rd=$(awk '/sys_enter_read/ {gsub(",","",$1); print $1}' $W/ps.txt)
pl=$(awk '/sys_enter_poll/ {gsub(",","",$1); print $1}' $W/ps.txt)
st=$(awk '/sys_enter_sendto/ {gsub(",","",$1); print $1}' $W/ps.txt)
rf=$(awk '/sys_enter_recvfrom/ {gsub(",","",$1); print $1}' $W/ps.txt)
echo "$1 c=$2 ${3:-ka} req=$req cpu_us_per_req=$(echo "scale=2; ($t1-$t0)*10000/$req" | bc) read/req=$(echo "scale=3; $rd/$req"|bc) poll/req=$(echo "scale=3; $pl/$req"|bc) sendto/req=$(echo "scale=3; $st/$req"|bc) recvfrom/req=$(echo "scale=3; $rf/$req"|bc)"
rm -rf $W
