import sys, collections
sys.path.insert(0, '/work/s63/connsplit/scripts/lib')
import conn_split as cs
for path in sys.argv[1:]:
    args=open(path+'.split').readline().split()
    get=lambda k:[a2 for a1,a2 in zip(args,args[1:]) if a1==k]
    srv={int(x) for x in get('--server-pid')}; cl={int(x) for x in get('--client-pid')}
    rx=get('--rx')[0]; conns=float(get('--conns')[0]); cpu=float(get('--busy-cpu-s')[0])
    b=collections.Counter(); busy=0
    for pid, frames in cs.samples(open(path+'.txt', errors='replace')):
        c=cs.classify(rx, srv, cl, pid, frames)
        if c=='idle': continue
        busy+=1
        syms=[s for _,s in frames]
        if c=='server: kernel':
            k=next((s for s in syms if s.startswith('__x64_sys_')), 'other kernel')
            b['kernel '+{'__x64_sys_sendto':'sendto (TX kick)','__x64_sys_poll':'poll'}.get(k,'other')]+=1
        elif c=='server: user space': b['user space']+=1
        elif c.startswith('server: its receive'):
            if '__xsk_map_flush' in syms: b['rx: socket wake-up (__xsk_map_flush)']+=1
            elif any(s.startswith('__xsk_rcv') for s in syms): b['rx: copy into UMEM (__xsk_rcv)']+=1
            else: b['rx: XDP hook, program, redirect']+=1
    us=lambda n: n/busy*cpu/conns*1e6
    print(path, ' '.join(f'{k}={us(v):.1f}' for k,v in sorted(b.items())), f'total={us(sum(b.values())):.1f}')
