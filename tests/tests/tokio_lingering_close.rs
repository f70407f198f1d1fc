//! A tokio stream dropped with received bytes unread, on flowlane's TCP
//! (`flowlane hyper-server` on AF_XDP, kernel TCP in the bed's peer
//! namespace as the client): what the application wrote before the drop
//! reaches the peer, then its FIN (a lingering close, RFC 9112 §9.6), not
//! a reset that destroys the response; a peer that never stops sending is
//! reset within the linger ([`flowlane_tokio::LINGER`]).

mod tcp_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use flowlane_testbed::netns::in_netns;
use flowlane_tests::{require_root, Bed};
use serde_json::Value;
use tcp_common::*;

const PORT: u16 = 8084;

/// The response body: large enough that the response takes several
/// segments (a reset right after it was queued finds most of it unsent).
fn body() -> String {
    "hi from hyper\n".repeat(600)
}

/// `flowlane hyper-server` on `bed`, on AF_XDP, answering [`body`].
fn hyper_server(bed: &Bed) -> App {
    let port = PORT.to_string();
    let body = body();
    let args = [
        "hyper-server",
        "--backend",
        "xdp",
        "--port",
        &port,
        "--body",
        &body,
    ];
    start(bed, &args, 120)
}

/// The summary's counters of the streams (`application.tokio`).
fn stream_counters(lines: &[Value]) -> Value {
    let summary = lines
        .iter()
        .find(|v| v["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {lines:?}"));
    summary["application"]["tokio"].clone()
}

/// How reading a connection ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The server's FIN.
    Eof,
    /// An error (a reset: `ConnectionReset`).
    Error(std::io::ErrorKind),
}

/// Sends `request` to the server (from another thread, as it may not read
/// it all) and reads what comes back until the connection ends (10 s at
/// most).
fn exchange(request: Vec<u8>) -> std::io::Result<(Vec<u8>, End)> {
    let s = TcpStream::connect(("10.99.0.1", PORT))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut w = s.try_clone()?;
    let writer = std::thread::spawn(move || {
        // A reset before it was all sent fails the write: what was read
        // tells.
        let _ = w.write_all(&request);
    });
    let (got, end) = read_to_end(&s);
    let _ = writer.join();
    Ok((got, end))
}

/// Everything read from `s` until it ends, and how it did.
fn read_to_end(mut s: &TcpStream) -> (Vec<u8>, End) {
    let mut got = Vec::new();
    let mut buf = vec![0; 64 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, End::Eof),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return (got, End::Error(e.kind())),
        }
    }
}

/// Whether `got` is a whole response with status `status` (its body
/// [`body`] for a 200).
fn whole_response(got: &[u8], status: u16) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some((head, rest)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    head.starts_with(&format!("HTTP/1.1 {status} ")) && (status != 200 || rest == body())
}

/// A POST whose body the service never reads, of 16 and 64 KiB, 20 times
/// each, and a request URI too long for hyper (answered `431`) 5 times:
/// the whole response arrives every time, then the server's FIN (the
/// stream was dropped with the body unread; a reset then destroyed the
/// response still in the stack's send buffer). The client closes after
/// it: no linger runs out.
#[test]
fn tokio_on_flowlane_delivers_a_response_to_a_request_it_did_not_read() {
    if !require_root("tokio_on_flowlane_delivers_a_response_to_a_request_it_did_not_read") {
        return;
    }
    let bed = Bed::up("tlc", 2);
    let app = hyper_server(&bed);
    let mut requests: Vec<(String, Vec<u8>, u16)> = Vec::new();
    for kib in [16usize, 64] {
        for i in 0..20 {
            let mut r = format!(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                kib << 10
            )
            .into_bytes();
            r.resize(r.len() + (kib << 10), b'a');
            requests.push((format!("{kib} KiB body, try {i}"), r, 200));
        }
    }
    for i in 0..5 {
        let r = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(200 << 10));
        requests.push((format!("200 KiB URI, try {i}"), r.into_bytes(), 431));
    }
    let failed = in_netns(&bed.peer_ns, move || {
        let mut failed = Vec::new();
        for (what, request, status) in requests {
            let (got, end) = exchange(request)?;
            if !whole_response(&got, status) || end != End::Eof {
                let head = String::from_utf8_lossy(&got[..got.len().min(40)]).into_owned();
                failed.push(format!("{what}: {} bytes ({head:?}), {end:?}", got.len()));
            }
        }
        Ok(failed)
    })
    .unwrap();
    let lines = app.stop();
    let streams = stream_counters(&lines);
    assert!(failed.is_empty(), "{} failed: {failed:#?}", failed.len());
    assert!(streams["lingered"].as_u64().unwrap() > 0, "{streams}");
    assert_eq!(streams["linger_expired"], 0, "{streams}");
}

/// A peer that sends a body without end and never closes: it gets the
/// whole response and the server's FIN, its bytes are dropped as they
/// come (rather than reset at once, as they were), and the connection is
/// reset at the end of the linger (within the sweep's tenth of a second
/// and some slack), counted.
#[test]
fn tokio_on_flowlane_resets_a_peer_that_never_stops_sending_after_the_linger() {
    if !require_root("tokio_on_flowlane_resets_a_peer_that_never_stops_sending_after_the_linger") {
        return;
    }
    let bed = Bed::up("tls", 2);
    let app = hyper_server(&bed);
    let (got, end, reset_after) = in_netns(&bed.peer_ns, || {
        let s = TcpStream::connect(("10.99.0.1", PORT))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut w = s.try_clone()?;
        let writer = std::thread::spawn(move || {
            let _ =
                w.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n");
            let chunk = vec![b'a'; 16 << 10];
            let start = Instant::now();
            // Until the reset (or 30 s: a connection held for good).
            while start.elapsed() < Duration::from_secs(30) {
                if w.write_all(&chunk).is_err() {
                    return Instant::now();
                }
            }
            Instant::now()
        });
        let (got, end) = read_to_end(&s);
        let answered = Instant::now();
        let stopped = writer.join().expect("the writer");
        Ok((got, end, stopped.saturating_duration_since(answered)))
    })
    .unwrap();
    let lines = app.stop();
    let streams = stream_counters(&lines);
    assert!(
        whole_response(&got, 200),
        "{} bytes: {:?}",
        got.len(),
        String::from_utf8_lossy(&got[..got.len().min(200)])
    );
    assert_eq!(end, End::Eof, "the server's FIN after the response");
    // The linger counts from the FIN (the client's end of stream), the
    // last byte the stack took of the response.
    let (least, most) = (
        flowlane_tokio::LINGER - Duration::from_millis(500),
        flowlane_tokio::LINGER + Duration::from_millis(1500),
    );
    assert!(
        (least..=most).contains(&reset_after),
        "reset {reset_after:?} after the response (not within {least:?} to {most:?}); {streams}"
    );
    assert_eq!(streams["lingered"], 1, "{streams}");
    assert_eq!(streams["linger_expired"], 1, "{streams}");
    assert!(
        streams["linger_discarded"].as_u64().unwrap() > 1 << 20,
        "{streams}"
    );
}
