//! flowlane-ttcp on 127.0.0.1 (no root needed): the window, the cycles/byte
//! arithmetic against /proc/stat, latency and overlap modes, misuse.

mod common;

use std::time::Duration;

use common::*;

fn f(v: &serde_json::Value, p: &str) -> f64 {
    v.pointer(p)
        .and_then(|x| x.as_f64())
        .unwrap_or_else(|| panic!("no {p} in {v}"))
}

fn cpu_mhz() -> f64 {
    let s = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    s.lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .map(|v| v.trim().parse().unwrap())
        .unwrap()
}

#[test]
fn throughput_window_and_cycles_per_byte_match_proc_stat() {
    let (ctl, data) = ports();
    let flags = format!("-m 2,*,127.0.0.1 -P 2 -W 1 -t 2 -C 0.5 -j --control-port {ctl} -p {data}");
    let rx = cmd(None, &a(&format!("-r {flags}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (tx, marks) = spawn_watching_stderr(
        cmd(None, &a(&format!("-s {flags} -l 2 -V"))),
        &["measured window starts", "measured window ends"],
    );
    let (txo, _) = wait_bounded(tx, Duration::from_secs(30), "sender");
    let (rxo, _) = wait_bounded(rx, Duration::from_secs(30), "receiver");
    let (r, s) = (json(&rxo), json(&txo));
    let marks = marks.join().unwrap();

    for v in [&r, &s] {
        assert!(
            (f(v, "/window_s") - 2.0).abs() < 0.1,
            "window {}",
            v["window_s"]
        );
        assert_eq!(v["iface"], "lo");
        assert_eq!(v["connections"], 4);
        assert!(f(v, "/bytes/measured") > 1e6);
        assert!(f(v, "/bytes/warmup") > 0.0 && f(v, "/bytes/cooldown") > 0.0);
        // Derived figures are recomputable from the raw differences (the
        // hypervisor's steal is no work of ours: not in the costs).
        let busy: f64 = ["user", "nice", "system", "irq", "softirq"]
            .iter()
            .map(|k| f(v, &format!("/raw/stat/{k}")))
            .sum();
        // The CPU's rate over its interval (window_s), the bytes' over -t.
        let cpu_s = busy / f(v, "/raw/user_hz") / f(v, "/window_s") * f(v, "/params/duration_s");
        let cpb = cpu_s * f(v, "/tsc_hz") / f(v, "/bytes/measured");
        let got = f(v, "/cycles_per_byte_system");
        assert!((cpb - got).abs() <= 1e-9 * got, "{cpb} vs {got}");
        // The bytes' rate is over the window they were counted in (-t).
        let mbit = f(v, "/bytes/measured") * 8.0 / f(v, "/params/duration_s") / 1e6;
        assert!((mbit - f(v, "/throughput_mbit_s")).abs() < 1e-6 * mbit);
        assert!(f(v, "/packets_received") > 0.0 && f(v, "/interrupts") > 0.0);
        assert_eq!(v["interrupt_source"], "net_rx_softirqs");
    }
    // Both sides measured the same stream over (nearly) the same window.
    let (rb, sb) = (f(&r, "/bytes/measured"), f(&s, "/bytes/measured"));
    assert!((rb - sb).abs() / sb < 0.05, "receiver {rb} vs sender {sb}");
    assert_eq!(r["peer"]["role"], "sender");
    assert_eq!(s["peer"]["role"], "receiver");

    // Independent check: /proc/stat read by this test when the sender announced
    // the window edges (-V), times the TSC rate of /proc/cpuinfo.
    assert_eq!(marks.len(), 2, "{marks:?}");
    let (b0, b1) = ((marks[0].1).0, (marks[1].1).0);
    let scale = f(&s, "/params/duration_s") / f(&s, "/window_s");
    let manual = (b1 - b0) as f64 / 100.0 * scale * cpu_mhz() * 1e6 / sb;
    let reported = f(&s, "/cycles_per_byte_system");
    eprintln!("cycles/byte: reported {reported:.3}, manual from /proc/stat {manual:.3}");
    assert!(
        (manual - reported).abs() / reported < 0.10,
        "cycles/byte reported {reported} vs manual {manual}"
    );
}

/// The maximum of `net.ipv4.<key>` (`tcp_rmem`, `tcp_wmem`), bytes.
fn sysctl_max(key: &str) -> f64 {
    let v = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{key}")).unwrap();
    v.split_whitespace().last().unwrap().parse().unwrap()
}

/// The most a kernel socket's receive buffer holds.
fn rmem_max() -> f64 {
    sysctl_max("tcp_rmem")
}

/// What may be in flight between a send and its receipt on one connection
/// over loopback: both ends' sockets full.
fn socket_buffers_max() -> f64 {
    rmem_max() + sysctl_max("tcp_wmem")
}

/// A byte counts as sent once the socket took it, as received once read
/// from it: with `-b 1024m`, sender and receiver disagree at a window's
/// edges by what the sockets and the kernel backend's user-space buffers
/// (256 KiB to send, a socket's worth read) hold at most, not by `-b`
/// (its send buffer held a whole write, counted at once: the sender
/// reported whole GiBs the receiver never saw).
#[test]
fn a_large_buffer_counts_what_the_socket_took() {
    let (ro, so) = pair(
        None,
        None,
        "-m 1,*,127.0.0.1 -W 0.3 -t 0.5 -C 0.3 -b 1024m -j",
        "",
        "",
    );
    let (r, s) = (json(&ro), json(&so));
    let (got, sent) = (f(&r, "/bytes/measured"), f(&s, "/bytes/measured"));
    // No whole writes counted at once (always a whole number of GiB).
    let b = f(&s, "/params/buffer");
    assert!(sent % b != 0.0, "sent {sent}: whole writes of {b}");
    // The connection's (both sockets, the bytes read and not counted yet,
    // the send buffer); and the two ends' windows apart by the sync (a
    // busy machine's scheduling).
    let bound = socket_buffers_max() + rmem_max() + 256.0 * 1024.0 + 0.1 * got;
    eprintln!("received {got}, sent {sent} in the window; bound {bound}");
    assert!(
        sent > 0.0 && (got - sent).abs() <= bound,
        "received {got} vs sent {sent} (at most {bound} apart)"
    );
}

/// Without sync (-N) a receiver whose sender stops in the measured window
/// fails, as a synced one does, rather than report an average over time
/// nobody sent in.
#[test]
fn a_no_sync_receiver_fails_when_its_sender_stops_early() {
    let (_, data) = ports();
    let flags = format!("-m 1,*,127.0.0.1 -N -W 0.3 -t 4 -C 0.2 -p {data}");
    let rx = cmd(None, &a(&format!("-r {flags}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut tx = cmd(None, &a(&format!("-s {flags}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    tx.kill().unwrap();
    let _ = tx.wait();
    let (o, t) = wait_bounded(rx, Duration::from_secs(30), "receiver");
    assert_fails(
        &o,
        "a data connection ended in the measured window (closed by the peer): the sender stopped before the end of the measured window",
    );
    assert!(t < Duration::from_secs(3), "failed only after {t:?}");
}

/// `--congestion` is the kernel backend's too: its sockets run it (not
/// the system's default), and both ends' reports say it.
#[test]
fn the_kernel_backend_runs_the_congestion_control_asked_for() {
    let (ctl, data) = ports();
    let flags = format!(
        "-m 1,*,127.0.0.1 -W 0.3 -t 1.5 -C 0.2 -j --congestion newreno --control-port {ctl} -p {data}"
    );
    let rx = cmd(None, &a(&format!("-r {flags}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let tx = cmd(None, &a(&format!("-s {flags}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    // Both ends' data sockets, with their congestion control (`ss -i`).
    let ss = std::process::Command::new("ss")
        .args(["-tinH", &format!("( sport = :{data} or dport = :{data} )")])
        .output()
        .expect("ss");
    let (txo, _) = wait_bounded(tx, Duration::from_secs(30), "sender");
    let (rxo, _) = wait_bounded(rx, Duration::from_secs(30), "receiver");
    let (r, s) = (json(&rxo), json(&txo));
    assert_eq!(
        (&r["congestion"], &s["congestion"]),
        (&"newreno".into(), &"newreno".into())
    );
    let out = String::from_utf8_lossy(&ss.stdout);
    let algs: Vec<&str> = out
        .split_whitespace()
        .filter(|w| ["reno", "cubic", "bbr", "bbr2", "htcp", "dctcp", "vegas"].contains(w))
        .collect();
    assert_eq!(algs, ["reno", "reno"], "{out}");
}

#[test]
fn long_warmup_is_not_counted() {
    // 3 s of warm-up around a 1 s window: the window must hold about a third of
    // the warm-up's bytes, not the warm-up's plus its own.
    let (ro, so) = pair(None, None, "-m 1,*,127.0.0.1 -W 3 -t 1 -C 0.3 -j", "", "");
    for v in [json(&ro), json(&so)] {
        let warm = f(&v, "/bytes/warmup");
        let meas = f(&v, "/bytes/measured");
        let rate_warm = warm / 3.0;
        let rate_meas = meas / f(&v, "/params/duration_s");
        eprintln!(
            "{}: warm-up {warm} B ({rate_warm:.0} B/s), window {meas} B ({rate_meas:.0} B/s)",
            v["role"]
        );
        assert!(meas < 0.6 * warm, "window {meas} vs warm-up {warm}");
        let r = rate_meas / rate_warm;
        assert!((0.33..3.0).contains(&r), "rate ratio {r}");
        let thr = f(&v, "/throughput_kbyte_s") * 1e3 * f(&v, "/params/duration_s");
        assert!((thr - meas).abs() < 1e-6 * meas);
    }
}

#[test]
fn latency_and_overlap_modes() {
    let (ro, so) = pair(
        None,
        None,
        "-m 1,*,127.0.0.1 -W 0.3 -t 1 -C 0.2 -j --latency --msg-size 256",
        "",
        "",
    );
    let s = json(&so);
    let r = json(&ro);
    let l = &s["latency"];
    assert!(l["round_trips"].as_u64().unwrap() > 50, "{l}");
    // Both ends count a round trip's bytes both ways.
    let (got, sent) = (f(&r, "/bytes/measured"), f(&s, "/bytes/measured"));
    assert!(
        sent > 0.0 && (got - sent).abs() / sent < 0.1,
        "receiver {got} vs sender {sent}"
    );
    let p = |k: &str| l[k].as_f64().unwrap();
    assert!(p("rtt_p50_us") <= p("rtt_p90_us"));
    assert!(p("rtt_p50_us") > 0.0);
    // The tail percentiles are there only with round trips enough for them
    // (null otherwise: they would be the maximum).
    let n = l["round_trips"].as_u64().unwrap();
    let (p99, p999) = (l["rtt_p99_us"].as_f64(), l["rtt_p999_us"].as_f64());
    assert_eq!(p99.is_some(), n >= 100, "{l}");
    assert_eq!(p999.is_some(), n >= 1000, "{l}");
    if let (Some(p99), Some(p999)) = (p99, p999) {
        assert!(p("rtt_p90_us") <= p99 && p99 <= p999, "{l}");
    }

    // Overlap: the sender computes on an application thread (queue-pair
    // mode; run to completion would compute on the loop that receives),
    // for much longer than a loopback round trip: the reply comes during
    // the compute, and the thread has it when the compute ends.
    let (ro, so) = pair(
        None,
        None,
        "-m 1,*,127.0.0.1 -W 0.3 -t 1 -C 0.2 -j --overlap-us 2000 --msg-size 1k",
        "",
        "--mode queue-pair",
    );
    json(&ro);
    let s = json(&so);
    let o = &s["overlap"];
    let g = |k: &str| o[k].as_f64().unwrap_or_else(|| panic!("no {k} in {o}"));
    assert!(g("iterations") > 50.0, "{o}");
    assert!(g("compute_mean_us") >= 2000.0, "{o}");
    assert!(g("total_mean_us") >= g("compute_mean_us"), "{o}");
    assert!(g("overlap_ratio") > 0.0 && g("overlap_ratio") <= 1.0, "{o}");
    assert!(g("reply_complete_at_compute_end_pct") > 50.0, "{o}");
    assert!(g("wait_after_compute_mean_us") < 1000.0, "{o}");
    // Its iterations hold the compute: no round-trip times.
    assert!(s["latency"].is_null(), "{}", s["latency"]);
}

/// A run whose measured window measured nothing (here a latency sender
/// whose receiver, unsynced, does not echo) prints its report and fails
/// in one line, on both ends.
#[test]
fn a_window_that_measured_nothing_fails() {
    let (ro, so) = pair(
        None,
        None,
        "-m 1,*,127.0.0.1 -W 0.2 -t 0.3 -C 0.1 -N",
        "",
        "--latency",
    );
    assert_fails(&so, "counted no payload byte: no figures");
    assert_fails(&ro, "counted no payload byte: no figures");
    let out = String::from_utf8_lossy(&so.stdout);
    assert!(out.contains("Round trips (64 B messages)"), "{out}");
}

/// The last data port (65535) is a range of one, not an overflow (the
/// verbose line named the range with a u16 sum).
#[test]
fn the_last_port_is_a_data_port() {
    let (ctl, _) = ports();
    let (o, _) = wait_bounded(
        cmd(
            None,
            &a(&format!(
                "-r -m 1,*,127.0.0.1 -p 65535 -P 1 -V --wait 0.3 --control-port {ctl}"
            )),
        )
        .spawn()
        .unwrap(),
        Duration::from_secs(15),
        "receiver",
    );
    let e = err_line(&o);
    assert!(!o.status.success(), "{e}");
    assert!(e.contains("127.0.0.1:65535..65535"), "{e}");
    assert!(
        e.ends_with("no sender connected to the control port within 0.3 s"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn queue_pair_mode_runs_the_same_handlers_on_application_threads() {
    // Throughput: both ends' handlers on application threads.
    let (ro, so) = pair(
        None,
        None,
        "-m 2,*,127.0.0.1 -W 0.3 -t 1 -C 0.2 -j --mode queue-pair",
        "",
        "",
    );
    let (r, s) = (json(&ro), json(&so));
    let (got, sent) = (f(&r, "/bytes/measured"), f(&s, "/bytes/measured"));
    assert!(
        sent > 0.0 && (got - sent).abs() / sent < 0.1,
        "received {got} vs sent {sent}"
    );
    let d = &r["cpu_data_threads"];
    assert!(
        d["label"].as_str().unwrap().contains("application threads"),
        "{d}"
    );
    // Four threads: two socket loops, two application threads.
    assert_eq!(d["threads"], 4, "{d}");

    // Latency: the sender's ping-pong on an application thread.
    let (ro, so) = pair(
        None,
        None,
        "-m 1,*,127.0.0.1 -W 0.3 -t 1 -C 0.2 -j --latency --msg-size 256",
        "",
        "--mode queue-pair",
    );
    json(&ro);
    let l = &json(&so)["latency"];
    assert!(l["round_trips"].as_u64().unwrap() > 50, "{l}");
}

/// A receiver that fails after the test was agreed (here a SIGTERM in the
/// window) tells the sender why (`Abort`): the sender's error names the
/// receiver's cause, not a closed control channel.
#[test]
fn a_receiver_failing_mid_test_tells_the_sender_why() {
    let (ctl, data) = ports();
    let flags = format!("-m 1,*,127.0.0.1 -W 0 -t 5 -C 0 --control-port {ctl} -p {data}");
    let rx = cmd(None, &a(&format!("-r {flags}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let tx = cmd(None, &a(&format!("-s {flags}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    flowlane_testbed::child::terminate(&rx);
    let (ro, _) = wait_bounded(rx, Duration::from_secs(30), "receiver");
    let (so, _) = wait_bounded(tx, Duration::from_secs(30), "sender");
    assert_fails(&ro, "interrupted by a signal");
    assert_fails(&so, "gave up");
    assert!(
        err_line(&so).contains("interrupted by a signal"),
        "{}",
        err_line(&so)
    );
}

/// A --nic that is not here fails the receiver at once, before a sender
/// is accepted (it was found only after the sync, the sender failing
/// with it).
#[test]
fn a_missing_nic_fails_before_any_sender() {
    let (ctl, data) = ports();
    let (o, t) = wait_bounded(
        cmd(
            None,
            &a(&format!(
                "-r -m 1,*,127.0.0.1 --nic nosuch0 --wait 10 --control-port {ctl} -p {data}"
            )),
        )
        .spawn()
        .unwrap(),
        Duration::from_secs(30),
        "receiver",
    );
    assert_fails(&o, "--nic nosuch0: /proc/net/dev: no interface nosuch0");
    assert!(t < Duration::from_secs(5), "failed only after {t:?}");
}

#[test]
fn misuse_is_one_line_nonzero_and_bounded() {
    let lim = Duration::from_secs(15);
    // Sender without a receiver.
    let (ctl, data) = ports();
    let (o, t) = wait_bounded(
        cmd(
            None,
            &a(&format!(
                "-s -m 1,*,127.0.0.1 --control-port {ctl} -p {data}"
            )),
        )
        .spawn()
        .unwrap(),
        lim,
        "sender",
    );
    assert_fails(&o, "connection refused");
    assert!(t < Duration::from_secs(6), "{t:?}");
    // Without sync: the data connection's refusal, named, in words.
    let (_, data) = ports();
    let (o, _) = wait_bounded(
        cmd(None, &a(&format!("-s -m 1,*,127.0.0.1 -N -p {data}")))
            .spawn()
            .unwrap(),
        lim,
        "sender",
    );
    assert_fails(
        &o,
        &format!("the data connection to 127.0.0.1:{data} was refused: nothing listens there"),
    );
    assert!(!err_line(&o).contains("Pre"), "{}", err_line(&o));

    // Mismatched flags: both sides fail, naming the flags.
    let (ro, so) = pair(None, None, "-m 1,*,127.0.0.1", "-t 2 -W 1", "-t 3 -W 1");
    assert_fails(&so, "mismatched flags: -t (receiver 2, sender 3)");
    assert_fails(&ro, "mismatched flags: -t (receiver 2, sender 3)");
    let (ro, so) = pair(None, None, "-m 1,*,127.0.0.1", "", "--latency");
    assert_fails(&so, "mode");
    assert!(!ro.status.success());

    // Receiver busy: a second sender while a test runs; a second receiver on the
    // same control port.
    let (ctl, data) = ports();
    let f = format!("-m 1,*,127.0.0.1 -W 0 -t 2 -C 0 --control-port {ctl} -p {data}");
    let rx = cmd(None, &a(&format!("-r {f}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let tx = cmd(None, &a(&format!("-s {f}"))).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (o, _) = wait_bounded(
        cmd(None, &a(&format!("-s {f}"))).spawn().unwrap(),
        lim,
        "2nd sender",
    );
    assert_fails(&o, "receiver busy");
    let (o, _) = wait_bounded(
        cmd(None, &a(&format!("-r {f}"))).spawn().unwrap(),
        lim,
        "2nd receiver",
    );
    assert_fails(&o, "is in use");
    let (o, _) = wait_bounded(tx, lim, "sender");
    assert!(o.status.success(), "{}", err_line(&o));
    let (o, _) = wait_bounded(rx, lim, "receiver");
    assert!(o.status.success(), "{}", err_line(&o));

    // A receiver nobody talks to gives up after --wait.
    let (ctl, data) = ports();
    let (o, t) = wait_bounded(
        cmd(
            None,
            &a(&format!(
                "-r -m 1,*,127.0.0.1 --wait 1 --control-port {ctl} -p {data}"
            )),
        )
        .spawn()
        .unwrap(),
        lim,
        "receiver",
    );
    assert_fails(&o, "no sender connected");
    assert!(t < Duration::from_secs(4), "{t:?}");

    // Bad flags.
    for (flags, want) in [
        ("-s -m 1,x,127.0.0.1", "cpu must be a number"),
        ("-s -m 1,*,127.0.0.1 -P 0", "-P 0"),
        ("-s -m 1,64000,127.0.0.1 -N -p 1", "cannot pin to CPU 64000"),
        (
            "-s -m 1,*,127.0.0.1 --overlap-us 500",
            "--overlap-us needs --mode queue-pair",
        ),
        (
            "-s -m 1,*,127.0.0.1 -l 18446744073709551615 -n 2",
            "more than can be counted",
        ),
    ] {
        let (o, _) = wait_bounded(cmd(None, &a(flags)).spawn().unwrap(), lim, flags);
        assert_fails(&o, want);
    }
}

/// A port the sender must know is never 0 (the kernel would pick one no
/// sender could know): `-p 0` and `--control-port 0` are refused while
/// parsing, on either side, with what to give.
#[test]
fn port_zero_is_refused_where_the_peer_must_know_the_port() {
    for flags in [
        "-r -m 1,*,127.0.0.1 -p 0",
        "-s -m 1,*,127.0.0.1 -p 0",
        "-r -m 1,*,127.0.0.1 --control-port 0",
        "-s -m 1,*,127.0.0.1 --control-port 0",
        "-r -m 1,*,127.0.0.1 -N --control-port 0",
    ] {
        let (o, _) = wait_bounded(
            cmd(None, &a(&format!("{flags} --wait 1"))).spawn().unwrap(),
            Duration::from_secs(10),
            flags,
        );
        assert_eq!(o.status.code(), Some(2), "{flags}: {}", err_line(&o));
        assert_fails(&o, "a port must be 1-65535");
    }
}

/// A report written to a pipe closed early (`flowlane-ttcp ... | true`) is
/// dropped: no panic (exit 101, a backtrace), the run ends as usual.
#[test]
fn a_closed_stdout_pipe_does_not_panic() {
    let (ctl, data) = ports();
    let flags = format!("-m 1,*,127.0.0.1 -W 0.2 -t 0.5 -C 0.2 -j --control-port {ctl} -p {data}");
    let mut rx = cmd(None, &a(&format!("-r {flags}"))).spawn().unwrap();
    // The reader of the receiver's stdout goes away before it writes.
    drop(rx.stdout.take());
    std::thread::sleep(Duration::from_millis(300));
    let tx = cmd(None, &a(&format!("-s {flags}"))).spawn().unwrap();
    let (txo, _) = wait_bounded(tx, Duration::from_secs(30), "sender");
    let (rxo, _) = wait_bounded(rx, Duration::from_secs(30), "receiver");
    assert!(txo.status.success(), "{}", err_line(&txo));
    let e = err_line(&rxo);
    assert_ne!(rxo.status.code(), Some(101), "{e}");
    assert!(!e.contains("panicked") && !e.contains("Broken pipe"), "{e}");
    assert!(rxo.status.success(), "{e}");
}
