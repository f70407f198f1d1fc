//! A flood of spoofed SYNs against a listener (RFC 4987): the half-open
//! table stays at its cap, further SYNs are answered with SYN cookies and
//! nothing is kept for them, legitimate clients still connect (with their
//! options) and transfer, and forged ACKs open nothing.
//!
//! The stacks are driven by hand here, not through the simulator: the
//! flood's SYN-ACKs go to addresses that do not exist, and must not be
//! answered by anyone.

mod sim;

use flowlane_tcp::time::{Duration, Instant};
use flowlane_tcp::{Config, ConnHandle, Event, Stack};
use flowlane_wire::tcp::{TcpFlags, TcpOptions};
use flowlane_wire::TcpRepr;
use sim::{test_config, Rng, A_IP, B_IP};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

const BACKLOG: usize = 8;

fn server(cookies: bool) -> Stack {
    server_and_listener(cookies).0
}

/// B with a listener on port 80 (and that listener).
fn server_and_listener(cookies: bool) -> (Stack, flowlane_tcp::ListenerId) {
    let mut cfg = test_config(2);
    cfg.listen_backlog = BACKLOG;
    cfg.syn_cookies = cookies;
    let mut b = Stack::new(cfg);
    let l = b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    (b, l)
}

fn emit(repr: &TcpRepr, payload: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0u8; 60];
    let n = repr.emit(&mut bytes).unwrap();
    bytes.truncate(n);
    bytes.extend_from_slice(payload);
    bytes
}

/// `n` spoofed SYNs (random sources, Linux-like options) at `now`.
fn flood(b: &mut Stack, rng: &mut Rng, now: Instant, n: usize) {
    flood_port(b, rng, now, n, 80);
}

/// Every segment `from` has to send at `now`, parsed.
fn drain(from: &mut Stack, now: Instant) -> Vec<(flowlane_tcp::Transmit, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        out.push((t, buf[..t.len].to_vec()));
    }
    out
}

/// Moves what `from` sends to `to`, except what `lose` picks.
fn deliver(
    from: &mut Stack,
    to: &mut Stack,
    now: Instant,
    mut lose: impl FnMut(&TcpRepr, usize) -> bool,
) {
    for (t, bytes) in drain(from, now) {
        let (repr, payload) = TcpRepr::parse_segment(&bytes).unwrap();
        if !lose(&repr, payload.len()) {
            to.handle_segment(now, t.src.ip(), t.dst.ip(), &bytes);
        }
    }
}

/// Runs both stacks for `ms` milliseconds, 1 ms at a time; collects
/// their events.
fn run(
    a: &mut Stack,
    b: &mut Stack,
    now: &mut Instant,
    ms: u64,
    ev: &mut (Vec<Event>, Vec<Event>),
) {
    for _ in 0..ms {
        *now += Duration::from_millis(1);
        a.handle_timeout(*now);
        b.handle_timeout(*now);
        deliver(a, b, *now, |_, _| false);
        // B's answers to the flood go nowhere; only A's tuples reach A.
        for (t, bytes) in drain(b, *now) {
            if t.dst.ip() == A_IP {
                a.handle_segment(*now, t.src.ip(), t.dst.ip(), &bytes);
            }
        }
        while let Some(e) = a.poll_event() {
            ev.0.push(e);
        }
        while let Some(e) = b.poll_event() {
            ev.1.push(e);
        }
    }
}

fn accepted(events: &[Event]) -> Vec<ConnHandle> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Accepted { conn, .. } => Some(*conn),
            _ => None,
        })
        .collect()
}

