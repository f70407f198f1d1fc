import sys, collections
sys.path.insert(0, '/work/s63/connsplit/scripts/lib')
import conn_split as cs
# Sensitivity: samples the rules give one side though they lie in the softirq receive
# (net_rx_action) of the other side's packets.
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
        soft='net_rx_action' in syms
        if c=='server: kernel' and soft: b['server kernel: softirq rx (client-bound IP layer etc.)']+=1
        if c=='client: wrk, kernel' and soft:
            if any(s.startswith('veth_xdp_rcv') for s in syms): b['wrk kernel: softirq rx, XDP pass (bed)']+=1
            else: b['wrk kernel: softirq rx, other (server-bound IP layer etc.)']+=1
    us=lambda n: n/busy*cpu/conns*1e6
    print(path, '; '.join(f'{k}={us(v):.1f} us' for k,v in sorted(b.items())))
