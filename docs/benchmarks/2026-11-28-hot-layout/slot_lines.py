#!/usr/bin/env python3
"""Which 64-byte lines of each connection's slot the steady phase touches.
usage: slot_lines.py SIMLOG TRACE SEGMENTS CONNS (see slot-lines.sh)"""
import sys, collections
simlog, trace, segs, conns = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
slabs, fields = {}, []
for line in open(simlog):
    if line.startswith(('A slab', 'B slab')):
        p = line.split()
        slabs[line[0]] = (int(p[2], 16), int(p[3]), int(p[4]), int(p[6]))
    elif line.startswith('field'):
        _, off, ty, name = line.split(None, 3)
        if (ty, name.strip()) not in [(f[1], f[2]) for f in fields]:
            fields.append((int(off), ty, name.strip()))
lines = {s: collections.Counter() for s in slabs}
offs = {s: collections.Counter() for s in slabs}
for line in open(trace):
    p = line.split()
    if len(p) != 2 or p[0] not in ('L', 'S', 'M'):
        continue
    a = int(p[1].split(',')[0], 16)
    for s, (base, cap, size, conn_at) in slabs.items():
        if base <= a < base + conns * size:
            k = (a - base) // size
            start = base + k * size
            lines[s][(k, a // 64 - start // 64)] += 1
            offs[s][a - start] += 1
per = segs / conns  # segments per connection (B's receive count)
for s in sorted(slabs):
    base, cap, size, conn_at = slabs[s]
    print(f"== {s}: slot {size} B, connection at {conn_at}; accesses per segment")
    for k in range(conns):
        row = {l: c / per for (kk, l), c in lines[s].items() if kk == k}
        hot = sum(1 for v in row.values() if v >= 0.25)
        print(f"  slot {k} (starts at line offset {(base + k*size) % 64}): lines touched >=0.25/seg: {hot}; >=0.02: {len(row)}")
        print("    " + " ".join(f"{l}:{row[l]:.1f}" for l in sorted(row)))
    print("  offsets touched (summed over slots, per segment), with the field at or before each:")
    for off in sorted(offs[s]):
        c = offs[s][off] / segs
        if c < 0.02:
            continue
        best = None
        for fo, ty, name in fields:
            ab = fo + (conn_at if ty == 'Connection' else 0)
            if ab <= off and (best is None or ab > best[0]):
                best = (ab, ty, name)
        print(f"    {off:4} {c:7.2f}  {best[1]}.{best[2]}+{off-best[0]}")
