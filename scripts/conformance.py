#!/usr/bin/env python3
"""Black-box TCP conformance cases, packetdrill-style, against one TCP echo
server: a scripted peer on raw frames (scapy) sends hand-made segments and
records every segment the server answers with, numbers relative to the two
initial sequence numbers, so that two servers' transcripts (flowlane's TCP on
AF_XDP and Linux's TCP through `--backend kernel`) compare line by line.

Run by scripts/conformance.sh, which makes the bed, starts each server and
diffs the transcripts. Inside the bed's peer namespace:

    python3 conformance.py --iface peer0 --src 10.99.0.3 --dst 10.99.0.1 \
        --dmac XSK0_MAC --port 7 --out xdp.txt [CASE...]

The source address is one the peer's kernel does not own (its neighbour
entry is set by hand on the server's side), so that the kernel answers
nothing for the peer's connections. An IPv6 --src/--dst pair runs the same
cases over IPv6 (those about IPv4 headers left out). Needs root and scapy.

With --client CMD the script runs the active-open cases instead (flowlane
as the side that connects): the peer answers, as a scripted responder on
--port, the SYNs of a client that CMD starts (one per case; `{addr}` and
`{port}` in CMD are replaced by the peer's address and port), and logs the
client's segments and how its transfer ended.
"""

import argparse
import json
import queue
import random
import shlex
import socket
import struct
import subprocess
import sys
import threading
import time

from scapy.all import Ether, IP, IPv6, Raw, TCP, get_if_hwaddr
from scapy.utils import checksum

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4

MSS = ("mss", 1460)
SACKOK = ("sackok",)
WS7 = ("ws", 7)


def ts_opt(tsval, tsecr):
    return ("ts", tsval, tsecr)


def encode_options(opts):
    """TCP options as bytes: tuples for well-formed ones, bytes as they are."""
    out = b""
    for o in opts:
        if isinstance(o, (bytes, bytearray)):
            out += bytes(o)
        elif o[0] == "mss":
            out += struct.pack("!BBH", 2, 4, o[1])
        elif o[0] == "ws":
            out += struct.pack("!BBB", 3, 3, o[1])
        elif o[0] == "sackok":
            out += b"\x04\x02"
        elif o[0] == "ts":
            out += struct.pack("!BBII", 8, 10, o[1] & 0xFFFFFFFF, o[2] & 0xFFFFFFFF)
        elif o[0] == "nop":
            out += b"\x01"
        elif o[0] == "sack":
            body = b"".join(struct.pack("!II", l & 0xFFFFFFFF, r & 0xFFFFFFFF) for l, r in o[1])
            out += struct.pack("!BB", 5, 2 + len(body)) + body
        else:
            raise ValueError(o)
    while len(out) % 4:
        out += b"\x00"
    return out


FLAG_BITS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, "A": 0x10, "U": 0x20, "E": 0x40, "C": 0x80}


def flag_str(f):
    return "".join(k for k, v in FLAG_BITS.items() if f & v) or "."


