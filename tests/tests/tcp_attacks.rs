//! RFC 5961 attacks from the peer namespace against a live connection, on
//! flowlane's echo server and on a kernel echo server in the bed's
//! namespace, side by side: the attacker sees the connection's segments on
//! the wire (the worst case for RFC 5961, which only has to stop a blind
//! attacker) and forges, from the client's own address and port, an RST
//! inside the window, an RST outside it, a SYN, data with an acknowledgment
//! far in the past, and last an RST exactly at RCV.NXT. Each stack must
//! answer the first three and the fourth with one challenge ACK (none for
//! the out-of-window RST), keep the connection (echoing nothing injected),
//! and be reset only by the exact RST.

mod tcp_common;

use std::time::Duration;

use flowlane_tests::{kill_and_reap, require_root, Bed};
use serde_json::Value;
use tcp_common::*;

/// The attacker and the connection's client, in the peer namespace:
/// `argv[1]` host, `argv[2]` port. Sniffs `peer0` (AF_PACKET) for the
/// connection's sequence numbers and timestamps; forges through a raw
/// socket whose IP TTL (33) tells its own segments apart in the capture.
/// Prints one JSON object: per attack, the challenge ACKs seen and whether
/// the connection still echoes. Run [`with_csum`].
const ATTACK: &str = r#"
import json, select, socket, struct, sys, time
host, port = sys.argv[1], int(sys.argv[2])
SRC, TTL = '10.99.0.2', 33
sn = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sn.bind(('peer0', 0))
sn.setblocking(False)
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
raw.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, TTL)
c = socket.create_connection((host, port), timeout=5)
lport = c.getsockname()[1]
st = {'rcv_nxt': None, 'snd_nxt': None, 'ts': None}
def parse(f):
    if len(f) < 54 or f[12:14] != b'\x08\x00' or f[23] != 6: return None
    ihl = (f[14] & 15) * 4
    ip_len, ttl = struct.unpack('!H', f[16:18])[0], f[22]
    t = 14 + ihl
    sp, dp, seq, ack, off, fl = struct.unpack('!HHIIBB', f[t:t + 14])
    thl = (off >> 4) * 4
    opts, ts, i = f[t + 20:t + thl], None, 0
    while i < len(opts):
        k = opts[i]
        if k == 0: break
        if k == 1: i += 1; continue
        if i + 1 >= len(opts) or opts[i + 1] < 2: break
        if k == 8 and opts[i + 1] == 10: ts = struct.unpack('!II', opts[i + 2:i + 10])
        i += opts[i + 1]
    plen = ip_len - ihl - thl
    end = (seq + plen + (fl & 1) + ((fl >> 1) & 1)) & 0xffffffff
    return dict(sp=sp, dp=dp, seq=seq, ack=ack, fl=fl, plen=plen, ts=ts, end=end, ttl=ttl)
def pump(d):
    seen, stop = [], time.time() + d
    while True:
        left = stop - time.time()
        if left <= 0: return seen
        if not select.select([sn], [], [], left)[0]: continue
        while True:
            try: f = sn.recv(65535)
            except BlockingIOError: break
            p = parse(f)
            if not p: continue
            if p['sp'] == lport and p['dp'] == port and p['ttl'] != TTL:
                st['rcv_nxt'] = p['end']
                if p['ts']: st['ts'] = p['ts']
            elif p['sp'] == port and p['dp'] == lport:
                st['snd_nxt'] = p['end']
                seen.append(p)
