#!/usr/bin/env python3
"""Splits a connection-rate run's CPU between the server and its client.

Reads `perf script -F comm,pid,tid,ip,sym` output of a whole-machine
recording (`perf record -a -g`) taken while wrk ran against one server on the
test bed, and assigns every sample to the server's part, the client's part
(wrk and its kernel TCP), other work or idle, by its process and its call
chain:

- On a veth bed a packet's receive runs in the sender's context (veth_xmit
  hands it to the peer's receive on the same CPU). In wrk's process the
  server's receive is the server's: for flowlane the XDP hook, the copy
  into the UMEM and the wake-up of its socket (generic or native XDP); for
  nginx (kernel TCP) `tcp_v4_rcv` and below. The rest of wrk's samples,
  user space and kernel (the bed's RSS program on the peer's egress
  included), are the client's.
- In the server's processes the client's kernel TCP receive (`tcp_v4_rcv`
  and below) is the client's; the rest, user space and kernel (flowlane's
  AF_XDP transmit and poll), the server's.
- The idle task (pid 0, `swapper`) is idle; every other process is other
  (perf itself, kernel threads, other programs on the machine: on a shared
  machine other `flowlane` or `wrk` processes too, which is why the parts
  go by process id, not by name).

These are session 27's rules (docs/benchmarks/2026-11-27-wake-qp/
classify.py, BENCHMARKS.md "Where a connection's CPU goes on this bed"),
with the processes named by id instead of by thread name, and flowlane's
receive named by its XDP path (session 27 matched every `bpf_prog_`, the
bed's RSS program on wrk's transmit too, and missed the socket's wake-up).

    conn_split.py --rx xdp|kernel --server-pid PID... --client-pid PID...
                  [--conns N --busy-cpu-s S] [FILE]

--rx says how the server receives (xdp: flowlane on AF_XDP; kernel: kernel
TCP, as nginx and flowlane's kernel backend); --server-pid and --client-pid
(each repeatable) name the server's processes and wrk's.

FILE (default standard input) is the `perf script` text. Prints each class's
share of all samples; with --conns (connections made in the recorded
window) and --busy-cpu-s (the machine's busy CPU seconds in that window,
from /proc/stat) also microseconds per connection for the server's part,
the client's part and other work, each class's share of the non-idle
samples times the busy time, over the connections. The last line is
`split server_us=X client_us=Y other_us=Z busy_samples=N` (or without the
microseconds when not asked), for scripts.
"""

import argparse
import collections
import re
import sys

PID_TID = re.compile(r"^-?[0-9]+/-?[0-9]+$")

# Frames (symbol prefixes) of the server's receive that run in the client's
# context, per kind of receive.
SERVER_RX_IN_CLIENT = {
    # The XDP hook and what follows it: native XDP on veth (veth_xdp_rcv:
    # the program, the redirect into the socket, AF_XDP's copy into the
    # UMEM), the flush that wakes the socket's poller at the end of the
    # veth's NAPI poll (__xsk_map_flush), and the same for generic XDP.
    # Not `bpf_prog_` as such: the bed's RSS (a tc program on the peer's
    # egress, flowlane_rss) runs in wrk's context whichever server it talks
    # to, and is the client's path.
    "xdp": (
        "veth_xdp_rcv",
        "__xsk_map_flush",
        "xsk_flush",
        "do_xdp_generic",
        "netif_receive_generic_xdp",
        "xdp_do_generic_redirect",
        "xsk_generic_rcv",
        "__xsk_rcv",
        "xsk_rcv",
    ),
    # Kernel TCP's receive of the server's segments.
    "kernel": ("tcp_v4_rcv", "tcp_v6_rcv"),
}
# The client's kernel TCP receive, run in the server's threads.
CLIENT_RX_IN_SERVER = ("tcp_v4_rcv", "tcp_v6_rcv")

# The classes, in the order printed; the first word says whose part it is.
CLASSES = (
    "server: user space",
    "server: kernel",
    "server: its receive, in the client's context",
    "client: wrk, user space",
    "client: wrk, kernel",
    "client: its TCP receive, in the server's context",
    "other",
    "idle",
)