/// A moves `len` bytes to B and B reads them back exactly.
fn transfer(
    a: &mut Stack,
    b: &mut Stack,
    now: &mut Instant,
    ca: ConnHandle,
    cb: ConnHandle,
    len: usize,
) {
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let (mut off, mut got) = (0, Vec::new());
    let mut buf = vec![0u8; 65_536];
    let mut ev = (Vec::new(), Vec::new());
    for _ in 0..20_000 {
        if off < len {
            off += a.send(ca, &data[off..]).unwrap_or(0);
        }
        run(a, b, now, 1, &mut ev);
        while let Ok(n) = b.recv(cb, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        if got.len() == len {
            break;
        }
    }
    assert!(
        got == data,
        "B read {} of {len} bytes, or other bytes",
        got.len()
    );
}

#[test]
fn a_flooded_listener_answers_with_cookies_and_a_client_still_connects() {
    let mut b = server(true);
    let mut rng = Rng::new(1);
    let mut now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, 1_000);
    let out = drain(&mut b, now);
    let syn_acks = out
        .iter()
        .filter(|(_, s)| {
            TcpRepr::parse_segment(s).unwrap().0.flags == TcpFlags::SYN | TcpFlags::ACK
        })
        .count();
    assert_eq!(syn_acks, 1_000, "one SYN-ACK per SYN, no more");
    let s = *b.stats();
    assert_eq!(b.connection_count(), BACKLOG, "nothing kept beyond the cap");
    assert_eq!(s.syn_cookies_sent, 1_000 - BACKLOG as u64);
    assert_eq!(s.syn_dropped, 0);

    // A legitimate client, during the flood.
    let mut a = Stack::new(test_config(1));
    let ca = a
        .connect(
            now,
            SocketAddr::new(A_IP, 40_000),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    // Its SYN gets a cookie too (the backlog is full), with every option.
    deliver(&mut a, &mut b, now, |_, _| false);
    let out = drain(&mut b, now);
    assert_eq!(out.len(), 1);
    let (t, bytes) = &out[0];
    let syn_ack = TcpRepr::parse_segment(bytes).unwrap().0;
    assert_eq!(syn_ack.flags, TcpFlags::SYN | TcpFlags::ACK);
    assert!(syn_ack.options.window_scale.is_some() && syn_ack.options.sack_permitted);
    assert!(syn_ack.options.timestamps.is_some());
    assert_eq!(b.stats().syn_cookies_sent, 1_000 - BACKLOG as u64 + 1);
    a.handle_segment(now, t.src.ip(), t.dst.ip(), bytes);
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 5, &mut ev);
    assert!(ev.0.contains(&Event::Connected(ca)), "{:?}", ev.0);
    let cb = accepted(&ev.1);
    assert_eq!(cb.len(), 1, "{:?}", ev.1);
    assert_eq!(b.stats().syn_cookies_accepted, 1);
    assert_eq!(b.connection_count(), BACKLOG + 1);
    // Window scaling, SACK and timestamps survived the cookie: 4 MiB go
    // through windows far above 64 KiB.
    transfer(&mut a, &mut b, &mut now, ca, cb[0], 4 << 20);
    // Both ends agreed on them: a scale mismatch would overrun B's window
    // and cost retransmissions.
    assert_eq!(a.stats().retransmits, 0, "{:?}", a.stats());
    assert_eq!(b.stats().unacceptable, 0, "{:?}", b.stats());
}

#[test]
fn forged_acks_open_nothing() {
    let mut b = server(true);
    let mut rng = Rng::new(2);
    let now = Instant::from_millis(1_000);
    // Without a recent cookie, an ACK is not even checked.
    let ack = |rng: &mut Rng| TcpRepr {
        src_port: 1024 + rng.below(60_000) as u16,
        dst_port: 80,
        seq: rng.next_u64() as u32,
        ack: rng.next_u64() as u32,
        flags: TcpFlags::ACK,
        window: 1000,
        urgent: 0,
        options: TcpOptions::default(),
    };
    b.handle_segment(now, A_IP, B_IP, &emit(&ack(&mut rng), &[]));
    assert_eq!(b.stats().syn_cookies_failed, 0);
    flood(&mut b, &mut rng, now, 100);
    drain(&mut b, now);
    for _ in 0..20_000 {
        b.handle_segment(now, A_IP, B_IP, &emit(&ack(&mut rng), b"GET /"));
        drain(&mut b, now);
    }
    let s = *b.stats();
    assert_eq!(s.syn_cookies_failed, 20_000);
    // And the one before the flood, when no cookie had gone out.
    assert_eq!((s.resets_out, s.resets_listener_ack), (20_001, 20_001));
    assert_eq!(s.syn_cookies_accepted, 0);
    assert_eq!(b.connection_count(), BACKLOG);
    assert!(b.poll_event().is_none(), "nothing accepted");
}

#[test]
fn a_client_without_timestamps_gets_a_plain_cookie() {
    let mut b = server(true);
    let mut rng = Rng::new(3);
    let mut now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, 50);
    drain(&mut b, now);
    let mut cfg: Config = test_config(1);
    cfg.timestamps = false;
    let mut a = Stack::new(cfg);
    let ca = a
        .connect(
            now,
            SocketAddr::new(A_IP, 40_001),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    // The SYN-ACK offers neither window scaling nor SACK: nothing could
    // carry them back.
    deliver(&mut a, &mut b, now, |_, _| false);
    let out = drain(&mut b, now);
    let (t, bytes) = &out[0];
    assert_eq!(t.dst.ip(), A_IP);
    let syn_ack = TcpRepr::parse_segment(bytes).unwrap().0;
    assert_eq!(syn_ack.flags, TcpFlags::SYN | TcpFlags::ACK);
    assert_eq!(syn_ack.options.window_scale, None);
    assert!(!syn_ack.options.sack_permitted);
    assert_eq!(syn_ack.options.timestamps, None);
    assert_eq!(syn_ack.options.mss, Some(1460));
    a.handle_segment(now, t.src.ip(), t.dst.ip(), bytes);
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 5, &mut ev);
    let cb = accepted(&ev.1);
    assert_eq!(cb.len(), 1, "{:?}", ev.1);
    transfer(&mut a, &mut b, &mut now, ca, cb[0], 300_000);
}

