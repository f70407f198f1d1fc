import sys,re,subprocess,collections
def load(f,incl):
    out=subprocess.run(['callgrind_annotate','--inclusive='+incl,'--threshold=100','--auto=no',f],capture_output=True,text=True).stdout
    d=collections.Counter()
    started=False
    for line in out.splitlines():
        if 'file:function' in line: started=True; continue
        if not started: continue
        m=re.match(r'\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.*)',line)
        if not m: continue
        v=int(m.group(1).replace(',',''))
        name=m.group(2)
        name=re.sub(r'\s*\[.*\]$','',name)
        fn=name.split(':',1)[1] if ':' in name else name
        d[fn]+=v
    return d
incl=sys.argv[3] if len(sys.argv)>3 else 'no'
a=load(sys.argv[1],incl); b=load(sys.argv[2],incl)
keys=set(a)|set(b)
rows=sorted(keys,key=lambda k:-abs(b[k]-a[k]))
for k in rows[:int(sys.argv[4]) if len(sys.argv)>4 else 30]:
    print(f"{a[k]:>12,} {b[k]:>12,} {b[k]-a[k]:>+10,}  {k[:150]}")
