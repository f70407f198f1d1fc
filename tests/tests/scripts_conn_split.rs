//! `scripts/lib/conn_split.py`, the classifier behind `SPLIT=1
//! scripts/conn-rate.sh`: it assigns each sample of a whole-machine `perf
//! record -a -g` taken during a wrk run to the server's part, the client's
//! (wrk and its kernel TCP), other work or idle. Run here on recorded
//! `perf script` text (`tests/fixtures/conn-split/`, samples picked from
//! real runs on the two-queue bed: flowlane's http-server on AF_XDP and
//! nginx; each file's comment names the processes), so that CI needs
//! neither perf nor a bed; each rule decides at least one sample of the
//! fixtures, so a broken rule changes the counts.

use std::path::{Path, PathBuf};
use std::process::Command;

use flowlane_tests::script_repo::scripts_dir;
use flowlane_tests::text;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/conn-split")
        .join(name)
}

/// The classifier's output on `file` with `args`.
fn split(args: &[&str], file: &Path) -> String {
    let o = Command::new("python3")
        .arg(scripts_dir().join("lib/conn_split.py"))
        .args(args)
        .arg(file)
        .output()
        .expect("running python3");
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// Samples per class, from the classifier's table.
fn counts(out: &str) -> Vec<(String, u64)> {
    out.lines()
        .filter(|l| l.ends_with(" %") && !l.starts_with("busy samples"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = w[w.len() - 3].parse().unwrap();
            (w[..w.len() - 3].join(" "), n)
        })
        .collect()
}

fn expect(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

/// The flowlane fixture's processes: the server (pid 25434) and wrk.
const FLOWLANE: [&str; 4] = ["--server-pid", "25434", "--client-pid", "25484"];
/// The nginx fixture's: its two workers and wrk.
const NGINX: [&str; 6] = [
    "--server-pid",
    "25385",
    "--server-pid",
    "25386",
    "--client-pid",
    "25987",
];

/// flowlane on AF_XDP: in wrk's process veth's XDP hook (the program, the
/// redirect, AF_XDP's copy into the UMEM) and the flush that wakes the
/// socket are the server's, the bed's RSS program on wrk's transmit is
/// not; in flowlane's process the client's `tcp_v4_rcv` (behind the TX
/// kick) is the client's, the rest (the kick itself, the poll, user space)
/// the server's; another flowlane process (the script's kernel-backend
/// server) is other, as are rustc, a thread whose name holds a space and
/// ksoftirqd; swapper is idle.
#[test]
fn flowlane_s_receive_in_wrk_s_context_is_the_server_s() {
    let out = split(
        &[&["--rx", "xdp"][..], &FLOWLANE].concat(),
        &fixture("flowlane.txt"),
    );
    assert_eq!(
        counts(&out),
        expect(&[
            ("server: user space", 3),
            ("server: kernel", 3),
            ("server: its receive, in the client's context", 3),
            ("client: wrk, user space", 2),
            ("client: wrk, kernel", 3),
            ("client: its TCP receive, in the server's context", 3),
            ("other", 4),
            ("idle", 2),
        ]),
        "{out}"
    );
}

/// nginx on kernel TCP: in wrk's process `tcp_v4_rcv` is the server's
/// receive, the XDP pass of flowlane's program (attached on the bed for
/// both servers) and the RSS program the client's; in nginx's processes
/// `tcp_v4_rcv` is the client's; a sample with no thread name (`:-1`) is
/// other.
#[test]
fn nginx_s_tcp_receive_in_wrk_s_context_is_the_server_s() {
    let out = split(
        &[&["--rx", "kernel"][..], &NGINX].concat(),
        &fixture("nginx.txt"),
    );
    assert_eq!(
        counts(&out),
        expect(&[
            ("server: user space", 2),
            ("server: kernel", 3),
            ("server: its receive, in the client's context", 3),
            ("client: wrk, user space", 2),
            ("client: wrk, kernel", 3),
            ("client: its TCP receive, in the server's context", 3),
            ("other", 4),
            ("idle", 2),
        ]),
        "{out}"
    );
}

/// A recording read with the other kind of receive moves exactly the
/// samples the receive rules decide: flowlane's three XDP receives in
/// wrk's process become the client's; in nginx's recording wrk's three
/// `tcp_v4_rcv` become the client's and the XDP pass the server's.
#[test]
fn the_receive_rule_follows_the_server_s_kind() {
    let rx = "server: its receive, in the client's context";
    let wrk = "client: wrk, kernel";
    let out = split(
        &[&["--rx", "kernel"][..], &FLOWLANE].concat(),
        &fixture("flowlane.txt"),
    );
    let c = counts(&out);
    assert_eq!((&c[2], &c[4]), (&(rx.into(), 0), &(wrk.into(), 6)), "{out}");
    let out = split(
        &[&["--rx", "xdp"][..], &NGINX].concat(),
        &fixture("nginx.txt"),
    );
    let c = counts(&out);
    assert_eq!((&c[2], &c[4]), (&(rx.into(), 1), &(wrk.into(), 5)), "{out}");
}

/// Microseconds per connection: each part's share of the busy (not idle)
/// samples times the busy CPU seconds, over the connections; the last
/// line for scripts.
#[test]
fn microseconds_per_connection_share_the_busy_time() {
    // 21 busy samples of 23: server 9, client 8, other 4; 2.1 busy CPU
    // seconds over 100,000 connections: 21 µs of busy time per connection.
    let args = ["--rx", "xdp", "--conns", "100000", "--busy-cpu-s", "2.1"];
    let out = split(&[&args[..], &FLOWLANE].concat(), &fixture("flowlane.txt"));
    assert_eq!(
        out.lines().last(),
        Some("split server_us=9.00 client_us=8.00 other_us=4.00 busy_samples=21"),
        "{out}"
    );
}

/// `SPLIT=1 scripts/conn-rate.sh` where perf cannot record every CPU (a VM
/// without the events, a paranoid setting): one line says so and the run
/// goes on without the split (no recording per cell, the plain table).
/// The bed, the servers and wrk are fakes (`ip netns exec` answers what
/// the script asks of it).
#[test]
fn conn_rate_without_a_working_perf_says_so_and_runs_unsplit() {
    use flowlane_tests::script_repo::{fake_program, ScriptRepo};
    let repo = ScriptRepo::new("conn-split-noperf", "conn-rate.sh");
    repo.fake_on_path("id", "echo 0\n");
    for f in ["wrk", "nginx", "curl"] {
        repo.fake_on_path(f, "exit 0\n");
    }
    repo.fake_on_path(
        "ip",
        "case \"$*\" in\n\
         *'addr show'*) echo '2: xsk0    inet 10.9.0.2/24 scope global xsk0' ;;\n\
         *' wrk '*) echo 'Requests/sec:   1000.00' ;;\n\
         esac\nexit 0\n",
    );
    repo.fake_on_path(
        "perf",
        &format!(
            "{}echo 'Error: perf_event_open: Permission denied' >&2\nexit 1\n",
            ScriptRepo::logging("perf")
        ),
    );
    fake_program(
        &repo.dir.path("cwd/flowlane"),
        "echo \"flowlane $*\" >>\"$FAKE_LOG\"\n",
    );
    let o = repo.run(
        &["50"],
        &[
            ("FLOWLANE", "./flowlane"),
            ("SPLIT", "1"),
            ("SERVERS", "nginx"),
            ("SECS", "1"),
        ],
    );
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{}", text(&o));
    let says: Vec<&str> = err.lines().filter(|l| l.contains("perf")).collect();
    assert_eq!(
        says,
        ["conn-rate: SPLIT=1 but perf cannot record every CPU (Error: perf_event_open: Permission denied): no split"],
        "{}",
        text(&o)
    );
    assert!(
        out.contains(
            "| server | clients | connections/s | errors | connections per CPU-second |\n"
        ),
        "{out}"
    );
    assert!(out.contains("| nginx | 50 | 1000.00 | 0 |"), "{out}");
    let perf_runs = repo
        .log()
        .lines()
        .filter(|l| l.starts_with("perf "))
        .count();
    assert_eq!(perf_runs, 1, "only the check: {}", repo.log());
}

/// The class of the one sample of `fixture` whose call chain holds
/// `symbol` (a frame's symbol ends with it), read with `args`.
fn class_of(args: &[&str], fixture_name: &str, symbol: &str) -> String {
    let all = std::fs::read_to_string(fixture(fixture_name)).unwrap();
    let blocks: Vec<&str> = all
        .split("\n\n")
        .filter(|b| b.lines().any(|l| l.trim_end().ends_with(symbol)))
        .collect();
    assert_eq!(blocks.len(), 1, "samples with {symbol}");
    let dir = flowlane_tests::OpenDir::new("conn-split-one");
    let one = dir.path("one.txt");
    std::fs::write(&one, format!("{}\n\n", blocks[0])).unwrap();
    let out = split(args, &one);
    let hit: Vec<String> = counts(&out)
        .into_iter()
        .filter(|(_, n)| *n == 1)
        .map(|(c, _)| c)
        .collect();
    assert_eq!(hit.len(), 1, "{out}");
    hit[0].clone()
}

/// Session 27's rule took every `bpf_prog_` in wrk's process for
/// flowlane's receive and missed the socket's wake-up: the bed's RSS
/// program on wrk's transmit is the client's path, the flush that wakes
/// flowlane's socket at the end of veth's NAPI poll the server's. (The
/// class counts alone do not tell: that rule swaps these two samples.)
#[test]
fn the_bed_s_rss_program_is_the_client_s_and_the_socket_s_wake_up_the_server_s() {
    let args = [&["--rx", "xdp"][..], &FLOWLANE].concat();
    assert_eq!(
        class_of(&args, "flowlane.txt", "flowlane_rss"),
        "client: wrk, kernel"
    );
    assert_eq!(
        class_of(&args, "flowlane.txt", "__xsk_map_flush"),
        "server: its receive, in the client's context"
    );
}