#[test]
fn data_on_a_lost_handshake_ack_opens_the_connection_from_the_cookie() {
    let mut b = server(true);
    let mut rng = Rng::new(4);
    let mut now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, 50);
    drain(&mut b, now);
    let mut a = Stack::new(test_config(1));
    let ca = a
        .connect(
            now,
            SocketAddr::new(A_IP, 40_002),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    deliver(&mut a, &mut b, now, |_, _| false);
    deliver(&mut b, &mut a, now, |_, _| false);
    assert_eq!(a.poll_event(), Some(Event::Connected(ca)));
    // The handshake's ACK is lost; the request that follows carries the
    // same acknowledgment and opens the connection.
    deliver(&mut a, &mut b, now, |_, len| len == 0);
    assert_eq!(b.stats().syn_cookies_accepted, 0);
    a.send(ca, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    deliver(&mut a, &mut b, now, |_, _| false);
    assert_eq!(b.stats().syn_cookies_accepted, 1);
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 2, &mut ev);
    let cb = accepted(&ev.1);
    assert_eq!(cb.len(), 1);
    let mut buf = [0u8; 100];
    let n = b.recv(cb[0], &mut buf).unwrap();
    assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n\r\n");
}

#[test]
fn without_cookies_a_full_backlog_drops_syns() {
    let mut b = server(false);
    let mut rng = Rng::new(5);
    let now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, 100);
    assert_eq!(drain(&mut b, now).len(), BACKLOG);
    let s = *b.stats();
    assert_eq!(
        (s.syn_dropped, s.syn_cookies_sent),
        (100 - BACKLOG as u64, 0)
    );
}

#[test]
fn a_spoofed_syn_holds_its_place_for_seconds_and_draws_three_syn_acks() {
    let mut b = server(true);
    let mut rng = Rng::new(6);
    let mut now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, BACKLOG);
    let mut syn_acks = drain(&mut b, now).len();
    for _ in 0..10_000 {
        now += Duration::from_millis(1);
        b.handle_timeout(now);
        syn_acks += drain(&mut b, now).len();
    }
    assert_eq!(
        syn_acks,
        3 * BACKLOG,
        "1 + Config::max_synack_retransmits each"
    );
    assert_eq!(b.connection_count(), 0, "all gone after 1 + 2 + 4 s");
}

/// In SYN-RECEIVED, an ACK that does not acknowledge our SYN-ACK is
/// answered with an RST at its acknowledgment number (RFC 9293
/// §3.10.7.4), counted as the handshake's; the half-open connection
/// stays, and the real client's handshake still completes.
#[test]
fn a_wrong_ack_in_syn_received_draws_a_named_reset_and_keeps_the_connection() {
    let mut b = server(false);
    let mut a = Stack::new(test_config(1));
    let now = Instant::from_millis(1_000);
    let ca = client_connect(&mut a, now, 40_000, 80);
    deliver(&mut a, &mut b, now, |_, _| false);
    let syn_ack = drain(&mut b, now);
    assert_eq!(syn_ack.len(), 1, "the SYN-ACK");
    let (sa, _) = TcpRepr::parse_segment(&syn_ack[0].1).unwrap();
    let wrong = TcpRepr {
        src_port: 40_000,
        dst_port: 80,
        seq: sa.ack,
        ack: sa.seq.wrapping_add(1_000),
        flags: TcpFlags::ACK,
        window: 1_000,
        urgent: 0,
        // Timestamps were agreed: a segment without them is not taken.
        options: TcpOptions {
            timestamps: sa.options.timestamps.map(|(ours, theirs)| (theirs, ours)),
            ..TcpOptions::default()
        },
    };
    b.handle_segment(now, A_IP, B_IP, &emit(&wrong, &[]));
    let out = drain(&mut b, now);
    assert_eq!(out.len(), 1, "one answer: {:?}", b.stats());
    let (rst, _) = TcpRepr::parse_segment(&out[0].1).unwrap();
    assert!(rst.flags.rst() && !rst.flags.ack(), "{rst:?}");
    assert_eq!(rst.seq, wrong.ack, "at the ACK's number");
    let s = *b.stats();
    assert_eq!((s.resets_out, s.resets_handshake_ack), (1, 1), "{s:?}");
    assert_eq!(b.connection_count(), 1, "the half-open connection stays");
    // The SYN-ACK reaches A after all; A's ACK completes the handshake.
    for (t, bytes) in syn_ack {
        a.handle_segment(now, t.src.ip(), t.dst.ip(), &bytes);
    }
    deliver(&mut a, &mut b, now, |_, _| false);
    let mut events = Vec::new();
    while let Some(e) = b.poll_event() {
        events.push(e);
    }
    assert_eq!(accepted(&events).len(), 1, "accepted: {events:?}");
    assert_eq!(a.state(ca), Ok(flowlane_tcp::State::Established));
}

/// A client of `b` on port `port`, connecting from A's port `from`.
fn client_connect(a: &mut Stack, now: Instant, from: u16, port: u16) -> ConnHandle {
    a.connect(
        now,
        SocketAddr::new(A_IP, from),
        SocketAddr::new(B_IP, port),
    )
    .unwrap()
}

