//! Software spill: more flowlane workers than the NIC has queues. On a
//! two-queue bed, `echo-server --workers 3` runs a third worker without a
//! queue: it takes a third of the RSS buckets from both queues, whose
//! workers forward it their frames, and sends its segments through queue 0
//! (its carrier). Kernel TCP clients in the peer namespace open many
//! connections, every byte echoed is checked, and the counters show the
//! third worker served its share. On a one-queue NIC whose RSS flowlane
//! cannot read, it steers with a hash of its own (software steering).

mod tcp_common;

use flowlane_tests::{flowlane_bin, in_ns, require_root, text, Bed};
use serde_json::Value;
use tcp_common::*;

/// Opens N connections at once, sends each SIZE random bytes (one of them
/// BIG), reads the echo and compares digests; prints what matched.
const SPILL_CLIENT: &str = r#"
import hashlib, json, os, selectors, socket, sys
host, n, size, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sel = selectors.DefaultSelector()
conns = []
for i in range(n):
    s = socket.create_connection((host, 7), timeout=30)
    s.setblocking(False)
    want = os.urandom(big if i == 0 else size)
    c = {"s": s, "out": memoryview(want), "digest": hashlib.sha256(want).hexdigest(),
         "len": len(want), "got": hashlib.sha256(), "n": 0}
    conns.append(c)
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
left = n
while left:
    for key, ev in sel.select(timeout=30):
        c = key.data
        if ev & selectors.EVENT_WRITE and len(c["out"]):
            try:
                k = c["s"].send(c["out"][:65536])
                c["out"] = c["out"][k:]
            except BlockingIOError:
                pass
            if not len(c["out"]):
                sel.modify(c["s"], selectors.EVENT_READ, c)
        if ev & selectors.EVENT_READ:
            try:
                b = c["s"].recv(262144)
            except BlockingIOError:
                continue
            c["got"].update(b)
            c["n"] += len(b)
            if c["n"] >= c["len"] or not b:
                sel.unregister(c["s"])
                c["s"].close()
                left -= 1
    else:
        if not sel.get_map():
            break
ok = sum(1 for c in conns if c["n"] == c["len"] and c["got"].hexdigest() == c["digest"])
print(json.dumps({"ok": ok, "n": n, "bytes": sum(c["n"] for c in conns)}))
"#;

/// Accepts N connections, reads each to its end and prints the sha256 of
/// each, one line each, after `ready`.
const MANY_RECV: &str = r#"
import hashlib, socket, sys, threading
n = int(sys.argv[1])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("10.99.0.2", 5002))
l.listen(64)
print("ready", flush=True)
sums = []
def serve(c):
    h = hashlib.sha256()
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        h.update(d)
    c.close()
    sums.append(h.hexdigest())
ts = []
for _ in range(n):
    c, _ = l.accept()
    t = threading.Thread(target=serve, args=(c,))
    t.start()
    ts.append(t)
for t in ts:
    t.join()
for d in sums:
    print(d, flush=True)
"#;

