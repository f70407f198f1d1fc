#!/usr/bin/env python3
# sum.py DIR...: flowlane/kernel system cycles per byte, per (connections, delay), each run
import json, sys
for d in sys.argv[1:]:
    cells = json.load(open(f"{d}/results.json"))['cells']
    by = {}
    for c in cells:
        if c.get('role') != 'receiver' or c.get('error'):
            continue
        by.setdefault((c['connections'], c['delay_ms']), {})[c['backend']] = c
    out = []
    for k in sorted(by):
        v = by[k]
        if 'kernel' in v and 'flowlane' in v:
            r = v['flowlane']['cycles_per_byte_system'] / v['kernel']['cycles_per_byte_system']
            out.append(f"{k[0]}/{k[1]:g}ms {r:.2f}x")
    print(d, ' '.join(out))