#[test]
fn at_the_connection_cap_syns_and_cookie_acks_are_dropped_until_a_slot_frees() {
    let mut cfg = test_config(2);
    cfg.listen_backlog = BACKLOG;
    cfg.max_connections = BACKLOG + 1;
    let mut b = Stack::new(cfg);
    b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let mut rng = Rng::new(7);
    let mut now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, 100);
    drain(&mut b, now);
    assert_eq!(b.connection_count(), BACKLOG);
    // Two clients: both SYNs get cookies (one slot is left), the first
    // ACK takes the last slot, the second is dropped: no RST, so that
    // the client's next segment (its request) tries again.
    let mut a = Stack::new(test_config(1));
    let c1 = client_connect(&mut a, now, 40_000, 80);
    let c2 = client_connect(&mut a, now, 40_001, 80);
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 20, &mut ev);
    assert!(ev.0.contains(&Event::Connected(c1)) && ev.0.contains(&Event::Connected(c2)));
    assert_eq!(accepted(&ev.1).len(), 1, "{:?}", ev.1);
    assert_eq!(b.connection_count(), BACKLOG + 1);
    let s = *b.stats();
    assert_eq!((s.syn_cookies_accepted, s.connection_limit_refused), (1, 1));
    assert_eq!(s.resets_out, 0);
    // A third client's SYN is dropped outright, and A's request on the
    // refused connection is too.
    let c3 = client_connect(&mut a, now, 40_002, 80);
    a.send(c2, b"GET /").unwrap();
    run(&mut a, &mut b, &mut now, 20, &mut ev);
    assert_eq!(b.stats().connection_limit_refused, 3);
    assert!(!ev.0.contains(&Event::Connected(c3)));
    // The flood's half-open connections time out after 7 s; the
    // retransmitted request (with its cookie) and SYN get in.
    run(&mut a, &mut b, &mut now, 16_000, &mut ev);
    assert!(ev.0.contains(&Event::Connected(c3)), "{:?}", ev.0);
    let cbs = accepted(&ev.1);
    assert_eq!(cbs.len(), 3, "{:?}", ev.1);
    let mut buf = [0u8; 16];
    let got: Vec<usize> = cbs
        .iter()
        .filter_map(|&c| b.recv(c, &mut buf).ok())
        .collect();
    assert!(got.contains(&5), "the request arrived: {got:?}");
    assert_eq!(b.stats().syn_cookies_accepted, 2);
}

#[test]
fn one_listener_cannot_take_every_connection() {
    let mut cfg = test_config(2);
    cfg.listener_max_connections = 2;
    let mut b = Stack::new(cfg);
    b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    b.listen(SocketAddr::new(B_IP, 81)).unwrap();
    let mut a = Stack::new(test_config(1));
    let mut now = Instant::from_millis(1_000);
    let on_80: Vec<ConnHandle> = (0..3)
        .map(|i| client_connect(&mut a, now, 40_000 + i, 80))
        .collect();
    let on_81 = client_connect(&mut a, now, 41_000, 81);
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 50, &mut ev);
    let connected = |ev: &[Event], c: &ConnHandle| ev.contains(&Event::Connected(*c));
    assert_eq!(on_80.iter().filter(|c| connected(&ev.0, c)).count(), 2);
    assert!(
        connected(&ev.0, &on_81),
        "the other listener still takes connections"
    );
    assert_eq!(b.stats().connection_limit_refused, 1);
    // One of port 80's connections closes: the third gets in on its
    // SYN's retransmission.
    let first = accepted(&ev.1)[0];
    b.abort(first).unwrap();
    run(&mut a, &mut b, &mut now, 3_000, &mut ev);
    assert_eq!(on_80.iter().filter(|c| connected(&ev.0, c)).count(), 3);
}

#[test]
fn connect_fails_at_the_stacks_cap() {
    let mut cfg = test_config(1);
    cfg.max_connections = 1;
    let mut a = Stack::new(cfg);
    let now = Instant::from_millis(1_000);
    client_connect(&mut a, now, 40_000, 80);
    let second = a.connect(
        now,
        SocketAddr::new(A_IP, 40_001),
        SocketAddr::new(B_IP, 80),
    );
    assert_eq!(second, Err(flowlane_tcp::Error::ConnectionLimit));
}

/// `n` spoofed SYNs (random sources, Linux-like options) to port `port`
/// at `now`.
fn flood_port(b: &mut Stack, rng: &mut Rng, now: Instant, n: usize, port: u16) {
    for _ in 0..n {
        let src = IpAddr::V4(Ipv4Addr::from(
            0x0a00_0000 | (rng.next_u64() as u32 & 0xff_ffff),
        ));
        let syn = TcpRepr {
            src_port: 1024 + (rng.below(60_000) as u16),
            dst_port: port,
            seq: rng.next_u64() as u32,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 64_240,
            urgent: 0,
            options: TcpOptions {
                mss: Some(1460),
                window_scale: Some(7),
                sack_permitted: true,
                timestamps: Some((rng.next_u64() as u32, 0)),
                ..TcpOptions::default()
            },
        };
        b.handle_segment(now, src, B_IP, &emit(&syn, &[]));
    }
}

/// The receive memory of the flood tests below: 4 MiB over a backlog of
/// 64, so that a half-open connection not crowded is offered 64 KiB (the
/// whole buffer), 63 KiB past the one segment every connection has
/// outside the budget: 63 of them per listener commit all of it.
const FLOOD_MEMORY: usize = 4 << 20;
const FLOOD_BACKLOG: usize = 64;