class Peer:
    """One scripted connection's end: its own source port, its sequence
    numbers, the segments received (a thread reads the interface)."""

    def __init__(self, args, out):
        self.args = args
        self.out = out
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((args.iface, 0))
        self.smac = get_if_hwaddr(args.iface)
        self.dmac = args.dmac
        self.q = queue.Queue()
        self.stop = False
        threading.Thread(target=self._reader, daemon=True).start()
        self.t0 = time.monotonic()
        self.sport = 0
        self.v6 = ":" in args.src
        self.family = socket.AF_INET6 if self.v6 else socket.AF_INET
        self.ip = IPv6 if self.v6 else IP

    def _reader(self):
        while not self.stop:
            try:
                data, addr = self.sock.recvfrom(65535)
            except OSError:
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            try:
                e = Ether(data)
            except Exception:
                continue
            l3 = IPv6 if self.v6 else IP
            if l3 in e and TCP in e and e[l3].src == self.args.dst and e[l3].dst == self.args.src:
                self.q.put((time.monotonic(), e))

    # --- per case -----------------------------------------------------
    def new_conn(self, sport=None):
        self.sport = sport or random.randint(20000, 39999)
        self.dport = self.args.port
        self.iss = random.randint(0, 0xFFFFFFFF)
        self.snd_nxt = self.iss
        self.irs = None
        self.rcv_nxt = None
        self.ts_on = False
        self.ts_recent = 0
        self.ts_base = random.randint(1, 0x7FFFFFFF)
        self.win = 64000
        self.ws = 7
        self.received = b""
        self.fin_seen = False
        self.peer_ws = 0
        self.snd_right = self.iss
        self.windows = []
        self.quiet = False
        self.drain()

    def tsval(self):
        return (self.ts_base + int((time.monotonic() - self.t0) * 1000)) & 0xFFFFFFFF

    def drain(self):
        while True:
            try:
                self.q.get_nowait()
            except queue.Empty:
                return

    def log(self, line):
        self.out.append(line)

    def rel_seq(self, s):
        return (s - self.irs) & 0xFFFFFFFF if self.irs is not None else s

    def rel_ack(self, a):
        return (a - self.iss) & 0xFFFFFFFF

    def segment(self, flags, seq, ack, data=b"", opts=(), win=None, urg=0, reserved=0,
                doff=None, bad_csum=False):
        o = encode_options(opts)
        off = doff if doff is not None else (20 + len(o)) // 4
        fl = 0
        for c in flags:
            fl |= FLAG_BITS[c]
        w = self.win >> self.ws if win is None else win
        hdr = struct.pack("!HHIIBBHHH", self.sport, self.dport, seq & 0xFFFFFFFF,
                          ack & 0xFFFFFFFF, (off << 4) | (reserved & 0x0F), fl,
                          min(w, 0xFFFF), 0, urg)
        seg = hdr + o + data
        src = socket.inet_pton(self.family, self.args.src)
        dst = socket.inet_pton(self.family, self.args.dst)
        if self.v6:  # RFC 8200 §8.1
            pseudo = src + dst + struct.pack("!IxxxB", len(seg), 6)
        else:
            pseudo = src + dst + struct.pack("!BBH", 0, 6, len(seg))
        c = checksum(pseudo + seg)
        if bad_csum:
            c ^= 0x5555
        return seg[:16] + struct.pack("!H", c) + seg[18:]

    def emit(self, seg, ip_kw=None, note=""):
        if self.v6:
            ip = IPv6(src=self.args.src, dst=self.args.dst, nh=6, **(ip_kw or {}))
        else:
            ip = IP(src=self.args.src, dst=self.args.dst, proto=6, **(ip_kw or {}))
        frame = Ether(src=self.smac, dst=self.dmac) / ip / Raw(seg)
        self.sock.send(bytes(frame))

    def send(self, flags="A", seq=None, ack=None, data=b"", opts=None, win=None, advance=True,
             note="", ip_kw=None, **kw):
        seq = self.snd_nxt if seq is None else seq
        ack = (self.rcv_nxt if self.rcv_nxt is not None else 0) if ack is None else ack
        if opts is None:
            opts = [("nop",), ("nop",), ts_opt(self.tsval(), self.ts_recent)] if self.ts_on else []
        seg = self.segment(flags, seq, ack, data, opts, win, **kw)
        self.emit(seg, ip_kw)
        desc = "> %s seq=%d ack=%d len=%d%s" % (
            flags, (seq - self.iss) & 0xFFFFFFFF,
            self.rel_seq(ack) if self.irs is not None and "A" in flags else 0, len(data),
            (" " + note) if note else "")
        if not self.quiet:
            self.log("  " + desc)
        if advance:
            end = seq + len(data) + (1 if "S" in flags else 0) + (1 if "F" in flags else 0)
            if ((end - self.snd_nxt) & 0xFFFFFFFF) < 0x80000000:
                self.snd_nxt = end & 0xFFFFFFFF

    def describe(self, t, e):
        t_ = e[TCP]
        opts = []
        for name, val in t_.options:
            if name == "MSS":
                opts.append("mss%d" % val)
            elif name == "WScale":
                opts.append("ws%d" % val)
            elif name == "SAckOK":
                opts.append("sackok")
            elif name == "Timestamp":
                opts.append("ts(ecr=%s)" % ("ours" if val[1] and val[1] <= self.tsval() and
                                               val[1] >= self.ts_base else val[1]))
            elif name == "SAck":
                opts.append("sack%s" % ([(self.rel_ack(val[i]), self.rel_ack(val[i + 1]))
                                         for i in range(0, len(val) - 1, 2)],))
            elif name == "NOP":
                continue
            else:
                opts.append(str(name))
        n = len(bytes(t_.payload)) if t_.payload else 0
        return "< %s seq=%d ack=%d win=%s len=%d%s%s" % (
            flag_str(int(t_.flags)), self.rel_seq(t_.seq),
            self.rel_ack(t_.ack) if int(t_.flags) & 0x10 else 0,
            "0" if t_.window == 0 else "W",
            n, (" " + ",".join(opts)) if opts else "",
            (" urg=%d" % t_.urgptr) if int(t_.flags) & 0x20 else "")

    def wait(self, secs=0.3, auto_ack=True, until=None, timing=False):
        """Collects the server's segments for `secs` (or until `until(seg)`),
        logging each; acknowledges in-order data and FIN as it comes when
        `auto_ack` (`"data"`: not a FIN). Returns [(t, Ether)]."""
        got = []
        start = time.monotonic()
        deadline = start + secs
        while True:
            left = deadline - time.monotonic()
            try:
                t, e = self.q.get(timeout=left) if left > 0 else self.q.get_nowait()
            except queue.Empty:
                break
            tcp = e[TCP]
            if tcp.dport != self.sport:
                continue
            got.append((t, e))
            fl = int(tcp.flags)
            if self.irs is None and fl & 0x02:
                self.irs = tcp.seq
                self.rcv_nxt = (tcp.seq + 1) & 0xFFFFFFFF
            for name, val in tcp.options:
                if name == "Timestamp":
                    self.ts_recent = val[0]
                if name == "WScale" and fl & 0x02:
                    self.peer_ws = min(val, 14)
            if fl & 0x10:
                shift = 0 if fl & 0x02 else self.peer_ws
                right = (tcp.ack + (tcp.window << shift)) & 0xFFFFFFFF
                self.windows.append(tcp.window << shift)
                if ((right - self.snd_right) & 0xFFFFFFFF) < 0x80000000:
                    self.snd_right = right
            n = len(bytes(tcp.payload)) if tcp.payload else 0
            if not self.quiet:
                line = "  " + self.describe(t, e)
                if timing:
                    line += "  @%.2fs" % (t - start)
                self.log(line)
            if self.rcv_nxt is not None and tcp.seq == self.rcv_nxt and not fl & 0x02 \
                    and (self.win or not n):
                if n:
                    self.received += bytes(tcp.payload)[:n]
                self.rcv_nxt = (self.rcv_nxt + n + (1 if fl & 0x01 else 0)) & 0xFFFFFFFF
                if fl & 0x01:
                    self.fin_seen = True
                if auto_ack and (n or fl & 0x01) and not (auto_ack == "data" and fl & 0x01):
                    self.send("A", note="(ack)")
            if until and until(e):
                break
        return got

    def connect(self, opts=None, data=b"", ack_it=True):
        if opts is None:
            opts = [MSS, SACKOK, ts_opt(self.tsval(), 0), ("nop",), WS7]
        self.ts_on = any(isinstance(o, tuple) and o[0] == "ts" for o in opts)
        self.send("S", seq=self.iss, ack=0, data=data, opts=opts, win=64000,
                  note="opts=%s" % ([o[0] if isinstance(o, tuple) else o.hex() for o in opts],))
        self.snd_nxt = (self.iss + 1) & 0xFFFFFFFF
        sent = time.monotonic()
        got = self.wait(1.5, until=lambda e: int(e[TCP].flags) & 0x12 == 0x12)
        if self.irs is None:
            self.log("  (no SYN-ACK in 1.5 s)")
            return False
        late = got[-1][0] - sent
        if late > 0.5:
            self.log("  (the SYN-ACK came %.2f s after the SYN)" % late)
        if ack_it:
            self.send("A")
        return True

    def close_hard(self):
        if self.irs is not None:
            self.send("R", ack=0, opts=[], note="(cleanup)")
            self.out.pop()  # not part of the case's transcript


