import json,sys,glob,os
runs=sorted(glob.glob('mx/*-*/results.json'))
data={}
for p in runs:
    tag=p.split('/')[1]
    for c in json.load(open(p))['cells']:
        if c.get('role','receiver')!='receiver': continue
        key=(c['connections'],c['delay_ms'])
        data.setdefault(key,{})[(tag,c['backend'])]=c
tags=[p.split('/')[1] for p in runs]
print('| connections | delay each way | '+' | '.join(tags)+' | kernel (run 1) |')
print('| --- | --- | '+' | '.join('---' for _ in tags)+' | --- |')
for key in sorted(data):
    row=[]
    for t in tags:
        c=data[key].get((t,'flowlane'))
        row.append('–' if c is None or c.get('error') else f"{c['cycles_per_byte_system']:.2f} ({c['mbit_s']:,.0f})".replace(',',' '))
    k=data[key].get((tags[0],'kernel'))
    kk='–' if k is None or k.get('error') else f"{k['cycles_per_byte_system']:.2f} ({k['mbit_s']:,.0f})".replace(',',' ')
    n,d=key
    print(f"| {n:,} | {d:g} ms | ".replace(',',' ')+' | '.join(row)+f' | {kk} |')
