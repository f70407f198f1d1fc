//! A spoofed SYN flood from the peer namespace (raw IPv4 with forged
//! on-link sources) at 10,000 SYNs per second for 3 s, while a kernel
//! client connects every half second: against flowlane's echo server and
//! against a kernel echo server in the bed's namespace, same bed, same run.
//! Both must let every legitimate connection through (flowlane with SYN
//! cookies once its half-open table is full, Linux with its own); the
//! figures are printed for BENCHMARKS.md.

mod tcp_common;

use std::time::Duration;

use flowlane_tests::{kill_and_reap, require_root, Bed};
use serde_json::Value;
use tcp_common::*;

/// `argv[1]` host, `argv[2]` port, `argv[3]` SYNs per second, `argv[4]`
/// seconds. Floods from forged sources 10.99.0.100-250 (on-link, so that
/// reverse-path filtering passes them), or with `argv[5]` = `many` from
/// 10.200.0.0/16, each SYN from a new address; random ports. Meanwhile a
/// client connects at 0.5, 1.0 … 2.5 s (from `argv[6]`, an address the
/// script adds to peer0, if given), echoes a byte and closes. Prints
/// JSON: SYNs sent, each connect's time in ms (null: failed). Run
/// [`with_csum`].
const FLOOD: &str = r#"
import json, random, socket, struct, subprocess, sys, threading, time
host, port, rate, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
many = len(sys.argv) > 5 and sys.argv[5] == 'many'
cli = sys.argv[6] if len(sys.argv) > 6 else None
if cli:
    subprocess.run(['ip', 'addr', 'add', cli + '/24', 'dev', 'peer0', 'nodad'], check=True)
dst = socket.inet_aton(host)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
r = random.Random(11)
n_syn = [0]
def syn():
    n_syn[0] += 1
    i = n_syn[0] % 65536
    src = socket.inet_aton('10.200.%d.%d' % (i >> 8, i & 255) if many else '10.99.0.%d' % r.randrange(100, 251))
    opts = b'\x02\x04\x05\xb4\x01\x03\x03\x07\x04\x02\x08\x0a' + struct.pack('!II', r.randrange(1 << 32), 0) + b'\x00\x00'
    tcp = struct.pack('!HHIIBBHHH', r.randrange(1024, 65536), port, r.randrange(1 << 32), 0,
                      (20 + len(opts)) // 4 << 4, 0x02, 64240, 0, 0) + opts
    tcp = tcp[:16] + struct.pack('!H', csum(src + dst + struct.pack('!BBH', 0, 6, len(tcp)) + tcp)) + tcp[18:]
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(tcp), r.randrange(65536), 0, 64, 6, 0, src, dst)
    return ip + tcp
times = []
def client():
    for i in range(5):
        time.sleep(0.5)
        t0 = time.time()
        try:
            c = socket.create_connection((host, port), timeout=5, source_address=(cli, 0) if cli else None)
            c.sendall(b'x')
            ok = c.recv(1) == b'x'
            c.close()
            times.append(round((time.time() - t0) * 1000, 2) if ok else None)
        except OSError:
            times.append(None)
t = threading.Thread(target=client)
t.start()
sent, start = 0, time.time()
while time.time() - start < secs:
    due = int((time.time() - start) * rate)
    while sent < due:
        s.sendto(syn(), (host, 0))
        sent += 1
    time.sleep(0.001)
t.join()
print(json.dumps({'syns': sent, 'seconds': round(time.time() - start, 2), 'connect_ms': times}))
"#;

fn all_connected(who: &str, r: &Value) {
    let times = r["connect_ms"].as_array().expect("connect_ms");
    assert_eq!(times.len(), 5, "{who}: {r}");
    assert!(
        times.iter().all(|t| t.as_f64().is_some()),
        "{who}: every legitimate connection gets through: {r}"
    );
}

#[test]
fn legitimate_clients_connect_during_a_spoofed_syn_flood() {
    if !require_root("legitimate_clients_connect_during_a_spoofed_syn_flood") {
        return;
    }
    let bed = Bed::up("tsf", 1);
    let app = start(&bed, &["echo-server", "--port", "7"], 120);
    let mut kernel = kernel_echo_server(&bed, 8007, 120);
    let parse = |s: String| -> Value {
        serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("flood output {s:?}: {e}"))
    };
    let on_flowlane = parse(peer_py(
        &bed,
        60,
        &with_csum(FLOOD),
        &["10.99.0.1", "7", "10000", "3"],
    ));
    let on_linux = parse(peer_py(
        &bed,
        60,
        &with_csum(FLOOD),
        &["10.99.0.1", "8007", "10000", "3"],
    ));
    eprintln!("flowlane: {on_flowlane}\nlinux:    {on_linux}");
    kill_and_reap(&mut kernel);
    std::thread::sleep(Duration::from_millis(200));
    let t = totals(&app.stop());
    eprintln!("counters: {t}");
    all_connected("flowlane", &on_flowlane);
    all_connected("linux", &on_linux);
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    assert!(n("syn_cookies_sent") > 0, "the flood filled the table: {t}");
    assert!(
        n("syn_cookies_accepted") >= 1,
        "a client came in by cookie: {t}"
    );
    assert_eq!(n("syn_dropped"), 0, "{t}");
    // State only for the half-open table (1024) and the real clients.
    assert!(n("passive_opens") <= 1024 + 5, "{t}");
}

/// Every spoofed SYN from an address never seen before (issue 11): the
/// neighbour table must not fill with them (before, it learned each one
/// and, full at 4 096, could learn no new peer), and a client from a new
/// address still connects.
#[test]
fn a_flood_from_many_addresses_leaves_the_neighbour_table_bounded() {
    if !require_root("a_flood_from_many_addresses_leaves_the_neighbour_table_bounded") {
        return;
    }
    let bed = Bed::up("tsn", 1);
    let app = start(&bed, &["echo-server", "--port", "7"], 120);
    let args = ["10.99.0.1", "7", "10000", "3", "many", "10.99.0.3"];
    let out = peer_py(&bed, 60, &with_csum(FLOOD), &args);
    let r: Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("flood output {out:?}: {e}"));
    std::thread::sleep(Duration::from_millis(200));
    let t = totals(&app.stop());
    eprintln!("flowlane: {r}\ncounters: {t}");
    all_connected("flowlane", &r);
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    assert!(r["syns"].as_u64().unwrap_or(0) > 5_000, "{r}");
    // The bed's peer (configured) and the new client (confirmed by its
    // handshakes); none of the flood's addresses.
    assert!(n("neighbor_entries") <= 2, "{t}");
    // (Retransmitted SYN-ACKs to flood addresses whose sighting a later
    // one overwrote are not sent: `no_neighbor` counts them.)
}