# ------------------------------------------------------------------------
# Cases: each takes a Peer with a fresh port, logs what it sends and gets.

CASES = []
# The active-open cases (run with --client): flowlane connects to the peer.
ACTIVE = []
# Cases about IPv4 headers, left out over IPv6.
V4_ONLY = set()


def case(f):
    CASES.append(f)
    return f


def active_case(f):
    ACTIVE.append(f)
    return f


def v4_only(f):
    V4_ONLY.add(f.__name__)
    return f


def established(p):
    ok = p.connect()
    p.wait(0.2)
    return ok


def probe_alive(p):
    """Whether the connection still exists: data that an open connection
    acknowledges (and echoes) and a closed one resets."""
    p.log("  -- alive?")
    p.send("PA", data=b"?")
    p.wait(0.4)


@case
def rst_exact(p):
    """RFC 5961 §3.2: RST with seq = RCV.NXT resets."""
    established(p)
    p.send("R", ack=0, opts=[], advance=False)
    p.wait(0.3)
    probe_alive(p)


@case
def rst_in_window(p):
    """RFC 5961 §3.2: RST in the window but not RCV.NXT: challenge ACK."""
    established(p)
    p.send("R", seq=p.snd_nxt + 1000, ack=0, opts=[], advance=False)
    p.wait(0.3)
    probe_alive(p)


@case
def rst_outside_window(p):
    """RFC 9293 §3.10.7.4: RST outside the window: dropped silently."""
    established(p)
    p.send("R", seq=p.snd_nxt + 10_000_000, ack=0, opts=[], advance=False)
    p.wait(0.3)
    p.send("R", seq=p.snd_nxt - 1, ack=0, opts=[], advance=False, note="(RCV.NXT-1)")
    p.wait(0.3)
    probe_alive(p)


@case
def rst_ack_exact(p):
    """RST|ACK with seq = RCV.NXT (what most stacks send)."""
    established(p)
    p.send("RA", advance=False)
    p.wait(0.3)
    probe_alive(p)


@case
def syn_in_established(p):
    """RFC 5961 §4: any SYN in a synchronized state: challenge ACK."""
    established(p)
    p.send("S", seq=p.snd_nxt + 5, ack=0, opts=[MSS], advance=False, note="(in window)")
    p.wait(0.3)
    p.send("S", seq=p.snd_nxt - 100000, ack=0, opts=[MSS], advance=False, note="(out of window)")
    p.wait(0.3)
    probe_alive(p)


@case
def syn_in_established_ts(p):
    """RFC 5961 §4: a SYN in ESTABLISHED carrying a current timestamp (a
    restarted peer's): challenge ACK."""
    established(p)
    p.send("S", seq=p.snd_nxt + 5, ack=0, opts=[MSS, ("nop",), ("nop",), ts_opt(p.tsval(), 0)],
           advance=False, note="(in window, TS)")
    p.wait(0.3)
    probe_alive(p)


@case
def ack_of_unsent(p):
    """RFC 9293 §3.10.7.4 fifth check / RFC 5961 §5: ACK of data never sent:
    an ACK, segment dropped (its data too)."""
    established(p)
    p.send("PA", ack=p.rcv_nxt + 1000, data=b"abc", note="(acks 1000 never sent)")
    p.wait(0.4)
    probe_alive(p)


@case
def ack_too_old(p):
    """RFC 5961 §5.2: ACK older than SND.UNA - MAX.SND.WND: challenge ACK, dropped."""
    established(p)
    p.send("PA", ack=p.rcv_nxt - 0x40000000, data=b"abc", note="(ack 2^30 back)")
    p.wait(0.4)
    probe_alive(p)


@case
def data_edges(p):
    """Data at RCV.NXT-1 (one old byte, rest new: trimmed), at RCV.NXT+RCV.WND
    (just outside: ACK), wholly old (duplicate: ACK)."""
    established(p)
    p.send("PA", data=b"0123456789")
    p.wait(0.3)
    p.send("PA", seq=p.snd_nxt - 1, data=b"9abc", advance=False, note="(seq RCV.NXT-1)")
    p.snd_nxt += 3
    p.wait(0.3)
    p.send("PA", seq=p.snd_nxt + 5_000_000, data=b"far", advance=False, note="(past window)")
    p.wait(0.3)
    p.send("PA", seq=p.snd_nxt - 13, data=b"0123456789", advance=False, note="(all old)")
    p.wait(0.3)
    p.send("A", seq=p.snd_nxt - 1, advance=False, note="(empty, seq RCV.NXT-1)")
    p.wait(0.3)
    p.log("  echoed=%r" % p.received)