def is_kernel(ip):
    """Whether a frame's address is in the kernel (x86-64's upper half)."""
    try:
        return int(ip, 16) >= 0xFFFF800000000000
    except ValueError:
        return False


def classify(rx, server, client, pid, frames):
    """The class of one sample of process `pid`: `frames` is its call chain,
    leaf first, as (address, symbol) pairs; `rx` the server's kind of
    receive, `server` and `client` the sets of their process ids."""
    syms = [s for _, s in frames]
    kernel = bool(frames) and is_kernel(frames[0][0])
    if pid in client:
        if any(s.startswith(SERVER_RX_IN_CLIENT[rx]) for s in syms):
            return "server: its receive, in the client's context"
        return "client: wrk, kernel" if kernel else "client: wrk, user space"
    if pid in server:
        if any(s.startswith(CLIENT_RX_IN_SERVER) for s in syms):
            return "client: its TCP receive, in the server's context"
        return "server: kernel" if kernel else "server: user space"
    if pid == 0:
        return "idle"
    return "other"


def samples(lines):
    """(pid, frames) per sample of `perf script` text: a header line (the
    thread's name, then `pid/tid`), then one indented line per frame
    (address, symbol), then a blank line. Lines that begin with `#` are
    comments."""
    pid, frames = None, []
    for line in lines:
        if line.startswith("#"):
            continue
        if not line.strip():
            if pid is not None:
                yield pid, frames
            pid, frames = None, []
        elif line[0] in " \t":
            if pid is not None:
                p = line.split(None, 1)
                frames.append((p[0], p[1].strip() if len(p) > 1 else ""))
        else:
            # The name may hold spaces: `pid/tid` is the first word after
            # it of that shape (perf writes -1 for an id it lacks).
            ids = [w for w in line.split()[1:] if PID_TID.match(w)]
            if not ids:
                raise ValueError(f"no pid/tid in a sample's first line: {line.strip()!r}")
            pid, frames = int(ids[0].split("/")[0]), []
    if pid is not None:
        yield pid, frames


def split(rx, server, client, lines):
    """Samples per class."""
    counts = collections.Counter({c: 0 for c in CLASSES})
    for pid, frames in samples(lines):
        counts[classify(rx, server, client, pid, frames)] += 1
    return counts


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rx", required=True, choices=sorted(SERVER_RX_IN_CLIENT))
    ap.add_argument("--server-pid", required=True, type=int, action="append")
    ap.add_argument("--client-pid", required=True, type=int, action="append")
    ap.add_argument("--conns", type=float, help="connections in the recorded window")
    ap.add_argument("--busy-cpu-s", type=float, help="busy CPU seconds in the window")
    ap.add_argument("file", nargs="?", help="perf script output (default: stdin)")
    a = ap.parse_args(argv)
    if (a.conns is None) != (a.busy_cpu_s is None):
        ap.error("--conns and --busy-cpu-s go together")
    src = open(a.file, encoding="utf-8", errors="replace") if a.file else sys.stdin
    with src:
        counts = split(a.rx, set(a.server_pid), set(a.client_pid), src)
    total = sum(counts.values())
    busy = total - counts["idle"]
    if busy == 0:
        print("conn_split: no busy samples", file=sys.stderr)
        return 1
    for c in CLASSES:
        print(f"{c:50s} {counts[c]:8d} {100 * counts[c] / total:6.1f} %")
    part = {
        who: sum(v for k, v in counts.items() if k.startswith(who + ":"))
        for who in ("server", "client")
    }
    part["other"] = counts["other"]
    print(
        f"busy samples: server {100 * part['server'] / busy:.1f} %, "
        f"client {100 * part['client'] / busy:.1f} %, other {100 * part['other'] / busy:.1f} %"
    )
    line = "split"
    if a.conns:
        us = {k: v / busy * a.busy_cpu_s / a.conns * 1e6 for k, v in part.items()}
        line += "".join(f" {k}_us={us[k]:.2f}" for k in ("server", "client", "other"))
    print(f"{line} busy_samples={busy}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
