import sys, subprocess, collections
f=sys.argv[1]
out=subprocess.run(['perf','script','-i',f,'-F','comm,ip,sym,dso'],capture_output=True,text=True).stdout
samples=out.split('\n\n')
cats=collections.Counter(); tot=0
order=[('user','USER'),('tcp_pace_kick','sender pacing timer xmit'),('tcp_tsq_handler','sender tsq'),('tcp_v4_rcv','peer tcp rx (ACKs or data)'),('__xsk_rcv','xsk rx copy'),('xsk_generic_xmit','xsk tx'),('__xsk_sendmsg','xsk tx'),('veth_xdp_rcv','veth napi/xdp'),('tcp_sendmsg','sender sendmsg'),('poll','poll'),('do_softirq','softirq other'),('__irq_exit_rcu','irq softirq other')]
for s in samples:
    lines=[l.strip() for l in s.strip().split('\n') if l.strip()]
    if not lines: continue
    comm=lines[0].split()[0]
    grp = 'flowlane-q' if comm.startswith('flowlane-q') else ('ttcp' if comm.startswith('ttcp') else ('idle' if comm=='swapper' else 'other'))
    tot+=1
    stack=' '.join(lines[1:])
    if grp!='flowlane-q' and grp!='ttcp':
        cats[(grp,'')]+=1; continue
    c='kernel other'
    first=lines[1] if len(lines)>1 else ''
    if 'kernel.kallsyms' not in first and 'bpf_prog' not in first: c='USER'
    else:
        for k,name in order[1:]:
            if k in stack: c=name; break
    cats[(grp,c)]+=1
for (g,c),n in sorted(cats.items(), key=lambda x:-x[1]):
    print(f"{100*n/tot:6.2f}% {g:12s} {c}")