/// Floods `listeners` of B's six listeners (ports 80, 81, ...) with
/// `FLOOD_BACKLOG - 1` spoofed SYNs each (all half-open, no cookie yet),
/// then connects a client to port 80, moves 200 000 bytes and returns what
/// the flood committed and the window B then offers the client.
fn flood_then_client(listeners: u16) -> (usize, usize) {
    let mut cfg = test_config(2);
    cfg.listen_backlog = FLOOD_BACKLOG;
    cfg.recv_memory = FLOOD_MEMORY;
    let mut b = Stack::new(cfg);
    for p in 0..6u16 {
        b.listen(SocketAddr::new(B_IP, 80 + p)).unwrap();
    }
    let mut a = Stack::new(test_config(1));
    let mut rng = Rng::new(21);
    let mut now = Instant::from_millis(1);
    for p in 0..listeners {
        flood_port(&mut b, &mut rng, now, FLOOD_BACKLOG - 1, 80 + p);
    }
    let syn_acks = drain(&mut b, now);
    let flood = (FLOOD_BACKLOG - 1) * usize::from(listeners);
    assert_eq!(syn_acks.len(), flood);
    assert_eq!(b.connection_count(), flood, "all half-open, none by cookie");
    assert_eq!(b.stats().syn_cookies_sent, 0);
    let committed = b.recv_memory_committed();
    // A client connecting now is offered its whole buffer, and keeps it.
    let ca = client_connect(&mut a, now, 40_000, 80);
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 5, &mut ev);
    let cb = accepted(&ev.1)[0];
    transfer(&mut a, &mut b, &mut now, ca, cb, 200_000);
    // Two full segments draw an immediate ACK, which carries the window.
    a.send(ca, &[7; 3000]).unwrap();
    deliver(&mut a, &mut b, now, |_, _| false);
    let mut offered = 0;
    for (t, bytes) in drain(&mut b, now) {
        if t.dst.ip() == A_IP {
            let (r, _) = TcpRepr::parse_segment(&bytes).unwrap();
            offered = usize::from(r.window) << b_wscale(&syn_acks);
        }
    }
    (committed, offered)
}

/// Half-open connections promise at most a quarter of the receive memory:
/// a flood of spoofed SYNs that fills most of the backlog leaves the rest
/// of the budget to the established connections. Each half-open
/// connection is offered the receive memory over the backlog (64 KiB
/// here), so that, were every one offered that, the flood's 63 would
/// commit the whole 4 MiB and a legitimate client that connected during
/// the flood would be offered no window; past a quarter of the backlog
/// they are offered one segment, which commits nothing. (Before, each
/// half-open connection also counted the whole window its SYN-ACK offered,
/// and the flood's count divided the budget under pressure.)
#[test]
fn a_flood_promises_at_most_a_quarter_of_the_receive_memory() {
    let (committed, offered) = flood_then_client(1);
    assert!(
        committed > FLOOD_MEMORY / 8,
        "the flood's first half-open connections are offered their share: {committed}"
    );
    assert!(
        committed <= FLOOD_MEMORY / 4,
        "the flood holds {committed} bytes"
    );
    assert!(
        offered >= 32 * 1024,
        "B offered the client {offered} bytes of window during the flood"
    );
}

/// The quarter is the stack's, not each listener's: a flood spread over
/// five listeners (each holding a quarter of its backlog and more
/// half-open) commits no more than a flood of one, and a client of one
/// of them still gets its window. When each
/// listener counted only its own half-open connections, five of them
/// committed the whole 4 MiB and the client was offered a zero window.
#[test]
fn a_flood_over_several_listeners_promises_at_most_a_quarter_too() {
    let (committed, offered) = flood_then_client(5);
    assert!(
        committed <= FLOOD_MEMORY / 4,
        "the flood over five listeners holds {committed} bytes"
    );
    assert!(
        offered >= 32 * 1024,
        "B offered the client {offered} bytes of window during the flood"
    );
}

/// The window scale B offered in its SYN-ACKs.
fn b_wscale(syn_acks: &[(flowlane_tcp::Transmit, Vec<u8>)]) -> u8 {
    let (r, _) = TcpRepr::parse_segment(&syn_acks[0].1).unwrap();
    r.options.window_scale.unwrap_or(0)
}