fn queue(summary: &Value, q: u64) -> Value {
    summary["counters"]["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["queue"] == q)
        .unwrap_or_else(|| panic!("no queue {q} in {summary}"))["tcp"]
        .clone()
}

#[test]
fn a_third_worker_on_two_queues_serves_its_share_of_connections() {
    if !require_root("a_third_worker_on_two_queues_serves_its_share_of_connections") {
        return;
    }
    let bed = Bed::up("spill", 2);
    // Its own control socket: another service running on the host (a
    // parallel run's) must not make `rebalance` ask which one.
    let sock = std::env::temp_dir().join(format!("{}.sock", bed.name));
    let sock = sock.to_str().unwrap();
    let app = start(
        &bed,
        &[
            "echo-server",
            "--port",
            "7",
            "--workers",
            "3",
            "--control-socket",
            sock,
        ],
        120,
    );

    // By hand, buckets do not move while workers outnumber queues.
    let o = in_ns(
        &bed.ns,
        &[
            flowlane_bin().to_str().unwrap(),
            "rebalance",
            "move",
            "--socket",
            sock,
            "--bucket",
            "0",
            "--to-queue",
            "1",
        ],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("software spill"),
        "{}",
        text(&o)
    );
    // Nor does the rebalancing loop run (no flag asked for it), and the
    // status says why.
    let o = in_ns(
        &bed.ns,
        &[
            flowlane_bin().to_str().unwrap(),
            "rebalance",
            "status",
            "--socket",
            sock,
            "--json",
            "--interval-ms",
            "0",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let st: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    assert_eq!(st["rebalance"], "off", "{st}");
    assert!(
        st["rebalance_off_because"]
            .as_str()
            .is_some_and(|w| w.contains("software spill")),
        "{st}"
    );
    // Worker 2 has no queue: it sends through queue 0, and the status
    // counts 3 workers on 2 queues, not 3 queues.
    let carriers: Vec<&Value> = st["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| &q["carrier"])
        .collect();
    assert_eq!(
        carriers,
        [&Value::Null, &Value::Null, &Value::from(0)],
        "{st}"
    );

    let out = peer_py(
        &bed,
        120,
        SPILL_CLIENT,
        &["10.99.0.1", "96", "65536", &(4 << 20).to_string()],
    );
    let r: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["ok"], 96, "every connection's bytes echoed intact: {r}");

    let lines = app.stop();
    let summary = lines
        .iter()
        .find(|v| v["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {lines:?}"));
    let (carrier, other, spill) = (queue(summary, 0), queue(summary, 1), queue(summary, 2));
    // A third of the buckets each: about 32 connections each.
    for q in [&carrier, &other, &spill] {
        assert!(q["passive_opens"].as_u64().unwrap() >= 16, "{q}");
    }
    let total_opens: u64 = [&carrier, &other, &spill]
        .iter()
        .map(|q| q["passive_opens"].as_u64().unwrap())
        .sum();
    assert_eq!(total_opens, 96);
    let forwarded = |q: &Value| q["spill_forwarded"].as_u64().unwrap();
    assert!(
        forwarded(&carrier) > 0 && forwarded(&other) > 0,
        "both queues forward"
    );
    assert_eq!(
        forwarded(&carrier) + forwarded(&other),
        spill["frames_forwarded_in"].as_u64().unwrap(),
        "what the queues forwarded is what worker 2 took"
    );
    assert!(spill["spill_handed"].as_u64().unwrap() > 0, "{spill}");
    assert_eq!(
        carrier["spill_transmitted"], spill["spill_handed"],
        "queue 0 sent every frame worker 2 handed it"
    );
    for q in [&carrier, &other, &spill] {
        assert_eq!(q["forward_dropped"], 0, "{q}");
        assert_eq!(q["frames_forwarded_late"], 0, "no move, no late frame: {q}");
    }
    assert_eq!(
        other["spill_transmitted"], 0,
        "worker 2 sends through queue 0 only"
    );
}

#[test]
fn a_worker_without_a_queue_opens_connections_through_its_carrier() {
    if !require_root("a_worker_without_a_queue_opens_connections_through_its_carrier") {
        return;
    }
    let bed = Bed::up("spillact", 2);
    let mut peer = peer_py_spawn(&bed, 90, MANY_RECV, &["12"]);
    wait_ready(&mut peer);
    let app = start(
        &bed,
        &[
            "bulk-source",
            "--connect",
            "10.99.0.2:5002",
            "--bytes",
            "4000000",
            "--connections",
            "12",
            "--workers",
            "3",
        ],
        90,
    );
    let lines = app.wait(std::time::Duration::from_secs(90));
    let mut sent: Vec<String> = lines
        .iter()
        .filter(|l| l["event"] == "source")
        .map(|l| {
            assert_eq!(l["bytes"], 4_000_000, "{l}");
            l["sha256"].as_str().unwrap().to_string()
        })
        .collect();
    let mut got: Vec<String> = finish(peer, std::time::Duration::from_secs(30))
        .lines()
        .map(str::to_string)
        .collect();
    sent.sort();
    got.sort();
    assert_eq!(sent.len(), 12, "one report per connection");
    assert_eq!(sent, got, "every connection's bytes arrived intact");
    let summary = lines.iter().find(|v| v["event"] == "summary").unwrap();
    let spill = queue(summary, 2);
    assert_eq!(
        spill["active_opens"], 4,
        "each worker opens its share: {spill}"
    );
    assert!(spill["spill_handed"].as_u64().unwrap() > 2_000, "{spill}");
    assert_eq!(
        queue(summary, 0)["spill_transmitted"],
        spill["spill_handed"]
    );
}

#[test]
fn one_queue_without_rss_known_is_steered_in_software() {
    if !require_root("one_queue_without_rss_known_is_steered_in_software") {
        return;
    }
    // A one-queue bed, the service run on its veth as on any NIC: it
    // cannot read an RSS key or table there, and hashes each frame with a
    // secret key of its own to pick its worker.
    let bed = Bed::up("spill1q", 1);
    let app = start_in_ns(&bed, &["echo-server", "--port", "7", "--workers", "2"], 120);
    let out = peer_py(
        &bed,
        120,
        SPILL_CLIENT,
        &["10.99.0.1", "48", "65536", &(2 << 20).to_string()],
    );
    let r: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["ok"], 48, "every connection's bytes echoed intact: {r}");
    let lines = app.stop();
    let summary = lines
        .iter()
        .find(|v| v["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {lines:?}"));
    let (queue0, steered) = (queue(summary, 0), queue(summary, 1));
    // Half the buckets each: 48 connections fall about evenly (a secret
    // key: which ones is not known in advance).
    for q in [&queue0, &steered] {
        assert!(q["passive_opens"].as_u64().unwrap() >= 8, "{q}");
    }
    assert_eq!(
        queue0["spill_forwarded"], steered["frames_forwarded_in"],
        "what queue 0 forwarded is what worker 1 took"
    );
    assert!(steered["frames_forwarded_in"].as_u64().unwrap() > 0);
    assert_eq!(queue0["spill_transmitted"], steered["spill_handed"]);
    assert_eq!(queue0["forward_dropped"], 0, "{queue0}");
}

#[test]
fn spill_refuses_what_it_cannot_do_in_one_line() {
    if !require_root("spill_refuses_what_it_cannot_do_in_one_line") {
        return;
    }
    let bed = Bed::up("spillno", 2);
    for (args, says) in [
        (
            vec!["--workers", "3", "--rebalance", "auto"],
            "use --rebalance off",
        ),
        (
            vec!["--workers", "3", "--backend", "kernel"],
            "--workers needs --backend xdp",
        ),
        (vec!["--workers", "1"], "at least one worker per queue"),
    ] {
        let o = std::process::Command::new(flowlane_bin())
            .args([
                "echo-server",
                "--port",
                "7",
                "--bed",
                &bed.name,
                "--timeout",
                "5",
            ])
            .args(&args)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].contains(says), "{args:?}: {err}");
    }
}