@case
def data_no_ack_flag(p):
    """RFC 9293 §3.10.7.4: a segment without ACK in a synchronized state is dropped."""
    established(p)
    p.send("P", data=b"noack")
    p.wait(0.3)
    p.log("  echoed=%r" % p.received)


@case
def out_of_order_then_fill(p):
    established(p)
    p.send("PA", seq=p.snd_nxt + 5, data=b"56789", advance=False, note="(hole of 5)")
    p.wait(0.3)
    p.send("PA", data=b"01234")
    p.snd_nxt += 5
    p.wait(0.3)
    p.log("  echoed=%r" % p.received)


@case
def fin_with_data(p):
    established(p)
    p.send("FPA", data=b"bye")
    p.wait(0.6)
    p.log("  echoed=%r fin=%s" % (p.received, p.fin_seen))


@case
def fin_out_of_order(p):
    """FIN beyond a hole: held until the hole fills."""
    established(p)
    p.send("FPA", seq=p.snd_nxt + 3, data=b"def", advance=False, note="(after hole of 3)")
    p.wait(0.3)
    p.send("PA", data=b"abc")
    p.snd_nxt += 4
    p.wait(0.6)
    p.log("  echoed=%r fin=%s" % (p.received, p.fin_seen))


@case
def data_after_fin(p):
    """Data past our FIN, and a duplicate FIN."""
    established(p)
    p.send("PA", data=b"x" * 5)
    p.wait(0.3)
    p.send("FA")
    p.wait(0.6)
    p.send("FA", seq=p.snd_nxt - 1, advance=False, note="(duplicate FIN)")
    p.wait(0.4)
    p.send("PA", data=b"after", advance=False, note="(data after FIN)")
    p.wait(0.4)


@case
def fin_then_server_closes(p):
    """Half-close: our FIN after data; the server still sends (the echo) and
    then closes."""
    established(p)
    p.send("FPA", data=b"half")
    p.wait(0.8)
    p.log("  echoed=%r fin=%s" % (p.received, p.fin_seen))


@case
def server_fin_unacknowledged(p):
    """Our FIN; the server's FIN then goes unacknowledged for 0.5 s (it is
    sent again) before our ACK."""
    established(p)
    p.send("PA", data=b"sim")
    p.wait(0.3)
    p.send("FA", note="(FIN)")
    p.wait(0.5, auto_ack=False)
    if p.fin_seen:
        p.send("A", note="(late ack of server FIN)")
        p.wait(0.3)


@case
def syn_with_data(p):
    """A SYN carrying data, no TFO: SYN-ACK acknowledges the SYN only (or
    the data); what reaches the application?"""
    p.connect(data=b"early")
    p.wait(0.4)
    p.send("PA", data=b"late")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def syn_mss_zero(p):
    """MSS 0 in the SYN: what size are the echoed segments?"""
    p.connect(opts=[("mss", 0), SACKOK, ts_opt(p.tsval(), 0), ("nop",), WS7])
    p.wait(0.2)
    p.send("PA", data=b"m" * 1200)
    p.wait(0.6)
    p.log("  echoed %d bytes" % len(p.received))


@case
def syn_wscale_15(p):
    """Window scale 15 (RFC 7323 §2.3: use 14, log)."""
    p.connect(opts=[MSS, SACKOK, ts_opt(p.tsval(), 0), ("nop",), ("ws", 15)])
    p.ws = 14
    p.wait(0.2)
    p.send("PA", data=b"w" * 100)
    p.wait(0.4)
    p.log("  echoed %d bytes" % len(p.received))


@case
def syn_sackok_bad_length(p):
    """SACK-permitted with length 3 (RFC 2018: length 2)."""
    p.connect(opts=[MSS, b"\x04\x03\x00", ("nop",), ts_opt(p.tsval(), 0), ("nop",), WS7])
    p.wait(0.2)
    probe_alive(p)


@case
def syn_option_bad_length(p):
    """An option whose length runs past the header (kind 2, length 40)."""
    p.connect(opts=[b"\x02\x28\x05\xb4"])
    p.wait(0.2)


@case
def syn_duplicate_mss(p):
    """Two MSS options, 1460 then 500: which one is used?"""
    p.connect(opts=[MSS, ("mss", 500), SACKOK, ("nop",), ("nop",), WS7])
    p.wait(0.2)
    p.send("PA", data=b"d" * 1200)
    p.wait(0.6)


@case
def syn_ts_zero(p):
    """TSval 0 in the SYN."""
    p.connect(opts=[MSS, SACKOK, ts_opt(0, 0), ("nop",), WS7])
    p.wait(0.2)
    p.send("PA", data=b"z")
    p.wait(0.4)


@case
def syn_ack_retransmission(p):
    """SYN never acknowledged: when does the SYN-ACK come again?"""
    p.connect(ack_it=False)
    p.wait(16.0, auto_ack=False, timing=True)


@case
def third_ack_lost(p):
    """The handshake's ACK lost; data (with ACK) completes it."""
    p.connect(ack_it=False)
    p.send("PA", data=b"data")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def ack_in_syn_received_wrong(p):
    """RFC 9293 §3.10.7.4: in SYN-RECEIVED, an unacceptable ACK draws a RST."""
    p.connect(ack_it=False)
    p.send("A", ack=p.rcv_nxt + 100, advance=False, note="(acks past the SYN)")
    p.wait(0.3)