/// Nor do a flood's half-open connections divide the receive memory that
/// the established ones share under pressure. Four clients with 256 KiB
/// buffers fill B's 1 MiB budget with data B has not read; 1 000 spoofed
/// SYNs arrive; B then reads one client's data (three quarters of the
/// budget stay committed: still under pressure). The window update offers
/// that client its share among the four established connections, not a
/// thousandth of the budget (about a kilobyte, when the half-open
/// connections counted).
#[test]
fn a_flood_does_not_divide_the_receive_memory_under_pressure() {
    let mut cfg = test_config(2);
    cfg.listen_backlog = 1024;
    cfg.recv_memory = 1 << 20;
    cfg.recv_buffer = 256 * 1024;
    cfg.recv_buffer_max = 256 * 1024;
    let mut b = Stack::new(cfg);
    b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let mut a = Stack::new(test_config(1));
    let mut now = Instant::from_millis(1);
    let clients: Vec<ConnHandle> = (0..4)
        .map(|i| client_connect(&mut a, now, 40_000 + i, 80))
        .collect();
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 5, &mut ev);
    let theirs = accepted(&ev.1);
    assert_eq!(theirs.len(), 4);
    let data = vec![3u8; 1 << 20];
    for _ in 0..300 {
        for &c in &clients {
            let _ = a.send(c, &data);
        }
        run(&mut a, &mut b, &mut now, 1, &mut ev);
    }
    let committed = b.recv_memory_committed();
    assert!(
        committed > (1 << 19),
        "under pressure: {committed} committed"
    );
    flood(&mut b, &mut Rng::new(22), now, 1000);
    let _ = drain(&mut b, now);
    let mut buf = vec![0u8; 1 << 16];
    while b.recv(theirs[0], &mut buf).is_ok_and(|n| n > 0) {}
    let port = b.four_tuple(theirs[0]).unwrap().remote.port();
    // B offers the smallest window scale that fits its largest buffer.
    let shift = (0..14)
        .find(|s| ((256 * 1024usize) >> s) <= 0xffff)
        .unwrap();
    let mut offered = 0;
    for (t, bytes) in drain(&mut b, now) {
        if t.dst.ip() == A_IP && t.dst.port() == port {
            let (r, _) = TcpRepr::parse_segment(&bytes).unwrap();
            offered = usize::from(r.window) << shift;
        }
    }
    assert!(
        offered >= 128 * 1024,
        "B offered {offered} bytes after the read, with the flood half-open"
    );
}

/// A listener's SYN filter (`Stack::set_syn_filter`) refusing a peer: the
/// SYN is answered with an RST, the client's connection ends refused, and
/// the server keeps nothing; another peer connects and transfers.
#[test]
fn a_syn_filter_refuses_at_the_syn_with_a_reset_and_keeps_nothing() {
    let (mut b, l) = server_and_listener(false);
    b.set_syn_filter(l, Some(Arc::new(|t| t.remote.port() != 40_000)))
        .unwrap();
    let mut a = Stack::new(test_config(1));
    let mut now = Instant::from_millis(1_000);
    let refused = a
        .connect(
            now,
            SocketAddr::new(A_IP, 40_000),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    deliver(&mut a, &mut b, now, |_, _| false);
    let out = drain(&mut b, now);
    assert_eq!(out.len(), 1, "one answer");
    let rst = TcpRepr::parse_segment(&out[0].1).unwrap().0;
    assert!(rst.flags.rst() && !rst.flags.syn(), "{rst:?}");
    assert_eq!(b.connection_count(), 0, "nothing kept");
    assert_eq!((b.stats().syn_refused, b.stats().passive_opens), (1, 0));
    assert_eq!(b.stats().resets_refused, 1);
    for (t, bytes) in out {
        a.handle_segment(now, t.src.ip(), t.dst.ip(), &bytes);
    }
    let mut closed = None;
    while let Some(e) = a.poll_event() {
        if let Event::Closed { conn, reason } = e {
            closed = Some((conn, reason));
        }
    }
    assert_eq!(
        closed,
        Some((refused, flowlane_tcp::CloseReason::Reset)),
        "the client sees its connection refused"
    );

    // Another port of the same peer is taken, and works.
    let ca = a
        .connect(
            now,
            SocketAddr::new(A_IP, 40_001),
            SocketAddr::new(B_IP, 80),
        )
        .unwrap();
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 50, &mut ev);
    let cb = *accepted(&ev.1).first().expect("accepted");
    transfer(&mut a, &mut b, &mut now, ca, cb, 100_000);
    assert_eq!(b.stats().syn_refused, 1);
}

/// A filter that refuses by the time a SYN cookie comes back (its budget
/// for the peer spent since the SYN): the cookie's ACK is answered with an
/// RST and opens nothing.
#[test]
fn a_syn_filter_also_refuses_a_returned_syn_cookie() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (mut b, l) = server_and_listener(true);
    let refuse = Arc::new(AtomicBool::new(false));
    let r = refuse.clone();
    b.set_syn_filter(l, Some(Arc::new(move |_| !r.load(Ordering::Relaxed))))
        .unwrap();
    let mut rng = Rng::new(2);
    let now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, 100);
    let _ = drain(&mut b, now);
    let mut a = Stack::new(test_config(1));
    a.connect(
        now,
        SocketAddr::new(A_IP, 40_000),
        SocketAddr::new(B_IP, 80),
    )
    .unwrap();
    deliver(&mut a, &mut b, now, |_, _| false);
    let before = b.connection_count();
    assert_eq!(b.stats().syn_cookies_sent, 100 - BACKLOG as u64 + 1);
    refuse.store(true, Ordering::Relaxed);
    // The cookie SYN-ACK to A, A's ACK back.
    deliver(&mut b, &mut a, now, |_, _| false);
    deliver(&mut a, &mut b, now, |_, _| false);
    let out = drain(&mut b, now);
    assert!(
        out.iter()
            .any(|(_, s)| TcpRepr::parse_segment(s).unwrap().0.flags.rst()),
        "answered with an RST"
    );
    assert_eq!(b.connection_count(), before, "opened nothing");
    assert_eq!(b.stats().syn_cookies_accepted, 0);
    assert_eq!(b.stats().syn_refused, 1);
    assert_eq!(
        b.stats().resets_refused,
        1,
        "the RST counted as the filter's"
    );
}

