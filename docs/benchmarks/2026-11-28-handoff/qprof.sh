#!/usr/bin/env bash
# qprof.sh BIN MODE CONNS MIB OUT : perf record the sink process during one transfer
set -euo pipefail
F=$1; MODE=$2; C=$3; MIB=$4; OUT=$5
BED=qp$$; PNS=flowlane-$BED-peer; W=$(mktemp -d)
cleanup(){ [ -n "${SINK:-}" ] && kill $SINK 2>/dev/null; "$F" testbed down --bed $BED >/dev/null 2>&1||true; rm -rf $W; }
trap cleanup EXIT
"$F" testbed up --bed $BED --queues 2 >/dev/null
cp /work/bench28/send.py $W/
"$F" bulk-sink --bed $BED --port 5001 --no-hash --count $C --backend xdp --mode $MODE --report $W/r.json --timeout 120 >$W/out 2>$W/err &
SINK=$!
for _ in $(seq 100); do [ -f $W/r.json ] && break; sleep 0.1; done
perf record -g -F 4000 -p $SINK -o $OUT -- sleep 100 >/dev/null 2>&1 &
P=$!
sleep 0.3
t0=$(date +%s%N)
ip netns exec $PNS python3 $W/send.py $C $MIB
t1=$(date +%s%N)
wait $SINK; SINK=
kill -INT $P 2>/dev/null; wait $P 2>/dev/null || true
python3 - $W/out $t0 $t1 <<'PY'
import json,sys
L=[json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
s=next(l for l in L if l.get('event')=='summary')
got=sum(l['bytes'] for l in L if l.get('event')=='sink' and l.get('ok'))
wall=(int(sys.argv[3])-int(sys.argv[2]))/1e9
g=got*8/wall/1e9
net=sum(x or 0 for x in s.get('worker_cpu_ns',[]))/1e9
print(f"gbit {g:.2f} net%/Gbit {net/wall*100/g:.1f} wall {wall:.2f}")
print(json.dumps({k:v for k,v in s.items() if k in ('queue_pair','app_cpu_ns','worker_cpu_ns')}))
PY
