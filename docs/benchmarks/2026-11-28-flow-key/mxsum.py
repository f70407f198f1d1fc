import json,sys
import os; runs=[(i+1,t) for i,t in enumerate(os.environ.get('TAGS','base b2048 b2048 base').split())]
rows={}
lat=[]
for i,tag in runs:
    d=json.load(open(f'mx/{i}-{tag}/results.json'))
    for c in d['cells']:
        k=(c['connections'],c['delay_ms'])
        r=c['receiver'] or {}
        qs=(r.get('dataplane') or {}).get('queues') or []
        si=sum(q['tcp']['segments_in'] for q in qs); so=sum(q['tcp']['segments_out'] for q in qs)
        rows.setdefault(k,[]).append((i,tag,c['backend'],round(c['mbit_s']),round(c['cycles_per_byte_system'],2),(si/so if so else None), r.get('peer',{}).get('tcp_retrans_segs_netns')))
    for l in d.get('latency',[]):
        lat.append((i,tag,l.get('backend'),l.get('p99_us') or l.get('p99'),l.get('p999_us') or l.get('p999'), list(l.keys())[:12]))
print("conns delay | " + " | ".join(f"{i}-{t}" for i,t in runs))
for k in sorted(rows):
    fl=[x for x in rows[k] if x[2]=='flowlane']; ke=[x for x in rows[k] if x[2]=='kernel']
    print(k, 'FL', ' | '.join(f"{x[3]} {x[4]} s/a {x[5]:.1f} r{x[6]}" for x in fl), ' || K', ' | '.join(f"{x[3]} {x[4]}" for x in ke))
for l in lat: print(l)
