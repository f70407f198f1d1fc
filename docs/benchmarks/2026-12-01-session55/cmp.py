import subprocess, sys, re
def fns(path):
    out = subprocess.run(['callgrind_annotate', '--threshold=100', path], capture_output=True, text=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r'\s*([\d,]+)\s+\([^)]*\)\s+(.*)', line)
        if m:
            n = int(m.group(1).replace(',', ''))
            name = re.sub(r'/tmp/cgtree2?/', '', m.group(2).strip()); name = re.sub(r'\[/work/s55/bench/[a-z0-9]+/', '[', name)
            name = re.sub(r'^\S*:', '', name, count=1) if ':' in name.split(' ')[0] else name
            d[name] = d.get(name, 0) + n
    return d
a, b, div = fns(sys.argv[1]), fns(sys.argv[2]), float(sys.argv[3])
rows = []
for k in set(a) | set(b):
    x, y = a.get(k, 0), b.get(k, 0)
    if abs(y - x) / div >= 0.5:
        rows.append(((y - x) / div, x / div, y / div, k))
for r in sorted(rows, key=lambda r: -abs(r[0]))[:25]:
    print(f"{r[0]:+8.1f} {r[1]:8.1f} {r[2]:8.1f}  {r[3][:150]}")
