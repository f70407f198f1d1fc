//! IPv6 Hop-by-Hop and Destination Options headers there only to be
//! walked (RFC 8504 §5.3), in front of a SYN from the peer namespace, on
//! flowlane's echo server and on a kernel listener in the bed's namespace,
//! side by side: each stack answers the same SYNs. Linux's `ip6_parse_tlv`
//! drops a header with more than 7 bytes of padding in a row, a PadN of
//! non-zero bytes or more than 8 other options; flowlane walked every
//! option of such a header (a 1,368-byte one of Pad1s: over a thousand
//! steps) and answered the SYN. Now it drops them too, counted as
//! `malformed`.

mod tcp_common;

use std::process::{Command, Stdio};

use flowlane_tests::{in_ns, kill_and_reap, require_root, Bed};
use serde_json::Value;
use tcp_common::*;

/// The SYNs, in the peer namespace: `argv[1]` flowlane's MAC, `argv[2]`
/// and `argv[3]` the two ports. Each case's SYN goes from fd99::2 (the
/// peer's kernel resets the SYN-ACKs, which is no matter here) behind its
/// extension header; prints, per case and port, whether a SYN-ACK came.
const SYNS: &str = r#"
import json, random, select, socket, struct, sys, time
dst_mac = bytes(int(x, 16) for x in sys.argv[1].split(':'))
ports = [int(p) for p in sys.argv[2:4]]
src_mac = bytes(int(x, 16) for x in open('/sys/class/net/peer0/address').read().strip().split(':'))
SRC, DST = 'fd99::2', 'fd99::1'
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86dd))
s.bind(('peer0', 0))
s.setblocking(False)
def a6(x): return socket.inet_pton(socket.AF_INET6, x)
def frame(sp, dp, ext, first):
    tcp = struct.pack('!HHIIBBHHH', sp, dp, 1000, 0, 6 << 4, 2, 65535, 0, 0) + b'\x02\x04\x05\xa0'
    pseudo = a6(SRC) + a6(DST) + struct.pack('!IxxxB', len(tcp), 6)
    tcp = tcp[:16] + struct.pack('!H', csum(pseudo + tcp)) + tcp[18:]
    pl = ext + tcp
    ip = struct.pack('!IHBB', 6 << 28, len(pl), first, 64) + a6(SRC) + a6(DST)
    return dst_mac + src_mac + b'\x86\xdd' + ip + pl
def header(nxt, units, data):
    h = bytes([nxt, units]) + data
    return h + b'\0' * (8 * (units + 1) - len(h))
HBH, DST_OPTS, TCP = 0, 60, 6
cases = {
    'plain': (b'', TCP),
    'hbh_6_pad1': (header(TCP, 0, b''), HBH),
    'hbh_14_pad1': (header(TCP, 1, b''), HBH),
    'hbh_1368_pad1': (header(TCP, 170, b''), HBH),
    'dst_padn_nonzero': (header(TCP, 0, b'\x01\x04\x00\x00\x07\x00'), DST_OPTS),
    'dst_8_options': (header(TCP, 2, b'\x1e\x00' * 8), DST_OPTS),
    'dst_9_options': (header(TCP, 2, b'\x1e\x00' * 9), DST_OPTS),
}
def syn_acked(sp, t=0.6):
    end = time.time() + t
    while time.time() < end:
        if not select.select([s], [], [], max(0, end - time.time()))[0]: continue
        while True:
            try: f = s.recv(65535)
            except BlockingIOError: break
            if (len(f) >= 74 and f[12:14] == b'\x86\xdd' and f[20] == 6
                    and struct.unpack('!H', f[56:58])[0] == sp and f[67] & 0x12 == 0x12):
                return True
    return False
out = {}
for name, (ext, first) in cases.items():
    for port in ports:
        sp = random.randint(20000, 60000)
        s.send(frame(sp, port, ext, first))
        out.setdefault(name, {})[str(port)] = syn_acked(sp)
print(json.dumps(out))
"#;

/// A kernel listener on `[::]:port` in the bed's namespace; prints `ready`.
const KERNEL_LISTENER: &str = r#"
import socket, sys, time
l = socket.socket(socket.AF_INET6)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('::', int(sys.argv[1])))
l.listen(128)
print('ready', flush=True)
time.sleep(3600)
"#;

#[test]
fn extension_headers_there_only_to_be_walked_are_dropped_as_linux_drops_them() {
    if !require_root("extension_headers_there_only_to_be_walked_are_dropped_as_linux_drops_them") {
        return;
    }
    let bed = Bed::up("v6opt", 1);
    let app = start(&bed, &["echo-server", "--port", "7"], 120);
    let mut kernel = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "timeout", "120"])
        .args(["python3", "-c", KERNEL_LISTENER, "8009"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ready(&mut kernel);
    let mac = in_ns(&bed.ns, &["cat", "/sys/class/net/xsk0/address"]);
    let mac = String::from_utf8_lossy(&mac.stdout).trim().to_string();
    let out = peer_py(&bed, 60, &with_csum(SYNS), &[&mac, "7", "8009"]);
    kill_and_reap(&mut kernel);
    let r: Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("SYN output {out:?}: {e}"));
    eprintln!("{r}");
    for (case, answered) in [
        ("plain", true),
        ("hbh_6_pad1", true),
        ("hbh_14_pad1", false),
        ("hbh_1368_pad1", false),
        ("dst_padn_nonzero", false),
        ("dst_8_options", true),
        ("dst_9_options", false),
    ] {
        assert_eq!(r[case]["8009"], answered, "linux, {case}: {r}");
        assert_eq!(r[case]["7"], answered, "flowlane, {case}: {r}");
    }
    let t = totals(&app.stop());
    eprintln!("counters: {t}");
    assert!(t["malformed"].as_u64().unwrap_or(0) >= 4, "{t}");
}