@case
def paws_old_tsval(p):
    """RFC 7323 §5.3: data with a TSval older than TS.Recent: dropped, ACK."""
    established(p)
    old = (p.tsval() - 1_000_000) & 0xFFFFFFFF
    p.send("PA", data=b"old", opts=[("nop",), ("nop",), ts_opt(old, p.ts_recent)],
           advance=False, note="(TSval 10^6 back)")
    p.wait(0.4)
    p.send("PA", data=b"new")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def paws_rst_old_tsval(p):
    """RFC 7323 §5.3 R1: PAWS does not apply to RST? (it says: RST segments
    with old timestamps: see Linux) RST exact with an old TSval."""
    established(p)
    old = (p.tsval() - 1_000_000) & 0xFFFFFFFF
    p.send("RA", opts=[("nop",), ("nop",), ts_opt(old, p.ts_recent)], advance=False,
           note="(old TSval)")
    p.wait(0.3)
    probe_alive(p)


@case
def ts_wrap(p):
    """TSval passing 2^32: newer by serial arithmetic, accepted."""
    p.ts_base = 0xFFFFFFFF - 200
    p.t0 = time.monotonic()
    established(p)
    time.sleep(0.3)
    p.send("PA", data=b"wrapped", note="(TSval past 2^32)")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def ts_missing_after_negotiated(p):
    """RFC 7323 §3.2: a non-RST segment without TS once negotiated: dropped (MAY accept)."""
    established(p)
    p.send("PA", data=b"nots", opts=[], advance=False, note="(no TS option)")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def ts_bad_tsecr(p):
    """A TSecr the server never sent (in its future)."""
    established(p)
    p.send("PA", data=b"ecr", opts=[("nop",), ("nop",), ts_opt(p.tsval(), p.ts_recent + 10_000_000)],
           note="(TSecr 10^7 ahead)")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def window_scaled_after_syn(p):
    """The third ACK's window is scaled (7): 100 << 7 = 12800 bytes may come;
    unscaled it would be 100."""
    p.connect(ack_it=False)
    p.send("A", win=100)
    for _ in range(4):
        p.send("PA", data=b"s" * 1400, win=100)
    p.wait(0.6)
    p.log("  echoed %d bytes" % len(p.received))


@case
def zero_window_persist(p):
    """We advertise 0 and hold data back: the server's persist probes
    (timing and backoff) over 8 s, then we open the window."""
    established(p)
    p.send("PA", data=b"p" * 100, win=0)
    p.win = 0
    p.wait(8.0, auto_ack=False, timing=True)
    p.win = 64000
    p.send("A", note="(window opens)")
    p.wait(0.5)
    p.log("  echoed %d bytes" % len(p.received))


def room(p):
    r = (p.snd_right - p.snd_nxt) & 0xFFFFFFFF
    return 0 if r >= 0x80000000 else r


@case
def zero_window_receiver(p):
    """The server's window shut by bytes it cannot echo (ours is 0): what
    it says to a probe past its window, and how its window reopens once we
    read (RFC 9293 §3.8.6.2.2: no update smaller than min(MSS, half the
    buffer))."""
    shut_servers_window(p)
    p.send("PA", data=b"z", advance=False, note="(probe past the window)")
    p.wait(0.3)
    p.send("A", seq=p.snd_nxt, advance=False, note="(empty probe)")
    p.wait(0.3)
    # Our window opens: the echo comes, the server reads, its window reopens.
    p.win = 4 << 20
    p.windows = []
    p.quiet = True
    p.send("A", note="(our window opens)")
    p.wait(3.0)
    p.quiet = False
    nz = [w for w in p.windows if w]
    p.log("  its window reopened: first update %s, updates under 1400 bytes: %d" % (
          "none" if not nz else ("< 1400" if nz[0] < 1400 else ">= 1400"),
          sum(1 for w in nz if w < 1400)))
    p.log("  echoed %s" % ("everything" if len(p.received) == p.filled
                           else "%d bytes" % len(p.received)))


def shut_servers_window(p):
    """Fills the server's window with bytes it cannot echo (our window 0);
    returns the bytes sent."""
    established(p)
    p.win = 0
    p.send("A", note="(our window 0)")
    p.wait(0.1)
    sent = 0
    p.quiet = True
    while sent < 32_000_000:
        if room(p) == 0:
            p.wait(0.3)
            if room(p) == 0:
                break
        n = min(1400, room(p))
        p.send("PA", data=b"z" * n)
        sent += n
        p.wait(0)
    p.quiet = False
    small = sum(1 for w in p.windows if 0 < w < 1400)
    p.log("  (the server's window is shut; %d windows under 1400 bytes on the way)" % small)
    p.filled = sent
    return sent


@case
def zero_window_edges(p):
    """RFC 9293 §3.10.7.4: with RCV.WND zero no segment is acceptable, 'but
    special allowance should be made to accept valid ACKs, URGs, and RSTs':
    a 1-byte segment at RCV.NXT whose ACK opens our window (the data is
    dropped, the window update taken: the echo flows), then an RST at
    RCV.NXT."""
    shut_servers_window(p)
    p.win = 4 << 20
    p.quiet = True
    p.send("PA", data=b"z", advance=False)
    p.quiet = False
    p.log("  > PA seq=RCV.NXT len=1 (our window opens in it)")
    p.wait(0.5, timing=True, until=lambda e: len(bytes(e[TCP].payload)) > 0)
    p.log("  echo flowing after the window update: %s" % (len(p.received) > 0))
    p.quiet = True
    p.wait(1.0)
    p.quiet = False


@case
def zero_window_rst(p):
    """An RST at RCV.NXT while the server's window is zero resets."""
    shut_servers_window(p)
    p.send("R", ack=0, opts=[], advance=False, note="(RST at RCV.NXT)")
    p.wait(0.3, auto_ack=False)
    p.win = 4 << 20
    p.send("A", note="(our window opens)")
    p.wait(0.3)


