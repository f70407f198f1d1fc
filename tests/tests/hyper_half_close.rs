//! `flowlane hyper-server` and clients that half-close once their request
//! is sent (`nc -N`, `shutdown(SHUT_WR)`, as many scripted clients do):
//! every one is answered, on flowlane's TCP (AF_XDP and kernel sockets)
//! and on tokio's own listener (`--tokio-baseline`), where hyper by
//! default takes the FIN for a request cut short and drops the connection
//! unanswered. A FIN within a head still ends the connection at once,
//! unanswered.

mod tcp_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use flowlane_testbed::netns::in_netns;
use flowlane_tests::{require_root, Bed};
use tcp_common::*;

const PORT: &str = "8084";
const BODY: &str = "hi from hyper\n";
/// Connections of each kind of request.
const CLIENTS: usize = 20;

/// What the server sent to one connection that sent `request` and
/// half-closed at once; and how long until the server's FIN.
fn half_closed_exchange(request: &[u8]) -> anyhow::Result<(String, Duration)> {
    let mut s = TcpStream::connect(format!("10.99.0.1:{PORT}"))?;
    // The bed's peer, not a host the root namespace's routes reach.
    let local = s.local_addr()?.ip().to_string();
    anyhow::ensure!(local.starts_with("10.99."), "connected from {local}");
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request)?;
    s.shutdown(Shutdown::Write)?;
    let start = Instant::now();
    let mut got = Vec::new();
    s.read_to_end(&mut got)?;
    Ok((String::from_utf8_lossy(&got).into_owned(), start.elapsed()))
}

/// From the bed's peer: [`CLIENTS`] connections for each of an HTTP/1.0
/// GET, an HTTP/1.1 HEAD and an HTTP/1.1 GET that closes, each
/// half-closed after its request, every one answered; then a head cut
/// short by the FIN, which gets no answer and no wait.
fn half_closing_clients_are_answered(bed: &Bed, what: &str) {
    let answers = in_netns(&bed.peer_ns, || {
        let mut answers = Vec::new();
        for (request, body) in [
            (&b"GET / HTTP/1.0\r\n\r\n"[..], BODY),
            (b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", ""),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                BODY,
            ),
        ] {
            for _ in 0..CLIENTS {
                let (got, _) = half_closed_exchange(request)?;
                let ok = got.starts_with("HTTP/1.") && got.contains(" 200 OK\r\n");
                answers.push((ok && got.ends_with(&format!("\r\n\r\n{body}")), got));
            }
        }
        let (got, took) = half_closed_exchange(b"GET / HTTP/1.1\r\nHost:")?;
        anyhow::ensure!(got.is_empty(), "a head cut short was answered: {got:?}");
        anyhow::ensure!(took < Duration::from_secs(5), "closed after {took:?}");
        Ok(answers)
    })
    .unwrap();
    let unanswered: Vec<_> = answers.iter().filter(|(ok, _)| !ok).collect();
    assert!(
        unanswered.is_empty(),
        "{what}: {} of {} unanswered, e.g. {:?}",
        unanswered.len(),
        answers.len(),
        unanswered[0].1
    );
}

#[test]
fn clients_that_half_close_after_their_request_are_answered() {
    if !require_root("clients_that_half_close_after_their_request_are_answered") {
        return;
    }
    let bed = Bed::up("hf53hc", 2);
    let base = ["hyper-server", "--port", PORT, "--body", BODY];
    // An idle timeout far longer than a head cut short may take to end.
    let idle = ["--idle-timeout", "30"];
    for backend in ["xdp", "kernel"] {
        let own = ["--backend", backend, "--control-socket", "none"];
        let args = [&base[..], &idle, &own, &["--daemon-socket", "none"]].concat();
        let app = start(&bed, &args, 120);
        half_closing_clients_are_answered(&bed, backend);
        app.stop();
    }
    let args = [&base[..], &idle, &["--tokio-baseline", "--queues", "2"]].concat();
    let app = start(&bed, &args, 120);
    half_closing_clients_are_answered(&bed, "--tokio-baseline");
    app.stop();
}
