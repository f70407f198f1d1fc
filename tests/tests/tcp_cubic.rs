//! CUBIC against the kernel's CUBIC (issue 11): two bulk flows share one
//! bottleneck of the delay line (`flowlane testbed delay --rate-mbit`,
//! 10 ms each way, a one-BDP drop-tail queue), both sent from flowlane's
//! side of the bed to kernel receivers in the peer namespace, for
//! [`SECS`] seconds. Each flow's goodput over the second half is measured
//! at the receiver.
//!
//! Pairs, in one bed, one after the other; in each, the flow named
//! first starts first (the kernel's CUBIC too, in the reference):
//! - kernel CUBIC against kernel CUBIC, with `FLOWLANE_CUBIC_REFERENCE=1`
//!   (measurements: BENCHMARKS.md): what "fair" looks like on this bed.
//!   It checks nothing of flowlane's (the bottleneck's drops and fill are
//!   asserted in every flowlane pair too), and took a fifth of the test's
//!   time (20 s of its 105 s), so CI leaves it out;
//! - flowlane `--congestion cubic` against kernel CUBIC: asserted within
//!   [`FACTOR`];
//! - flowlane `--congestion newreno` against kernel CUBIC: printed (a
//!   loose bound only; at this bandwidth-delay product, about 86 segments,
//!   CUBIC runs in its Reno-friendly region, RFC 9438 §4.3, so NewReno is
//!   expected to get about as much).
//!
//! The spread over repeated runs, and what the assertion's factor rests
//! on, are in BENCHMARKS.md ("CUBIC against the kernel's CUBIC").
//!
//! The kernel sender runs in flowlane's own namespace: its ports are
//! outside flowlane's (the bed reserves flowlane's ephemeral range from the
//! kernel), so flowlane's XDP program passes its ACKs to the kernel, and its
//! frames leave through the same `xsk0` → `peer0` veth and the same
//! direction of the line as flowlane's. Its device sends wire-size frames
//! (TSO/GSO off, `gso_max_segs 1`), as flowlane does: a 64 KiB GSO
//! super-frame would meet the drop-tail queue as one frame.

mod tcp_common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flowlane_tests::{kill_and_reap, require_root, wait_within, Bed};
use serde_json::Value;
use tcp_common::*;

/// One-way delay of the line (ms): a 20 ms round trip.
const ONE_WAY_MS: &str = "10";
/// The bottleneck's rate (Mbit/s), each direction.
const RATE_MBIT: &str = "50";
/// Seconds both flows run once both are connected.
const SECS: u64 = 20;

/// The path of a run: [`ONE_WAY_MS`], [`RATE_MBIT`] and [`SECS`] unless
/// `FLOWLANE_CUBIC_MS`, `FLOWLANE_CUBIC_MBIT` or `FLOWLANE_CUBIC_SECS`
/// say otherwise (for measurements: BENCHMARKS.md).
struct Setup {
    ms: String,
    mbit: String,
    secs: u64,
}

impl Setup {
    fn from_env() -> Setup {
        let var = |name: &str, default: &str| {
            let v = std::env::var(name).unwrap_or_else(|_| default.to_string());
            assert!(
                v.parse::<f64>().is_ok_and(|x| x > 0.0),
                "{name}={v}: a positive number"
            );
            v
        };
        Setup {
            ms: var("FLOWLANE_CUBIC_MS", ONE_WAY_MS),
            mbit: var("FLOWLANE_CUBIC_MBIT", RATE_MBIT),
            secs: var("FLOWLANE_CUBIC_SECS", &SECS.to_string())
                .parse()
                .expect("whole seconds"),
        }
    }