/// A closed connection's slot is held until its `Closed` is taken (so that
/// the application may key its state by the handle's index until then): it
/// counts against the cap like a live one, or a connect made before the
/// `Closed` is taken (in the callback of an earlier event) would grow the
/// slab past its reservation, one copy of the whole slab.
#[test]
fn a_slot_held_for_its_closed_counts_against_the_cap() {
    let mut cfg = test_config(1);
    cfg.max_connections = 1;
    let mut a = Stack::new(cfg);
    let now = Instant::from_millis(1_000);
    let first = client_connect(&mut a, now, 40_000, 80);
    a.abort(first).unwrap();
    let connect = |a: &mut Stack| {
        a.connect(
            now,
            SocketAddr::new(A_IP, 40_001),
            SocketAddr::new(B_IP, 80),
        )
    };
    assert_eq!(connect(&mut a), Err(flowlane_tcp::Error::ConnectionLimit));
    while let Some(e) = a.poll_event() {
        if matches!(e, flowlane_tcp::Event::Closed { .. }) {
            break;
        }
    }
    assert!(
        connect(&mut a).is_ok(),
        "the slot is free once its Closed was taken"
    );
}

/// What B commits and holds of a 1 MiB receive memory once 256 clients
/// connected while its backlog was full (so each through a SYN cookie)
/// and each sent it 64 KiB that B does not read; and how many connections
/// cookies opened.
fn memory_of_cookie_connections() -> (usize, usize, u64) {
    const CLIENTS: u16 = 256;
    let mut cfg = test_config(2);
    cfg.listen_backlog = BACKLOG;
    cfg.syn_cookies = true;
    cfg.recv_memory = 1 << 20;
    let mut b = Stack::new(cfg);
    b.listen(SocketAddr::new(B_IP, 80)).unwrap();
    let mut a = Stack::new(test_config(1));
    let mut rng = Rng::new(5);
    let mut now = Instant::from_millis(1);
    flood(&mut b, &mut rng, now, BACKLOG);
    drain(&mut b, now);
    let conns: Vec<ConnHandle> = (0..CLIENTS)
        .map(|i| client_connect(&mut a, now, 20_000 + i, 80))
        .collect();
    let mut ev = (Vec::new(), Vec::new());
    run(&mut a, &mut b, &mut now, 5, &mut ev);
    assert_eq!(accepted(&ev.1).len(), usize::from(CLIENTS));
    let data = vec![9u8; 64 * 1024];
    for _ in 0..200 {
        for &c in &conns {
            let _ = a.send(c, &data);
        }
        run(&mut a, &mut b, &mut now, 1, &mut ev);
    }
    (
        b.recv_memory_committed(),
        b.buffer_memory(),
        b.stats().syn_cookies_accepted,
    )
}

/// A connection rebuilt from a SYN cookie is bound by the window its
/// SYN-ACK offered, so that SYN-ACK offers what a crowded listener's
/// half-open connection is offered, one segment, which commits nothing;
/// the window then grows within the receive memory as any other
/// connection's. When it offered the whole 64 KiB buffer, outside the
/// budget, 256 unread cookie connections held 16 MiB against 1 MiB.
#[test]
fn connections_from_cookies_stay_within_the_receive_memory() {
    let (committed, held, from_cookies) = memory_of_cookie_connections();
    assert_eq!(from_cookies, 256, "every client connected through a cookie");
    // Past the budget: window-scale rounding (under 2^7 bytes a
    // connection) in the commitment; in the chunks held, what each
    // connection holds within its floor (one segment, in chunks: 4 KiB a
    // connection at most).
    let committed_bound = (1 << 20) + 256 * 128;
    let held_bound = (1 << 20) + 256 * 4096;
    assert!(
        committed <= committed_bound,
        "B committed {committed} of 1 MiB"
    );
    assert!(
        held <= held_bound,
        "B holds {held} bytes against a 1 MiB budget"
    );
}

/// A copy of the SYN that opened a half-open connection draws our SYN-ACK
/// again (RFC 9293 §3.10.7.4), but at most once per
/// `Config::invalid_ack_interval`, as Linux's `tcp_oow_rate_limited`
/// holds it: 1 000 copies in a millisecond (a spoofed source's, say) drew
/// 1 000 SYN-ACKs, a reflection, each also counted as a segment with bad
/// flags. The suppressed ones are counted; a client's retransmission a
/// second later is answered.
#[test]
fn copies_of_a_syn_draw_one_syn_ack_per_interval() {
    let mut b = server(true);
    let now = Instant::from_millis(1_000);
    let src = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9));
    let syn = TcpRepr {
        src_port: 5555,
        dst_port: 80,
        seq: 77,
        ack: 0,
        flags: TcpFlags::SYN,
        window: 64_240,
        urgent: 0,
        options: TcpOptions {
            mss: Some(1460),
            ..TcpOptions::default()
        },
    };
    let bytes = emit(&syn, &[]);
    b.handle_segment(now, src, B_IP, &bytes);
    assert_eq!(drain(&mut b, now).len(), 1, "the SYN-ACK");
    let mut syn_acks = Vec::new();
    for _ in 0..1000 {
        b.handle_segment(now, src, B_IP, &bytes);
        syn_acks.extend(drain(&mut b, now));
    }
    assert_eq!(syn_acks.len(), 1, "one SYN-ACK for 1 000 copies in 1 ms");
    let (r, _) = TcpRepr::parse_segment(&syn_acks[0].1).unwrap();
    assert!(r.flags.syn() && r.flags.ack() && r.ack == 78, "{r:?}");
    let s = *b.stats();
    assert_eq!(s.syn_acks_limited, 999);
    assert_eq!(s.bad_flags, 0, "a retransmitted SYN has no bad flags");
    // The client's own retransmission, a second after its SYN.
    let later = now + Duration::from_millis(1000);
    b.handle_segment(later, src, B_IP, &bytes);
    let again: Vec<_> = drain(&mut b, later)
        .into_iter()
        .filter(|(_, s)| TcpRepr::parse_segment(s).unwrap().0.flags.syn())
        .collect();
    assert!(
        !again.is_empty(),
        "a retransmission a second later is answered"
    );
    assert_eq!(b.stats().syn_acks_limited, 999);
}

