#!/bin/bash
# As run in session 27: binaries were copied to /work/bench27/bin/flowlane.TAG (base, new, qpmove); run as root.
# prof.sh SERVER(rtc|nginx) CLIENTS [close]: perf profile of one wrk run.
set -u
F=${F:-/work/main/target/release/flowlane}
BED=pf$$; NS=flowlane-$BED; PNS=flowlane-$BED-peer
W=/work/bench27/prof-$1-$2${3:+-$3}; rm -rf $W; mkdir -p $W
$F testbed up --bed $BED --queues 2 >/dev/null
ADDR=$(ip netns exec $NS ip -4 -o addr show dev xsk0 | awk '{print $4}' | cut -d/ -f1)
if [ $1 = nginx ]; then
cat >$W/nginx.conf <<EOC
worker_processes 2;
pid $W/nginx.pid;
error_log $W/nginx-error.log;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $W; proxy_temp_path $W; fastcgi_temp_path $W; uwsgi_temp_path $W; scgi_temp_path $W;
  server { listen $ADDR:8080 reuseport backlog=4096; location / { return 200 "hello from nginx\n"; } } }
EOC
ip netns exec $NS nginx -c $W/nginx.conf -g 'daemon on;'; PORT=8080
else
$F http-server --bed $BED --port 80 --mode $1 > $W/fl.log 2>&1 & PID=$!; PORT=80
fi
sleep 2
H=(); [ "${3:-}" = close ] && H=(-H 'Connection: close')
ip netns exec $PNS wrk -t 2 -c $2 -d 1 "${H[@]}" http://$ADDR:$PORT/ >/dev/null 2>&1
ip netns exec $PNS wrk -t 2 -c $2 -d 6 "${H[@]}" http://$ADDR:$PORT/ > $W/wrk.out 2>&1 &
WP=$!
sleep 1
perf record -a -g -F 2000 -o $W/perf.data -- sleep 4 2>$W/perf.err >/dev/null
wait $WP
[ $1 = nginx ] && kill $(cat $W/nginx.pid) || { kill $PID; wait $PID; }
$F testbed down --bed $BED >/dev/null 2>&1
grep Requests/sec $W/wrk.out
perf report -i $W/perf.data --no-children --sort comm,dso -g none --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -25