    /// The delay line's flags.
    fn line_args(&self) -> [&str; 4] {
        ["--ms", &self.ms, "--rate-mbit", &self.mbit]
    }
}
/// flowlane's CUBIC gets between 1/FACTOR and FACTOR of the kernel's, in
/// the median of [`CUBIC_PAIRS`] pairs. Measured on this path: a median of
/// 1.49 over 16 runs (0.92 to 2.16), 2.53 in a later run, and 4.51 in one
/// CI run of session 17; kernel against kernel spread from 0.56 to 1.93.
/// Two causes of flowlane's larger share were found in session 24 (a CI
/// run at 5.10): slow start overshot a one-BDP queue, and PSH on every
/// segment made Linux receivers ACK each one, so flowlane sent single
/// frames where the kernel sent pairs that the full queue cut. Since then
/// three pairs measured 1.99 to 2.05 (BENCHMARKS.md, "slow start's
/// overshoot and PSH"); the bound holds flowlane to a factor, not to
/// fairness: the slower start of the kernel flow beside it is still open.
const FACTOR: f64 = 4.0;
/// flowlane CUBIC pairs run: one pair's share varies too much on these 2
/// shared vCPUs for a single run to decide (see [`FACTOR`]).
const CUBIC_PAIRS: usize = 3;
/// The receivers' port (peer namespace).
const PORT: u16 = 5301;

/// Kernel receiver for the fairness runs (peer namespace): accepts
/// `argv[2]` connections on `argv[1]`, counts each one's bytes, and once
/// all are connected samples the counts every second for `argv[3]`
/// seconds; prints one JSON object (sender port → list of cumulative byte
/// counts, the first at the start) and exits.
const FAIR_SINK: &str = r#"
import json, os, socket, sys, threading, time
host, port = sys.argv[1].rsplit(':', 1)
n, secs = int(sys.argv[2]), int(sys.argv[3])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((host, int(port)))
l.listen(16)
print('ready', flush=True)
counts = {}
def serve(c, key):
    buf = bytearray(1 << 20)
    while True:
        k = c.recv_into(buf)
        if not k:
            break
        counts[key] += k
for _ in range(n):
    c, a = l.accept()
    counts[a[1]] = 0
    threading.Thread(target=serve, args=(c, a[1]), daemon=True).start()
t0 = time.monotonic()
samples = {k: [v] for k, v in counts.items()}
for i in range(1, secs + 1):
    time.sleep(max(0.0, t0 + i - time.monotonic()))
    snap = dict(counts)
    for k in samples:
        samples[k].append(snap[k])
print(json.dumps({str(k): v for k, v in samples.items()}), flush=True)
os._exit(0)
"#;

/// Kernel bulk sender (flowlane's namespace): connects from 10.99.0.1 to
/// `argv[1]` with congestion control `argv[2]`, prints its local port,
/// then sends until the receiver goes away; samples its `tcp_info` every
/// second meanwhile, and prints at the end (JSON) its segments sent and
/// retransmitted and the mean congestion window (segments) and smoothed
/// RTT (ms) over the samples of the second half.
const KERNEL_BULK: &str = r#"
import json, socket, struct, sys, threading, time
host, port = sys.argv[1].rsplit(':', 1)
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, sys.argv[2].encode())
s.bind(('10.99.0.1', 0))
s.connect((host, int(port)))
print(s.getsockname()[1], flush=True)
def info():
    b = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    u32 = lambda i: struct.unpack_from('I', b, 8 + 4 * i)[0]
    # rtt (us), snd_cwnd, total_retrans; tcpi_segs_out after 4 u64s
    return u32(15), u32(18), u32(23), struct.unpack_from('I', b, 8 + 4 * 24 + 32)[0]
samples = []
def sample():
    while True:
        time.sleep(1)
        try:
            samples.append(info())
        except OSError:
            return
threading.Thread(target=sample, daemon=True).start()
block = bytes(1 << 20)
try:
    while True:
        s.sendall(block)
except OSError:
    pass
