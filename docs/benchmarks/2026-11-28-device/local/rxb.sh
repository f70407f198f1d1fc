#!/usr/bin/env bash
# rxb.sh PAIRS: alternate EXP_RX_BUDGET 256 / 2048 on the receive matrix
F=/work/bench28/bin/flowlane.exp; T=/work/main/target/release/flowlane-ttcp
for i in $(seq $1); do for b in 256 2048; do
  d=/work/bench29/rxb-$i-$b; rm -rf $d
  EXP_RX_BUDGET=$b $T matrix --flowlane $F --backends flowlane --roles receiver --conns 256,1024 --sizes 64k --delays 0 --seconds 5 --latency-sizes none --out $d >/dev/null 2>&1
  python3 - $d/results.json $b <<'PY'
import json,sys
for c in json.load(open(sys.argv[1]))['cells']:
    r=c['receiver']; qs=r['dataplane']['queues']
    si=sum(q['tcp']['segments_in'] for q in qs); so=sum(q['tcp']['segments_out'] for q in qs)
    print(sys.argv[2], c['connections'], round(c['mbit_s']), 'cpb %.2f'%c['cycles_per_byte_system'], 'seg/ack %.1f'%(si/max(so,1)), 'retr', r['peer'].get('tcp_retrans_segs_netns'))
PY
done; done