/// The ACK that returns a cookie B sent without timestamps (the client's
/// SYN had none, and the MSS option `mss`), and B's answer to the first
/// data then: the TSecr of the ACK is `tsecr`.
fn cookie_connection_with_ack_tsecr(
    mss: Option<u16>,
    tsecr: impl FnOnce(&TcpRepr) -> Option<u32>,
) -> Stack {
    let mut b = server(true);
    let mut rng = Rng::new(3);
    let now = Instant::from_millis(1_000);
    flood(&mut b, &mut rng, now, 50);
    drain(&mut b, now);
    let syn = TcpRepr {
        src_port: 40_000,
        dst_port: 80,
        seq: 1000,
        ack: 0,
        flags: TcpFlags::SYN,
        window: 64_240,
        urgent: 0,
        options: TcpOptions {
            mss,
            ..TcpOptions::default()
        },
    };
    let cookies = b.stats().syn_cookies_sent;
    b.handle_segment(now, A_IP, B_IP, &emit(&syn, &[]));
    let out = drain(&mut b, now);
    let sa = TcpRepr::parse_segment(&out[0].1).unwrap().0;
    assert_eq!(b.stats().syn_cookies_sent, cookies + 1, "a cookie");
    assert_eq!(sa.options.timestamps, None);
    assert_eq!(sa.options.window_scale, None);
    assert!(!sa.options.sack_permitted);
    let ack = TcpRepr {
        src_port: 40_000,
        dst_port: 80,
        seq: 1001,
        ack: sa.seq.wrapping_add(1),
        flags: TcpFlags::ACK,
        window: 100,
        urgent: 0,
        options: TcpOptions {
            timestamps: tsecr(&sa).map(|ecr| (5, ecr)),
            ..TcpOptions::default()
        },
    };
    b.handle_segment(now, A_IP, B_IP, &emit(&ack, &[]));
    b
}

/// RFC 7323 §3.2: a timestamp option on a connection that did not
/// negotiate timestamps is ignored. A cookie's options ride in the TSecr
/// only when our SYN-ACK carried timestamps; an ACK whose TSecr echoes no
/// TSval of ours (window scale 14 and SACK in its low bits, here) to a
/// SYN-ACK without timestamps built a connection with timestamps, SACK
/// and a window scale of 14, and B sent 200 000 bytes into the client's
/// 100-byte window (read as 100 << 14). Now the option is ignored and
/// counted, and the connection has none of them.
#[test]
fn a_cookie_ack_with_timestamps_never_negotiated_carries_no_options() {
    let mut b = cookie_connection_with_ack_tsecr(Some(1460), |_| Some(14 | 16));
    let now = Instant::from_millis(1_000);
    let cb = accepted(&std::iter::from_fn(|| b.poll_event()).collect::<Vec<_>>())
        .pop()
        .expect("accepted");
    b.send(cb, &vec![1u8; 200_000]).unwrap();
    let out = drain(&mut b, now);
    let first = TcpRepr::parse_segment(&out[0].1).unwrap().0;
    assert!(
        first.options.timestamps.is_none(),
        "timestamps never negotiated"
    );
    let bytes: usize = out
        .iter()
        .map(|(_, s)| TcpRepr::parse_segment(s).unwrap().1.len())
        .sum();
    assert!(bytes <= 100, "sent {bytes} bytes into a 100-byte window");
    assert_eq!(b.stats().syn_cookies_ts_ignored, 1);
}

/// A cookie keeps the client's MSS option as the largest size of its table
/// not above it; an option of 0 is no option (RFC 9293 §3.7.1's 536, as
/// Linux reads it), as on the connections B keeps (`states.rs`). Taken as
/// a size, it was the table's smallest, 64 bytes.
#[test]
fn a_cookie_for_an_mss_option_of_zero_carries_the_default_mss() {
    let mut b = cookie_connection_with_ack_tsecr(Some(0), |_| None);
    let cb = accepted(&std::iter::from_fn(|| b.poll_event()).collect::<Vec<_>>())
        .pop()
        .expect("accepted");
    assert_eq!(b.info(cb).unwrap().mss, 536);
}