rtt, cwnd, retrans, segs = info()
half = samples[len(samples) // 2:] or [(rtt, cwnd, retrans, segs)]
print(json.dumps({"segs_out": segs, "retrans": retrans,
                  "cwnd": sum(x[1] for x in half) / len(half),
                  "srtt_ms": sum(x[0] for x in half) / len(half) / 1000}), flush=True)
"#;

/// A running [`KERNEL_BULK`].
struct KernelSender {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    port: String,
}

impl KernelSender {
    /// Waits (bounded) for it to see the receiver go; its closing figures.
    fn finish(mut self) -> Value {
        if wait_within(&mut self.child, Duration::from_secs(10)).is_none() {
            kill_and_reap(&mut self.child);
            return Value::Null;
        }
        let mut line = String::new();
        let _ = self.out.read_line(&mut line);
        serde_json::from_str(line.trim()).unwrap_or(Value::Null)
    }
}

/// Starts [`KERNEL_BULK`] in flowlane's namespace.
fn kernel_sender(bed: &Bed, to: &str, cc: &str, secs: u64) -> KernelSender {
    let limit = (secs + 60).to_string();
    let mut child = Command::new("ip")
        .args(["netns", "exec", &bed.ns, "timeout", &limit])
        .args(["python3", "-c", KERNEL_BULK, to, cc])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port = line.trim().to_string();
    assert!(port.parse::<u16>().is_ok(), "kernel sender: {line:?}");
    KernelSender { child, out, port }
}

/// The first sender of a pair.
enum First {
    /// flowlane's `bulk-source` with this `--congestion`.
    Flowlane(&'static str),
    /// A second kernel CUBIC sender.
    Kernel,
}

/// One pair's result: goodput (Mbit/s) over the second half of each flow,
/// and the line's report.
struct Pair {
    first: f64,
    kernel: f64,
    line: Value,
}

/// Mbit/s between the samples at `from` and `to` seconds.
fn mbit(samples: &[u64], from: usize, to: usize) -> f64 {
    (samples[to] - samples[from]) as f64 * 8.0 / 1e6 / (to - from) as f64
}

/// Runs `first` and a kernel CUBIC sender through a fresh bottleneck.
fn pair(bed: &Bed, setup: &Setup, first: First) -> Pair {
    let secs = setup.secs;
    let line = DelayLine::start(bed, &setup.line_args());
    let to = format!("10.99.0.2:{PORT}");
    let mut sink = peer_py_spawn(bed, secs + 90, FAIR_SINK, &[&to, "2", &secs.to_string()]);
    wait_ready(&mut sink);
    let (flowlane, other) = match first {
        First::Flowlane(cc) => {
            let args = [
                "bulk-source",
                "--connect",
                &to,
                "--bytes",
                "100000000000",
                "--congestion",
                cc,
            ];
            let app = start(bed, &args, secs + 60);
            (Some(app), None)
        }
        First::Kernel => (None, Some(kernel_sender(bed, &to, "cubic", secs))),
    };
    let kernel = kernel_sender(bed, &to, "cubic", secs);
    let kport = kernel.port.clone();
    let out = finish(sink, Duration::from_secs(secs + 60));
    let kernel_tcp = kernel.finish();
    let (other_port, first_tcp) = match (other, flowlane) {
        (Some(k), _) => (Some(k.port.clone()), k.finish()),
        (None, Some(app)) => {
            let t = &app.report_now()["counters"]["total"];
            let first = serde_json::json!({
                "segs_out": t["segments_out"], "retransmits": t["retransmits"],
                "fast_retransmits": t["fast_retransmits"], "rto_timeouts": t["rto_timeouts"],
                "rack_lost": t["rack_lost"], "tlp_probes": t["tlp_probes"],
                "spurious_recoveries": t["spurious_recoveries"],
            });
            (None, first)
        }
        (None, None) => unreachable!("a first sender"),
    };
    let report = line.stop();
    let counts: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    let counts = counts.as_object().unwrap();
    let samples = |port: &str| -> Vec<u64> {
        counts[port]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let k = samples(&kport);
    let f = match other_port {
        Some(p) => samples(&p),
        None => {
            let p = counts.keys().find(|p| **p != kport).expect("two flows");
            samples(p)
        }
    };
    let n = secs as usize;
    eprintln!(
        "  per second (Mbit/s), first: {:?}",
        (0..n)
            .map(|i| mbit(&f, i, i + 1).round())
            .collect::<Vec<_>>()
    );
    eprintln!(
        "  per second (Mbit/s), kernel: {:?}",
        (0..n)
            .map(|i| mbit(&k, i, i + 1).round())
            .collect::<Vec<_>>()
    );
    eprintln!("  first sender's TCP: {first_tcp}");
    eprintln!("  kernel sender's TCP: {kernel_tcp}");
    Pair {
        first: mbit(&f, n / 2, n),
        kernel: mbit(&k, n / 2, n),
        line: report,
    }
}

/// Prints a pair's figures; returns first/kernel.
fn show(what: &str, setup: &Setup, p: &Pair) -> f64 {
    let q = &p.line["queue"];
    let ratio = p.first / p.kernel.max(1e-9);
    eprintln!(
        "{what}: {:.1} vs kernel CUBIC {:.1} Mbit/s over the second {} s (ratio {ratio:.2}, sum {:.1} of {}); \
         bottleneck drops {} (queue peak {} bytes of {}), line late {:.0} µs mean, socket drops {}",
        p.first,
        p.kernel,
        setup.secs / 2,
        p.first + p.kernel,
        setup.mbit,
        q["bottleneck_to_peer"]["dropped"],
        q["bottleneck_to_peer"]["peak_queue_bytes"],
        p.line["queue_bytes"],
        p.line["mean_late_us"].as_f64().unwrap_or(0.0),
        p.line["socket_drops"],
    );
    ratio
}

#[test]
fn flowlane_cubic_shares_a_bottleneck_fairly_with_kernel_cubic() {
    if !require_root("flowlane_cubic_shares_a_bottleneck_fairly_with_kernel_cubic") {
        return;
    }
    let setup = Setup::from_env();
    let bed = Bed::up("tcu", 1);
    kernel_sends_wire_size_frames(&bed);
    {
        let line = DelayLine::start(&bed, &setup.line_args());
        let rtts = ping_rtts(&bed, 3);
        eprintln!("RTT through the line (idle): {rtts:?} ms");
        let report = line.stop();
        assert_eq!(report["lanes"], 1, "a rate runs one lane: {report}");
    }

    // The reference pair, for measurements only (see the module's doc).
    let reference = std::env::var_os("FLOWLANE_CUBIC_REFERENCE").map(|_| {
        let p = pair(&bed, &setup, First::Kernel);
        (show("kernel CUBIC", &setup, &p), p)
    });
    let kk = reference
        .as_ref()
        .map_or_else(|| "not run".to_string(), |(r, _)| format!("{r:.2}"));
    let mut cubics: Vec<(f64, Pair)> = (0..CUBIC_PAIRS)
        .map(|_| {
            let p = pair(&bed, &setup, First::Flowlane("cubic"));
            (show("flowlane CUBIC", &setup, &p), p)
        })
        .collect();
    cubics.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (fc, cubic) = cubics.swap_remove(CUBIC_PAIRS / 2);
    let newreno = pair(&bed, &setup, First::Flowlane("newreno"));
    let fr = show("flowlane NewReno", &setup, &newreno);
    eprintln!(
        "ratios: kernel/kernel {kk}, flowlane CUBIC/kernel {fc:.2} (median of {CUBIC_PAIRS}), flowlane NewReno/kernel {fr:.2}"
    );

    // The asserted pairs: the bottleneck was the bottleneck (it dropped,
    // and the two flows filled it), not this machine's CPU.
    for (what, p) in reference
        .iter()
        .map(|(_, p)| ("reference", p))
        .chain(cubics.iter().map(|(_, p)| ("cubic", p)))
        .chain([("cubic", &cubic)])
    {
        let q = &p.line["queue"];
        assert!(
            q["bottleneck_to_peer"]["dropped"].as_u64().unwrap() > 0,
            "{what}: no bottleneck drops: {}",
            p.line
        );
        let rate: f64 = setup.mbit.parse().unwrap();
        assert!(
            p.first + p.kernel > 0.7 * rate && p.first + p.kernel < 1.05 * rate,
            "{what}: {} + {} Mbit/s through a {rate} Mbit/s bottleneck",
            p.first,
            p.kernel
        );
    }
    assert!(
        (1.0 / FACTOR..=FACTOR).contains(&fc),
        "flowlane CUBIC got {:.1} Mbit/s against the kernel's {:.1} in the median pair (ratio {fc:.2}; kernel against kernel: {kk}, FLOWLANE_CUBIC_REFERENCE=1 runs it)",
        cubic.first,
        cubic.kernel
    );
    assert!(fr > 0.05, "flowlane NewReno starved: ratio {fr:.2}");
}