def forge(seq, ack, fl, payload=b''):
    opts = b''
    if st['ts']:
        opts = b'\x01\x01\x08\x0a' + struct.pack('!II', (st['ts'][0] + 1) & 0xffffffff, st['ts'][1])
    hdr = struct.pack('!HHIIBBHHH', lport, port, seq & 0xffffffff, ack & 0xffffffff,
                      (20 + len(opts)) // 4 << 4, fl, 502, 0, 0) + opts
    seg = hdr + payload
    pseudo = socket.inet_aton(SRC) + socket.inet_aton(host) + struct.pack('!BBH', 0, 6, len(seg))
    seg = seg[:16] + struct.pack('!H', csum(pseudo + seg)) + seg[18:]
    raw.sendto(seg, (host, 0))
def echo(msg):
    try:
        c.sendall(msg)
        got = b''
        while len(got) < len(msg):
            d = c.recv(4096)
            if not d: break
            got += d
        return got.decode(errors='replace')
    except OSError as e:
        return type(e).__name__
out = {}
assert echo(b'hello') == 'hello'
def attack(name, seq, ack, fl, payload=b''):
    pump(0.7)  # quiet, and past both stacks' 500 ms answer interval
    nxt = st['rcv_nxt']
    forge(seq(nxt), ack(st['snd_nxt']), fl, payload)
    seen = pump(0.4)
    out[name] = {
        'challenge_acks': sum(1 for p in seen if p['fl'] == 0x10 and p['plen'] == 0 and p['ack'] == nxt),
        'data_sent': sum(p['plen'] for p in seen),
        'echo': echo(name.encode()),
    }
RST, SYN, PA = 0x04, 0x02, 0x18
attack('rst_in_window', lambda n: n + 1000, lambda s: 0, RST)
attack('rst_out_of_window', lambda n: n + (1 << 30), lambda s: 0, RST)
attack('syn', lambda n: n + 123457, lambda s: 0, SYN)
attack('old_ack_data', lambda n: n, lambda s: s - (1 << 30), PA, b'INJECTED')
pump(0.7)
forge(st['rcv_nxt'], 0, RST)
pump(0.3)
out['exact_rst'] = {'echo': echo(b'after')}
print(json.dumps(out))
"#;

/// Checks one stack's answers to the attacks.
fn check(who: &str, r: &Value) {
    let acks = |a: &str| r[a]["challenge_acks"].as_u64().unwrap_or(99);
    let echo = |a: &str| r[a]["echo"].as_str().unwrap_or("?").to_string();
    assert_eq!(acks("rst_in_window"), 1, "{who}: {r}");
    assert_eq!(acks("rst_out_of_window"), 0, "{who}: {r}");
    assert_eq!(acks("syn"), 1, "{who}: {r}");
    assert_eq!(acks("old_ack_data"), 1, "{who}: {r}");
    for a in ["rst_in_window", "rst_out_of_window", "syn", "old_ack_data"] {
        assert_eq!(echo(a), a, "{who}: the connection survives {a}: {r}");
    }
    assert_eq!(
        r["old_ack_data"]["data_sent"].as_u64(),
        Some(0),
        "{who}: nothing injected is echoed: {r}"
    );
    assert_eq!(
        echo("exact_rst"),
        "ConnectionResetError",
        "{who}: an RST at RCV.NXT resets: {r}"
    );
}

#[test]
fn rfc5961_attacks_fail_against_flowlane_as_against_linux() {
    if !require_root("rfc5961_attacks_fail_against_flowlane_as_against_linux") {
        return;
    }
    let bed = Bed::up("tat", 1);
    let app = start(&bed, &["echo-server", "--port", "7"], 120);
    let mut kernel = kernel_echo_server(&bed, 8007, 120);

    let parse = |s: String| -> Value {
        serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("attack output {s:?}: {e}"))
    };
    let on_flowlane = parse(peer_py(&bed, 60, &with_csum(ATTACK), &["10.99.0.1", "7"]));
    let on_linux = parse(peer_py(
        &bed,
        60,
        &with_csum(ATTACK),
        &["10.99.0.1", "8007"],
    ));
    eprintln!("flowlane: {on_flowlane}\nlinux:    {on_linux}");
    kill_and_reap(&mut kernel);
    check("linux", &on_linux);
    check("flowlane", &on_flowlane);

    std::thread::sleep(Duration::from_millis(200));
    let t = totals(&app.stop());
    eprintln!("counters: {t}");
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    assert_eq!(n("rst_challenged"), 1, "{t}");
    assert_eq!(n("rst_out_of_window"), 1, "{t}");
    assert_eq!(n("syn_challenged"), 1, "{t}");
    assert_eq!(n("ack_unacceptable"), 1, "{t}");
    assert_eq!(n("challenge_acks"), 3, "{t}");
    assert_eq!(n("resets_in"), 1, "{t}");
}