@case
def sws_sender(p):
    """Sender silly window syndrome avoidance (RFC 9293 §3.8.6.2.1): 3,000
    bytes to echo, our window shut, then opened by one unit (128 bytes)
    and after 1.5 s wide."""
    established(p)
    p.win = 0
    p.send("PA", data=b"w" * 1400, win=0)
    p.send("PA", data=b"w" * 1400, win=0)
    p.send("PA", data=b"w" * 200, win=0)
    p.wait(0.1, auto_ack=False)
    p.win = 128
    p.send("A", note="(window 128 bytes)")
    p.wait(1.5, timing=True)
    p.win = 64000
    p.send("A", note="(window opens)")
    p.wait(0.5)
    p.log("  echoed %d bytes" % len(p.received))


@case
def listener_odd_flags(p):
    """To a listener (RFC 9293 §3.10.7.2): an ACK draws RST <SEQ=SEG.ACK>;
    an RST is ignored; SYN|FIN, SYN|RST and a segment with no flags or
    FIN|PSH|URG (no ACK) are dropped; a SYN-ACK draws an RST."""
    p.irs = 0
    p.send("A", seq=p.iss, ack=12345, opts=[], note="(ACK, no connection)")
    p.wait(0.3, auto_ack=False)
    p.send("R", seq=p.iss, ack=0, opts=[], note="(RST)")
    p.wait(0.3, auto_ack=False)
    p.send("SF", seq=p.iss, ack=0, opts=[MSS], note="(SYN|FIN)")
    p.wait(0.3, auto_ack=False)
    p.sport += 1
    p.send("SR", seq=p.iss, ack=0, opts=[MSS], note="(SYN|RST)")
    p.wait(0.3, auto_ack=False)
    p.sport += 1
    p.send("", seq=p.iss, ack=0, opts=[], note="(no flags)")
    p.wait(0.3, auto_ack=False)
    p.send("FPU", seq=p.iss, ack=0, opts=[], note="(FIN|PSH|URG)")
    p.wait(0.3, auto_ack=False)
    p.sport += 1
    p.send("SA", seq=p.iss, ack=777, opts=[MSS], note="(SYN-ACK)")
    p.wait(0.3, auto_ack=False)


@case
def closed_port(p):
    """To a port nothing listens on: a SYN draws RST|ACK <SEQ=0><ACK=SEG.SEQ+1>;
    data with ACK draws RST <SEQ=SEG.ACK>; an RST nothing."""
    p.dport = p.args.port + 2
    p.irs = 0
    p.send("S", seq=p.iss, ack=0, opts=[MSS], advance=False)
    p.wait(0.3, auto_ack=False)
    p.send("PA", seq=p.iss, ack=999, data=b"x", opts=[], advance=False)
    p.wait(0.3, auto_ack=False)
    p.send("R", seq=p.iss, ack=0, opts=[], advance=False)
    p.wait(0.3, auto_ack=False)


@case
def last_ack_segments(p):
    """In LAST-ACK (our FIN, the server's FIN unacknowledged): new data
    past our FIN, our FIN again, an RST in the window, then the ACK."""
    established(p)
    p.send("FA")
    p.wait(0.3, auto_ack=False)
    p.send("PA", data=b"late", advance=False, note="(data past our FIN)")
    p.wait(0.3, auto_ack=False)
    p.send("FA", seq=p.snd_nxt - 1, advance=False, note="(our FIN again)")
    p.wait(0.3, auto_ack=False)
    p.send("R", seq=p.snd_nxt + 100, ack=0, opts=[], advance=False, note="(RST in window)")
    p.wait(0.3, auto_ack=False)
    p.send("A", note="(ACK of its FIN)")
    p.wait(0.3, auto_ack=False)
    probe_alive(p)


@case
def close_wait_data_from_server(p):
    """Half-close: our FIN first, then the server's echo of bytes sent
    before it still arrives and is acknowledged by us (CLOSE-WAIT there)."""
    established(p)
    for _ in range(2):
        p.send("PA", data=b"q" * 1400)
    p.send("FA")
    p.wait(0.8)
    p.log("  echoed %d bytes, fin=%s" % (len(p.received), p.fin_seen))


@case
def urgent_data(p):
    """URG with the pointer at the byte after 'U' (RFC 6093: urgent data is
    in the stream; Linux takes the byte out unless SO_OOBINLINE)."""
    established(p)
    p.send("UPA", data=b"abUcd", urg=3)
    p.wait(0.5)
    p.log("  echoed=%r" % p.received)


@case
@v4_only
def ip_options(p):
    """An IPv4 header with options (a NOP and end of list) carrying data."""
    established(p)
    p.send("PA", data=b"ipopt", ip_kw={"options": b"\x01\x01\x01\x00"})
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
@v4_only
def ip_fragments(p):
    """Data carried in two IPv4 fragments."""
    established(p)
    data = b"f" * 64
    seg = p.segment("PA", p.snd_nxt, p.rcv_nxt, data,
                    [("nop",), ("nop",), ts_opt(p.tsval(), p.ts_recent)])
    p.log("  > PA seq=%d len=%d (in 2 IP fragments)" % ((p.snd_nxt - p.iss) & 0xFFFFFFFF, len(data)))
    p.snd_nxt += len(data)
    ident = random.randint(1, 65535)
    f1 = IP(src=p.args.src, dst=p.args.dst, proto=6, id=ident, flags="MF", frag=0) / Raw(seg[:40])
    f2 = IP(src=p.args.src, dst=p.args.dst, proto=6, id=ident, frag=5) / Raw(seg[40:])
    for f in (f1, f2):
        p.sock.send(bytes(Ether(src=p.smac, dst=p.dmac) / f))
    p.wait(0.5)
    p.log("  echoed %d bytes" % len(p.received))


