#!/usr/bin/env python3
"""Classifies `perf script -F comm,ip,sym` samples of a wrk run into the
server's work and the client's, wherever each ran (on veth, a packet's
receive runs in the sender's context): in the client's (wrk) context, the
receive of the server's stack (flowlane: the XDP hook and the copy into
the UMEM; nginx: tcp_v4_rcv) is the server's; in the server's context,
tcp_v4_rcv is the client's kernel TCP."""
import sys, collections
SERVER_RX_IN_CLIENT = {
    'flowlane': ('xsk_generic_rcv', '__xsk_rcv', 'xsk_rcv', 'do_xdp_generic',
                 'bpf_prog_', 'netif_receive_generic_xdp', 'xdp_do_generic_redirect'),
    'nginx': ('tcp_v4_rcv', 'tcp_v6_rcv'),
}
CLIENT_RX_IN_SERVER = ('tcp_v4_rcv', 'tcp_v6_rcv')
server = sys.argv[2]
counts = collections.Counter()
def flush(comm, frames):
    if comm is None:
        return
    syms = [f[1] for f in frames]
    kernel = any(f[0].startswith('ffffffff') for f in frames[:1])
    if comm.startswith('wrk'):
        hit = any(any(s.startswith(m) for m in SERVER_RX_IN_CLIENT[server]) for s in syms)
        counts['server: its receive, in the client\'s context' if hit else
               ('client: wrk, kernel' if kernel else 'client: wrk, user space')] += 1
    elif comm.startswith('flowlane') or comm.startswith('nginx'):
        hit = any(s.startswith(CLIENT_RX_IN_SERVER) for s in syms)
        counts['client: its TCP receive, in the server\'s context' if hit else
               ('server: kernel' if kernel else 'server: user space')] += 1
    elif comm.startswith('swapper'):
        counts['idle'] += 1
    else:
        counts['other'] += 1
comm, frames = None, []
for line in open(sys.argv[1]):
    if not line.strip():
        flush(comm, frames); comm, frames = None, []
    elif not line.startswith('\t') and not line.startswith(' '):
        comm, frames = line.strip(), []
    else:
        p = line.split(None, 1)
        frames.append((p[0], p[1].strip() if len(p) > 1 else ''))
flush(comm, frames)
total = sum(counts.values())
busy = total - counts['idle']
for k in sorted(counts):
    print(f'{k:55s} {100*counts[k]/total:6.1f} %')
srv = sum(v for k, v in counts.items() if k.startswith('server'))
cli = sum(v for k, v in counts.items() if k.startswith('client'))
print(f'server share of busy samples {100*srv/busy:.1f} %, client {100*cli/busy:.1f} %')