@case
def bad_checksum(p):
    established(p)
    p.send("PA", data=b"csum", bad_csum=True, advance=False, note="(bad checksum)")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def bad_data_offset(p):
    """Data offset 4 (< 5) and data offset past the segment."""
    established(p)
    p.send("PA", data=b"off4", doff=4, advance=False, note="(doff 4)")
    p.wait(0.3)
    p.send("PA", data=b"", doff=15, advance=False, opts=[], note="(doff 15, 20 bytes)")
    p.wait(0.3)
    p.log("  echoed=%r" % p.received)


@case
def reserved_bits(p):
    """Reserved bits set (RFC 9293 §3.1: must be zero when sent, ignored
    when received... 'Must be zero' — receivers ignore them)."""
    established(p)
    p.send("PA", data=b"rsv", reserved=0x0E, note="(reserved bits 0b111)")
    p.wait(0.4)
    p.log("  echoed=%r" % p.received)


@case
def syn_reserved_bits(p):
    """A SYN with reserved bits set."""
    p.ts_on = True
    opts = [MSS, SACKOK, ts_opt(p.tsval(), 0), ("nop",), WS7]
    seg = p.segment("S", p.iss, 0, b"", opts, 64000, reserved=0x0E)
    p.emit(seg)
    p.log("  > S seq=0 (reserved bits set)")
    p.snd_nxt = p.iss + 1
    p.wait(0.6, auto_ack=False)


@case
def rst_in_syn_received(p):
    """RFC 9293 §3.10.7.4 / 5961: RST in SYN-RECEIVED with seq = RCV.NXT
    ends it; in window: challenge ACK."""
    p.connect(ack_it=False)
    p.send("R", seq=p.snd_nxt + 10, ack=0, opts=[], advance=False, note="(in window)")
    p.wait(0.3, auto_ack=False)
    p.send("R", ack=0, opts=[], advance=False, note="(exact)")
    p.wait(0.3, auto_ack=False)
    p.send("A", note="(third ACK after the reset)")
    p.wait(0.3)


# ------------------------------------------------------------------------
# Active opens (--client): the peer is the responder, the client the
# connecting side. `p.client` is the client's process, started per case.

def their_syn(p, secs=10.0):
    """Waits for the client's SYN to the peer's port; logs it."""
    got = p.wait(secs, auto_ack=False, until=lambda e: int(e[TCP].flags) & 0x02)
    syn = [e for _, e in got if int(e[TCP].flags) & 0x02]
    if not syn:
        p.log("  (no SYN in %.0f s)" % secs)
        return None
    p.dport = syn[-1][TCP].sport
    return syn[-1]


def syn_ack(p, opts=None, ack=None, data=b"", flags="SA"):
    """Our SYN-ACK (or SYN) to their SYN, with timestamps when theirs had one."""
    if opts is None:
        opts = [MSS, SACKOK, ts_opt(p.tsval(), p.ts_recent), ("nop",), WS7]
    p.ts_on = any(isinstance(o, tuple) and o[0] == "ts" for o in opts) and p.ts_recent != 0
    p.send(flags, seq=p.iss, ack=p.rcv_nxt if ack is None else ack, data=data, opts=opts,
           win=64000, note="opts=%s" % ([o[0] if isinstance(o, tuple) else o.hex() for o in opts],))
    p.snd_nxt = (p.iss + 1 + len(data)) & 0xFFFFFFFF


def transfer(p, secs=6.0):
    """Takes the client's bytes (ACKing them) until its FIN, then sends
    ours; logs the sizes of its data segments, not each one."""
    p.quiet = True
    got = p.wait(secs, until=lambda e: int(e[TCP].flags) & 0x01)
    p.quiet = False
    sizes = [len(bytes(e[TCP].payload)) for _, e in got if e[TCP].payload]
    p.log("  < data segments: %s%s" % (sizes, ", FIN" if p.fin_seen else ", no FIN"))
    if p.fin_seen:
        p.send("FA")
        p.wait(0.5, auto_ack=False)


def client_result(p, secs=15.0):
    """How the client's transfer ended: its JSON line's ok and reason."""
    try:
        out, _ = p.client.communicate(timeout=secs)
    except subprocess.TimeoutExpired:
        p.client.kill()
        out, _ = p.client.communicate()
        p.log("  client: still running after %.0f s (killed)" % secs)
        return
    if p.client_log:  # the client's own lines (its summary's counters) beside the transcript
        with open(p.client_log, "wb") as f:
            f.write(out)
    for line in out.decode(errors="replace").splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if "ok" in v:
            why = {k: v[k] for k in v if k in ("close", "error") or "reason" in k}
            p.log("  client: ok=%s %s" % (v["ok"], why or ""))
            return
    last = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
    p.log("  client: exit %d, no transfer line: %s" % (p.client.returncode, last[0][:160]))


@active_case
def active_synack_odd_options(p):
    """SYN-ACK with MSS 536, an unknown option (kind 30), window scale 15
    and no timestamps (RFC 9293 §3.1 MUST-6: unknown options ignored; RFC
    7323 §2.3: shift 14; §3.2: no TS in the SYN-ACK: none sent after)."""
    if their_syn(p) is None:
        return
    syn_ack(p, opts=[("mss", 536), b"\x1e\x06abcd", ("ws", 15), SACKOK])
    p.ts_on = False
    transfer(p)
    client_result(p)


@active_case
def active_synack_mss_zero(p):
    """SYN-ACK with MSS 0 (RFC 9293 §3.7.1: no usable MSS: 536)."""
    if their_syn(p) is None:
        return
    syn_ack(p, opts=[("mss", 0), SACKOK, ts_opt(p.tsval(), p.ts_recent), ("nop",), WS7])
    transfer(p)
    client_result(p)


@active_case
def active_synack_wrong_ack(p):
    """RFC 9293 §3.10.7.3: in SYN-SENT a SYN-ACK whose ACK is not ISS+1:
    RST <SEQ=SEG.ACK>, the connection stays in SYN-SENT (SYN again)."""
    if their_syn(p) is None:
        return
    syn_ack(p, ack=p.rcv_nxt + 1000)
    p.wait(1.5, auto_ack=False, timing=True)
    if p.client.poll() is None:
        p.log("  client: still connecting")
    else:
        client_result(p, secs=0.1)


@active_case
def active_rst_in_syn_sent(p):
    """RFC 9293 §3.10.7.3: in SYN-SENT a RST without ACK, or whose ACK is
    not ISS+1, is dropped; a RST|ACK acking the SYN resets."""
    syn = their_syn(p)
    if syn is None:
        return
    p.send("R", seq=p.iss, ack=0, opts=[], advance=False, note="(no ACK)")
    p.wait(0.3, auto_ack=False)
    p.send("RA", seq=p.iss, ack=p.rcv_nxt + 5, opts=[], advance=False, note="(ack ISS+6)")
    p.wait(0.3, auto_ack=False)
    p.send("RA", seq=p.iss, ack=p.rcv_nxt, opts=[], advance=False, note="(ack ISS+1)")
    p.wait(1.5, auto_ack=False, timing=True)
    client_result(p, secs=5)


@active_case
def active_simultaneous_open(p):
    """RFC 9293 §3.10.7.3 (and figure 8): a bare SYN in SYN-SENT: SYN-ACK
    <SEQ=ISS><ACK=RCV.NXT>, SYN-RECEIVED; our ACK then opens it."""
    if their_syn(p) is None:
        return
    syn_ack(p, flags="S", ack=0)
    p.wait(0.5, auto_ack=False)
    p.send("A", note="(acks their SYN)")
    transfer(p)
    client_result(p)


@active_case
def active_synack_lost(p):
    """No SYN-ACK: when does the SYN come again (RFC 6298 §2: 1 s, doubled)?"""
    if their_syn(p) is None:
        return
    p.wait(8.0, auto_ack=False, timing=True)
    p.log("  (answered after 8 s)")
    syn_ack(p)
    transfer(p)
    client_result(p)


@active_case
def active_synack_with_data(p):
    """A SYN-ACK carrying 5 bytes (RFC 9293 §3.10.7.3: queued, ACK
    <ACK=RCV.NXT> covers them)."""
    if their_syn(p) is None:
        return
    syn_ack(p, data=b"hello")
    got = p.wait(0.5, until=lambda e: e[TCP].payload or int(e[TCP].flags) == 0x10)
    if got and ((got[-1][1][TCP].ack - p.iss - 1) & 0xFFFFFFFF) < 5:
        # Not taken (what the RFC allows no more than a lost segment):
        # sent again, as a peer would on its retransmission timeout.
        p.send("PA", seq=p.iss + 1, data=b"hello", advance=False, note="(the 5 bytes again)")
    transfer(p)
    client_result(p)


@active_case
def active_simultaneous_close(p):
    """RFC 9293 §3.6, figure 13: both FINs cross: the client's FIN, then
    ours acking its data but not its FIN: CLOSING, an ACK of our FIN,
    TIME-WAIT on our ACK of theirs."""
    if their_syn(p) is None:
        return
    syn_ack(p)
    p.quiet = True
    got = p.wait(6.0, auto_ack="data", until=lambda e: int(e[TCP].flags) & 0x01)
    p.quiet = False
    sizes = [len(bytes(e[TCP].payload)) for _, e in got if e[TCP].payload]
    p.log("  < data segments: %s%s" % (sizes, ", FIN" if p.fin_seen else ", no FIN"))
    if not p.fin_seen:
        return
    p.send("FA", ack=p.rcv_nxt - 1, note="(our FIN, crossing theirs)")
    p.wait(0.5, auto_ack=False)
    p.send("A", note="(acks their FIN)")
    p.wait(0.5, auto_ack=False)
    client_result(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iface", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--dmac", required=True)
    ap.add_argument("--port", type=int, default=7)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--client", help="the active-open cases: the client's command line, "
                    "with {addr} and {port} for the peer's address and port")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    random.seed(args.seed)
    want = set(args.cases)
    unknown = want - {c.__name__ for c in CASES + ACTIVE}
    if unknown:
        sys.exit("conformance: no case %s; cases: %s" % (
            ", ".join(sorted(unknown)), " ".join(c.__name__ for c in CASES + ACTIVE)))
    out = []
    p = Peer(args, out)
    p.client = None
    p.client_log = None
    for c in ACTIVE if args.client else CASES:
        if want and c.__name__ not in want or p.v6 and c.__name__ in V4_ONLY:
            continue
        out.append("== %s: %s" % (c.__name__, (c.__doc__ or c.__name__).strip().splitlines()[0]))
        p.new_conn()
        if args.client:
            addr = "[%s]" % args.src if p.v6 else args.src
            cmd = args.client.format(addr=addr, port=p.sport)
            p.client_log = "%s.%s.client" % (args.out, c.__name__)
            p.client = subprocess.Popen(shlex.split(cmd), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
        try:
            c(p)
        except Exception as e:  # a case that breaks says so and the run goes on
            out.append("  !! %r" % e)
        p.close_hard()
        if p.client is not None and p.client.poll() is None:
            p.client.kill()
            p.client.wait()
        time.sleep(0.1)
        p.drain()
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    p.stop = True


if __name__ == "__main__":
    main()
